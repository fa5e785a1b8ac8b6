"""The trained explorer policy (navigate family): the decision contract, its heads, a checkpoint
round trip, training steps, and the policy in CompassMem's navigator slot by configuration."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
import torch

from memlab.stage import Stage
from memlab.stages.encoder import TextEncoder
from memlab.stages.event_view import EventView
from memlab.stages.navigate import ACTIONS, ExplorerPolicy, ExplorerTarget, NavigateIn, Neighbour
from memlab.stages.navigate.neural import RELATION_SLOTS, relation_slot, view_text
from memlab.stages.relate import RELATION_LABELS

REPO = Path(__file__).resolve().parents[2]


def view(key: str, summary: str) -> EventView:
    return EventView(key, summary, (f"D1:{key[1:]}",), ("Ann", "Bob"), datetime(2023, 5, 7))


NODE = view("N0", "Ann adopted a puppy named Rex from the shelter.")
NEIGHBOURS = (Neighbour(view("N1", "Rex chews every shoe in the house."), "causal"),
              Neighbour(view("N2", "Ann started a pottery class."), "motivation"),
              Neighbour(view("N3", "Ann and Bob plan a trip to Lisbon."), "enablement"),
              Neighbour(view("N4", "The weather was rainy all week."), "follow_up (from)"))


def state(satisfied=(False, False), neighbours=NEIGHBOURS, kept=(), max_next=2) -> NavigateIn:
    return NavigateIn("What is the name of Ann's puppy?", ("the puppy's name", "what the puppy does"), satisfied,
                      NODE, neighbours, kept, max_next)


def small_policy(**kwargs) -> ExplorerPolicy:
    torch.manual_seed(0)
    frozen = kwargs.pop("frozen", False)
    policy = ExplorerPolicy(TextEncoder(max_length=32, lora_rank=0 if frozen else 4, frozen=frozen), hidden=16, **kwargs)
    policy.warm_up()
    return policy


def force(policy: ExplorerPolicy, action: str, relevance: float = 20.0) -> None:
    """Make the heads decide: ``action`` always; every pair relevant (or not); neighbours ranked
    by their relation (motivation > enablement > causal > follow_up from)."""
    with torch.no_grad():
        final = policy.action[-1]
        final.weight.zero_()
        final.bias.copy_(torch.tensor([20.0 if a == action else 0.0 for a in ACTIONS]))
        policy.relevance.weight.zero_()
        policy.relevance.bias.fill_(relevance)
        policy.route.weight.zero_()
        policy.route.bias.zero_()
        for relation, weight in (("causal", 1.0), ("motivation", 3.0), ("enablement", 2.0), ("follow_up (from)", -5.0)):
            policy.route.weight[0, policy.hidden + relation_slot(relation)] = weight


def test_the_texts_and_relation_slots_it_reads():
    assert view_text(NODE) == "[7 May 2023] (Ann, Bob) Ann adopted a puppy named Rex from the shelter."
    assert view_text(EventView("N9", "plain")) == "plain"  # no key, no provenance
    assert relation_slot("causal") == 0 and relation_slot("causal (from)") == len(RELATION_LABELS)
    assert relation_slot("<- cause-effect") == len(RELATION_LABELS)  # normalised, incoming
    assert relation_slot("made up") == RELATION_LABELS.index("related") and RELATION_SLOTS == 2 * len(RELATION_LABELS)
    with pytest.raises(ValueError, match="next_threshold must be in"):
        ExplorerPolicy(TextEncoder(), next_threshold=1.5)
    with pytest.raises(ValueError, match="action must be one of"):
        ExplorerTarget("STOP")


def test_decisions_respect_the_contract():
    policy = small_policy()
    force(policy, "ANSWER")
    [out] = policy([state(satisfied=(True, False))])
    assert out.action == "ANSWER"
    assert out.next_nodes == ("N2", "N3")  # best first, at most max_next, only neighbours
    assert out.satisfied == (1,)  # open subgoals only: the first one was satisfied already
    force(policy, "SKIP")
    [skip] = policy([state()])
    assert skip.action == "SKIP" and skip.satisfied == () and skip.next_nodes == ("N2", "N3")  # SKIP satisfies nothing
    force(policy, "EXPAND", relevance=-20.0)
    outs = policy([state(max_next=5), state(neighbours=()), state(kept=(view("N7", "kept"),), max_next=1)])
    assert [o.action for o in outs] == ["EXPAND"] * 3
    assert outs[0].next_nodes == ("N2", "N3", "N1")  # the follow_up (from) neighbour is below next_threshold
    assert outs[1].next_nodes == () and outs[2].next_nodes == ("N2",)
    assert all(o.satisfied == () for o in outs)  # not relevant to any subgoal
    known = {n.view.key for n in NEIGHBOURS}
    random_policy = small_policy(next_threshold=0.0)
    for out in random_policy([state(max_next=k) for k in (1, 2, 3)]):
        assert set(out.next_nodes) <= known and len(out.next_nodes) == len(set(out.next_nodes))
    assert [len(o.next_nodes) for o in random_policy([state(max_next=k) for k in (1, 2, 3)])] == [1, 2, 3]


def test_logits_have_the_documented_shapes_and_decisions_reuse_cached_texts():
    policy = small_policy()
    logits = policy.logits([state(), state(neighbours=())])
    assert tuple(logits.action.shape) == (2, len(ACTIONS)) and tuple(logits.relevance.shape) == (2,)
    assert [tuple(s.shape) for s in logits.satisfied] == [(2,), (2,)]
    assert [tuple(n.shape) for n in logits.next] == [(4,), (0,)]
    assert logits.action.requires_grad and logits.next[0].requires_grad
    empty = policy.logits([])
    assert tuple(empty.action.shape) == (0, len(ACTIONS)) and empty.next == []
    policy([state()])
    cached = len(policy._cache)
    assert cached == 1 + 2 + 1 + len(NEIGHBOURS)  # question, subgoals, node, neighbours: each encoded once
    policy([state(kept=(NODE,))])
    assert len(policy._cache) == cached  # nothing new to encode


def test_a_checkpoint_round_trip_gives_the_same_decisions(tmp_path):
    policy = small_policy(next_threshold=0.3)
    items = [state(), state(satisfied=(True, False), kept=(view("N7", "Rex sleeps a lot."),))]
    policy.save(tmp_path / "explorer")
    loaded = Stage.load(tmp_path / "explorer")
    assert isinstance(loaded, ExplorerPolicy) and loaded.next_threshold == 0.3
    assert loaded(items) == policy(items)
    loaded.eval(), policy.eval()  # no dropout
    torch.testing.assert_close(loaded.logits(items).action, policy.logits(items).action)


@pytest.mark.parametrize("freeze", [True, False])
def test_gradient_steps_reduce_the_loss(freeze):
    policy = small_policy(frozen=freeze)
    items = [state(), state(satisfied=(True, False), kept=(NODE,)), state(neighbours=NEIGHBOURS[:2])]
    targets = [ExplorerTarget("EXPAND", ("N1",), (0,)), ExplorerTarget("ANSWER", (), (1,)), ExplorerTarget("SKIP", ("N2",))]
    trainable = [p for p in policy.parameters() if p.requires_grad]
    assert any("lora_" in name for name, p in policy.named_parameters() if p.requires_grad) is not freeze
    optimiser = torch.optim.AdamW(trainable, lr=1e-2)
    policy.train()
    losses = []
    for _ in range(4):
        loss = policy.loss(policy.logits(items), targets, items, action_weights=torch.tensor([0.5, 1.0, 2.0]))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    with pytest.raises(ValueError, match="3 logits, 2 targets"):
        policy.loss(policy.logits(items), targets[:2], items)


def test_plugged_into_compassmem_by_config_no_navigator_call(tmp_path, monkeypatch):
    from memlab.config import build_pipeline
    from memlab.stages.navigate import PromptedNavigator
    from memlab.types import Query
    from tests.fakes import ReplayLM
    from tests.pipelines.test_compassmem import Script, history

    small_policy(next_threshold=0.2).save(tmp_path / "explorer")
    monkeypatch.chdir(REPO)
    pipeline, _, _ = build_pipeline(REPO / "configs/pipelines/compassmem.yaml", [
        "navigator._component_=memlab.stage.load_stage", f"navigator.path={tmp_path / 'explorer'}"])
    assert isinstance(pipeline.navigator, ExplorerPolicy) and not isinstance(pipeline.navigator, PromptedNavigator)
    script = Script(same_event=False)
    lm = ReplayLM(script)
    for _, stage in pipeline.named_stages():
        if hasattr(stage, "lm"):
            stage.lm = lm
    memory = pipeline.build(history())
    answer = pipeline.answer(memory, Query("q1", "What is the name of the dog Ann adopted?", datetime(2023, 6, 1)))
    navigated = [s for s in answer.trace.steps if s["step"] == "navigate"]
    assert navigated and all(s["error"] is None for s in navigated)
    assert "navigate" not in script.kinds and "plan" in script.kinds and "answer" in script.kinds
    assert not any("possible actions" in m["content"] for r in lm.requests for m in r.messages)
