"""Relation labels from teacher sessions, the relation scores, and the relation-extractor recipe
end to end on synthetic teacher sessions (never the real response cache)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime

import datasets
import pytest

import memlab.training.teacher
from memlab.stage import Stage
from memlab.stages.relate import MajorityRelationExtractor, RelateOut, Relation, RelationExtractor
from memlab.training import load_recipe, load_recipe_config
from memlab.training.relations import (
    class_weights,
    evaluate_relation_extractor,
    label_counts,
    macro_f1,
    majority_label,
    pair_labels,
    relation_examples,
    relation_scores,
)
from memlab.training.teacher import TeacherSession
from memlab.types import MemoryUnit, Session, Turn
from tests.train.test_recipes import CONFIGS, three_conversations, tiny_data  # noqa: F401  (fixture)

DAY = datetime(2023, 5, 7)


def unit(n: int, text: str, people=("Ann",)) -> MemoryUnit:
    return MemoryUnit(f"c/s/w0/event{n}", text, (f"D1:{n + 1}",), DAY, "event",
                      attributes={"session": "session_1", "participants": list(people), "extractive": False})


def teacher(texts: list[str], relations: list[Relation], conversation: str = "conv-x", session: str = "session_1",
            failed: bool = False) -> TeacherSession:
    turns = tuple(Turn(f"D1:{n + 1}", "Ann", text) for n, text in enumerate(texts))
    return TeacherSession(conversation, Session(session, DAY, turns), tuple(unit(n, t) for n, t in enumerate(texts)),
                          tuple(relations), False, failed)


SESSION = teacher(["Ann lost her job.", "Ann moved to Lisbon.", "Ann found a new job.", "Ann adopted a cat."],
                  [Relation(0, 1, "causal"), Relation(2, 1, "temporal_before"), Relation(3, 0, "elaboration"),
                   Relation(1, 0, "contrast")])  # the last repeats the pair (0, 1): the first one wins


def test_pair_labels_turn_reversed_relations_round():
    assert pair_labels(SESSION) == [
        (0, 1, "causal"), (0, 2, "none"), (0, 3, "elaboration"),
        (1, 2, "temporal_after"),  # given 2 -> 1 as temporal_before
        (1, 3, "none"), (2, 3, "none")]


def test_relation_examples_rows_and_card():
    failed = teacher(["a", "b"], [Relation(0, 1, "causal")], session="session_2", failed=True)
    lonely = teacher(["only one"], [], session="session_3")
    data = relation_examples([SESSION, failed, lonely], teacher_counts={"not_cached": 4, "sessions": 3})
    assert len(data) == 6 and data[0]["earlier"] == "Ann: Ann lost her job." and data[0]["later"] == "Ann: Ann moved to Lisbon."
    assert data[3]["label"] == "temporal_after" and set(data["session_id"]) == {"session_1"}
    assert label_counts(data) == {"causal": 1, "temporal_after": 1, "elaboration": 1, "none": 3}
    card = data.info.description
    assert "DISTILLATION of CompassMem's prompted" in card and "F.1" in card
    assert "temporal_before <-> temporal_after swapped" in card
    assert "{'teacher_failed': 1, 'fewer_than_two_events': 1}" in card and "{'not_cached': 4, 'sessions': 3}" in card
    kept = relation_examples([SESSION, failed], keep_failed=True)
    assert len(kept) == 7 and kept[6]["teacher_failed"] and kept[6]["label"] == "causal"
    assert len(relation_examples([])) == 0
    with pytest.raises(ValueError, match="not made by relation_examples"):
        label_counts(datasets.Dataset.from_dict({"label": []}))


def test_scores_on_known_cases():
    gold = ["none", "none", "none", "causal", "causal", "related"]
    predicted = ["none", "none", "causal", "causal", "none", "none"]
    # none: tp 2, gold 3, predicted 4 -> 4/7; causal: tp 1, gold 2, predicted 2 -> 1/2; related: 0
    assert macro_f1(gold, predicted, ["none", "causal", "related", "parallel"]) == pytest.approx((4 / 7 + 0.5) / 3)
    scores = relation_scores(gold, predicted)
    assert scores["accuracy"] == pytest.approx(3 / 6)
    assert scores["macro_f1"] == pytest.approx((4 / 7 + 0.5) / 3)
    assert scores["macro_f1_relations"] == pytest.approx(0.5 / 2)
    assert relation_scores(["none"], ["none"]) == {"accuracy": 1.0, "macro_f1": 1.0, "macro_f1_relations": None}
    assert majority_label(gold) == "none" and majority_label(["causal", "related"]) == "causal"  # tie: label order
    weights = class_weights(gold, ["causal", "related", "none", "parallel"], power=1.0)
    assert weights.tolist() == pytest.approx([1.0, 2.0, 2 / 3, 1.0])  # 6 / (3 * n_c); absent class: 1
    assert class_weights(gold, ["none", "causal"], power=0.0).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="no pair to score"):
        relation_scores([], [])


class Replay(RelationExtractor):
    """Answers each session with the relations given for it (by its first event's text)."""

    def __init__(self, answers: dict) -> None:
        super().__init__()
        self.answers = answers

    def forward(self, batch):
        return [RelateOut(self.answers.get(item.events[0].summary, ())) for item in batch]


def test_evaluate_relation_extractor_against_the_teacher():
    other = teacher(["Bob cooked.", "Bob ate."], [Relation(0, 1, "temporal_before")], session="session_2")
    sessions = [SESSION, other, teacher(["x", "y"], [], failed=True)]
    # the teacher's own relations, one given the other way round: a perfect score
    perfect = Replay({"Ann lost her job.": (Relation(1, 0, "causal"), Relation(1, 2, "temporal_after"),
                                             Relation(0, 3, "elaboration")),
                      "Bob cooked.": (Relation(1, 0, "temporal_after"),)})
    scores = evaluate_relation_extractor(perfect, sessions)
    assert scores["accuracy"] == scores["macro_f1"] == scores["macro_f1_relations"] == 1.0
    assert scores["sessions"] == 2 and scores["pairs"] == 7 and scores["skipped"] == {"teacher_failed": 1}
    assert scores["labels"] == {"causal": 1, "temporal_before": 1, "temporal_after": 1, "elaboration": 1, "none": 3}
    majority = scores["majority_relation"]
    assert majority["label"] == "none" and majority["accuracy"] == pytest.approx(3 / 7)
    assert majority["macro_f1"] == pytest.approx((2 * 3 / (3 + 7)) / 5) and majority["macro_f1_relations"] == 0.0
    # the majority baseline as a stage scores exactly the "majority relation" figures
    baseline = evaluate_relation_extractor(MajorityRelationExtractor(), sessions)
    assert {k: baseline[k] for k in ("accuracy", "macro_f1", "macro_f1_relations")} == \
        {k: majority[k] for k in ("accuracy", "macro_f1", "macro_f1_relations")}
    assert baseline["predicted"] == {"none": 7}
    with pytest.raises(ValueError, match="no teacher session with two events"):
        evaluate_relation_extractor(perfect, [sessions[2]])


# -- the recipe ---------------------------------------------------------------------------
STORIES = [("lost a job", "moved back home", "causal"), ("booked a flight", "flew to Rome", "temporal_before"),
           ("painted a wall", "read a novel", None), ("won a race", "celebrated with friends", "causal")]


def synthetic_teacher(conversations, config=None, overrides=(), missing: tuple[str, ...] = (), pipeline=None):
    """Stand-in for ``teacher_sessions``: two sessions per conversation made from ``STORIES``;
    the conversations in ``missing`` have nothing cached."""
    found, counts = [], Counter()
    for conversation in conversations:
        for k, session in enumerate(conversation.sessions[:2]):
            if conversation.id in missing:
                counts["not_cached"] += 1
                continue
            texts, relations = [], []
            for a, b, label in STORIES[k * 2:k * 2 + 2]:
                if label:
                    relations.append(Relation(len(texts), len(texts) + 1, label))
                texts += [f"Ann {a}.", f"Ann {b}."]
            found.append(teacher(texts, relations, conversation.id, session.id))
            counts["sessions"] += 1
    return found, counts


def recipe_config(tmp_path, data_path) -> dict:
    config = load_recipe_config(CONFIGS / "relation_extractor.yaml", [
        f"output_dir={tmp_path / 'relations'}", "stage.encoder.max_length=32", "optim.epochs=2",
        "optim.batch_size=8", "optim.lr=5e-3", "progress=false"])
    config["data"] = tiny_data(data_path)
    return config


@pytest.mark.slow  # two short epochs (frozen MiniLM, head only) and three loads
def test_recipe_runs_end_to_end_on_synthetic_teacher_sessions(three_conversations, tmp_path, monkeypatch):  # noqa: F811
    recipe = load_recipe("train_relation_extractor")
    monkeypatch.setattr(memlab.training.teacher, "teacher_sessions", synthetic_teacher)
    summary = recipe.main(recipe_config(tmp_path, three_conversations))
    assert summary["split"] == {"train": ["tiny-a"], "validation": ["tiny-b"], "evaluation": ["tiny-c"]}
    assert summary["pairs"] == 2 * 6  # two sessions of four events
    evaluation = summary["evaluation"]
    assert 0.0 <= evaluation["accuracy"] <= 1.0 and evaluation["majority_relation"]["label"] == "none"
    assert summary["evaluation_train_majority"]["label"] == "none"
    assert "DISTILLATION" in summary["dataset_card"]
    log = [json.loads(line) for line in (tmp_path / "relations.metrics.jsonl").read_text().splitlines()]
    assert len(log) == summary["epochs"] and set(log[0]["validation"]) == {"macro_f1", "macro_f1_relations", "accuracy"}
    loaded = Stage.load(tmp_path / "relations")
    assert type(loaded).__name__ == "PairRelationClassifier" and loaded.trained_on == {"tiny-a", "tiny-b"}
    assert json.loads((tmp_path / "relations" / "training.json").read_text())["split"] == summary["split"]


def test_recipe_refuses_a_split_part_with_no_cached_session(three_conversations, tmp_path, monkeypatch):  # noqa: F811
    recipe = load_recipe("train_relation_extractor")
    monkeypatch.setattr(memlab.training.teacher, "teacher_sessions",
                        lambda conversations, *args, **kwargs: synthetic_teacher(conversations, missing=("tiny-b",)))
    with pytest.raises(ValueError, match=r"the validation conversations: no cached teacher session for \['tiny-b'\] "
                                         r"\(\{'not_cached': 2\}"):
        recipe.setup(recipe_config(tmp_path, three_conversations))
    with pytest.raises(Exception, match="metric='f1' must be one of"):
        config = recipe_config(tmp_path, three_conversations)
        recipe.setup({**config, "validation": {**config["validation"], "metric": "f1"}})
