"""The simulated engine's tokenizer: one whitespace-separated word is one token.

The simulator never sees real text, so it counts a prompt's words; the benchmark client builds its prompts with
this tokenizer, so the lengths it asks for are the lengths the simulator counts.
"""

from __future__ import annotations

from functools import lru_cache

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

VOCABULARY = 4096


@lru_cache(maxsize=1)
def word_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCABULARY)}, unk_token="w0"))  # noqa: S106 (a word, not a secret)
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with single spaces
    return tokenizer


def count_tokens(text: str) -> int:
    return len(text.split())
