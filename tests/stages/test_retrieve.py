"""The trainable retriever (``BiEncoderEmbedder``): an embedder and a stage at once."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from memlab.embed import SentenceTransformerEmbedder
from memlab.memory.store import MemoryStoreError, UnitMemory
from memlab.stage import Stage, load_stage
from memlab.stages.encoder import TextEncoder
from memlab.stages.retrieve import BiEncoderEmbedder, EmbedIn
from memlab.types import MemoryUnit

TEXTS = ["I adopted a puppy from the shelter last weekend.", "The tax report is due on Friday."]

pytestmark = pytest.mark.slow


def _one_step(stage: BiEncoderEmbedder) -> None:
    optimizer = torch.optim.AdamW([p for p in stage.parameters() if p.requires_grad], lr=1e-2)
    stage.train()
    queries = stage.embed(["Who got a dog?", "When is the tax report due?"], is_query=True)
    loss = stage.loss(queries, stage.embed(TEXTS, is_query=False), torch.arange(2))
    loss.backward()
    optimizer.step()


def test_untrained_it_is_the_packaged_minilm():
    vectors = BiEncoderEmbedder(TextEncoder(max_length=128)).encode(TEXTS)
    np.testing.assert_allclose(vectors, SentenceTransformerEmbedder().encode(TEXTS), atol=1e-5)


def test_forward_is_the_embedder_contract_and_prefixes_mark_queries():
    stage = BiEncoderEmbedder(TextEncoder(max_length=128, lora_rank=4), query_prefix="query: ")
    out = stage([EmbedIn(TEXTS[0], is_query=True), EmbedIn(TEXTS[1])])
    np.testing.assert_allclose(out[0].vector, stage.encode(["query: " + TEXTS[0]])[0], atol=1e-5)
    np.testing.assert_allclose(out[1].vector, stage.encode(TEXTS[1:])[0], atol=1e-5)
    assert np.isclose(np.linalg.norm(out[0].vector), 1.0, atol=1e-5)


def test_save_load_round_trip_and_a_memory_refuses_another_checkpoint(tmp_path):
    stage = BiEncoderEmbedder(TextEncoder(max_length=128, lora_rank=4))
    _one_step(stage)
    stage.save(tmp_path / "retriever")
    loaded = load_stage(tmp_path / "retriever")
    assert loaded.identity == stage.identity
    np.testing.assert_allclose(loaded.encode(TEXTS), stage.encode(TEXTS), atol=1e-6)
    assert (tmp_path / "retriever" / "encoder" / "model.safetensors").stat().st_size < 1_000_000  # the adapter only

    units = [MemoryUnit(id=f"u{i}", text=t, source_ids=(f"D1:{i}",)) for i, t in enumerate(TEXTS)]
    UnitMemory.build(units, loaded).save(tmp_path / "memory")
    assert len(UnitMemory.load(tmp_path / "memory", Stage.load(tmp_path / "retriever"))) == 2
    other = Stage.load(tmp_path / "retriever")
    _one_step(other)  # the same class and base model, other weights
    assert other.identity["weights"] != stage.identity["weights"]
    with pytest.raises(MemoryStoreError, match="embedder"):
        UnitMemory.load(tmp_path / "memory", other)
