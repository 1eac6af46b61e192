"""Benchmark requests: random token prompts of exact lengths, ShareGPT conversations, a JSONL file of prompts, or a
mix of request classes (each one of those) interleaved in one benchmark (``autotune.space.mix``).

Lengths are counted with the model's own tokenizer (``tokenizers`` reading tokenizer.json, no transformers). Every
dataset is deterministic for a seed. A file is read bounded and streaming (``autotune.bench.dataset_files``), and
``check`` refuses one that gives no prompts before any engine is launched for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from autotune.bench.dataset_files import count_records, json_array_items, jsonl_lines, shuffled_first
from autotune.bench.fetch import sharegpt_file
from autotune.engines.models import load_tokenizer as load_tokenizer  # also read by engines (which import no bench)
from autotune.errors import UsageError
from autotune.space.mix import RequestClass, class_counts, mix_counts
from autotune.space.schema import Workload

# vllm bench's ShareGPT filter: drop prompts or completions under 4 tokens, prompts over 1024, pairs over 2048.
SHAREGPT_MIN_LEN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048
_ADJUST_ROUNDS, _FRESH_STARTS = 10, 20
_CLASS_SHAPE = {"dataset", "path", "input_len", "output_len", "range_ratio", "prefix_len"}  # a class's own fields


@dataclass(frozen=True)
class BenchRequest:
    """One request: the prompt, its length in tokens (None when no tokenizer counted it), the output length asked;
    in a mix, the name of its class."""

    prompt: str
    prompt_len: int | None
    output_len: int
    request_class: str | None = None


def build_requests(workload: Workload, tokenizer: Tokenizer | None, seed: int | None = None,
                   every_class: bool = True) -> list[BenchRequest]:  # fmt: skip
    """The workload's requests; ``seed`` overrides the workload's (a different seed per repeat avoids prefix-cache hits).
    A mix sends each class at least once, unless ``every_class`` is False (a warm-up of fewer requests than classes).

    Raises:
        UsageError: a tokenizer or a file is missing, or the file gives no prompts (``check``).
    """
    seed = workload.seed if seed is None else seed
    if workload.dataset == "mix":
        return mix_requests(workload, tokenizer, seed, every_class)
    if workload.dataset == "random":
        if tokenizer is None:
            raise UsageError("the random dataset needs the model's tokenizer; fix: pass --tokenizer PATH")
        return random_requests(tokenizer, workload, seed)
    path = dataset_path(workload)
    if workload.dataset == "sharegpt":
        if tokenizer is None:
            raise UsageError("the ShareGPT dataset needs the model's tokenizer; fix: pass --tokenizer PATH")
        return sharegpt_requests(path, tokenizer, workload.num_prompts, seed)
    return jsonl_requests(path, tokenizer, workload)


def check(workload: Workload) -> None:
    """Refuse a workload whose file gives no prompts, before any engine is launched for it: a path that is missing,
    a directory, a device or a FIFO; bytes that are not UTF-8; a record over the bound or not a record; no record at
    all. Reads the file once, bounded as the benchmark reads it; a random workload has no file.

    Raises:
        UsageError: naming the file (and the line), with the fix.
    """
    if workload.dataset == "mix":
        mix_counts(workload.classes, workload.num_prompts)
        for request_class in workload.classes:
            try:
                check(class_workload(workload, request_class, 1, workload.seed))
            except UsageError as exc:
                raise UsageError(
                    f"class {request_class.name}: {str(exc).replace('workload.path', 'its path')}"
                ) from None
        return
    if workload.dataset == "random":
        return
    path = dataset_path(workload)
    if workload.dataset == "sharegpt":
        count_records(path, _sharegpt_pairs(path))
    else:
        count_records(path, (_jsonl_record(path, number, line, workload) for number, line in jsonl_lines(path)))


def class_workload(workload: Workload, request_class: RequestClass, count: int, seed: int) -> Workload:
    """The workload of one class of a mix: its dataset and lengths, ``count`` prompts, the seed of the class's
    prompts (``class_seed``); everything else the mix's."""
    shape = request_class.model_dump(include=_CLASS_SHAPE)
    return workload.model_copy(update=shape | {"classes": None, "num_prompts": count, "seed": seed})


def class_seed(seed: int, name: str) -> int:
    """The seed of one class's prompts: its own (classes of one shape get different prompts), the same whatever the
    order or number of the other classes."""
    return int.from_bytes(hashlib.blake2b(f"{seed}/{name}".encode(), digest_size=8).digest(), "big")


def mix_requests(workload: Workload, tokenizer: Tokenizer | None, seed: int, every_class: bool = True,
                 ) -> list[BenchRequest]:  # fmt: skip
    """A mix's requests: each class's own (``mix_counts`` of them: exact), interleaved in an order shuffled by
    ``seed``; each request names its class. Without ``every_class``, a class may get none (``class_counts``).

    Raises:
        UsageError: a class would get no request, its dataset needs what is missing, or gives fewer prompts than
            its share (a ShareGPT file whose conversations the length filter drops).
    """
    classes, total = workload.classes, workload.num_prompts
    counts = mix_counts(classes, total) if every_class else class_counts([c.share for c in classes], total)
    queues = []
    for request_class, count in zip(classes, counts, strict=True):
        if not count:
            queues.append(iter(()))
            continue
        own = build_requests(class_workload(workload, request_class, count, class_seed(seed, request_class.name)),
                             tokenizer)  # fmt: skip
        if len(own) < count:
            raise UsageError(f"class {request_class.name} of the mix: its dataset gives {len(own)} usable prompts, "
                             f"its share is {count} of {total}; fix: a larger file, or fewer "
                             "num_prompts")  # fmt: skip
        queues.append(iter([dataclasses.replace(r, request_class=request_class.name) for r in own[:count]]))
    order = [index for index, count in enumerate(counts) for _ in range(count)]
    random.Random(seed).shuffle(order)
    return [next(queues[index]) for index in order]


def needs_tokenizer(workload: Workload) -> bool:
    """Whether the workload's prompts are made or cut with the model's tokenizer (random and ShareGPT prompts; a
    JSONL file's are counted with it where it is found, else sent as they are)."""
    datasets = {c.dataset for c in workload.classes or ()} if workload.dataset == "mix" else {workload.dataset}
    return bool(datasets & {"random", "sharegpt"})


def dataset_path(workload: Workload) -> Path:
    """The file of a ShareGPT or JSONL workload: as written (a relative path starts in the working directory), else
    a ShareGPT file of that name that ``autotune dataset fetch`` put in the cache (``autotune.bench.fetch``).

    Raises:
        UsageError: a ShareGPT workload whose file is in neither place (with where to get it), or no path at all.
    """
    if workload.dataset == "sharegpt":
        return sharegpt_file(workload.path)
    if workload.path is None:
        raise UsageError(
            f"the {workload.dataset} dataset needs a file; fix: set workload.path (bench: --dataset-path FILE)"
        )
    return Path(workload.path)


def _length_range(mean: int, ratio: float) -> tuple[int, int]:
    return max(1, math.floor(mean * (1 - ratio))), math.ceil(mean * (1 + ratio))


def random_requests(tokenizer: Tokenizer, workload: Workload, seed: int) -> list[BenchRequest]:
    """Prompts of random tokens whose re-tokenized length is exactly the sampled input length (+ a shared prefix).

    Like vllm bench, the input length counts the special tokens the tokenizer adds (a BOS), so the server sees
    ``input_len`` prompt tokens; ``prompt_len`` is that server-side count.
    """
    rng = random.Random(seed)
    special = set(tokenizer.get_added_tokens_decoder())
    vocab = [i for i in range(tokenizer.get_vocab_size()) if i not in special]
    added = len(tokenizer.encode("", add_special_tokens=True).ids)
    prefix = [rng.choice(vocab) for _ in range(workload.prefix_len)]
    in_low, in_high = _length_range(max(1, workload.input_len - added), workload.range_ratio)
    out_low, out_high = _length_range(workload.output_len, workload.range_ratio)
    requests = []
    for _ in range(workload.num_prompts):
        target = workload.prefix_len + rng.randint(in_low, in_high)
        prompt, length = _exact_length_prompt(tokenizer, prefix, target, vocab, rng)
        requests.append(BenchRequest(prompt, length + added, rng.randint(out_low, out_high)))
    return requests


def _exact_length_prompt(tokenizer: Tokenizer, prefix: list[int], target: int, vocab: list[int], rng: random.Random):
    # Decoding random ids and encoding the text again merges or splits tokens; trim or pad until it round-trips.
    # Some sequences oscillate around the target: then start over from new random ids.
    for _ in range(_FRESH_STARTS):
        ids = prefix + [rng.choice(vocab) for _ in range(target - len(prefix))]
        for _ in range(_ADJUST_ROUNDS):
            text = tokenizer.decode(ids)
            encoded = tokenizer.encode(text, add_special_tokens=False).ids
            if len(encoded) == target:
                return text, target
            ids = (
                encoded[:target]
                if len(encoded) > target
                else encoded + [rng.choice(vocab) for _ in range(target - len(encoded))]
            )
    return text, len(encoded)


def sharegpt_requests(path: Path, tokenizer: Tokenizer, count: int, seed: int) -> list[BenchRequest]:
    """The first human turn as prompt and the reply's length as output length, filtered and shuffled like vllm bench
    (every conversation of two turns or more shuffled, then the first ``count`` that pass the length filter).

    Raises:
        UsageError: the file gives no conversation (``check``), or none passes the filter.
    """

    def filtered(pair: tuple[str, str]) -> BenchRequest | None:
        prompt, completion = pair
        prompt_len = len(tokenizer.encode(prompt, add_special_tokens=False).ids)
        output_len = len(tokenizer.encode(completion, add_special_tokens=False).ids)
        if min(prompt_len, output_len) < SHAREGPT_MIN_LEN or prompt_len > SHAREGPT_MAX_PROMPT:
            return None
        if prompt_len + output_len > SHAREGPT_MAX_TOTAL:
            return None
        return BenchRequest(prompt, prompt_len, output_len)

    total = count_records(path, _sharegpt_pairs(path))
    requests = shuffled_first(path, lambda: _sharegpt_pairs(path), total, seed, count, filtered)
    if not requests:
        raise UsageError(f"no conversation of {path} passes vllm bench's filter (prompt and reply of "
                         f"{SHAREGPT_MIN_LEN} tokens or more, prompt up to {SHAREGPT_MAX_PROMPT}, both up to "
                         f"{SHAREGPT_MAX_TOTAL}); fix: give conversations of those lengths")  # fmt: skip
    return requests


def _sharegpt_pairs(path: Path) -> Iterator[tuple[str, str]]:
    """(first human turn, its reply) of each conversation of two turns or more, in the file's order."""
    for line, item in json_array_items(path):
        turns = item.get("conversations", []) if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise UsageError(f'{path}:{line}: not a conversation ({{"conversations": [...]}}); '
                             "fix: pass the ShareGPT_V3 JSON file")  # fmt: skip
        if len(turns) < 2:
            continue
        values = [turn.get("value") if isinstance(turn, dict) else None for turn in turns[:2]]
        if not all(isinstance(value, str) for value in values):
            raise UsageError(f'{path}:{line}: a turn without a text "value"; fix: pass the ShareGPT_V3 JSON file')
        yield values[0], values[1]


def jsonl_requests(path: Path, tokenizer: Tokenizer | None, workload: Workload) -> list[BenchRequest]:
    """One JSON object per line: ``{"prompt": "...", "output_len": 128}`` (output_len optional; vllm bench's custom
    dataset key ``output_tokens`` is read too, so one file serves both clients). Every line shuffled by the
    workload's seed, the first num_prompts kept.

    Raises:
        UsageError: the file gives no prompts, or a line is not a prompt (``check``).
    """

    def request(numbered: tuple[int, str]) -> BenchRequest:
        prompt, output_len = _jsonl_record(path, *numbered, workload)
        prompt_len = len(tokenizer.encode(prompt, add_special_tokens=False).ids) if tokenizer else None
        return BenchRequest(prompt, prompt_len, output_len)

    total = count_records(path, (_jsonl_record(path, number, line, workload) for number, line in jsonl_lines(path)))
    return shuffled_first(path, lambda: jsonl_lines(path), total, workload.seed, workload.num_prompts, request)


def _jsonl_record(path: Path, number: int, line: str, workload: Workload) -> tuple[str, int]:
    """(prompt, output length) of one line."""
    try:
        item = json.loads(line)
        prompt = item["prompt"]
        output_len = int(item.get("output_len", item.get("output_tokens", workload.output_len)))
        if not isinstance(prompt, str):
            raise TypeError
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # RecursionError: nested too deep
        raise UsageError(
            f"{path}:{number}: not a JSON object with a 'prompt'; fix: one {{\"prompt\": ...}} per line"
        ) from None
    return prompt, output_len
