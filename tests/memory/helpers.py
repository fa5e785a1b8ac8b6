"""Test helpers for memory tests: a cheap deterministic embedder and a few LoCoMo-like units."""

from __future__ import annotations

import zlib
from datetime import datetime
from typing import Any

import numpy as np

from memlab.embed import Embedder
from memlab.memory.index import tokenize
from memlab.types import MemoryUnit


class HashingEmbedder(Embedder):
    """Hashed bag of stemmed words: deterministic, instant, and lexical enough that a query
    sharing words with a text lands nearest to it. For mechanics tests; semantic behaviour is
    tested with the real MiniLM."""

    def __init__(self, dim: int = 128, salt: str = "") -> None:
        super().__init__()
        self._d = dim
        self.salt = salt
        self.encoded = 0

    def _load(self) -> None:
        pass

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.encoded += len(texts)
        out = np.zeros((len(texts), self._d), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in tokenize(text):
                out[row, zlib.crc32((self.salt + token).encode()) % self._d] += 1.0
        return out

    def _dim(self) -> int:
        return self._d

    def _count_tokens(self, text: str) -> int:
        return len(text.split())

    def _identity(self) -> dict[str, Any]:
        return {"class": "tests.HashingEmbedder", "salt": self.salt}


def make_units() -> list[MemoryUnit]:
    rows = [
        ("D1:1", "Caroline", "I went to the LGBTQ support group yesterday and it was powerful.", datetime(2023, 5, 7, 13, 56)),
        ("D1:2", "Melanie", "That sounds great! I painted a sunrise over the lake last week.", datetime(2023, 5, 7, 13, 57)),
        ("D2:1", "Caroline", "I am researching adoption agencies because I want to adopt children.", datetime(2023, 5, 25, 10, 0)),
        ("D2:2", "Melanie", "My kids love camping; we went to the beach and roasted marshmallows.", datetime(2023, 5, 25, 10, 1)),
        ("D3:1", "Caroline", "I am counseling people about mental health now.", datetime(2023, 6, 9, 18, 30)),
        ("D3:2", "Melanie", "I signed up for a pottery class and made a bowl.", datetime(2023, 6, 9, 18, 31)),
    ]
    return [
        MemoryUnit(
            id=f"u{i}",
            text=f"{speaker}: {text}",
            source_ids=(dia_id,),
            timestamp=ts,
            speaker=speaker,
            attributes={"entities": [speaker], "session": dia_id.split(":")[0], "seen": ts},
        )
        for i, (dia_id, speaker, text, ts) in enumerate(rows)
    ]
