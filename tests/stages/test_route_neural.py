import json
from datetime import date

import pytest
import torch

from memlab.stage import Stage
from memlab.stages.encoder import TextEncoder
from memlab.stages.route import QUESTION_TYPES, QueryRouter, RouteIn, RouteOut
from memlab.stages.route.neural import DEFAULT_HEADS, IGNORE_INDEX

QUESTIONS = ["Why did Alice move to Paris?", "When did Bob start playing guitar?",
             "What does Bob drink?", "Would Alice enjoy a rainy holiday?"]


def small_router(**kwargs) -> QueryRouter:
    torch.manual_seed(0)
    return QueryRouter(TextEncoder(max_length=24, lora_rank=4), **kwargs)


def test_heads_have_one_logit_per_label_and_bad_heads_are_refused():
    router = small_router()
    logits = router.logits(QUESTIONS[:3])
    assert {name: tuple(t.shape) for name, t in logits.items()} == {
        name: (3, len(labels)) for name, labels in DEFAULT_HEADS.items()}
    assert logits["intent"].requires_grad
    with pytest.raises(ValueError, match="default_intent"):
        QueryRouter(TextEncoder(), heads={"intent": ["WHY", "WHEN"]})
    with pytest.raises(ValueError, match="two distinct labels"):
        QueryRouter(TextEncoder(), heads={"complexity": ["LOW"]})
    with pytest.raises(ValueError, match="must be among"):
        QueryRouter(TextEncoder(), heads={"intent": ["WHY", "HOW"]}, default_intent="WHY")
    assert router.intents == tuple(DEFAULT_HEADS["intent"])
    with pytest.raises(ValueError, match="unknown heads"):
        router.loss(logits, {"topic": torch.zeros(3, dtype=torch.long)})


@pytest.mark.slow  # a few backward passes through MiniLM: seconds on a busy CPU
def test_training_lowers_the_summed_loss_and_ignores_unlabelled_questions():
    router = small_router()
    targets = {"intent": torch.tensor([0, 1, 2, 2]),
               "question_type": torch.tensor([3, 1, IGNORE_INDEX, 2])}
    optimiser = torch.optim.AdamW([p for p in router.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(3):
        loss = router.loss(router.logits(QUESTIONS), targets)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    all_ignored = router.loss(router.logits(QUESTIONS[:1]), {"complexity": torch.tensor([IGNORE_INDEX])})
    assert all_ignored.item() == 0.0


def test_forward_fills_route_out_and_maps_adversarial_to_none(tmp_path):
    from memlab.stages.temporal import RuleTemporalNormalizer

    router = small_router(normalizer=RuleTemporalNormalizer())
    router.warm_up()  # the heads exist once the encoder is loaded
    with torch.no_grad():  # make the heads decide: bias towards "adversarial", "WHEN", "HIGH"
        for name, label in (("question_type", "adversarial"), ("intent", "WHEN"), ("complexity", "HIGH")):
            router.heads[name].bias.copy_(torch.tensor([100.0 if x == label else 0.0 for x in DEFAULT_HEADS[name]]))
    assert router.predict(QUESTIONS[:1]) == [{"question_type": "adversarial", "intent": "WHEN", "complexity": "HIGH"}]
    [out] = router([RouteIn("What did Alice do last week?", reference=date(2023, 5, 20))])
    assert isinstance(out, RouteOut)
    assert out.intent == "WHEN" and out.question_type is None and out.complexity == "HIGH"
    assert out.time_window is not None and "Alice" in out.keywords
    router.save(tmp_path / "router")
    assert Stage.load(tmp_path / "router").predict(QUESTIONS) == router.predict(QUESTIONS)
    # The checkpoint names its labels: loading does not depend on DEFAULT_HEADS.
    saved = json.loads((tmp_path / "router" / "config.json").read_text())["kwargs"]["heads"]
    assert saved == {name: list(labels) for name, labels in DEFAULT_HEADS.items()}


def test_a_frozen_head_is_still_checkpointed():
    router = small_router(heads={"intent": ["WHY", "WHEN", "ENTITY"]})
    router.warm_up()
    router.heads["intent"].weight.requires_grad_(False)
    saved = set(router.checkpoint_state())
    assert {"heads.intent.weight", "heads.intent.bias"} <= saved
    assert saved and all(k.startswith("heads.") or "lora_" in k for k in saved)


def test_missing_heads_fall_back_to_the_defaults():
    router = small_router(heads={"question_type": list(QUESTION_TYPES)}, default_intent="WHY")
    [out] = router([RouteIn("Who is Bob?")])
    assert out.intent == "WHY" and out.question_type in QUESTION_TYPES and out.complexity is None
