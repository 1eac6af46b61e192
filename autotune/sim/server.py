"""The simulated engine as an OpenAI-compatible streaming server: the scheduler's step loop in real time.

Each step sleeps the model's step time × ``time_scale`` (against absolute deadlines, so the server's own lag does
not add up), then streams the tokens that step produced: one SSE event per sequence and step, holding all the
tokens speculative decoding accepted (as vLLM streams them). It answers ``/health`` and ``/v1/models`` (owned by
``autotune-simulated``: never mistaken for an engine), and 400 for a request longer than the context.
"""

from __future__ import annotations

import asyncio
import json
import logging
from functools import lru_cache

from autotune.sim.http_server import HttpConnection, sse_event
from autotune.sim.scheduler import Scheduler, SimRequest, StepModel, TokenEvent
from autotune.sim.words import count_tokens

log = logging.getLogger(__name__)
IDLE_WAKE_S = 0.005
_HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class _Stream:
    def __init__(self, transport: asyncio.Transport, chat: bool, model: str, prompt_len: int) -> None:
        self.transport, self.chat, self.model, self.prompt_len = transport, chat, model, prompt_len

    def tokens(self, count: int) -> None:
        self.transport.write(_token_event(self.chat, count))

    def finish(self, completion_tokens: int) -> None:
        usage = {"prompt_tokens": self.prompt_len, "completion_tokens": completion_tokens,
                 "total_tokens": self.prompt_len + completion_tokens}  # fmt: skip
        tail = json.dumps({"id": "sim", "model": self.model, "choices": [], "usage": usage}).encode()
        self.transport.write(sse_event(tail) + sse_event(b"[DONE]") + b"0\r\n\r\n")


@lru_cache(maxsize=64)
def _token_event(chat: bool, count: int) -> bytes:
    """The SSE event carrying ``count`` tokens (the same bytes every time: serving costs a write)."""
    text = " t" * count
    if chat:
        payload = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}
    else:
        payload = {"object": "text_completion", "choices": [{"index": 0, "text": text}]}
    return sse_event(json.dumps(payload | {"id": "sim", "usage": None}).encode())


class SimulatedServer:
    """Serve on host:port until cancelled; ``time_scale`` seconds of wall time per simulated second."""

    owned_by = "autotune-simulated"
    never_ready = False

    def __init__(self, model: StepModel, model_name: str, port: int, host: str = "127.0.0.1", time_scale: float = 1.0):
        self.scheduler = Scheduler(model)
        self.model_name, self.port, self.host, self.time_scale = model_name, port, host, time_scale
        self.max_lag_s = 0.0

    def on_request(self, transport: asyncio.Transport, request: dict) -> None:
        chat = "messages" in request
        prompt = request.get("prompt") or " ".join(m.get("content", "") for m in request.get("messages", []))
        output_len = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        stream = _Stream(transport, chat, request.get("model", self.model_name), count_tokens(prompt))
        sim_request = SimRequest(stream.prompt_len, output_len, handle=stream)
        if not self.scheduler.admissible(sim_request):
            message = f"This model's maximum context length is {self.scheduler.model.max_model_len} tokens."
            body = json.dumps({"error": {"message": message, "type": "BadRequestError", "code": 400}}).encode()
            head = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            transport.write(head % len(body) + body)
            return
        transport.write(_HEADERS)
        self.scheduler.add(sim_request)
        self.wake.set()

    async def _step_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.scheduler.busy:
                self.wake.clear()
                await self.wake.wait()
                # let the rest of a burst land: a client sends N requests at once over N connections, a few ms apart,
                # and an engine's API server needs about as long to hand them to its scheduler
                await asyncio.sleep(IDLE_WAKE_S)
                deadline = loop.time()
            duration, events = self.scheduler.step()
            deadline += duration * self.time_scale
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                self.max_lag_s = max(self.max_lag_s, -delay)
            _deliver(events)

    async def serve(self) -> None:
        self.wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: HttpConnection(self), self.host, self.port, backlog=4096,
                                          reuse_address=True)  # fmt: skip
        stepper = asyncio.create_task(self._step_loop())
        try:
            async with server:
                await server.serve_forever()
        finally:
            stepper.cancel()


def _deliver(events: list[TokenEvent]) -> None:
    for event in events:
        stream: _Stream = event.request.handle  # type: ignore[assignment]
        stream.tokens(event.tokens)
        if event.finished:
            stream.finish(event.request.emitted)
