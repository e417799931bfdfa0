"""The shipped text corpus, a character-level tokenizer and random training batches.

    text = load_text()                     # KJV Genesis + Exodus (data/README.md)
    tok = CharTokenizer.from_text(text)    # one id per distinct character, sorted
    x, y = get_batch(tok.encode(text), batch_size=8, block_size=32, rng=rng)  # (B, T) each
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CORPUS = Path(__file__).parent / "data" / "kjv_genesis_exodus.txt"


def load_text(path: str | Path | None = None) -> str:
    return Path(path or CORPUS).read_text(encoding="utf-8")


class CharTokenizer:
    def __init__(self, chars: str):
        if len(set(chars)) != len(chars):
            raise ValueError("tokenizer characters must be distinct")
        self.chars = chars
        self._ids = {ch: i for i, ch in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        try:
            return np.array([self._ids[ch] for ch in text], dtype=np.int64)
        except KeyError as err:
            raise ValueError(f"character {err.args[0]!r} is not in the tokenizer's vocabulary") from None

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def get_batch(tokens: np.ndarray, batch_size: int, block_size: int, rng: np.random.Generator):
    """B random windows of T tokens and the same windows shifted by one (the targets)."""
    if len(tokens) <= block_size:
        raise ValueError(f"corpus of {len(tokens)} tokens is too short for block_size {block_size}")
    starts = rng.integers(0, len(tokens) - block_size, size=batch_size)
    x = np.stack([tokens[s:s + block_size] for s in starts])  # (B, T)
    y = np.stack([tokens[s + 1:s + block_size + 1] for s in starts])  # (B, T)
    return x, y
