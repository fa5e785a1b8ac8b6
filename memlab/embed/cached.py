"""``CachedEmbedder``: any embedder's vectors kept on disk, so a slow model encodes a text once.

EmbeddingGemma-300M needs about two minutes per LoCoMo conversation on 2 cores; a training
recipe run leave-one-conversation-out encodes every conversation once per fold. Wrapped in a
``CachedEmbedder``, it encodes each distinct (text, side) once across folds and runs:

```yaml
embedder:
  _component_: memlab.embed.cached.CachedEmbedder
  folder: ~/.cache/memlab/vectors
  embedder: {_component_: memlab.embed.SentenceTransformerEmbedder, path: embeddinggemma-300m, ...}
```

Vectors live in ``FOLDER/vectors.sqlite``, keyed by the sha256 of (the wrapped embedder's
identity, document or query side, text): another model, checkpoint or prompt never reads them.
The wrapper's ``identity`` is the wrapped one's, so a memory built through the cache is the
memory the model itself would build. A file that is not a readable cache is an
``EmbedderError`` naming it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from memlab.embed.base import Embedder, EmbedderError

CACHE_FILE = "vectors.sqlite"


class CachedEmbedder(Embedder, nn.Module):
    """``embedder``'s vectors, read from ``folder`` when they were encoded before (module docstring).

    A module only so that a wrapped trained retriever stays a submodule of the pipeline:
    ``memlab.held_out.trained_conversations`` must still see what it was trained on.
    """

    def __init__(self, embedder: Embedder, folder: str | Path) -> None:
        nn.Module.__init__(self)
        Embedder.__init__(self)
        self.embedder = embedder
        self.path = Path(folder).expanduser() / CACHE_FILE
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        #: Texts encoded by the wrapped model (misses), for reports and tests.
        self.encoded = 0

    def _load(self) -> None:
        self.embedder.warm_up()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False)
            self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)")
            self._db.commit()
        except (OSError, sqlite3.DatabaseError) as e:
            raise EmbedderError(f"{self.path}: not a usable vector cache ({type(e).__name__}: {e}); "
                                "delete it to start an empty one") from None

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._cached(texts, "document", self.embedder.encode)

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._cached(texts, "query", self.embedder.encode_queries)

    def _cached(self, texts: list[str], side: str, encode) -> np.ndarray:
        prefix = json.dumps([self.embedder.identity, side], sort_keys=True)
        keys = [hashlib.sha256(f"{prefix}\n{text}".encode()).hexdigest() for text in texts]
        dim = self.embedder.dim
        found: dict[str, np.ndarray] = {}
        with self._lock:
            try:
                for start in range(0, len(keys), 500):  # SQLite's bound-parameter limit
                    chunk = list(dict.fromkeys(keys[start:start + 500]))
                    marks = ",".join("?" * len(chunk))
                    rows = self._db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", chunk).fetchall()
                    found.update((key, np.frombuffer(blob, dtype=np.float32)) for key, blob in rows)
            except sqlite3.DatabaseError as e:
                raise EmbedderError(f"{self.path}: cannot read the vector cache ({e}); "
                                    "delete it to start again") from None
        if any(v.shape != (dim,) for v in found.values()):
            raise EmbedderError(f"{self.path}: a cached vector is not of dim {dim}; delete the cache to start again")
        missing = list(dict.fromkeys((k, t) for k, t in zip(keys, texts) if k not in found))
        if missing:
            vectors = encode([t for _, t in missing])
            self.encoded += len(missing)
            with self._lock:
                try:
                    with self._db:  # one transaction: all of these or none
                        rows = [(k, v.astype(np.float32).tobytes()) for (k, _), v in zip(missing, vectors)]
                        self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
                except sqlite3.DatabaseError as e:
                    raise EmbedderError(f"{self.path}: cannot write the vector cache ({e})") from None
            found.update((k, v) for (k, _), v in zip(missing, vectors))
        return np.stack([found[k] for k in keys])

    def _dim(self) -> int:
        return self.embedder.dim

    def _count_tokens(self, text: str) -> int:
        return self.embedder.count_tokens(text)

    def _identity(self) -> dict[str, Any]:
        return {k: v for k, v in self.embedder.identity.items() if k not in ("dim", "normalize")}

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.embedder!r}, {str(self.path.parent)!r})"
