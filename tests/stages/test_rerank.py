import json

import pytest
import torch

from memlab.stage import Stage, StageError, seal_checkpoint
from memlab.stages.encoder import TextEncoder
from memlab.stages.rerank import (
    CosineReranker,
    CrossEncoderReranker,
    FusionReranker,
    PromptedReranker,
    Reranker,
    RerankIn,
    RerankOut,
)
from memlab.stages.rerank.prompted import order_scores
from tests.fakes import ReplayLM
from tests.memory.helpers import HashingEmbedder

ITEM = RerankIn("Where does Alice live now?",
                ("Bob plays the guitar on weekends.", "Alice lives in Paris now.", "The weather was rainy."))
PAIRS = [("where does alice live", "Alice lives in Paris."), ("where does alice live", "Bob likes green tea."),
         ("what does bob drink", "Bob likes green tea."), ("what does bob drink", "Alice lives in Paris.")]


def small_reranker(**kwargs) -> CrossEncoderReranker:
    torch.manual_seed(0)
    return CrossEncoderReranker(TextEncoder(max_length=32, **{"lora_rank": 4, **kwargs}), batch_size=2)


def train_steps(stage: CrossEncoderReranker, steps: int) -> list[float]:
    queries, texts = [q for q, _ in PAIRS], [t for _, t in PAIRS]
    labels = torch.tensor([1.0, 0.0, 1.0, 0.0])
    optimiser = torch.optim.AdamW([p for p in stage.parameters() if p.requires_grad], lr=1e-2)
    stage.train()
    losses = []
    for _ in range(steps):
        loss = stage.loss(stage.score_pairs(queries, texts), labels)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return losses


def test_construction_is_lazy_and_parameters_build_the_stage():
    stage = small_reranker()
    assert not stage.is_built
    trainable = [name for name, p in stage.named_parameters() if p.requires_grad]
    assert stage.is_built
    assert any("lora_" in name for name in trainable) and "head.weight" in trainable
    assert not any(name.endswith("query.base_layer.weight") for name in trainable)  # base frozen


@pytest.mark.slow  # a few backward passes through MiniLM: seconds on a busy CPU
def test_cross_encoder_scores_one_per_candidate_and_training_lowers_the_loss():
    stage = small_reranker()
    out = stage([ITEM, RerankIn("q", ())])
    assert [len(o.scores) for o in out] == [3, 0] and all(isinstance(s, float) for s in out[0].scores)
    # batch_size=2 splits the 3 pairs over two chunks; scores do not depend on the chunking
    stage.batch_size = 3
    assert stage([ITEM])[0].scores == pytest.approx(out[0].scores, abs=1e-5)
    losses = train_steps(stage, 3)
    assert losses[-1] < losses[0]
    assert stage.training  # forward restores the caller's mode


def test_lora_checkpoint_is_small_and_round_trips(tmp_path):
    stage = small_reranker()
    train_steps(stage, 1)
    before = stage([ITEM])[0].scores
    stage.save(tmp_path / "rr")
    size = sum(p.stat().st_size for p in (tmp_path / "rr").rglob("model.safetensors"))
    assert size < 1_000_000  # adapter + head, not the 90 MB encoder
    assert json.loads((tmp_path / "rr" / "encoder" / "config.json").read_text())["kwargs"]["lora_rank"] == 4
    torch.manual_seed(123)  # a different LoRA init must be overwritten by the checkpoint
    loaded = Stage.load(tmp_path / "rr")
    assert isinstance(loaded, CrossEncoderReranker)
    assert loaded([ITEM])[0].scores == before


def test_loading_refuses_a_checkpoint_of_another_stage(tmp_path):
    small_reranker().save(tmp_path / "rr")
    config = json.loads((tmp_path / "rr" / "encoder" / "config.json").read_text())
    config["kwargs"]["lora_rank"] = 2  # adapter shapes no longer fit
    (tmp_path / "rr" / "encoder" / "config.json").write_text(json.dumps(config))
    seal_checkpoint(tmp_path / "rr")  # an edit made on purpose: the checksums then pass, the shapes do not
    with pytest.raises(StageError, match="do not match"):
        Stage.load(tmp_path / "rr")


@pytest.mark.slow  # writes the whole 90 MB encoder
def test_full_fine_tune_checkpoint_round_trips(tmp_path):
    stage = small_reranker(lora_rank=0)
    assert all(p.requires_grad for p in stage.parameters())
    with torch.no_grad():
        stage.head.bias.add_(0.5)
        next(stage.encoder.parameters()).mul_(1.01)
    before = stage([ITEM])[0].scores
    stage.save(tmp_path / "full")
    assert (tmp_path / "full" / "encoder" / "model.safetensors").stat().st_size > 50_000_000
    assert Stage.load(tmp_path / "full")([ITEM])[0].scores == before


def test_cosine_and_fusion_rank_the_exact_match_first():
    item = RerankIn("alice lives in paris", ("bob plays guitar", "the weather was rainy", "alice lives in paris"))
    for stage in (CosineReranker(HashingEmbedder()), FusionReranker(HashingEmbedder(), rrf_k=10)):
        [out] = stage([item])
        assert len(out.scores) == 3 and max(range(3), key=out.scores.__getitem__) == 2, type(stage).__name__
    assert CosineReranker(HashingEmbedder())([RerankIn("q", ())]) == [RerankOut(())]


def test_order_scores_puts_listed_first_and_keeps_input_order_for_the_rest():
    scores = order_scores(4, [2, 0, 2])
    assert sorted(range(4), key=lambda i: -scores[i]) == [2, 0, 1, 3]


def test_prompted_reranker_parses_the_ranking_and_falls_back_to_input_order():
    lm = ReplayLM(['{"ranking": [3, 9, 1]}', "not json", "still not json"])
    stage = PromptedReranker(lm, max_candidates=3, max_chars_per_candidate=20)
    long_item = RerankIn("q", ("a", "b", "c" * 50, "d"))
    [out] = stage([long_item])
    assert sorted(range(4), key=lambda i: -out.scores[i]) == [2, 0, 1, 3]  # 9 is out of range, "d" unshown
    prompt = lm.requests[0].messages[-1]["content"]
    assert "3. " + "c" * 17 + "..." in prompt and "4. d" not in prompt
    assert lm.requests[0].json_schema["properties"]["ranking"]["maxItems"] == 3
    [fallback] = stage([ITEM])
    assert fallback.error and list(fallback.scores) == sorted(fallback.scores, reverse=True)
    assert len(stage.failures) == 1
    assert stage([RerankIn("q", ())]) == [RerankOut(())] and lm.remaining == 0


class _Reverse(Reranker):
    """Scores candidates in reverse input order (a reranker that disagrees with the first stage)."""

    def forward(self, batch):
        return [RerankOut(tuple(float(i) for i in range(len(item.candidates)))) for item in batch]


def test_order_fusion_keeps_first_stage_agreement_and_weights_the_reranker():
    from memlab.stages.rerank import OrderFusionReranker

    item = RerankIn("q", ("a", "b", "c", "d"))
    even = OrderFusionReranker(_Reverse(), rrf_k=0).run_one(item).scores
    assert even[0] == pytest.approx(even[3]) and even[1] == pytest.approx(even[2])  # symmetric disagreement
    leaning = OrderFusionReranker(_Reverse(), rrf_k=0, weight=2.0).run_one(item).scores
    assert max(range(4), key=lambda i: leaning[i]) == 3  # the reranker's first wins when it weighs more
    with pytest.raises(ValueError):
        OrderFusionReranker(_Reverse(), weight=-1)
