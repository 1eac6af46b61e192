"""A deterministic OpenAI-compatible streaming server with scripted timings and faults.

It stands in for an engine wherever the truth must be known exactly: metric definitions (hand-computable timings),
client capacity (zero delay), client timing fidelity (every stream paced at a known interval) and faults. It speaks
just enough HTTP/1.1 (keep-alive, chunked SSE) on raw asyncio so that it is cheap enough not to be the bottleneck.

Each request streams ``max_tokens`` (or ``max_completion_tokens``) events, one token each, the first after
``ttft_ms`` and the rest ``itl_ms`` apart, then a usage event and ``[DONE]``. ``prompt_tokens`` is the number of
whitespace-separated words of the prompt. A prompt containing one of these markers misbehaves on purpose:
``FAULT:reset`` (connection reset after 2 tokens), ``FAULT:malformed`` (a non-JSON data line), ``FAULT:500`` and
``FAULT:404`` (HTTP errors), ``FAULT:stall`` (stops sending after 2 tokens, keeps the connection open),
``FAULT:error-event`` (an ``{"error": ...}`` data event), ``FAULT:no-tokens`` (usage and [DONE] only).

Run: ``python -m autotune.testing.scripted --port 8000 [--ttft-ms 50] [--itl-ms 20] [--cpu 1]``.

As a stand-in engine for fast study tests it also takes vLLM's command line, ``python -m autotune.testing.scripted
serve MODEL --port P [--served-model-name N] [--max-num-seqs K] [--dtype float32] [--speculative-config ...] ...``
(other flags are ignored): at most K streams run at once (the rest queue), float32 doubles the ITL, and a
speculative config fails at start-up with vLLM-CPU's message. Environment: ``SCRIPTED_ITL_MS`` (10),
``SCRIPTED_TTFT_MS`` (20), ``SCRIPTED_PREFILL_MS`` (0: ms of TTFT added per prompt token, so that a long-prompt
workload is slower), ``SCRIPTED_STARTUP_S`` (0.3), ``SCRIPTED_NEVER_READY=1`` (/health answers 503 forever),
``SCRIPTED_DIE_AFTER=N`` (the process dies when request N+1 arrives), ``SCRIPTED_HANG=1`` (ready, but no request
is ever answered), ``SCRIPTED_STRICT=1`` (like ``transformers serve``: ``/v1/models`` lists nothing and a request
with vLLM's extension fields gets HTTP 422), ``SCRIPTED_OOM_AT_REQUEST=N`` (from request N on, every request gets
HTTP 500 and the log says CUDA out of memory, like a KV pool allocated at the first requests that does not fit),
``SCRIPTED_OOM_ABOVE_CONCURRENCY=K`` (out of memory at load: a request that arrives while K are already in flight gets
HTTP 500 and the log says CUDA out of memory; the server stays up and serves lighter loads),
``SCRIPTED_REQUIRE_HEADER=name:value`` (HTTP 403 for a request without that header), ``SCRIPTED_RECORD=FILE``
(appends ``start PID TIME CUDA_VISIBLE_DEVICES`` as it starts and ``stop PID TIME`` at SIGTERM: which GPUs each
launch was given, and when it held them), ``SCRIPTED_SPECULATIVE_SERVES=1`` (a speculative config starts: an engine
version that fixed it), ``SCRIPTED_SLOWER=FLAG=VALUE:FACTOR[,...]`` (the ITL times FACTOR when the command line has
``FLAG VALUE``, e.g. ``--max-num-seqs=32:4``: another version, slower on one configuration). ``--request-log FILE``
appends ``PROMPT_TOKENS MAX_TOKENS`` for each completion request received (what a client sent, counted on the
server's side). Like vLLM, ``--api-key KEY`` or
``VLLM_API_KEY`` makes ``/v1/*`` answer 401 to a request without ``Authorization: Bearer KEY`` (``/health`` stays
open). The first completion request's fields and header names are logged, so a test can see what a client sent.
It is a scripted server, not an engine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from autotune.sim.http_server import HttpConnection, json_response, sse_event

_FAULTS = ("reset", "malformed", "500", "404", "stall", "error-event", "no-tokens")
_EXTENSION_FIELDS = ("ignore_eos", "repetition_penalty")  # what a strict server refuses


class _Stream:
    """One streaming response, driven by timers on the loop."""

    def __init__(self, server: ScriptedServer, transport: asyncio.Transport, request: dict) -> None:
        self.server, self.transport = server, transport
        self.chat = "messages" in request
        prompt = request.get("prompt") or " ".join(m.get("content", "") for m in request.get("messages", []))
        self.fault = next((f for f in _FAULTS if f"FAULT:{f}" in prompt), None)
        self.prompt_tokens = len(prompt.split())
        self.total = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        self.sent = 0
        self.model = request.get("model", "scripted").encode()

    def start(self) -> None:
        self.t0 = self.server.loop.time()
        if self.fault in ("500", "404"):
            status = b"500 Internal Server Error" if self.fault == "500" else b"404 Not Found"
            error = {"error": {"message": f"scripted {self.fault}", "code": int(self.fault)}}
            self.transport.write(json_response(status, error))
            self.server.finished(self.transport)
            return
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        self._schedule()

    def _schedule(self) -> None:
        # Event k is due at t0 + ttft + k·itl (absolute times), so the server's own lag does not add up.
        if self.server.zero_delay:
            self.server.loop.call_soon(self.step)
        else:
            ttft = self.server.ttft + self.prompt_tokens * self.server.prefill_per_token
            self.server.loop.call_at(self.t0 + ttft + self.sent * self.server.itl, self.step)

    def step(self) -> None:
        if self.transport.is_closing():  # the client went away: like an engine, abort the request, free its slot
            self.server.finished(self.transport)
            return
        if self.fault == "no-tokens":
            self.total = 0
        if self.sent < self.total:
            if self.sent == 2 and self.fault in ("reset", "stall", "malformed", "error-event"):
                self._misbehave()
                return
            burst = min(self.server.burst, self.total - self.sent)
            self.transport.write(self.server.token_event[self.chat] * burst)
            self.sent += burst
            self._schedule()
            return
        usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.total,
                 "total_tokens": self.prompt_tokens + self.total}  # fmt: skip
        tail = json.dumps({"id": "x", "model": self.model.decode(), "choices": [], "usage": usage}).encode()
        self.transport.write(sse_event(tail) + sse_event(b"[DONE]") + b"0\r\n\r\n")
        self.server.finished(self.transport)

    def _misbehave(self) -> None:
        if self.fault == "reset":
            self.transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            self.transport.abort()
        elif self.fault == "malformed":
            self.transport.write(sse_event(b'{"choices": [ this is not json'))
            self.fault = None
            self._schedule()
        elif self.fault == "error-event":
            self.transport.write(
                sse_event(b'{"error":{"message":"scripted engine error","code":500}}')
                + sse_event(b"[DONE]")
                + b"0\r\n\r\n"
            )
            self.server.finished(self.transport)
        # "stall": send nothing more; the client's stall timeout must fire


class ScriptedServer:
    """Serve on 127.0.0.1:port until cancelled. Timings in milliseconds; 0/0 streams as fast as possible."""

    def __init__(self, port: int, ttft_ms: float = 0.0, itl_ms: float = 0.0, burst: int = 1) -> None:
        self.port, self.ttft, self.itl, self.burst = port, ttft_ms / 1000, itl_ms / 1000, burst
        self.prefill_per_token = 0.0  # seconds of TTFT per prompt token: a long prompt's prefill (SCRIPTED_PREFILL_MS)
        self.zero_delay = ttft_ms == 0 and itl_ms == 0
        self.completed = self.running = self.requests = 0
        self.queue: list[_Stream] = []
        # one token per event, the same bytes every time, so serving costs a write and nothing else
        self.token_event = {
            False: sse_event(b'{"id":"x","object":"text_completion","choices":[{"index":0,"text":" t"}],"usage":null}'),
            True: sse_event(
                b'{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" t"}}],"usage":null}'
            ),
        }

    model_name = "scripted"
    owned_by = "autotune-scripted"
    never_ready = False
    die_after: int | None = None
    max_running: int | None = None
    hang = False
    strict = False
    oom_at: int | None = None
    oom_above: int | None = None
    api_key: str | None = None
    required_header: tuple[str, str] | None = None
    logged_first = False

    request_log = None  # an open file: one line per request received

    def on_request(self, transport: asyncio.Transport, request: dict) -> None:
        self.requests += 1
        if self.request_log is not None:
            stream = _Stream(self, transport, request)
            self.request_log.write(f"{stream.prompt_tokens} {stream.total}\n")
        if self.die_after is not None and self.requests > self.die_after:
            os._exit(1)
        if self.hang:
            return  # keep the connection, answer nothing
        if self.strict and (unexpected := [f for f in _EXTENSION_FIELDS if f in request]):
            detail = f"Unexpected fields in the request: {set(unexpected)}"
            transport.write(json_response(b"422 Unprocessable Entity", {"detail": detail}))
            return
        if self.oom_at is not None and self.requests >= self.oom_at:
            if self.requests == self.oom_at:
                print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB (scripted)",
                      file=sys.stderr, flush=True)  # fmt: skip
            transport.write(json_response(b"500 Internal Server Error", {"error": {"message": "scripted OOM"}}))
            return
        if self.oom_above is not None and self.running + len(self.queue) >= self.oom_above:
            print(f"torch.OutOfMemoryError: CUDA out of memory with {self.running + len(self.queue) + 1} requests in "
                  "flight. Tried to allocate 2.00 GiB (scripted)", file=sys.stderr, flush=True)  # fmt: skip
            transport.write(json_response(b"500 Internal Server Error", {"error": {"message": "scripted OOM"}}))
            return
        self.admit(_Stream(self, transport, request))

    def admit(self, stream: _Stream) -> None:
        if self.max_running is not None and self.running >= self.max_running:
            self.queue.append(stream)
            return
        self.running += 1
        stream.start()

    def finished(self, transport: asyncio.Transport) -> None:
        self.completed += 1
        self.running -= 1
        while self.queue and self.queue[0].transport.is_closing():
            self.queue.pop(0)  # aborted while it waited
        if self.queue:
            self.running += 1
            self.queue.pop(0).start()

    async def serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        server = await self.loop.create_server(
            lambda: HttpConnection(self), "127.0.0.1", self.port, backlog=4096, reuse_address=True
        )
        async with server:
            await server.serve_forever()


def serve_like_vllm(argv: list[str]) -> None:
    """The stand-in engine: vLLM's ``serve`` command line, scripted behaviour (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="scripted serve")
    parser.add_argument("model")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name")
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--speculative-config")
    parser.add_argument("--api-key")
    args, _ = parser.parse_known_args(argv)
    print(f"scripted engine (not a real engine): serve {args.model} {' '.join(argv[1:])}", flush=True)
    if record := os.environ.get("SCRIPTED_RECORD"):
        _record(record, f"start {os.getpid()} {time.time():.3f} {os.environ.get('CUDA_VISIBLE_DEVICES', '-')}")

        def stop(signum: int, frame: object) -> None:
            _record(record, f"stop {os.getpid()} {time.time():.3f}")
            os._exit(0)

        signal.signal(signal.SIGTERM, stop)
    time.sleep(float(os.environ.get("SCRIPTED_STARTUP_S", "0.3")))
    if args.speculative_config and os.environ.get("SCRIPTED_SPECULATIVE_SERVES") != "1":
        print("NotImplementedError: Unsupported speculative method: 'mtp'", file=sys.stderr, flush=True)
        sys.exit(1)
    itl = float(os.environ.get("SCRIPTED_ITL_MS", "10")) * (2 if args.dtype == "float32" else 1)
    itl *= _slower(argv, os.environ.get("SCRIPTED_SLOWER", ""))
    server = ScriptedServer(args.port, float(os.environ.get("SCRIPTED_TTFT_MS", "20")), itl)
    server.model_name = args.served_model_name or args.model
    server.prefill_per_token = float(os.environ.get("SCRIPTED_PREFILL_MS", "0")) / 1000
    server.max_running = args.max_num_seqs
    server.never_ready = os.environ.get("SCRIPTED_NEVER_READY") == "1"
    server.hang = os.environ.get("SCRIPTED_HANG") == "1"
    server.strict = os.environ.get("SCRIPTED_STRICT") == "1"
    server.api_key = args.api_key or os.environ.get("VLLM_API_KEY")
    if required := os.environ.get("SCRIPTED_REQUIRE_HEADER"):
        name, _, value = required.partition(":")
        server.required_header = (name.strip().lower(), value.strip())
    oom_at = os.environ.get("SCRIPTED_OOM_AT_REQUEST")
    server.oom_at = int(oom_at) if oom_at else None
    oom_above = os.environ.get("SCRIPTED_OOM_ABOVE_CONCURRENCY")
    server.oom_above = int(oom_above) if oom_above else None
    die_after = os.environ.get("SCRIPTED_DIE_AFTER")
    server.die_after = int(die_after) if die_after else None
    asyncio.run(server.serve())


def _slower(argv: list[str], spec: str) -> float:
    """The ITL factor ``SCRIPTED_SLOWER`` sets for this command line (1 where no entry matches)."""
    factor = 1.0
    pairs = set(itertools.pairwise(argv))
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        flag_value, _, times = entry.rpartition(":")
        flag, _, value = flag_value.partition("=")
        if (flag, value) in pairs:
            factor *= float(times)
    return factor


def _record(path: str, line: str) -> None:
    with open(path, "a") as f:  # one short write per line: lines of concurrent launches do not interleave
        f.write(line + "\n")


@contextlib.contextmanager
def serving(workdir: Path, ttft_ms: float = 0.0, itl_ms: float = 0.0, burst: int = 1, cpu: int | None = None,
            port: int | None = None, request_log: Path | None = None):  # fmt: skip
    """The scripted server as a subprocess (on ``port`` or a free one), through the ServerProcess every engine launch
    uses; yields it ready."""
    # imported here: the server process itself starts without autotune's heavier modules
    from autotune.engines.base import LaunchSpec
    from autotune.engines.readiness import lists_model
    from autotune.serving.process import ServerProcess, free_port

    port = port or free_port()
    argv = [sys.executable, "-m", "autotune.testing.scripted", "--port", str(port), "--ttft-ms", str(ttft_ms),
            "--itl-ms", str(itl_ms), "--burst", str(burst), *(["--cpu", str(cpu)] if cpu is not None else []),
            *(["--request-log", str(request_log)] if request_log is not None else [])]  # fmt: skip
    ready = lists_model("/health", ScriptedServer.model_name)
    with ServerProcess(LaunchSpec(tuple(argv)), workdir, port, ready) as server:
        server.wait_ready(30)
        yield server


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        serve_like_vllm(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    parser.add_argument("--burst", type=int, default=1, help="events per write (each still one token)")
    parser.add_argument(
        "--cpu", type=int, help="pin the server to this CPU (so a client on another core is measured alone)"
    )
    parser.add_argument("--request-log", help="append PROMPT_TOKENS MAX_TOKENS for each request received")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    server = ScriptedServer(args.port, args.ttft_ms, args.itl_ms, args.burst)
    with open(args.request_log, "a", buffering=1) if args.request_log else contextlib.nullcontext() as log:
        server.request_log = log
        asyncio.run(server.serve())


if __name__ == "__main__":
    main()
