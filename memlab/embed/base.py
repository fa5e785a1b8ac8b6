"""The embedder contract every text encoder in memlab honours.

Contract
--------
* ``encode(texts) -> np.ndarray``: float32, shape ``(len(texts), dim)``, every row
  L2-normalised (so inner product is cosine similarity), rows in input order. Batching
  happens inside; an empty list gives a ``(0, dim)`` array.
* ``encode_queries(texts)``: the same for search queries. Asymmetric models (EmbeddingGemma,
  nomic, E5) put a query prefix on queries and a document prefix on everything ``encode`` gets;
  symmetric ones encode both alike. Code that searches encodes its query with this.
* ``dim``: the vector size. ``count_tokens(text)``: the number of tokens of ``text`` under
  the embedder's own tokenizer, without special tokens and without truncation.
* ``identity``: a JSON-serialisable dict that changes whenever the vectors would change
  (class, model, a fingerprint of the model files, dim, normalisation, truncation length).
  Saved memories record it; loading a memory with an embedder of another identity is refused.
  It contains no absolute path, so the same model installed elsewhere has the same identity.
* Loading is lazy: constructing an embedder loads nothing. ``warm_up()`` loads it now; the
  first call to ``encode``/``dim``/``count_tokens``/``identity`` otherwise does. Loading is
  guarded by a lock, so concurrent first calls load once.
* A model folder that is missing or unreadable raises ``EmbedderError`` naming the folder.
"""

from __future__ import annotations

import hashlib
import os
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable

import numpy as np

from memlab.components import CheckedArguments
from memlab.errors import MemlabError


class EmbedderError(MemlabError, RuntimeError):
    """An embedder model that cannot be found or loaded."""


class Embedder(CheckedArguments, ABC):
    """Base class of text embedders (see the module docstring for the contract)."""

    def __init__(self) -> None:
        self._load_lock = threading.Lock()
        self._loaded = False

    # -- subclass hooks ------------------------------------------------------------------
    @abstractmethod
    def _load(self) -> None:
        """Load the model and tokenizer (called once, under the load lock)."""

    @abstractmethod
    def _encode(self, texts: list[str]) -> np.ndarray:
        """Encode a non-empty list of texts (the model is loaded); rows need not be normalised."""

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        """Encode search queries (the model is loaded); symmetric models encode them like documents."""
        return self._encode(texts)

    @abstractmethod
    def _dim(self) -> int:
        """Vector size (the model is loaded)."""

    @abstractmethod
    def _count_tokens(self, text: str) -> int:
        """Token count of ``text`` (the model is loaded)."""

    @abstractmethod
    def _identity(self) -> dict[str, Any]:
        """Identity fields besides ``dim`` and ``normalize`` (the model is loaded)."""

    # -- public API ----------------------------------------------------------------------
    def warm_up(self) -> None:
        """Load the model now instead of on first use."""
        if self._loaded:
            return
        with self._load_lock:
            if not self._loaded:
                self._load()
                self._loaded = True

    @property
    def dim(self) -> int:
        self.warm_up()
        return self._dim()

    @property
    def identity(self) -> dict[str, Any]:
        self.warm_up()
        return {**self._identity(), "dim": self._dim(), "normalize": True}

    def encode(self, texts: list[str]) -> np.ndarray:
        return self._encoded(texts, self._encode, "encode")

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._encoded(texts, self._encode_queries, "encode_queries")

    def _encoded(self, texts: list[str], encoder: Callable[[list[str]], np.ndarray], what: str) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError(f"{what} takes a list of texts, got a single str")
        texts = list(texts)
        self.warm_up()
        if not texts:
            return np.zeros((0, self._dim()), dtype=np.float32)
        vectors = np.asarray(encoder(texts), dtype=np.float32)
        if vectors.shape != (len(texts), self._dim()):
            raise EmbedderError(
                f"{type(self).__name__}: model returned shape {vectors.shape} for {len(texts)} texts"
            )
        return l2_normalize(vectors)

    def count_tokens(self, text: str) -> int:
        self.warm_up()
        return self._count_tokens(text)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(loaded={self._loaded})"


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation (float32); all-zero rows stay zero."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors / np.maximum(norms, 1e-12), dtype=np.float32)


def model_fingerprint(folder: str | os.PathLike) -> str:
    """A short, location-independent fingerprint of a model folder.

    Small files (configs, tokenizer, vocab: under 4 MB) are hashed by content; large ones
    (weights) by name and size, which keeps this fast while still telling models apart.
    """
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        if relative.startswith(".") or relative.lower() == "readme.md":
            continue
        size = path.stat().st_size
        digest.update(f"{relative}\0{size}\0".encode())
        if size < 4 * 2**20:
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def check_model_folder(path: str | os.PathLike, who: str) -> Path:
    """The folder as a Path, or ``EmbedderError`` if it is not a model folder."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise EmbedderError(f"{who}: model folder not found: {folder}")
    if not (folder / "config.json").is_file():
        raise EmbedderError(f"{who}: {folder} has no config.json (not a Hugging Face model folder)")
    return folder


def offline_hub() -> None:
    """Make sure nothing reaches for the Hugging Face hub: models here are local folders."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


_shared: dict[tuple, Any] = {}
_shared_lock = threading.Lock()


def load_shared(key: tuple, loader: Callable[[], Any]) -> Any:
    """Load a read-only model once per process, however many embedders use it.

    Several pipelines (and tests) build their own embedder over the same folder; inference
    does not mutate the weights, so they can share one copy instead of loading it again.
    """
    with _shared_lock:
        if key not in _shared:
            _shared[key] = loader()
        return _shared[key]
