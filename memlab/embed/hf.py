"""An embedder for any local Hugging Face encoder folder: AutoModel + masked mean pooling."""

from __future__ import annotations

from typing import Any

import numpy as np

from memlab.bounds import PositiveInt
from memlab.embed.base import Embedder, EmbedderError, check_model_folder, load_shared, model_fingerprint, offline_hub


class HFMeanPoolingEmbedder(Embedder):
    """Mean of the last hidden states over non-padding tokens, L2-normalised.

    ``max_length`` truncates long inputs (the vectors then depend on it, so it is part of
    the identity). See ``memlab.embed.base`` for the contract.
    """

    def __init__(self, path: str, device: str = "cpu", batch_size: PositiveInt = 32, max_length: PositiveInt = 512) -> None:
        super().__init__()
        self.path = path
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length

    def _load(self) -> None:
        folder = check_model_folder(self.path, type(self).__name__).resolve()
        offline_hub()

        def load():
            from transformers import AutoModel, AutoTokenizer

            try:
                tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
                model = AutoModel.from_pretrained(str(folder), local_files_only=True).to(self.device).eval()
            except Exception as e:  # transformers raises many types for a bad folder
                raise EmbedderError(f"cannot load Hugging Face model from {folder}: {e}") from e
            return tokenizer, model, model_fingerprint(folder)

        self._tokenizer, self._model, self._fingerprint = load_shared(("hf-auto", str(folder), self.device), load)
        self._model_name = folder.name

    def _encode(self, texts: list[str]) -> np.ndarray:
        import torch

        # Sorting by length keeps padding (wasted compute) small inside each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self._dim()), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                batch = self._tokenizer(
                    [texts[i] for i in idx],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[idx] = pooled.float().cpu().numpy()
        return out

    def _dim(self) -> int:
        return int(self._model.config.hidden_size)

    def _count_tokens(self, text: str) -> int:
        return len(self._tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def _identity(self) -> dict[str, Any]:
        return {
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            "model": self._model_name,
            "fingerprint": self._fingerprint,
            "max_length": self.max_length,
        }
