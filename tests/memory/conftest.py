from __future__ import annotations

import pytest

from memlab.embed import SentenceTransformerEmbedder
from memlab.types import MemoryUnit
from tests.memory.helpers import HashingEmbedder, make_units


@pytest.fixture
def units() -> list[MemoryUnit]:
    return make_units()


@pytest.fixture
def hashing() -> HashingEmbedder:
    return HashingEmbedder()


@pytest.fixture(scope="session")
def minilm() -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder()
    embedder.warm_up()
    return embedder
