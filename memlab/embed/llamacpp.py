"""An embedder over a GGUF embedding model, run in-process by llama-cpp-python (``embedding=True``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from memlab.bounds import PositiveInt, Range
from memlab.embed.base import Embedder, EmbedderError, load_shared


class LlamaCppEmbedder(Embedder):
    """A GGUF embedding model (e.g. ``nomic-embed-text-v1.5``) through llama.cpp.

    ``model`` is a ``.gguf`` path or the name of a packaged model (``memlab.embed.packaged``).
    The pooling is the one the GGUF declares. ``query_prefix`` / ``document_prefix`` are put
    before queries / documents (nomic: ``"search_query: "`` / ``"search_document: "``) and are
    part of the identity. Texts longer than ``n_ctx`` tokens are cut to it. See
    ``memlab.embed.base`` for the contract.
    """

    def __init__(
        self,
        model: str,
        query_prefix: str = "",
        document_prefix: str = "",
        n_ctx: Annotated[int, Range(min=8)] = 512,
        n_threads: PositiveInt | None = None,
        batch_size: PositiveInt = 32,
    ) -> None:
        super().__init__()
        self.model = model
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.batch_size = batch_size

    def _path(self) -> Path:
        from memlab.embed.packaged import KNOWN_EMBEDDER_MODELS, resolve_embedder_model

        path = resolve_embedder_model(self.model) if self.model in KNOWN_EMBEDDER_MODELS else Path(self.model)
        if not path.is_file():
            raise EmbedderError(f"{type(self).__name__}: GGUF file not found: {path}")
        return path

    def _load(self) -> None:
        path = self._path().resolve()

        def load():
            from llama_cpp import Llama

            from memlab.lm.models import model_fingerprint

            try:
                llama = Llama(model_path=str(path), embedding=True, n_ctx=self.n_ctx, n_batch=self.n_ctx,
                              n_ubatch=self.n_ctx, n_threads=self.n_threads or max(1, (os.cpu_count() or 1)),
                              verbose=False)
            except Exception as e:  # llama.cpp raises ValueError / RuntimeError for a bad file
                raise EmbedderError(f"cannot load GGUF embedding model {path}: {e}") from e
            return llama, model_fingerprint(path)

        self._llama, self._fingerprint = load_shared(("llama.cpp-embedding", str(path), self.n_ctx, self.n_threads),
                                                     load)
        self._name = path.stem
        self._size = int(self._llama.n_embd())

    def _tokens(self, text: str) -> list[int]:
        return self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def _fit(self, text: str) -> str:
        """``text`` cut to what fits ``n_ctx`` with the special tokens llama.cpp adds."""
        tokens = self._tokens(text)
        limit = self.n_ctx - 4
        if len(tokens) <= limit:
            return text
        return self._llama.detokenize(tokens[:limit]).decode("utf-8", errors="ignore")

    def _run(self, texts: list[str], prefix: str) -> np.ndarray:
        rows = []
        for start in range(0, len(texts), self.batch_size):
            batch = [self._fit(prefix + text) for text in texts[start:start + self.batch_size]]
            rows.extend(self._llama.embed(batch, normalize=False))
        return np.asarray(rows, dtype=np.float32)

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, self.document_prefix)

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, self.query_prefix)

    def _dim(self) -> int:
        return self._size

    def _count_tokens(self, text: str) -> int:
        return len(self._tokens(text))

    def _identity(self) -> dict[str, Any]:
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}", "model": self._name,
                "fingerprint": self._fingerprint, "n_ctx": self.n_ctx,
                "query_prefix": self.query_prefix, "document_prefix": self.document_prefix}
