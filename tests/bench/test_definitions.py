"""Metric definitions: the client's parsing and timing driven by a scripted byte stream on a fake clock, so every
metric can be computed by hand and must match exactly."""

from __future__ import annotations

import asyncio
import json

import pytest

from autotune.bench import client as client_module
from autotune.bench import http as http_module
from autotune.bench.client import RequestRecord, stream_request
from autotune.bench.http import StreamingClient, _Connection
from autotune.bench.metrics import compute_metrics, format_block


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTransport:
    def __init__(self) -> None:
        self.written, self.closing = b"", False

    def write(self, data: bytes) -> None:
        self.written += data

    def abort(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def token(text: str) -> bytes:
    return chunk(b'data: {"choices":[{"index":0,"text":"%s"}]}\n\n' % text.encode())


def usage(prompt: int, completion: int) -> bytes:
    body = {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}
    return chunk(b"data: " + json.dumps(body).encode() + b"\n\n") + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def replay(script: list[tuple[float, float, list[tuple[float, bytes]]]], monkeypatch) -> list[RequestRecord]:
    """Run one request per script entry (send time, prompt len, [(arrival time, bytes)]) through the real client code."""
    clock = Clock()
    monkeypatch.setattr(http_module.time, "perf_counter", clock)
    monkeypatch.setattr(client_module.time, "perf_counter", clock)

    async def main() -> list[RequestRecord]:
        client = StreamingClient("http://127.0.0.1:9", 60, 60, 5)
        records = []
        for sent, prompt_len, arrivals in script:
            conn = _Connection(client.idle.append)
            conn.connection_made(FakeTransport())

            async def connection(fresh: bool, conn=conn) -> _Connection:
                return conn

            client._connection = connection
            clock.now = sent
            record = RequestRecord(prompt_len, 0)
            task = asyncio.ensure_future(stream_request(client, b"POST / HTTP/1.1\r\n\r\n", record))
            await asyncio.sleep(0)
            for at, data in arrivals:
                clock.now = at
                conn.data_received(data)
            await task
            records.append(record)
        return records

    return asyncio.run(main())


SCRIPT = [
    # request A: sent at 0.0; first token at 0.1; then 0.15 and 0.2 (two events in one read), 0.3; 4 tokens
    (0.0, 10, [(0.05, HEAD), (0.1, token("a")), (0.15, token("b")), (0.2, token("c") + token("d")[:7]),
               (0.3, token("d")[7:] + usage(12, 4))]),
    # request B: sent at 0.2; a role-less first event at 0.4, the last at 0.5 together with usage; 2 tokens
    (0.2, 20, [(0.4, HEAD + token("x")), (0.5, token("y") + usage(21, 2))]),
    # request C: HTTP 503
    (0.6, 5, [(0.7, b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")]),
]  # fmt: skip


def test_every_metric_equals_the_hand_computed_value(monkeypatch) -> None:
    records = replay(SCRIPT, monkeypatch)
    a, b, c = records
    assert (a.success, b.success, c.success) == (True, True, False)
    assert (
        a.ttft == pytest.approx(0.1) and a.itl == pytest.approx([0.05, 0.05, 0.1]) and a.latency == pytest.approx(0.3)
    )
    assert (a.prompt_len, a.output_tokens, b.prompt_len, b.output_tokens) == (12, 4, 21, 2)  # the server's counts
    assert (c.error_type, c.error) == ("http_503", "busy")

    m = compute_metrics(records, duration=2.0, goodput={"ttft": 150, "tpot": 100})
    hand = {
        "completed": 2, "failed": 1, "total_input_tokens": 33, "total_output_tokens": 6,
        "request_throughput": 1.0, "output_throughput": 3.0, "total_token_throughput": 19.5,
        "mean_ttft_ms": 150.0, "median_ttft_ms": 150.0, "std_ttft_ms": 50.0, "p99_ttft_ms": 100 + 100 * 0.99,
        # TPOT = (latency - ttft) / (output - 1): A (0.3-0.1)/3, B (0.3-0.2)/1
        "mean_tpot_ms": (200 / 3 + 100) / 2, "median_tpot_ms": (200 / 3 + 100) / 2,
        # ITL over all gaps: A 50, 50, 100; B 100
        "mean_itl_ms": 75.0, "median_itl_ms": 75.0, "p50_itl_ms": 75.0, "p99_itl_ms": 100.0,
        "mean_e2el_ms": 300.0, "median_e2el_ms": 300.0, "std_e2el_ms": 0.0,
        # both requests' 6 tokens fall in the first second; both requests are active in it
        "max_output_tokens_per_s": 6.0, "max_concurrent_requests": 2,
        # goodput: A meets TTFT ≤ 150 and TPOT ≤ 100; B has TTFT 200
        "request_goodput": 0.5,
    }  # fmt: skip
    for key, value in hand.items():
        assert m[key] == pytest.approx(value), key
    assert m["errors_by_type"] == {"http_503": 1}


def test_printed_block_has_vllm_bench_layout(monkeypatch) -> None:
    block = format_block(compute_metrics(replay(SCRIPT, monkeypatch), duration=2.0)).splitlines()
    assert block[0] == "============ Serving Benchmark Result ============"
    assert block[1] == f"{'Successful requests:':<40} {2:<10}"
    assert f"{'Output token throughput (tok/s):':<40} {3.0:<10.2f}" in block
    assert block.index("---------------Time to First Token----------------") < block.index(
        f"{'P99 TTFT (ms):':<40} {199.0:<10.2f}"
    )
    assert block[-1] == "=" * 50


@pytest.mark.parametrize(
    ("arrivals", "error_type"),
    [
        ([(0.1, HEAD + chunk(b"data: {not json\n\n"))], "malformed_sse"),
        ([(0.1, HEAD + chunk(b'data: {"error":{"message":"boom"}}\n\n'))], "server_error_event"),
        ([(0.1, HEAD + usage(3, 0))], "no_tokens"),
        ([(0.1, HEAD + b"zz\r\n")], "malformed_http"),
    ],
)
def test_stream_faults_are_typed(arrivals, error_type, monkeypatch) -> None:
    if error_type == "malformed_http":
        arrivals = [(0.1, b"garbage\r\n\r\n")]
    (record,) = replay([(0.0, 3, arrivals)], monkeypatch)
    assert not record.success and record.error_type == error_type
