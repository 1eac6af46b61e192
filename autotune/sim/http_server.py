"""Just enough HTTP/1.1 server on raw asyncio (keep-alive, chunked SSE) for the simulator's server and the scripted
server of ``autotune.testing``: cheap enough not to be the bottleneck of the benchmark client it serves."""

from __future__ import annotations

import asyncio
import json


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def sse_event(data: bytes) -> bytes:
    return chunk(b"data: " + data + b"\n\n")


def json_response(status: bytes, payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


class HttpConnection(asyncio.Protocol):
    """Just enough HTTP/1.1 server: GET answers /v1/models (else ``{}``); a POST's JSON body goes to the server's
    ``on_request(transport, body)``, which streams the answer on the transport."""

    def __init__(self, server) -> None:
        self.server, self.buffer = server, b""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower().decode()] = value.strip().decode()
            length = int(headers.get("content-length", 0))
            if len(rest) < length:
                return
            body, self.buffer = rest[:length], rest[length:]
            self._handle(lines[0].split(b" ", 2), headers, body)

    def _handle(self, request_line: list[bytes], headers: dict[str, str], body: bytes) -> None:
        method, path = request_line[0], request_line[1]
        if refusal := self._refusal(path, headers):
            self.transport.write(refusal)
            return
        if method == b"GET":
            status = b"503 Service Unavailable" if self.server.never_ready else b"200 OK"
            # the simulator's server shares this connection class and is never strict
            listed = (
                []
                if getattr(self.server, "strict", False)
                else [{"id": self.server.model_name, "owned_by": self.server.owned_by}]
            )
            models = {"object": "list", "data": listed}
            payload = json.dumps(models).encode() if path == b"/v1/models" else b"{}"
            head = b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            self.transport.write(head % (status, len(payload)) + payload)
            return
        request = json.loads(body)
        if not getattr(self.server, "logged_first", True):
            self.server.logged_first = True
            print(f"first request: fields {sorted(request)}, headers {sorted(headers)}", flush=True)
        self.server.on_request(self.transport, request)

    def _refusal(self, path: bytes, headers: dict[str, str]) -> bytes | None:
        """The error response for a request the server's API key or required header refuses, else None."""
        key = getattr(self.server, "api_key", None)
        if key and path.startswith(b"/v1/") and headers.get("authorization") != f"Bearer {key}":
            return json_response(b"401 Unauthorized", {"error": "Unauthorized"})
        required = getattr(self.server, "required_header", None)
        if required and headers.get(required[0]) != required[1]:
            return json_response(b"403 Forbidden", {"error": f"missing header {required[0]}"})
        return None
