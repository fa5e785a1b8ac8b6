"""The trained relation extractor (pair classifier), its majority baseline, and the LLM-free fuser."""

from __future__ import annotations

import json

import pytest
import torch

from memlab.stage import Stage
from memlab.stages.encoder import TextEncoder
from memlab.stages.event_view import EventView
from memlab.stages.fuse import ClassifierFuser, FuseIn
from memlab.stages.relate import (
    NO_RELATION,
    PAIR_LABELS,
    AdjacentRelationExtractor,
    MajorityRelationExtractor,
    PairRelationClassifier,
    RelateIn,
    RelateOut,
    Relation,
    RelationExtractor,
    canonical_pairs,
    canonical_relation,
    event_text,
)

EVENTS = (
    EventView("N0", "Ann lost her job at the bank.", ("D1:1",), ("Ann",)),
    EventView("N1", "Ann started a pottery class.", ("D1:2",), ("Ann",)),
    EventView("N2", "Bob cooked dinner for his sister.", ("D1:3",), ("Bob",)),
    EventView("N3", "Ann sold her first pottery bowl.", ("D1:4",), ("Ann", "Bob")),
)
#: Synthetic labelled pairs: a consequence reads "causal", unrelated events "none".
PAIRS = [("Ann lost her job.", "Ann had to move out."), ("Bob cooked dinner.", "It rained in Paris."),
         ("The storm hit the town.", "The town flooded."), ("Ann bought a cat.", "The train was late.")]
PAIR_TARGETS = ["causal", NO_RELATION, "causal", NO_RELATION]
ENCODER_KEYS = {"max_length", "frozen", "lora_rank"}
DISTANCES = [1, 3, 1, 6]  # events apart in their session


def small_classifier(**kwargs) -> PairRelationClassifier:
    torch.manual_seed(0)
    encoder = TextEncoder(**{"max_length": 32, "frozen": True, **{k: kwargs.pop(k) for k in ENCODER_KEYS & set(kwargs)}})
    return PairRelationClassifier(encoder, **{"batch_size": 4, **kwargs})


def train_steps(stage: PairRelationClassifier, steps: int) -> list[float]:
    optimiser = torch.optim.AdamW([p for p in stage.parameters() if p.requires_grad], lr=1e-2)
    weights = torch.ones(len(stage.labels))
    stage.train()
    losses = []
    for _ in range(steps):
        loss = stage.loss(stage.pair_logits(PAIRS, DISTANCES), stage.targets(PAIR_TARGETS), weights)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return losses


def scripted(stage: PairRelationClassifier, monkeypatch, answers: dict[tuple[int, int], tuple[str, float]]) -> list:
    """Make ``stage.predict`` answer per pair of ``EVENTS`` (unlisted pairs: ``none``); returns the pairs asked."""
    index = {event_text(e): n for n, e in enumerate(EVENTS)}
    asked: list = []

    def predict(pairs, distances):
        asked.extend((index[a], index[b]) for a, b in pairs)
        assert list(distances) == [index[b] - index[a] for a, b in pairs]  # events apart in the session
        return [answers.get((index[a], index[b]), (NO_RELATION, 0.9)) for a, b in pairs]

    monkeypatch.setattr(stage, "predict", predict)
    return asked


def test_labels_pairs_and_directions():
    assert PAIR_LABELS[-1] == NO_RELATION and len(PAIR_LABELS) == 12
    assert canonical_pairs(3) == [(0, 1), (0, 2), (1, 2)] and canonical_pairs(1) == []
    assert canonical_relation(Relation(2, 0, "temporal_before", ("D1:1",))) == Relation(0, 2, "temporal_after", ("D1:1",))
    assert canonical_relation(Relation(2, 0, "causal")) == Relation(0, 2, "causal")
    assert canonical_relation(Relation(0, 2, "temporal_before")) == Relation(0, 2, "temporal_before")
    assert event_text(EVENTS[3]) == "Ann, Bob: Ann sold her first pottery bowl."
    assert event_text(EventView("N9", "No one.")) == "No one."
    lonely = small_classifier()
    assert lonely([RelateIn(EVENTS[:1]), RelateIn(())]) == [RelateOut(), RelateOut()] and not lonely.is_built  # no pair
    with pytest.raises(ValueError, match="include 'none'"):
        PairRelationClassifier(TextEncoder(), labels=["causal", "related"])
    with pytest.raises(ValueError, match=r"\['caused'\] are not among"):
        PairRelationClassifier(TextEncoder(), labels=["caused", "none"])


def test_every_canonical_pair_is_classified_and_none_drops_it(monkeypatch):
    stage = small_classifier(max_relations=None)
    asked = scripted(stage, monkeypatch, {(0, 1): ("causal", 0.8), (1, 3): ("temporal_before", 0.7)})
    out = stage([RelateIn(EVENTS), RelateIn(EVENTS[:1]), RelateIn(EVENTS[:2])])
    assert asked == canonical_pairs(4) + canonical_pairs(2)  # session order, earlier event first
    assert out[0] == RelateOut((Relation(0, 1, "causal"), Relation(1, 3, "temporal_before")))
    assert out[1] == RelateOut() and out[2] == RelateOut((Relation(0, 1, "causal"),))


def test_max_relations_keeps_the_most_confident_in_canonical_order(monkeypatch):
    stage = small_classifier(max_relations=2)
    scripted(stage, monkeypatch, {(0, 1): ("causal", 0.5), (0, 3): ("related", 0.9), (2, 3): ("parallel", 0.8)})
    assert stage([RelateIn(EVENTS)])[0].relations == (Relation(0, 3, "related"), Relation(2, 3, "parallel"))


def test_gradient_steps_lower_the_loss_and_forward_restores_the_mode():
    stage = small_classifier()
    assert stage.pair_logits(PAIRS, DISTANCES).shape == (4, len(PAIR_LABELS))
    losses = train_steps(stage, 4)
    assert losses[-1] < losses[0]
    predictions = stage.predict(PAIRS, DISTANCES)
    assert all(label in PAIR_LABELS and 0.0 < p <= 1.0 for label, p in predictions)
    assert stage.training
    with pytest.raises(ValueError, match=r"labels \['cause'\] are not among"):
        stage.targets(["cause"])
    with pytest.raises(ValueError, match="class_weights"):
        stage.loss(stage.pair_logits(PAIRS[:1], [1]), stage.targets(["causal"]), torch.ones(3))
    # the distance is read (one-hot, clipped at max_distance): the same texts apart or adjacent differ
    stage.eval()
    with torch.no_grad():
        near, far, farther = (stage.pair_logits(PAIRS[:1], [d]) for d in (1, 4, 9))
    assert not torch.allclose(near, far) and torch.allclose(far, farther)
    with pytest.raises(ValueError, match="one distance per pair"):
        stage.pair_logits(PAIRS, [1, 1])
    with pytest.raises(ValueError, match="one distance >= 1 per pair"):
        stage.pair_logits(PAIRS[:1], [0])


def test_a_frozen_encoder_stays_the_packaged_one_and_vectors_can_be_precomputed():
    stage = small_classifier()
    encoder_before = {k: v.clone() for k, v in stage.encoder.state_dict().items()}
    train_steps(stage, 2)
    assert all(torch.equal(v, stage.encoder.state_dict()[k]) for k, v in encoder_before.items())
    assert not any(k.startswith("encoder.") for k in stage.checkpoint_state())  # the head alone
    # precomputed event vectors give the logits pair_logits gives from the texts
    stage.eval()
    vectors = stage.encode_texts([text for pair in PAIRS for text in pair])
    with torch.no_grad():
        from_vectors = stage.logits_from_vectors(vectors[0::2], vectors[1::2], DISTANCES)
        assert torch.allclose(from_vectors, stage.pair_logits(PAIRS, DISTANCES), atol=1e-5)
    with pytest.raises(ValueError, match="frozen=true leaves a LoRA adapter untrained"):
        TextEncoder(frozen=True, lora_rank=4)
    # a LoRA adapter trains when the encoder is not frozen
    lora = small_classifier(frozen=False, lora_rank=4)
    losses = train_steps(lora, 3)
    assert losses[-1] < losses[0]
    assert any("lora_" in k for k in lora.checkpoint_state())


def test_save_and_load_round_trip(tmp_path):
    stage = small_classifier(max_relations=5)
    train_steps(stage, 1)
    before = stage([RelateIn(EVENTS)])
    logits = stage.predict(PAIRS, DISTANCES)
    stage.save(tmp_path / "rc")
    config = json.loads((tmp_path / "rc" / "config.json").read_text())
    assert config["kwargs"]["labels"] == list(PAIR_LABELS) and config["kwargs"]["max_relations"] == 5
    assert (tmp_path / "rc" / "model.safetensors").stat().st_size < 1_000_000  # the head only
    torch.manual_seed(123)  # another head init must be overwritten by the checkpoint
    loaded = Stage.load(tmp_path / "rc")
    assert isinstance(loaded, PairRelationClassifier)
    assert loaded([RelateIn(EVENTS)]) == before
    assert [label for label, _ in loaded.predict(PAIRS, DISTANCES)] == [label for label, _ in logits]


def test_majority_baseline():
    assert MajorityRelationExtractor()([RelateIn(EVENTS)]) == [RelateOut()]
    out = MajorityRelationExtractor("related")([RelateIn(EVENTS[:3]), RelateIn(EVENTS[:1])])
    assert out == [RelateOut((Relation(0, 1, "related"), Relation(0, 2, "related"), Relation(1, 2, "related"))),
                   RelateOut()]
    with pytest.raises(ValueError, match="'causes' is not"):
        MajorityRelationExtractor("causes")


def test_adjacent_baseline_chains_consecutive_events():
    out = AdjacentRelationExtractor()([RelateIn(EVENTS), RelateIn(EVENTS[:1]), RelateIn(())])
    assert out == [RelateOut((Relation(0, 1, "enablement"), Relation(1, 2, "enablement"), Relation(2, 3, "enablement"))),
                   RelateOut(), RelateOut()]
    assert AdjacentRelationExtractor("causal")([RelateIn(EVENTS[:2])])[0].relations == (Relation(0, 1, "causal"),)
    with pytest.raises(ValueError, match="'none' is not one of"):
        AdjacentRelationExtractor("none")


class Fixed(RelationExtractor):
    """Gives each pair the next of ``replies`` (a ``RelateOut``), and counts its calls."""

    def __init__(self, replies: list[RelateOut]) -> None:
        super().__init__()
        self.replies, self.seen = list(replies), []

    def forward(self, batch):
        self.seen += batch
        return [self.replies.pop(0) for _ in batch]


def test_classifier_fuser_merges_above_the_similarity_and_else_asks_the_extractor():
    new, existing = EVENTS[3], EVENTS[1]
    extractor = Fixed([RelateOut((Relation(0, 1, "causal"),)), RelateOut(),
                       RelateOut((Relation(1, 0, "temporal_before"),)), RelateOut(error="boom")])
    fuser = ClassifierFuser(extractor, same_event_similarity=0.95)
    out = fuser([FuseIn(new, existing, 0.97), FuseIn(new, existing, 0.92), FuseIn(new, existing, 0.91),
                 FuseIn(new, existing, 0.95), FuseIn(new, existing, 0.93)])
    assert [o.decision for o in out] == ["merge", "link", "new", "merge", "link"]  # 0.95 itself merges
    assert (out[1].decision, out[1].relation) == ("link", "causal")
    assert out[2].decision == "new" and out[2].error is None
    assert (out[4].decision, out[4].relation) == ("link", "temporal_after")  # given new -> existing: turned round
    assert len(extractor.seen) == 3 and extractor.seen[0] == RelateIn((existing, new))  # existing first
    failed = fuser([FuseIn(new, existing, 0.5)])[0]
    assert failed.decision == "new" and failed.error == "boom"
    assert fuser([]) == []
    with pytest.raises(TypeError, match="must be a RelationExtractor"):
        ClassifierFuser("not a stage")


def test_classifier_fuser_with_the_majority_extractor():
    fuser = ClassifierFuser(MajorityRelationExtractor("related"))
    assert fuser.run_one(FuseIn(EVENTS[1], EVENTS[0], 0.93)).relation == "related"
    assert ClassifierFuser(MajorityRelationExtractor()).run_one(FuseIn(EVENTS[1], EVENTS[0], 0.93)).decision == "new"


def test_classifier_fuser_saves_and_loads_as_a_tree(tmp_path):
    classifier = small_classifier()
    train_steps(classifier, 1)
    fuser = ClassifierFuser(classifier, same_event_similarity=0.96)
    items = [FuseIn(e, EVENTS[0], 0.93) for e in EVENTS[1:]] + [FuseIn(EVENTS[1], EVENTS[0], 0.99)]
    before = fuser(items)
    fuser.save(tmp_path / "fuser")
    config = json.loads((tmp_path / "fuser" / "config.json").read_text())
    assert config["stages"] == {"relation_extractor": "relation_extractor"}
    assert config["kwargs"] == {"same_event_similarity": 0.96}
    assert not (tmp_path / "fuser" / "model.safetensors").exists()  # the child holds the weights
    assert (tmp_path / "fuser" / "relation_extractor" / "model.safetensors").is_file()
    loaded = Stage.load(tmp_path / "fuser")
    assert isinstance(loaded, ClassifierFuser) and isinstance(loaded.relation_extractor, PairRelationClassifier)
    assert loaded(items) == before
    # a caller's stage replaces the saved child
    swapped = Stage.load(tmp_path / "fuser", relation_extractor=MajorityRelationExtractor())
    assert [o.decision for o in swapped(items)] == ["new", "new", "new", "merge"]


def test_a_pair_is_related_when_not_none_is_likelier_than_the_threshold(monkeypatch):
    stage = small_classifier()
    causal, motivation, none = (PAIR_LABELS.index(label) for label in ("causal", "motivation", NO_RELATION))

    def logits(pairs, distances):
        rows = torch.full((len(pairs), len(PAIR_LABELS)), -30.0)
        # pair 0: none 0.4 beside causal 0.35 and motivation 0.25 -> related (0.6), causal
        # pair 1: none 0.6 -> none, though no single relation label is likelier
        for row, probs in zip(range(len(pairs)), ({none: 0.4, causal: 0.35, motivation: 0.25}, {none: 0.6, causal: 0.4})):
            for label, p in probs.items():
                rows[row, label] = torch.tensor(p).log()
        return rows

    monkeypatch.setattr(stage, "pair_logits", logits)
    (label0, p0), (label1, p1) = stage.predict(PAIRS[:2], [1, 1])
    assert (label0, label1) == ("causal", NO_RELATION)
    assert p0 == pytest.approx(0.6, abs=1e-4) and p1 == pytest.approx(0.4, abs=1e-4)
    stage.relation_threshold = 0.7
    assert stage.predict(PAIRS[:1], [1])[0][0] == NO_RELATION
