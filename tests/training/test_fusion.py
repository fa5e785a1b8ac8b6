"""memlab.training.fusion: how a fuser's reply is read, the scores against a teacher, and the family's evaluator."""

from __future__ import annotations

from pathlib import Path

import pytest

import memlab.training.evaluators as evaluators
from memlab.pipelines.compassmem.settings import ConstructionSettings
from memlab.stages.event_view import EventView
from memlab.stages.fuse import EventFuser, FuseIn, FuseOut
from memlab.training.fusion import FuserEvaluator, RecordingFuser, fusion_scores, outcome

REPO = Path(__file__).resolve().parents[2]


def pair(similarity: float) -> FuseIn:
    return FuseIn(EventView("NEW", "Ann adopted Rex."), EventView("N0", "Ann visited a shelter."), similarity)


def test_a_reply_is_read_as_the_pipeline_reads_it():
    assert outcome(FuseOut(same_event=True), pair(0.95), 0.9) == "merge"
    assert outcome(FuseOut(same_event=True), pair(0.6), 0.9) == "link"  # may not merge below the threshold
    assert outcome(FuseOut(has_overlap=True, relation="follow_up"), pair(0.6), 0.9) == "link"
    assert outcome(FuseOut(has_overlap=True), pair(0.6), 0.9) == "none"  # an overlap with no relation: no edge
    assert outcome(FuseOut(), pair(0.99), 0.9) == "none"


def test_scores_against_the_teacher_and_the_majority():
    gold = ["link", "link", "link", "none"]
    result = fusion_scores(gold, ["link", "none", "link", "none"])
    assert result["accuracy"] == 0.75 and result["link_agreement"] == 0.75
    assert result["link_f1"] == pytest.approx(2 * 2 / (3 + 2))
    # macro over the outcomes present: link F1 0.8, none F1 2/3
    assert result["macro_f1"] == pytest.approx((0.8 + 2 / 3) / 2)
    assert fusion_scores(gold, ["link"] * 4)["accuracy"] == 0.75


def test_the_recorder_keeps_every_pair_and_reply():
    class Overlapping(EventFuser):
        def forward(self, batch):
            return [FuseOut(has_overlap=True, relation="related") for _ in batch]

    recorder = RecordingFuser(Overlapping())
    out = recorder([pair(0.5), pair(0.7)])
    assert [item.similarity for item, _ in recorder.asked] == [0.5, 0.7] and [o for _, o in recorder.asked] == out


class Replying(EventFuser):
    """Every pair gets the same reply."""

    def __init__(self, reply: FuseOut) -> None:
        super().__init__()
        self.reply = reply

    def forward(self, batch):
        return [self.reply for _ in batch]


class TeacherBuild:
    """Stands in for a CompassMem teacher: each build asks its fuser two pairs."""

    construction = ConstructionSettings(merge_threshold=0.9)

    def __init__(self, fuser: EventFuser) -> None:
        self.fuser = fuser

    def eval(self):
        return self

    def replace(self, name, stage):
        old, self.fuser = self.fuser, stage
        return old

    def build(self, history):
        self.fuser([pair(0.95), pair(0.5)])


def test_the_fuser_evaluator_scores_a_fuser_on_the_pairs_the_teachers_builds_ask(monkeypatch):
    from memlab.data import load_sample

    teacher = TeacherBuild(Replying(FuseOut(same_event=True)))  # merge at 0.95, a link below the threshold
    monkeypatch.setattr(evaluators, "build_pipeline", lambda tree, adjust: (teacher, {}, {}))
    evaluator = FuserEvaluator(teacher=str(REPO / "configs/pipelines/compassmem_teacher.yaml"))
    conversations = load_sample()[:1] * 2  # two builds
    prepared = evaluator.prepare(conversations)
    assert prepared.outcomes == ("merge", "link") * 2 and isinstance(teacher.fuser, Replying)  # the teacher's own fuser back
    perfect = evaluator.score(Replying(FuseOut(same_event=True)), prepared)
    assert perfect["macro_f1"] == perfect["accuracy"] == 1.0 and perfect["candidate"] == {"merge": 2, "link": 2}
    apart = evaluator.score(Replying(FuseOut()), prepared)  # never links: every pair a node of its own
    assert apart["accuracy"] == 0.0 and apart["link_agreement"] == 0.0 and evaluator.primary(apart) == 0.0
    baseline = evaluator.score(None, prepared)
    assert "macro_f1" not in baseline and baseline["majority_scores"]["accuracy"] == 0.5
    assert evaluator.headline(baseline)["accuracy"] == (0.5, 4)
    teacher.build = lambda history: None  # one session each: nothing asked
    with pytest.raises(ValueError, match="asked no fusion pair"):
        evaluator.prepare(conversations)
