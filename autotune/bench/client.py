"""Stream requests to an OpenAI-compatible server and record each one's timings; a failed request is data.

Built on ``autotune.bench.http`` (asyncio protocols; why not aiohttp is said there) with a parser that looks at each
SSE event's bytes instead of decoding its JSON: token events are recognised by their ``"choices":[{`` and only the
rare other events (usage, errors) are parsed. Measured against ``vllm bench serve`` in benchmarks/client_capacity.py.

Timing follows vllm bench serve: TTFT = send → first event with non-empty choices; ITL = gaps between
such events; latency = send → the last of them; output tokens from the usage event. Events that arrive in one read
share its timestamp (they did arrive together).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autotune.bench.datasets import BenchRequest
from autotune.bench.http import StreamingClient
from autotune.errors import HttpStreamError

_TOKEN_MARKERS = (b'"choices":[{', b'"choices": [{')
_USAGE_MARKERS = (b'"usage":{', b'"usage": {')


@dataclass
class RequestRecord:
    """What happened to one request. Times are ``time.perf_counter()`` seconds; durations in seconds."""

    prompt_len: int | None
    requested_output_len: int
    start_time: float = 0.0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    output_tokens: int | None = None
    token_events: int = 0
    success: bool = False
    error_type: str | None = None
    error: str | None = None


# Fields vllm bench sends beyond the OpenAI API; a server that accepts none of them gets requests without them.
REQUEST_EXTENSIONS = frozenset({"ignore_eos", "repetition_penalty"})


@dataclass(frozen=True)
class ClientOptions:
    """How requests are sent. ``stall_timeout_s`` bounds the silence between two reads of one stream;
    ``extensions`` are the non-OpenAI request fields the server accepts (``ignore_eos`` is sent only if there)."""

    base_url: str
    model: str
    endpoint: str = "/v1/completions"
    ignore_eos: bool = True
    request_timeout_s: float = 6 * 3600.0
    stall_timeout_s: float = 300.0
    connect_timeout_s: float = 30.0
    extra_body: dict = field(default_factory=dict)
    headers: dict = field(default_factory=dict)
    extensions: frozenset[str] = REQUEST_EXTENSIONS
    # the chat request's length field: OpenAI's current one, or the older max_tokens some servers read instead
    chat_length_field: str = "max_completion_tokens"

    @property
    def chat(self) -> bool:
        return self.endpoint.endswith("chat/completions")


def bearer(api_key: str | None) -> dict[str, str]:
    """The header that presents ``api_key`` (OpenAI's scheme, which vLLM and SGLang check), or none."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def request_body(options: ClientOptions, request: BenchRequest) -> bytes:
    """The JSON body vllm bench would send for this request."""
    body: dict = {"model": options.model, "stream": True, "stream_options": {"include_usage": True}}
    if options.chat:
        body |= {
            "messages": [{"role": "user", "content": request.prompt}],
            options.chat_length_field: request.output_len,
        }
    else:
        body |= {"prompt": request.prompt, "max_tokens": request.output_len}
        if "repetition_penalty" in options.extensions:
            body["repetition_penalty"] = 1.0
    if options.ignore_eos and "ignore_eos" in options.extensions:
        body["ignore_eos"] = True
    return json.dumps(body | options.extra_body).encode()


def _read_events(record: RequestRecord, events: list[bytes], now: float, state: list[float]) -> bool:
    """Account for complete SSE events received at ``now``; True once ``[DONE]`` arrived. ``state`` = [last token time].

    The hot path of the client: one ``data: {...}`` line per event is handled without decoding JSON.
    """
    for event in events:
        if b"\n" in event or not event.startswith(b"data: "):
            datas = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]  # comments, ids
        else:
            datas = (event[6:],)
        for data in datas:
            if not data or data[0] != 123 or data[-1] != 125:  # not {...}
                if data == b"[DONE]":
                    return True
                raise HttpStreamError("malformed_sse", f"not a JSON event: {data[:80]!r}")
            if _TOKEN_MARKERS[0] in data or _TOKEN_MARKERS[1] in data:
                if record.token_events:
                    record.itl.append(now - state[0])
                else:
                    record.ttft = now - record.start_time
                record.token_events += 1
                state[0] = now
                if _USAGE_MARKERS[0] not in data and _USAGE_MARKERS[1] not in data:
                    continue
            _read_other_event(record, data)
    return False


def _read_other_event(record: RequestRecord, data: bytes) -> None:
    try:
        payload = json.loads(data)
    except ValueError:
        raise HttpStreamError("malformed_sse", f"invalid JSON event: {data[:80]!r}") from None
    if payload.get("error"):
        raise HttpStreamError("server_error_event", str(payload["error"])[:200])
    usage = payload.get("usage") or {}
    if usage.get("completion_tokens") is not None:
        record.output_tokens = usage["completion_tokens"]
    if usage.get("prompt_tokens") is not None:
        record.prompt_len = usage["prompt_tokens"]  # the server's count, as vllm bench 0.32 takes it


async def stream_request(client: StreamingClient, request: bytes, record: RequestRecord) -> None:
    """Send one prepared request and fill ``record``; never raises for what the server or the network does."""
    record.start_time = time.perf_counter()
    state = [record.start_time]
    try:
        await client.stream(request, lambda events, now: _read_events(record, events, now, state))
        if not record.token_events:
            raise HttpStreamError("no_tokens", "the stream ended without a token event")
        record.latency = state[0] - record.start_time
        record.success = True
    except HttpStreamError as exc:
        record.error_type, record.error = exc.error_type, str(exc)


class LoopLagMonitor:
    """Measures how late the event loop wakes up: when it lags, timestamps are late too (the client is saturated)."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval, self.lags = interval_s, []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.lags.append(time.perf_counter() - before - self.interval)

    def __enter__(self) -> LoopLagMonitor:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()


def arrival_offsets(count: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Send times after the start, in seconds: all at 0 for an infinite rate, else gamma-distributed gaps
    (Poisson at burstiness 1) with mean 1/rate, like vllm bench."""
    if rate == float("inf"):
        return [0.0] * count
    rng, offsets, now = random.Random(seed), [], 0.0
    for _ in range(count):
        offsets.append(now)
        now += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
    return offsets


async def run_requests(
    options: ClientOptions,
    requests: Sequence[BenchRequest],
    offsets: Sequence[float],
    max_concurrency: int | None,
    start_at: float | None = None,
    on_done: Callable[[int, RequestRecord], None] | None = None,
) -> tuple[list[RequestRecord], list[float], float, float]:
    """Send ``requests`` at ``start_at + offsets`` (perf_counter time), at most ``max_concurrency`` at once.

    Returns:
        records (in request order), event-loop lags, the start and the end time of the run.
    """
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    records = [RequestRecord(r.prompt_len, r.output_len) for r in requests]
    client = StreamingClient(options.base_url, options.request_timeout_s, options.stall_timeout_s,
                             options.connect_timeout_s, options.headers)  # fmt: skip
    wire = [client.request_bytes(options.endpoint, request_body(options, r)) for r in requests]
    async with client:
        start = start_at if start_at is not None else time.perf_counter()
        await asyncio.sleep(max(0.0, start - time.perf_counter()))

        async def one(index: int) -> None:
            await asyncio.sleep(max(0.0, start + offsets[index] - time.perf_counter()))
            if limit:
                async with limit:
                    await stream_request(client, wire[index], records[index])
            else:
                await stream_request(client, wire[index], records[index])
            if on_done:
                on_done(index, records[index])

        with LoopLagMonitor() as monitor:
            await asyncio.gather(*(one(i) for i in range(len(requests))))
        end = time.perf_counter()
    return records, monitor.lags, start, end
