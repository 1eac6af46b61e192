"""The benchmark: a streaming load generator with ``vllm bench serve``'s metric definitions.

``runner.run_benchmark`` is the entry point; ``datasets`` builds the requests, ``client`` streams them over ``http``
(asyncio protocols, chosen by measurement: benchmarks/client_capacity.py), ``shards`` spreads the load over
processes, ``metrics`` turns per-request records into vllm-bench-compatible results. The deterministic server that
tests and benchmarks measure it against is ``autotune.testing.scripted``.
"""
