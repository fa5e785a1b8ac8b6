"""Event boundaries read from LoCoMo's observations (``memlab.training.observation_boundaries``),
the gap labels' loss and F1 (``memlab.training.segmentation``), peak decoding and the
position-blind ``WindowBoundarySegmenter``, and the recipe trained on observations."""

from __future__ import annotations

import itertools
import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
import torch

import memlab.training.teacher
from memlab.embed.base import Embedder
from memlab.embed.similarity import cross_group_percentile
from memlab.stage import Stage
from memlab.stages.encoder import TextEncoder
from memlab.stages.segment import WindowBoundarySegmenter
from memlab.stages.segment.neural import decode_boundaries
from memlab.training import load_recipe
from memlab.training.observation_boundaries import (
    observation_labels,
    session_labels,
    without_names,
)
from memlab.training.segmentation import BoundaryLabels, boundary_label_loss, label_f1, span_shape
from memlab.types import Conversation, Observation, Session, SessionAnnotation, Turn
from tests.train.test_recipes import SAMPLE


def turns_session(n: int, sid: str = "session_1") -> Session:
    day = datetime(2023, 5, 8)
    return Session(sid, day, tuple(Turn(f"{sid}:{t}", "Ann" if t % 2 else "Bob", f"turn {t}", timestamp=day)
                                   for t in range(n)))


def test_session_labels_join_similar_neighbours_and_leave_one_boundary_between_others():
    # anchors at turns 1, 3 (similar to 1), 6 (a new topic) and 6 again, 8 citing 8..9; 11 turns
    anchors = [(1, 1), (3, 3), (6, 6), (6, 6), (8, 9)]
    similarity = np.array([[1, .8, .1, .1, .1], [.8, 1, .2, .1, .1], [.1, .2, 1, .9, .7],
                           [.1, .1, .9, 1, .1], [.1, .1, .7, .1, 1.]])
    labels = session_labels(turns_session(11), anchors, similarity, threshold=0.5)
    # 1..3 one event (zeros 2, 3), one boundary in 4..6, 6..8 one event (the best pair across the
    # two facts at turn 6 is 0.7), 9 inside the 8..9 fact, 10 after the last anchor, 1 before the first
    assert labels.gaps == ((4, 6),)
    assert labels.zeros == (1, 2, 3, 7, 8, 9, 10)
    strict = session_labels(turns_session(11), anchors, similarity, threshold=0.75)
    assert strict.gaps == ((4, 6), (7, 8))  # 0.7 is below: a boundary between turn 6's facts and turn 8's


def test_observation_labels_calibrate_on_cross_session_pairs_and_drop_names():
    assert without_names("Caroline's dog met Melanie.", ("Caroline", "Melanie")) == "dog met ."

    class TopicEmbedder(Embedder):  # one axis per topic word: facts of a topic are identical
        topics = ("dog", "pottery", "trip")

        def _encode(self, texts):
            return np.array([[float(w in t) for w in self.topics] + [0.1 * ("Ann" in t)] for t in texts])

        def _dim(self):
            return len(self.topics) + 1

        def _load(self):
            pass

        def _count_tokens(self, text):
            return len(text.split())

        def _identity(self):
            return {"class": "TopicEmbedder"}

    sessions = (turns_session(8, "session_1"), turns_session(6, "session_2"))
    cite = lambda s, t: (f"{s}:{t}",)  # noqa: E731
    annotations = (
        SessionAnnotation("session_1", observations=(
            Observation("Ann", "Ann got a dog", cite("session_1", 1)), Observation("Ann", "Ann walks the dog",
                                                                                  cite("session_1", 3)),
            Observation("Bob", "Bob took up pottery", cite("session_1", 5)))),
        SessionAnnotation("session_2", observations=(
            Observation("Ann", "Ann plans a trip", cite("session_2", 2)),
            Observation("Bob", "Bob sells pottery", cite("session_2", 4)))),
    )
    conversation = Conversation("c", ("Ann", "Bob"), sessions, annotations=annotations)
    labels = observation_labels(conversation, TopicEmbedder(), percentile=90)
    assert labels["session_1"] == BoundaryLabels(zeros=(1, 2, 3, 6, 7), gaps=((4, 5),))
    assert labels["session_2"] == BoundaryLabels(zeros=(1, 2, 5), gaps=((3, 4),))
    assert observation_labels(Conversation("c", ("Ann",), sessions[:1], annotations=annotations[:1]),
                              TopicEmbedder()) == {}  # one session: nothing to calibrate on
    with pytest.raises(ValueError, match="two groups"):
        cross_group_percentile(np.eye(2), ["s1", "s1"], 90)


def test_the_gap_loss_is_the_probability_of_exactly_one_boundary():
    logits = torch.tensor([0.3, -1.0, 2.0, -0.5, 0.1], requires_grad=True)
    labels = BoundaryLabels(zeros=(1,), gaps=((2, 4), (5, 5)))
    p = torch.sigmoid(logits).tolist()

    def exactly_one(ps):
        return sum(math.prod(q if i == j else 1 - q for i, q in enumerate(ps)) for j in range(len(ps)))

    expected = -(math.log(1 - p[0]) + math.log(exactly_one(p[1:4])) + math.log(p[4])) / 3
    loss = boundary_label_loss([logits], [labels])
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="overlaps"):
        boundary_label_loss([logits], [BoundaryLabels(zeros=(3,), gaps=((2, 4),))])


def test_label_f1_counts_one_hit_per_gap_and_ignores_unknown_positions():
    labels = [BoundaryLabels(zeros=(1, 2), gaps=((3, 5), (7, 7)))]  # position 6 unknown
    scores = label_f1([[3, 4, 6]], labels)  # 3 finds the gap, 4 is a second one in it, 6 is not scored
    assert (scores["correct"], scores["predicted"], scores["gold"]) == (1, 2, 2)
    assert scores["precision"] == 0.5 and scores["recall"] == 0.5
    assert label_f1([[1, 7]], labels)["precision"] == 0.5
    assert label_f1([[]], [BoundaryLabels(zeros=(1,))])["f1"] == 1.0
    assert span_shape([[1, 3]], [6]) == {"events": 3, "mean_turns_per_event": 2.0, "single_turn_event_share": 0.333}


def test_peak_decoding_keeps_only_local_maxima():
    p = [0.6, 0.7, 0.2, 0.4, 0.3, 0.1]
    assert decode_boundaries(p, 0.25, None) == [1, 2, 4, 5]
    assert decode_boundaries(p, 0.25, None, peaks_only=True) == [2, 4]
    assert decode_boundaries(p, 0.25, 2, peaks_only=True) == [2, 4, 6]  # max_span still forces cuts


def test_the_window_segmenter_scores_a_position_from_its_neighbourhood_only():
    segmenter = WindowBoundarySegmenter(TextEncoder(max_length=32), window=2, context_size=8)
    torch.manual_seed(0)
    vectors = torch.randn(9, 384)
    segmenter.warm_up()
    segmenter.eval()
    with torch.no_grad():
        whole = segmenter.logits_from_vectors([vectors])[0]
        shifted = segmenter.logits_from_vectors([torch.cat([torch.randn(3, 384), vectors[2:7]])])[0]
    assert whole.shape == (8,)
    # positions 4 and 5 of the session (turns 2..6 around them) are positions 5 and 6 of the other
    assert torch.allclose(whole[3:5], shifted[4:6], atol=1e-5)


@pytest.fixture
def annotated_conversations(tmp_path) -> Path:
    """The sample as three conversations whose sessions carry observations: one per third turn,
    its text the turn's own words (so neighbouring facts on one topic are alike)."""
    sample = json.loads(SAMPLE.read_text())[0]
    observation = {}
    for key, turns in sample["conversation"].items():
        if key.startswith("session_") and isinstance(turns, list):
            facts = {}
            for turn in turns[1::3]:
                facts.setdefault(turn["speaker"], []).append([turn["text"], turn["dia_id"]])
            observation[f"{key}_observation"] = facts
    data = [{**sample, "sample_id": name, "observation": observation} for name in ("tiny-a", "tiny-b", "tiny-c")]
    path = tmp_path / "annotated.json"
    path.write_text(json.dumps(data))
    return path


def test_the_recipe_trains_on_observations_and_scores_against_both(annotated_conversations, tmp_path, monkeypatch):
    from tests.training.test_segmentation import synthetic_teacher, tiny_config

    recipe = load_recipe("train_event_segmenter")
    monkeypatch.setattr(memlab.training.teacher, "teacher_sessions", synthetic_teacher())
    config = tiny_config(annotated_conversations, tmp_path / "seg")
    config.update(labels="observations", calibrate_threshold=True,
                  stage={**config["stage"], "_component_": "memlab.stages.segment.WindowBoundarySegmenter"})
    summary = recipe.main(config)
    assert "observation annotations" in summary["dataset_card"] and summary["labels"] == "observations"
    assert summary["sessions"]["train"] == 5 and summary["sessions"]["validation"] == 5
    held_out = summary["evaluation_observations"]
    assert held_out["sessions"] == 5 and {"f1", "mean_turns_per_event", "baseline"} <= set(held_out)
    assert {"f1", "baseline"} <= set(summary["evaluation"])  # against the teacher too
    loaded = Stage.load(tmp_path / "seg")
    assert isinstance(loaded, WindowBoundarySegmenter) and loaded.peaks_only
    assert loaded.threshold == summary["threshold"]["threshold"]
    assert all(a <= b for a, b in itertools.pairwise([0.05, loaded.threshold, 0.9]))


def test_fusion_links_are_scored_against_the_observations(annotated_conversations):
    from memlab.config import build_pipeline
    from memlab.data import load_dataset, load_sample
    from memlab.embed import SentenceTransformerEmbedder
    from memlab.training.fusion import link_agreement, links_against_observations

    config = Path(__file__).resolve().parents[2] / "configs/pipelines/compassmem_trained_construction.yaml"
    pipeline = build_pipeline(config, [])[0]
    conversation = next(c for c in load_dataset(annotated_conversations) if c.id == "tiny-c")
    row = links_against_observations(pipeline.build(conversation.history()), conversation, SentenceTransformerEmbedder())
    assert row["pairs"] > 0 and 0 <= row["related"] <= row["pairs"] and row["linked_related"] <= row["linked"]
    assert link_agreement({"pairs": 4, "related": 2, "linked": 3, "linked_related": 1}) == {
        "pairs": 4, "related": 2, "linked": 3, "linked_related": 1, "base_rate": 0.5, "precision": 0.333, "recall": 0.5}
    sample = load_sample()[0]
    with pytest.raises(ValueError, match="no observation annotations"):
        links_against_observations(pipeline.build(sample.history()), sample, SentenceTransformerEmbedder())
