"""memlab.training.fusion: how a fuser's reply is read, and the scores against a teacher."""

from __future__ import annotations

import pytest

from memlab.stages.event_view import EventView
from memlab.stages.fuse import EventFuser, FuseIn, FuseOut
from memlab.training.fusion import RecordingFuser, fusion_scores, outcome


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
