"""Evidence supervision of the explorer policy: labels on a hand-built event graph with known
provenance, the data set and its card, the evaluation and its baselines, and the recipe end to end."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path

import pytest

import memlab.training.evaluators as evaluators
from memlab.pipelines.compassmem.memory import EventMemory
from memlab.pipelines.compassmem.settings import SearchSettings
from memlab.stage import Stage
from memlab.stages.encoder import TextEncoder
from memlab.stages.navigate import NavigateIn, NavigateOut, Navigator
from memlab.training import load_recipe
from memlab.training.navigation import (
    evaluate_explorer_policy,
    navigation_examples,
    navigation_states,
    row_inputs,
    row_target,
)
from memlab.types import Conversation, MemoryUnit, Question
from tests.memory.helpers import HashingEmbedder

REPO = Path(__file__).resolve().parents[2]

SAMPLE = Path(__file__).resolve().parents[2] / "memlab" / "data" / "samples" / "sample_locomo.json"
EVENTS = [  # id, summary, provenance
    ("e0", "Ann adopted a puppy named Rex from the shelter", ("D1:1", "D1:2")),
    ("e1", "Rex chews every shoe in the house", ("D1:3",)),
    ("e2", "Bob bought a red kayak", ("D2:1",)),
    ("e3", "Her pottery bowl cracked in the kiln", ("D2:3",)),
    ("e4", "A trip to Lisbon is planned for June", ("D3:1",)),
    ("e5", "The weather was rainy", ("D3:2",)),
]
EDGES = [("e0", "e1", "causal"), ("e1", "e3", "follow_up"), ("e2", "e4", "related")]


def memory() -> EventMemory:
    events = EventMemory(HashingEmbedder())
    for event_id, summary, turns in EVENTS:
        events.add_event(MemoryUnit(event_id, summary, turns, datetime(2023, 5, 7), "event",
                                    attributes={"participants": ["Ann"]}))
    for source, target, label in EDGES:
        events.link(source, target, label)
    return events


def question(text: str, evidence: tuple[str, ...], category: str = "multi-hop", n: int = 0) -> Question:
    return Question(f"c1:q{n}", "c1", text, "an answer never shown", category, evidence)


ASKED = question("Which puppy did Ann adopt from the shelter?", ("D1:1", "D2:3"))


def test_labels_follow_the_evidence_along_the_simulated_exploration():
    events = memory()
    key = events.key_of
    states = navigation_states(events, ASKED, top_k=1, hops=2)
    # start: the dense top 1 (e0), then breadth over relation edges: e1 (1 hop), e3 (2 hops)
    assert [(s.node.key, t.action, hop) for s, t, hop in states] == [
        (key["e0"], "EXPAND", 0), (key["e1"], "SKIP", 1), (key["e3"], "ANSWER", 2)]
    (first, t0, _), (second, t1, _), (third, t2, _) = states
    # e1 holds no evidence but leads to e3, which holds the uncovered D2:3
    assert t0.next_nodes == (key["e1"],) and t0.satisfied == (0,)
    # from e1: e3 holds it; e0 is covered already and leads nowhere else
    assert t1.next_nodes == (key["e3"],) and t1.satisfied == ()
    assert t2.next_nodes == () and t2.satisfied == (0,)  # everything covered: no neighbour is worth a visit
    # the kept nodes and the subgoal's flag grow with the kept evidence
    assert [len(s.kept) for s in (first, second, third)] == [0, 1, 1] and second.kept[0].key == key["e0"]
    assert [s.satisfied for s in (first, second, third)] == [(False,), (True,), (True,)]
    assert {n.view.key: n.relation for n in second.neighbours} == {key["e0"]: "causal (from)", key["e3"]: "follow_up"}
    # one hop: e3 is out of reach, so e1 is not a lead from e0
    one_hop = navigation_states(events, ASKED, top_k=1, hops=1)
    assert [t.action for _, t, _ in one_hop] == ["EXPAND", "SKIP"] and one_hop[0][1].next_nodes == ()
    assert len(navigation_states(events, ASKED, top_k=1, hops=2, max_states=2)) == 2
    # a question whose evidence no event holds gives no state
    assert navigation_states(events, question("Which puppy?", ("D9:9",)), top_k=1) == []
    with pytest.raises(ValueError, match="top_k, max_states, max_next >= 1"):
        navigation_states(events, ASKED, top_k=0)


def test_single_evidence_is_answered_where_it_is_found():
    events = memory()
    states = navigation_states(events, question("Which puppy did Ann adopt from the shelter?", ("D1:2",)), top_k=2)
    assert [t.action for _, t, _ in states][0] == "ANSWER"
    assert all(t.action == "SKIP" for _, t, _ in states[1:])  # nothing holds evidence beyond e0


def test_no_gold_field_reaches_the_navigator_inputs():
    events = memory()
    conversation = Conversation("c1", ("Ann", "Bob"), (), (ASKED,))
    data = navigation_examples({"c1": events}, [conversation], top_k=2)
    assert len(data) and set(data.unique("question_id")) == {ASKED.id}
    for row in data:
        inputs = row_inputs(row)
        assert [f.name for f in dataclasses.fields(NavigateIn)] == [
            "question", "subgoals", "satisfied", "node", "neighbours", "kept", "max_next"]
        assert inputs.question == ASKED.text and inputs.subgoals == (ASKED.text,)
        # every view is the memory's own view of that event, nothing added
        for shown in (inputs.node, *(n.view for n in inputs.neighbours), *inputs.kept):
            assert shown == events.view(events.id_of[shown.key])
        assert ASKED.answer not in repr(inputs) and ASKED.category not in repr(inputs)
        assert row_target(row).action == row["action"]


def test_the_card_names_the_label_source_and_counts():
    events = memory()
    conversation = Conversation("c1", ("Ann", "Bob"), (), (
        ASKED, question("Which puppy?", ("D9:9",), n=1), question("Is Ann happy?", ("D1:1",), "adversarial", n=2),
        question("Did Ann adopt a pet?", (), "single-hop", n=3)))
    data = navigation_examples({"c1": events}, [conversation], top_k=1)
    card = data.info.description
    assert "Label source: gold evidence" in card and "provenance" in card and "no LLM" in card
    assert "Questions used: 1; skipped because no event holds\ntheir evidence: 1" in card
    assert "States: 3; actions: {'ANSWER': 1, 'EXPAND': 1, 'SKIP': 1}" in card
    with pytest.raises(ValueError, match=r"no memory for conversation c1 \(memories: \['c2'\]\)"):
        navigation_examples({"c2": events}, [conversation])


class Constant(Navigator):
    def __init__(self, action: str, first: int = 0) -> None:
        super().__init__()
        self.action, self.first = action, first

    def forward(self, batch: list[NavigateIn]) -> list[NavigateOut]:
        return [NavigateOut(self.action, tuple(n.view.key for n in item.neighbours[: self.first])) for item in batch]


def test_evaluation_scores_actions_and_next_nodes_against_baselines():
    conversation = Conversation("c1", ("Ann", "Bob"), (), (ASKED,))
    data = navigation_examples({"c1": memory()}, [conversation], top_k=1)  # EXPAND, SKIP, ANSWER
    scores = evaluate_explorer_policy(Constant("SKIP", first=1), data, majority="SKIP")
    assert scores["states"] == 3 and scores["action_accuracy"] == pytest.approx(1 / 3)
    assert scores["action_recall"] == {"SKIP": 1.0, "EXPAND": 0.0, "ANSWER": 0.0}
    assert scores["balanced_accuracy"] == pytest.approx(1 / 3)
    # the first neighbour of e0 is e1 (right), of e1 is e3 (its out-edge first: right), of e3 is e1 (wrong)
    assert scores["next_precision"] == pytest.approx(2 / 3) and scores["next_recall"] == 1.0
    assert scores["next_f1"] == pytest.approx(0.8)  # 2 hits of 3 named and 2 wanted
    assert scores["baselines"]["always_expand"]["action_accuracy"] == pytest.approx(1 / 3)
    assert scores["baselines"]["majority"] == {"action": "SKIP", "action_accuracy": pytest.approx(1 / 3),
                                               "balanced_accuracy": pytest.approx(1 / 3)}
    nothing = evaluate_explorer_policy(Constant("EXPAND"), data)
    assert nothing["next_precision"] is None and nothing["next_recall"] == 0.0  # no node named: no precision
    assert nothing["next_f1"] == 0.0
    with pytest.raises(ValueError, match="no examples"):
        evaluate_explorer_policy(Constant("SKIP"), [])


@pytest.fixture
def three_conversations(tmp_path) -> Path:
    sample = json.loads(SAMPLE.read_text())[0]
    path = tmp_path / "tiny_locomo.json"
    path.write_text(json.dumps([{**sample, "sample_id": name} for name in ("tiny-a", "tiny-b", "tiny-c")]))
    return path


def test_the_recipe_trains_saves_and_evaluates_on_held_out_conversations(three_conversations, tmp_path, monkeypatch):
    from tests.pipelines.test_compassmem import Script, pipeline

    recipe = load_recipe("train_explorer_policy")
    built = pipeline(Script(same_event=False), HashingEmbedder(), search=SearchSettings(refinement_rounds=0), refiner=None)
    monkeypatch.setattr(evaluators, "build_pipeline", lambda tree, adjust: (built, {}, {}))  # the one the evaluator builds
    out = tmp_path / "explorer"
    summary = recipe.main({
        "recipe": "train_explorer_policy", "output_dir": str(out), "progress": False,
        "data": {"path": str(three_conversations), "eval_ids": ["tiny-c"], "validation_ids": ["tiny-b"],
                 "max_questions": 6},
        "stage": {"_component_": "memlab.stages.navigate.ExplorerPolicy", "hidden": 16,
                  "encoder": {"_component_": "memlab.stages.encoder.TextEncoder", "max_length": 32,
                              "frozen": True}},  # heads only: seconds on a CPU
        "validation": {"_component_": "memlab.training.navigation.NavigatorEvaluator", "max_states": 4},
        "optim": {"epochs": 1, "batch_size": 8, "max_steps": 2},
        "eval_every": 1,
        "calibrate_next_threshold": True,
    })
    assert summary["split"] == {"train": ["tiny-a"], "validation": ["tiny-b"], "evaluation": ["tiny-c"]}
    assert summary["steps"] == 2 and set(summary["action_weights"]) == {"SKIP", "EXPAND", "ANSWER"}
    final = summary["evaluation"]
    assert 0.0 <= final["action_accuracy"] <= 1.0 and "always_expand" in final["baselines"]
    assert "Label source: gold evidence" in summary["supervision"]["train"]
    record = json.loads((out / "training.json").read_text())
    assert record["evaluation"] == final and record["config"]["validation"]["max_states"] == 4
    assert record["evaluator"]["max_states"] == 4 and "_component_" in record["evaluator"]["pipeline"]  # resolved
    loaded = Stage.load(out)
    assert loaded.trained_on == {"tiny-a", "tiny-b"}
    assert loaded.next_threshold == summary["calibration"]["next_threshold"] in recipe.NEXT_THRESHOLDS
    assert len((tmp_path / "explorer.metrics.jsonl").read_text().splitlines()) == 3  # step 0, 1, 2


def test_evaluate_stage_scores_an_explorer_policy_on_built_memories(tmp_path, capsys, caplog):
    from memlab.cli import main
    from memlab.stages.navigate import ExplorerPolicy
    from memlab.training.navigation import NavigatorEvaluator

    ExplorerPolicy(TextEncoder(frozen=True)).save(tmp_path / "policy")
    config = tmp_path / "chunks.yaml"  # an LLM-free build: token chunks, no relations, no fusion
    config.write_text(f"_base_: {REPO / 'configs/ablations/compassmem_chunks.yaml'}\n"
                      "construction: {edges: false}\nrelation_extractor: null\nfuser: null\n")
    assert main(["evaluate-stage", str(tmp_path / "policy")]) == 2  # saved in code: no evaluator recorded
    assert "records no evaluator" in caplog.text
    record = {"config": {}, "evaluator": NavigatorEvaluator().node(), "split": {"train": [], "validation": []}}
    (tmp_path / "policy" / "training.json").write_text(json.dumps(record))
    assert main(["evaluate-stage", str(tmp_path / "policy"), f"pipeline={config}"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["stage"] == "ExplorerPolicy" and 0.0 <= result["action_accuracy"] <= 1.0


def test_calibration_saves_the_next_threshold_with_the_best_validation_f1(tmp_path):
    from memlab.stages.navigate import ExplorerPolicy

    recipe = load_recipe("train_explorer_policy")

    class PeaksAtFifteen:  # a stand-in evaluator whose next-node F1 is best at threshold 0.15
        def score(self, stage, examples):
            return {"next_precision": 0.1, "next_recall": 0.2, "next_f1": 1 - abs(stage.next_threshold - 0.15)}

    policy = ExplorerPolicy(TextEncoder(frozen=True))
    run = recipe.Run(settings=recipe.Settings(), out=tmp_path, evaluator=PeaksAtFifteen(), datasets={"validation": []})
    assert recipe.calibrate_next_threshold(run, policy)["next_threshold"] == 0.15
    policy.save(tmp_path / "policy")
    assert Stage.load(tmp_path / "policy").next_threshold == 0.15


def test_edge_reach_compares_one_hop_with_as_many_more_dense_hits():
    from memlab.config import build_pipeline
    from memlab.data.select import load_conversations
    from memlab.training.navigation import reach, reach_summary
    from memlab.training.supervision import evaluable_questions

    events = memory()
    # e1 is the start; its edges reach e0 and e3 (the evidence); the next two dense hits do not
    shoes = question("Which shoe does Rex chew in the house?", ("D2:3",))
    assert reach(events, shoes, top_k=1) == {"top": False, "edges": True, "dense": False, "added": 2}
    assert reach(events, question("Kayak?", ("D9:9",)), top_k=1) is None  # no event holds the evidence
    assert reach_summary([{"top": False, "edges": True, "dense": False, "added": 2},
                           {"top": True, "edges": True, "dense": True, "added": 4}]) == {
        "questions": 2, "top_k_holds": 1, "with_edges_holds": 2, "with_dense_holds": 1, "only_edges": 1,
        "only_dense": 0, "mean_added": 3.0}
    config = str(REPO / "configs/pipelines/compassmem_trained_construction.yaml")
    (conversation,) = load_conversations(SAMPLE, ["sample-1"])
    built = build_pipeline(config)[0].build(conversation.history())
    pooled = reach_summary([r for r in (reach(built, q, 5) for q in evaluable_questions(conversation)) if r])
    assert pooled["questions"] > 0
    assert pooled["top_k_holds"] <= min(pooled["with_edges_holds"], pooled["with_dense_holds"])
