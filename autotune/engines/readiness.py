"""How a launch confirms that the process answering is ours and serves the expected model (an engine property).

A probe gets an httpx client on the server's address and answers True once the engine is ready; the caller also
checks that the process it started is alive and owns the listening socket, so an orphan on the port never counts.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

Readiness = Callable[[httpx.Client], bool]
_PROBE_TIMEOUT_S = 30.0


def lists_model(ready_path: str, served_model: str) -> Readiness:
    """Ready when ``ready_path`` answers 200 and ``/v1/models`` lists ``served_model`` (vLLM, SGLang, TRT-LLM)."""

    def ready(client: httpx.Client) -> bool:
        try:
            if client.get(ready_path).status_code != 200:
                return False
            models = client.get("/v1/models").json().get("data", [])
        except (httpx.HTTPError, ValueError, AttributeError):
            return False
        return any(m.get("id") == served_model for m in models if isinstance(m, dict))

    return ready


def answers_a_request(ready_path: str, served_model: str) -> Readiness:
    """Ready when ``ready_path`` answers 200 and a one-token chat completion for ``served_model`` succeeds: for
    engines whose ``/v1/models`` does not name what they serve (``transformers serve`` lists its hub cache)."""

    def ready(client: httpx.Client) -> bool:
        body = {"model": served_model, "messages": [{"role": "user", "content": "ready?"}], "max_tokens": 1}
        try:
            if client.get(ready_path).status_code != 200:
                return False
            # bounded, so that the caller looks at the process and its log between probes (a first request that
            # runs out of memory can leave the server up and the request unanswered)
            return client.post("/v1/chat/completions", json=body, timeout=_PROBE_TIMEOUT_S).status_code == 200
        except httpx.HTTPError:
            return False

    return ready
