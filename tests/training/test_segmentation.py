"""Segmentation supervision: boundary labels from hand-made teacher sessions, boundary F1, the
dataset card, and the event-segmenter recipe end to end on synthetic teacher sessions."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
import torch

import memlab.training.teacher
from memlab.config import ConfigError
from memlab.stage import Stage
from memlab.stages.segment import BoundarySegmenter, FixedSpanSegmenter
from memlab.training import load_recipe, load_recipe_config
from memlab.training.segmentation import (
    BoundaryLabels,
    boundary_f1,
    boundary_label_loss,
    evaluate_segmenter,
    labelled_positions,
    mean_event_length,
    segmentation_examples,
    session_boundaries,
    turn_events,
)
from memlab.training.teacher import TeacherSession
from memlab.types import MemoryUnit, Session, Turn
from tests.train.test_recipes import three_conversations  # noqa: F401  (a fixture: the sample as tiny-a, -b, -c)

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "train" / "event_segmenter.yaml"


def session(n: int, sid: str = "session_1") -> Session:
    return Session(sid, datetime(2023, 5, 7), tuple(Turn(f"D1:{t}", "AB"[t % 2], f"turn {t}") for t in range(1, n + 1)))


def event(n: int, *turns: int, extractive: bool = False) -> MemoryUnit:
    return MemoryUnit(f"c/s/w0/event{n}", f"event {n}", tuple(f"D1:{t}" for t in turns), kind="event",
                      attributes={"extractive": extractive})


def teacher(events: list[MemoryUnit], n: int = 8, failed: bool = False, conversation: str = "conv-a",
            sid: str = "session_1", windows: tuple = ()) -> TeacherSession:
    return TeacherSession(conversation, session(n, sid), tuple(events), (), failed, False, windows)


def spans(session: Session, size: int) -> list[MemoryUnit]:
    """Events of ``size`` consecutive turns."""
    ids = [t.id for t in session.turns]
    return [MemoryUnit(f"e{i}", "x", tuple(ids[i:i + size]), kind="event") for i in range(0, len(ids), size)]


def test_a_turns_event_is_the_first_claiming_it_and_boundaries_follow_changes():
    # turns 1-8: event 0 claims 1-3, event 1 claims 3-5 (turn 3 stays event 0's), an extractive
    # event claims 6, event 3 claims 8 and 1 (turn 1 stays event 0's), turn 7 is claimed by none
    events = [event(0, 1, 2, 3), event(1, 3, 4, 5), event(2, 6, extractive=True), event(3, 8, 1)]
    t = teacher(events)
    assert turn_events(t.session, t.events) == [0, 0, 0, 1, 1, 2, None, 3]
    assert session_boundaries(t.session, t.events) == [3, 5, 6, 7]
    # an event claiming non-adjacent turns splits around the other event's turns
    t = teacher([event(0, 1, 2, 5, 6), event(1, 3, 4)], n=6)
    assert session_boundaries(t.session, t.events) == [2, 4]
    assert session_boundaries(session(1), [event(0, 1)]) == [] and session_boundaries(session(3), []) == []
    assert BoundaryLabels.exact([2, 4], range(1, 6)) == BoundaryLabels(zeros=(1, 3, 5), gaps=((2, 2), (4, 4)))


def test_boundary_f1_is_micro_over_sessions():
    scores = boundary_f1([[1, 3], [2]], [[1, 4], [2, 5]])
    assert (scores["correct"], scores["predicted"], scores["gold"]) == (2, 3, 4)
    assert scores["precision"] == pytest.approx(2 / 3) and scores["recall"] == pytest.approx(0.5)
    assert scores["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    # a position counts only in its own session
    assert boundary_f1([[1], []], [[], [1]])["f1"] == 0.0
    assert boundary_f1([[], []], [[], []]) == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "predicted": 0, "gold": 0,
                                               "correct": 0}
    assert boundary_f1([[]], [[3]])["precision"] == 0.0 and boundary_f1([[2]], [[]])["recall"] == 0.0
    with pytest.raises(ValueError, match="2 predicted sessions but 1"):
        boundary_f1([[1], [2]], [[1]])


def test_labelled_positions_leave_out_window_edges_failed_windows_and_unclaimed_runs():
    window = lambda *turns: tuple(f"D1:{t}" for t in turns)  # noqa: E731
    # windows 1-5 and 6-10; window 1: events 1-2 and 3-4, turn 5 unclaimed; window 2 failed (all extractive)
    events = [event(0, 1, 2), event(1, 3, 4), event(2, 5, extractive=True),
              event(3, 6, 7, 8, extractive=True), event(4, 9, 10, extractive=True)]
    t = teacher(events, n=10, failed=True, windows=(window(1, 2, 3, 4, 5), window(6, 7, 8, 9, 10)))
    assert session_boundaries(t.session, t.events) == [2, 4, 5, 8]
    # 1..4 inside window 1; 5 (turn 4 is an event's, turn 5 unclaimed) too; 5|6 is the window edge; 6..9 failed
    assert labelled_positions(t) == [1, 2, 3, 4]
    # two unclaimed turns side by side: cut by rule, not by the teacher
    t = teacher([event(0, 1, 2), event(1, 3, extractive=True), event(2, 4, extractive=True)], n=4)
    assert labelled_positions(t) == [1, 2]
    # no windows recorded: the whole session is one call
    assert labelled_positions(teacher([event(0, 1, 2), event(1, 3, 4)], n=4)) == [1, 2, 3]
    assert boundary_f1([[2, 3], [1]], [[2, 5], [1]], positions=[[1, 2, 3, 4], []]) == {
        "precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "predicted": 2, "gold": 1, "correct": 1}


def test_dataset_card_names_the_source_and_counts_and_masks_failed_windows():
    good = teacher([event(0, 1, 2), event(1, 3, 4, 5), event(2, 6, 7, 8)])
    window = tuple(f"D1:{t}" for t in range(1, 5)), tuple(f"D1:{t}" for t in range(5, 9))
    half = teacher([event(0, 1, 2), event(1, 3, 4), event(2, 5, 6, 7, extractive=True), event(3, 8, extractive=True)],
                   failed=True, sid="session_2", windows=window)
    failed = teacher([event(0, 1, 2, 3, extractive=True), event(1, 4, 5, 6, extractive=True)], n=6, failed=True,
                     sid="session_3")
    counts = {"sessions": 3, "failed": 2, "not_cached": 4}
    data = segmentation_examples([good, half, failed], counts)
    assert data["session_id"] == ["session_1", "session_2"] and data["boundaries"] == [[2, 5], [2, 4, 7]]
    assert data["positions"] == [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3]]
    assert data["turns"][0][0] == "B: turn 1" and data["events"] == [3, 4] and data["failed"] == [False, True]
    card = data.info.description
    for needle in ("distillation of CompassMem's prompted segmenter", "F.1", "qwen2.5-coder-1.5b", "replayed from the",
                   "Sessions: 2; turns: 16; boundaries: 5; labelled positions: 10 of 14, 3 of them boundaries",
                   "not cached (the prompted build had not reached them): 4", "failed segmenter call: 2",
                   "1 sessions had no labelled position", "masked", "LoCoMo annotations", "NOT used"):
        assert needle in card, needle
    assert len(segmentation_examples([failed])) == 0  # an empty data set keeps its columns
    assert mean_event_length([good, failed]) == pytest.approx(14 / 5)


def test_evaluate_segmenter_scores_any_segmenter_beside_the_fixed_span_baseline():
    teachers = [teacher(spans(session(8), 2)), teacher(spans(session(5, "session_2"), 2), n=5, sid="session_2")]
    perfect = evaluate_segmenter(FixedSpanSegmenter(span=2), teachers)
    assert perfect["f1"] == 1.0 and perfect["baseline"]["f1"] == 1.0
    assert perfect["baseline"]["segmenter"] == "FixedSpanSegmenter(span=2)"  # the teacher's mean, rounded
    assert perfect["sessions"] == 2 and perfect["turns"] == 13 and perfect["conversations"] == ["conv-a"]
    assert "not used" in perfect["labels"]
    coarse = evaluate_segmenter(FixedSpanSegmenter(span=4), teachers, baseline_span=3)
    # predicted [4], [4]; gold [2, 4, 6], [2, 4]: 2 correct of 2 predicted, 5 gold
    assert coarse["precision"] == 1.0 and coarse["recall"] == pytest.approx(0.4)
    # the baseline's [3, 6], [3]: only 6 is right
    assert coarse["baseline"]["segmenter"] == "FixedSpanSegmenter(span=3)" and coarse["baseline"]["correct"] == 1
    with pytest.raises(ValueError, match="no teacher session with a labelled position"):
        evaluate_segmenter(FixedSpanSegmenter(), [teacher([], n=0)])


# -- the recipe ---------------------------------------------------------------------------
def synthetic_teacher(missing: tuple[str, ...] = ()):
    """A stand-in for ``teacher_sessions``: events of 3 turns (2 in odd sessions), no cache read;
    the conversations in ``missing`` are not cached."""

    def teacher_sessions(conversations, config=None, overrides=(), pipeline=None):
        found, counts = [], {"not_cached": 0, "failed": 0, "sessions": 0}
        for conversation in conversations:
            for k, s in enumerate(conversation.history().sessions[:3]):
                if conversation.id in missing:
                    counts["not_cached"] += 1
                    continue
                events = spans(s, 2 + k % 2)
                if k == 2:  # a failed call: its turns became extractive events
                    events = [replace(e, attributes={"extractive": True}) for e in events]
                found.append(TeacherSession(conversation.id, s, tuple(events), (), k == 2, False))
                counts["sessions"] += 1
                counts["failed"] += k == 2
        return found, counts

    return teacher_sessions


def tiny_config(path: Path, out: Path) -> dict:
    config = load_recipe_config(CONFIG)
    config.update(output_dir=str(out), progress=False, patience=2,
                  data={"path": str(path), "eval_ids": ["tiny-c"], "validation_ids": ["tiny-b"]},
                  stage={"_component_": "memlab.stages.segment.BoundarySegmenter", "context_size": 16,
                         "encoder": {"_component_": "memlab.stages.encoder.TextEncoder", "max_length": 32,
                                     "frozen": True}},
                  optim={**config["optim"], "epochs": 3, "batch_size": 2, "lr": 1e-2})
    return config


def test_the_recipe_trains_saves_and_scores_against_the_baseline(three_conversations, tmp_path, monkeypatch):
    recipe = load_recipe("train_event_segmenter")
    monkeypatch.setattr(memlab.training.teacher, "teacher_sessions", synthetic_teacher())
    summary = recipe.main(tiny_config(three_conversations, tmp_path / "seg"))
    assert summary["split"] == {"train": ["tiny-a"], "validation": ["tiny-b"], "evaluation": ["tiny-c"]}
    assert summary["sessions"] == {"train": 2, "validation": 2, "evaluation": 2}  # the failed third left out
    assert summary["teacher"]["train"] == {"not_cached": 0, "failed": 1, "sessions": 3}
    assert "distillation of CompassMem's prompted segmenter" in summary["dataset_card"]
    evaluation = summary["evaluation"]
    assert {"precision", "recall", "f1", "baseline", "turns_per_second"} <= set(evaluation)
    assert evaluation["baseline"]["segmenter"] == "FixedSpanSegmenter(span=2)"  # 2- and 3-turn events: mean 2.4
    assert summary["best"] is not None and summary["epochs"] >= 1
    loaded = Stage.load(tmp_path / "seg")
    assert isinstance(loaded, BoundarySegmenter) and loaded.trained_on == {"tiny-a", "tiny-b"}
    saved = json.loads((tmp_path / "seg" / "training.json").read_text())
    assert saved["evaluation"]["f1"] == evaluation["f1"]
    log = [json.loads(line) for line in (tmp_path / "seg.metrics.jsonl").read_text().splitlines()]
    assert len(log) == summary["epochs"] and "f1" in log[0]["validation"]
    # the frozen encoder's vectors were computed once, and a training step lowers the loss on them
    run = recipe.setup(tiny_config(three_conversations, tmp_path / "again"))
    assert run.vectors is not None and len(run.vectors) == len(run.sessions) == 2

    def loss() -> float:
        run.stage.eval()  # no dropout
        with torch.no_grad():
            return boundary_label_loss(run.stage.logits_from_vectors(run.vectors), run.labels).item()

    before = loss()
    recipe.train(run)
    assert loss() < before


def test_the_recipe_refuses_a_part_with_no_cached_teacher_session(three_conversations, tmp_path, monkeypatch):
    recipe = load_recipe("train_event_segmenter")
    monkeypatch.setattr(memlab.training.teacher, "teacher_sessions", synthetic_teacher(missing=("tiny-c",)))
    with pytest.raises(ConfigError, match=r"the evaluation conversations: no cached teacher session for \['tiny-c'\]"):
        recipe.setup(tiny_config(three_conversations, tmp_path / "seg"))


def test_the_segmenter_evaluator_reads_the_teacher_and_refuses_none_cached(monkeypatch):
    from memlab.data import load_sample
    from memlab.training.segmentation import SegmenterEvaluator

    conversation = load_sample()[0]
    monkeypatch.setattr(memlab.training.teacher, "teacher_sessions", synthetic_teacher())
    result = SegmenterEvaluator()(FixedSpanSegmenter(span=2), [conversation])
    assert result["sessions"] == 2 and result["teacher"]["failed"] == 1 and result["baseline"]["f1"] == result["f1"]
    monkeypatch.setattr(memlab.training.teacher, "teacher_sessions", synthetic_teacher(missing=(conversation.id,)))
    with pytest.raises(ValueError, match="no cached teacher session"):
        SegmenterEvaluator()(FixedSpanSegmenter(), [conversation])
