"""Benchmark requests: random token prompts of exact lengths, ShareGPT conversations, or a JSONL file of prompts.

Lengths are counted with the model's own tokenizer (``tokenizers`` reading tokenizer.json, no transformers). Every
dataset is deterministic for a seed.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from autotune.errors import UsageError
from autotune.space import Workload

# vllm bench's ShareGPT filter: drop prompts or completions under 4 tokens, prompts over 1024, pairs over 2048.
SHAREGPT_MIN_LEN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048
_ADJUST_ROUNDS, _FRESH_STARTS = 10, 20


@dataclass(frozen=True)
class BenchRequest:
    """One request: the prompt, its length in tokens (None when no tokenizer counted it), the output length asked."""

    prompt: str
    prompt_len: int | None
    output_len: int


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer in ``path`` (a tokenizer.json, or a model directory holding one).

    Raises:
        UsageError: no tokenizer.json there.
    """
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(
            f"no tokenizer.json at {path}; fix: pass --tokenizer with a local model directory or tokenizer.json"
        )
    return Tokenizer.from_file(str(file))


def build_requests(workload: Workload, tokenizer: Tokenizer | None, seed: int | None = None) -> list[BenchRequest]:
    """The workload's requests; ``seed`` overrides the workload's (a different seed per repeat avoids prefix-cache hits)."""
    seed = workload.seed if seed is None else seed
    if workload.dataset == "random":
        if tokenizer is None:
            raise UsageError("the random dataset needs the model's tokenizer; fix: pass --tokenizer PATH")
        return random_requests(tokenizer, workload, seed)
    if workload.path is None:
        raise UsageError(f"the {workload.dataset} dataset needs a file; fix: pass --dataset-path FILE")
    if workload.dataset == "sharegpt":
        if tokenizer is None:
            raise UsageError("the ShareGPT dataset needs the model's tokenizer; fix: pass --tokenizer PATH")
        return sharegpt_requests(Path(workload.path), tokenizer, workload.num_prompts, seed)
    return jsonl_requests(Path(workload.path), tokenizer, workload)


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
    """The first human turn as prompt and the reply's length as output length, filtered and shuffled like vllm bench."""
    try:
        conversations = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read ShareGPT file {path}: {exc}; fix: pass the ShareGPT_V3 JSON file") from None
    pairs = [c["conversations"] for c in conversations if len(c.get("conversations", [])) >= 2]
    random.Random(seed).shuffle(pairs)
    requests = []
    for turns in pairs:
        prompt, completion = turns[0]["value"], turns[1]["value"]
        prompt_len = len(tokenizer.encode(prompt, add_special_tokens=False).ids)
        output_len = len(tokenizer.encode(completion, add_special_tokens=False).ids)
        if min(prompt_len, output_len) < SHAREGPT_MIN_LEN or prompt_len > SHAREGPT_MAX_PROMPT:
            continue
        if prompt_len + output_len > SHAREGPT_MAX_TOTAL:
            continue
        requests.append(BenchRequest(prompt, prompt_len, output_len))
        if len(requests) == count:
            break
    return requests


def jsonl_requests(path: Path, tokenizer: Tokenizer | None, workload: Workload) -> list[BenchRequest]:
    """One JSON object per line: ``{"prompt": "...", "output_len": 128}`` (output_len optional; vllm bench's custom
    dataset key ``output_tokens`` is read too, so one file serves both clients)."""
    requests = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}; fix: check the path") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            prompt = item["prompt"]
            output_len = int(item.get("output_len", item.get("output_tokens", workload.output_len)))
        except (ValueError, KeyError, TypeError):
            raise UsageError(
                f"{path}:{number}: not a JSON object with a 'prompt'; fix: one {{\"prompt\": ...}} per line"
            ) from None
        prompt_len = len(tokenizer.encode(prompt, add_special_tokens=False).ids) if tokenizer else None
        requests.append(BenchRequest(prompt, prompt_len, output_len))
    random.Random(workload.seed).shuffle(requests)
    return requests[: workload.num_prompts]
