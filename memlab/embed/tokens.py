"""The shared token counter: budgets (recall@tokN, context_tokens) measured in one unit.

Every pipeline's context is counted with the default embedder's tokenizer, whatever LM or
embedder the pipeline uses, so token budgets compare across pipelines. Only the tokenizer
is loaded (no model weights), once per process.
"""

from __future__ import annotations

import threading
from typing import Callable

from memlab.embed.base import EmbedderError, offline_hub
from memlab.embed.sentence_transformers import default_model_path

_counter: Callable[[str], int] | None = None
_lock = threading.Lock()


def default_token_counter() -> Callable[[str], int]:
    """A cached ``count(text) -> int``: all-MiniLM-L6-v2 word pieces, no special tokens, no truncation."""
    global _counter
    with _lock:
        if _counter is None:
            _counter = _load_counter()
        return _counter


def _load_counter() -> Callable[[str], int]:
    folder = default_model_path()
    offline_hub()
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # transformers raises many types for a bad folder
        raise EmbedderError(f"cannot load the default tokenizer from {folder}: {e}") from e

    def count(text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"count takes a str, got {type(text).__name__}")
        if not text:
            return 0
        return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    return count
