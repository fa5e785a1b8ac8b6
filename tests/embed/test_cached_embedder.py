"""CachedEmbedder: each (text, side) encoded once across instances; identity and errors."""

from __future__ import annotations

import numpy as np
import pytest

from memlab.embed import EmbedderError
from memlab.embed.cached import CachedEmbedder
from memlab.held_out import trained_conversations
from memlab.memory import UnitMemory
from memlab.stages.encoder import TextEncoder
from tests.memory.helpers import HashingEmbedder, make_units


def close(a, b):
    np.testing.assert_allclose(a, b, atol=1e-6)  # normalised once more on the way out


class AsymmetricHashing(HashingEmbedder):
    """Queries land elsewhere than documents, so a cache that mixed the sides would show."""

    def _encode_queries(self, texts):
        return self._encode(texts)[:, ::-1].copy()


def test_vectors_are_encoded_once_across_instances_and_equal_the_model(tmp_path):
    texts = ["Melanie paints sunsets", "Caroline went to a support group", "Melanie paints sunsets"]
    model = AsymmetricHashing()
    cached = CachedEmbedder(model, tmp_path / "vectors")
    first = cached.encode(texts)
    close(first, AsymmetricHashing().encode(texts))
    assert model.encoded == 2 and cached.encoded == 2  # the repeated text once
    close(cached.encode(texts[:2]), first[:2])
    queries = cached.encode_queries(texts[:1])
    close(queries, AsymmetricHashing().encode_queries(texts[:1]))
    assert not np.allclose(queries, first[:1]) and model.encoded == 3  # the query side is its own entry
    again = CachedEmbedder(AsymmetricHashing(), tmp_path / "vectors")  # a later run
    close(again.encode(texts), first)
    assert again.encoded == 0 and again.embedder.encoded == 0
    other = CachedEmbedder(HashingEmbedder(salt="v2"), tmp_path / "vectors")  # another model: its own keys
    other.encode(texts[:1])
    assert other.encoded == 1
    assert cached.identity == model.identity and cached.dim == model.dim


def test_a_memory_built_through_the_cache_loads_with_the_model_itself(tmp_path):
    memory = UnitMemory.build(make_units(), CachedEmbedder(HashingEmbedder(), tmp_path / "vectors"))
    memory.save(tmp_path / "memory")
    loaded = UnitMemory.load(tmp_path / "memory", HashingEmbedder())
    assert len(loaded) == len(memory)


def test_a_file_that_is_not_a_cache_is_named(tmp_path):
    (tmp_path / "vectors.sqlite").write_bytes(b"not a database at all, just some bytes" * 40)
    with pytest.raises(EmbedderError, match="vectors.sqlite: not a usable vector cache"):
        CachedEmbedder(HashingEmbedder(), tmp_path).encode(["text"])


def test_a_wrapped_trained_retriever_still_counts_as_trained(tmp_path):
    from memlab.stages.retrieve import BiEncoderEmbedder

    retriever = BiEncoderEmbedder(TextEncoder(max_length=128))  # the model loads on first use: not here
    object.__setattr__(retriever, "_trained_on", frozenset({"conv-41"}))  # as Stage.load records it
    assert set(trained_conversations(CachedEmbedder(retriever, tmp_path)).values()) == {frozenset({"conv-41"})}
