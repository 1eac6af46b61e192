"""``autotune bench``: benchmark a running server like ``vllm bench serve`` does, with the same metrics."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Annotated, Literal

import httpx
import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from autotune.bench import datasets
from autotune.bench.client import ClientOptions, bearer
from autotune.bench.metrics import format_block
from autotune.bench.mix import format_classes
from autotune.bench.runner import run_benchmark
from autotune.engines import get_engine
from autotune.engines.hub import resolve_tokenizer
from autotune.errors import AutotuneError, UsageError
from autotune.space.schema import Workload
from autotune.text import lowercase_first

_GOODPUT_METRICS = ("ttft", "tpot", "e2el")


def bench(
    base_url: Annotated[str, typer.Option(help="server address, e.g. http://127.0.0.1:8000")],
    model: Annotated[str, typer.Option(help="model name the server answers to")],
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="tokenizer.json, a model directory, or a hub id ORG/NAME[@REV] found in the Hugging Face cache "
            "(or its tokenizer downloaded); random/sharegpt need it"
        ),
    ] = None,
    endpoint: Annotated[str, typer.Option(help="/v1/completions or /v1/chat/completions")] = "/v1/completions",
    dataset: Annotated[str, typer.Option(help="random, sharegpt, jsonl or mix (of --class)")] = "random",
    request_class: Annotated[
        list[str] | None,
        typer.Option(
            "--class",
            help="a class of mixed traffic, repeatable (makes the dataset mix): its fields as "
            "KEY=VALUE,...: name, share, input_len, output_len, range_ratio, prefix_len, dataset, path, and "
            "SLOs by metric (p99_ttft_ms=500); e.g. name=chat,share=0.7,input_len=1000,output_len=200",
        ),
    ] = None,
    dataset_path: Annotated[Path | None, typer.Option(help="ShareGPT JSON or JSONL prompts")] = None,
    input_len: Annotated[int, typer.Option(help="random: input tokens")] = 1024,
    output_len: Annotated[int, typer.Option(help="output tokens (random, jsonl default)")] = 128,
    range_ratio: Annotated[float, typer.Option(help="random: lengths uniform in len·(1±r)")] = 0.0,
    prefix_len: Annotated[int, typer.Option(help="random: shared prefix tokens")] = 0,
    num_prompts: Annotated[int, typer.Option(help="requests measured")] = 1000,
    request_rate: Annotated[float, typer.Option(help="requests/s; inf sends all at once")] = math.inf,
    burstiness: Annotated[float, typer.Option(help="1 = Poisson arrivals, else gamma")] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option(help="requests in flight at most (default: no limit)")] = None,
    warmup_requests: Annotated[int, typer.Option(help="unmeasured requests sent first")] = 0,
    seed: Annotated[int, typer.Option(help="seed of the prompts and arrival times")] = 0,
    ignore_eos: Annotated[
        bool, typer.Option("--ignore-eos/--no-ignore-eos", help="ask for exactly the output length (no early stop)")
    ] = True,
    goodput: Annotated[list[str] | None, typer.Option(help="SLO as metric:ms (ttft, tpot, e2el); repeatable")] = None,
    percentiles: Annotated[
        str, typer.Option("--metric-percentiles", help="printed percentiles, comma-separated")
    ] = "99",
    shards: Annotated[int, typer.Option(help="client processes (more when one core cannot keep up)")] = 1,
    stall_timeout: Annotated[float, typer.Option(help="seconds a stream may stay silent")] = 300.0,
    request_timeout: Annotated[float, typer.Option(help="seconds a request may take")] = 6 * 3600.0,
    save_result: Annotated[Path | None, typer.Option(help="write vllm bench's result JSON here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result JSON instead of the block")] = False,
    engine: Annotated[
        str,
        typer.Option(help="the server's engine (vllm, sglang, trtllm, transformers): which request fields it takes"),
    ] = "vllm",
    api_key_env: Annotated[
        str,
        typer.Option(help="environment variable holding the server's API key, sent as a bearer token when set"),
    ] = "OPENAI_API_KEY",
    header: Annotated[list[str] | None, typer.Option(help="header sent with every request, as NAME:VALUE")] = None,
    extra_body: Annotated[
        str | None, typer.Option(help="JSON object merged into every request body, e.g. '{\"temperature\": 0.7}'")
    ] = None,
) -> None:
    """Benchmark a running OpenAI-compatible server; exit 1 when it is unreachable or every request failed."""
    adapter = get_engine(engine)  # strict servers (transformers) refuse ignore_eos and read max_tokens
    classes = [parse_class(item) for item in request_class] if request_class else None
    dataset = "mix" if classes and dataset == "random" else dataset
    try:
        workload = Workload(dataset=dataset, path=str(dataset_path) if dataset_path else None, classes=classes,
                            endpoint=endpoint,
                            input_len=input_len, output_len=output_len, range_ratio=range_ratio, prefix_len=prefix_len,
                            num_prompts=num_prompts, request_rate=request_rate, burstiness=burstiness,
                            max_concurrency=max_concurrency, ignore_eos=ignore_eos, warmup_requests=warmup_requests,
                            seed=seed, headers=parse_headers(header or []),
                            extra_body=parse_extra_body(extra_body))  # fmt: skip
    except ValidationError as exc:
        error = exc.errors()[0]
        if error["loc"][0] == "classes":  # the class (1 first) and its key, e.g. --class #2 share
            where = "".join(f" #{p + 1}" if isinstance(p, int) else f" {p}" for p in error["loc"][1:])
            raise UsageError(f"--class{where}: {error['msg'].removeprefix('Value error, ')}; fix: "
                             "--class name=NAME,share=S,... (`autotune bench --help`)") from None  # fmt: skip
        flag = "--" + "-".join(map(str, error["loc"])).replace("_", "-")
        raise UsageError(f"{flag} {error['input']}: {lowercase_first(error['msg'])}; fix: {flag} with a value it accepts "
                         f"(`autotune bench --help`)") from None  # fmt: skip
    datasets.check(workload)  # a bad file is refused before the server sees a request
    slos = parse_goodput(goodput or [])
    printed = tuple(float(p) for p in percentiles.split(","))
    headers = workload.headers | bearer(os.environ.get(api_key_env))
    check_server(base_url, headers)
    tok = resolve_tokenizer(tokenizer).load() if tokenizer else None
    options = ClientOptions(base_url, model, endpoint, ignore_eos, request_timeout, stall_timeout,
                            extra_body=workload.extra_body, headers=headers, extensions=adapter.request_extensions,
                            chat_length_field=adapter.chat_length_field)  # fmt: skip
    with _progress_bar(num_prompts, quiet=as_json) as hook:
        result = run_benchmark(options, workload, tok, goodput=slos, percentiles=printed, shards=shards,
                               on_progress=hook, tokenizer_id=tokenizer)  # fmt: skip
    if save_result:
        save_result.write_text(json.dumps(result.to_vllm_json()))
    print(json.dumps(result.to_vllm_json()) if as_json else format_block(result, printed))
    if result.classes and not as_json:
        print(format_classes(result, workload))
    if result.saturated:
        print(f"warning: the client could not keep its timing (event-loop lag p50 {result.client['event_loop_lag_p50_ms']:.1f} ms); "
              "use --shards N", file=sys.stderr)  # fmt: skip
    if result.completed == 0:
        raise AutotuneError(
            f"every request failed: {result.errors_by_type} (first error: {next(e for e in result.errors if e)})"
        )


def parse_goodput(items: list[str]) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` → ``{"ttft": 500.0, "tpot": 50.0}``."""
    slos = {}
    for item in items:
        name, _, value = item.partition(":")
        try:
            if name not in _GOODPUT_METRICS:
                raise ValueError
            slos[name] = float(value)
        except ValueError:
            raise UsageError(
                f"--goodput {item!r}: expected METRIC:MS with METRIC in {', '.join(_GOODPUT_METRICS)}"
            ) from None
    return slos


def parse_class(item: str) -> dict:
    """``"name=chat,share=0.7,input_len=1000,output_len=200,p99_ttft_ms=500"`` → a request class's fields (the
    metric names, ``slo``'s); the schema checks their values."""
    fields: dict = {}
    for part in item.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--class {item!r}: expected KEY=VALUE,..., e.g. --class "
                             "name=chat,share=0.7,input_len=1000,output_len=200")  # fmt: skip
        if key.endswith("_ms"):
            fields.setdefault("slo", {})[key] = value.strip()
        else:
            fields[key] = value.strip()
    return fields


def parse_headers(items: list[str]) -> dict[str, str]:
    """``["x-team:gpu"]`` → ``{"x-team": "gpu"}``."""
    headers = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"--header {item!r}: expected NAME:VALUE, e.g. --header x-request-source:autotune")
        headers[name.strip()] = value.strip()
    return headers


def parse_extra_body(text: str | None) -> dict:
    if text is None:
        return {}
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise UsageError(f"--extra-body {text!r}: expected a JSON object, e.g. '{{\"temperature\": 0.7}}'")
    return body


def check_server(base_url: str, headers: dict[str, str]) -> None:
    """Fail fast, with one line, when nothing answers at ``base_url`` or it refuses our key (the control plane uses
    httpx)."""
    try:
        answer = httpx.get(base_url.rstrip("/") + "/v1/models", headers=headers, timeout=10.0)
    except httpx.HTTPError as exc:
        raise AutotuneError(f"server unreachable at {base_url} ({type(exc).__name__}: {exc})") from None
    if answer.status_code == 401:
        raise AutotuneError(f"{base_url} refused the request (401 Unauthorized); fix: set the server's API key in the "
                            "variable --api-key-env names (default OPENAI_API_KEY)")  # fmt: skip


class _progress_bar:
    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet

    def __enter__(self):
        if self.quiet or not sys.stderr.isatty():
            return None
        self.bar = Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.fields[rate]}"), transient=True)  # fmt: skip
        self.bar.start()
        self.task = self.bar.add_task("bench", total=self.total, rate="")
        return self._update

    def _update(self, progress) -> None:
        rate = f"{progress.metrics['output_throughput']:.0f} out tok/s"
        self.bar.update(self.task, completed=progress.finished, rate=rate)

    def __exit__(self, *exc: object) -> Literal[False]:
        if not (self.quiet or not sys.stderr.isatty()):
            self.bar.stop()
        return False
