"""``python -m autotune.sim serve --config JSON --hardware JSON --port P [--time-scale S]``: the simulated engine.

It starts like the engine it stands in for: the engine's static rules and the model's memory decide whether it
starts, and a configuration that would not start exits 1 with the real engine's message, so the study classifies
it like a real failure. Then it serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time

from autotune.config import Hardware, ServerConfig
from autotune.engines import get_engine
from autotune.errors import FailureKind, StartupFailure, UnsupportedConfig
from autotune.sim.analytic import analytic_profile
from autotune.sim.server import SimulatedServer

STARTUP_S = 0.2  # a real engine loads weights for minutes; the simulator only pretends briefly

# The seed study's start-up failures, in the engines' own words (seed-failures.csv), by the static rule that predicts them.
REAL_MESSAGES = {
    "sparse-attention-backend": "ValueError: Selected backend AttentionBackendEnum.{backend} is not valid for this "
    "configuration. Reason: ['sparse not supported']",
    "sparse-dcp": "RuntimeError: the FlashMLA sparse backend does not return the softmax LSE for decode, which DCP needs",
    "nsa-needs-deepgemm": "RuntimeError: NSA indexer requires DeepGEMM (SGLANG_ENABLE_JIT_DEEPGEMM=0 given)",
}


def _start(config: ServerConfig, hardware: Hardware):
    try:
        get_engine(config.engine).check(config, hardware)
    except UnsupportedConfig as exc:
        message = REAL_MESSAGES.get(exc.rule, f"ValueError: {exc.reason}")
        raise StartupFailure(FailureKind.UNSUPPORTED, message.format(backend=config.attention_backend)) from None
    return analytic_profile(config, hardware)


def serve(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.sim serve")
    parser.add_argument("--config", required=True, help="the ServerConfig, as JSON")
    parser.add_argument("--hardware", required=True, help="the Hardware, as JSON")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--time-scale", type=float, default=1.0, help="wall seconds per simulated second")
    parser.add_argument("--performance-model", default="analytic", choices=["analytic"])
    args = parser.parse_args(argv)
    config = ServerConfig.model_validate_json(args.config)
    hardware = Hardware.model_validate_json(args.hardware)
    print(f"SIMULATED {config.engine} {config.engine_version or ''} (autotune.sim, analytic model, time scale "
          f"{args.time_scale:g}); not a real engine: {config.model}", flush=True)  # fmt: skip
    try:
        profile = _start(config, hardware)
    except StartupFailure as exc:
        print(str(exc), file=sys.stderr, flush=True)
        return 1
    print(f"max running {profile.max_running}, KV cache {profile.kv_tokens_per_rank} tokens × {profile.ranks} "
          f"rank(s), max model len {profile.max_model_len}", flush=True)  # fmt: skip
    time.sleep(STARTUP_S)
    server = SimulatedServer(profile, config.api_model_name, args.port, args.host, args.time_scale)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.serve())
    return 0


def main() -> None:
    if sys.argv[1:2] != ["serve"]:
        sys.exit("usage: python -m autotune.sim serve --config JSON --hardware JSON --port PORT [--time-scale S]")
    sys.exit(serve(sys.argv[2:]))


if __name__ == "__main__":
    main()
