"""Trained relation extractor: a pair classifier over event vectors with one head over the labels.

The ``TextEncoder`` pools each event of a session into one vector (a bi-encoder: ``n`` encoder
passes per session, not one per pair). A linear head reads a pair as (earlier ``a``, later
``b``, ``a * b``, ``|a - b|``, their cosine) and the pair's distance, and maps it onto
``RELATION_LABELS`` plus ``NO_RELATION``. The distance is how many events apart the two are
in the session (1: consecutive), one-hot up to ``max_distance``: the prompted teacher relates
consecutive events far more often than distant ones (BENCHMARKS.md), which no text shows. The
fuser's pair (an existing event, a new one: ``ClassifierFuser``) is read as consecutive. Where
``PromptedRelationExtractor`` asks a model for a session's relations in one call, this stage
classifies every canonical pair on its own, with no LLM.

Why a bi-encoder over a frozen encoder (the default) rather than a cross-encoder reading both
events at once: with a few hundred teacher pairs, a cross-encoder (LoRA or whole) learnt the
texts of its training pairs and predicted ``none`` for nearly every held-out pair, whatever
its class weights or learning rates; fixed event vectors under one linear head generalise
(BENCHMARKS.md, "CompassMem").

Canonical pairs: every unordered pair ``(i, j)``, ``i < j``, of a session's events in session
order (``RelateIn.events``). A pair is related when its probability of being anything but
``none`` exceeds ``relation_threshold`` (the edge is a yes / no decision: the teacher's typed
labels split the related pairs so thinly that ``none`` would win an argmax on nearly every
pair); it then becomes ``Relation(i, j, label)`` with the most probable relation label. Its
direction is always session order (earlier -> later; a teacher relation given the other way
round is turned round by ``canonical_relation`` for training) and its ``cited_turns`` is empty
(the classifier names no turns). With ``max_relations``, only that many relations per session
are kept, the most confident ones (probability of being related).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from memlab.bounds import PositiveInt, UnitFloat
from memlab.stages.encoder import EncoderStage, TextEncoder
from memlab.stages.event_view import EventView
from memlab.stages.relate.base import NO_RELATION, RELATION_LABELS, RelateIn, RelateOut, Relation, RelationExtractor

#: The classifier's classes, in the head's order: the relation labels, then ``none``.
PAIR_LABELS: tuple[str, ...] = RELATION_LABELS + (NO_RELATION,)


def event_text(event: EventView) -> str:
    """What the classifier reads of an event: ``Caroline, Melanie: summary``. No prompt key
    (``N12``/``NEW`` say nothing) and no date (the events of one session share it)."""
    return f"{', '.join(event.participants)}: {event.summary}" if event.participants else event.summary


def canonical_pairs(n_events: int) -> list[tuple[int, int]]:
    """Every unordered pair ``(i, j)``, ``i < j``, of ``n_events`` events, in session order."""
    return [(i, j) for i in range(n_events) for j in range(i + 1, n_events)]


#: Labels that name a direction in time: a relation read the other way round takes the other one.
_REVERSED = {"temporal_before": "temporal_after", "temporal_after": "temporal_before"}


def canonical_relation(relation: Relation) -> Relation:
    """``relation`` on its canonical pair (``source < target``): one given later -> earlier is
    turned round, ``temporal_before`` <-> ``temporal_after`` swapped (the other labels keep their
    name: the classifier's direction is session order, so it cannot tell "A causes B" from "B
    causes A" and is not asked to)."""
    if relation.source < relation.target:
        return relation
    return Relation(relation.target, relation.source, _REVERSED.get(relation.label, relation.label), relation.cited_turns)


class PairRelationClassifier(EncoderStage, RelationExtractor):
    """Classifies each canonical event pair of a session (module docstring).

    ``labels`` are the head's classes (default ``PAIR_LABELS``; saved resolved, so the weights'
    class order never depends on the code's default); they must include ``none``.
    A frozen ``encoder`` (the recipe's setting) keeps the packaged MiniLM as it is: only the head
    trains, event vectors can be computed once per training run, and the checkpoint is the head
    alone; an encoder that trains saves its adapter or weights in ``encoder/``. The encoder's
    ``max_length`` (tokens of an event) and ``batch_size`` (events per encoder pass) set the CPU cost, one encoder pass per event. ``max_relations`` caps the relations
    kept per session (None: all); 12 is the prompted extractor's cap.

    Training API: ``pair_logits`` (differentiable ``[n, n_labels]`` logits for (earlier, later)
    text pairs and their distances), the same from precomputed event vectors
    (``encode_texts`` + ``logits_from_vectors``), ``loss`` (cross-entropy, optional class
    weights since ``none`` dominates), ``predict`` (label and probability of being related per pair).
    """

    def __init__(
        self,
        encoder: TextEncoder,
        labels: list[str] | None = None,
        batch_size: PositiveInt = 64,
        max_relations: PositiveInt | None = 12,
        max_distance: PositiveInt = 4,
        relation_threshold: UnitFloat = 0.5,
        device: str = "cpu",
    ) -> None:
        super().__init__()
        labels = list(PAIR_LABELS if labels is None else labels)
        if len(set(labels)) != len(labels) or NO_RELATION not in labels or len(labels) < 2:
            raise ValueError(f"PairRelationClassifier: labels must be distinct and include {NO_RELATION!r}, got {labels}")
        unknown = [label for label in labels if label not in PAIR_LABELS]
        if unknown:
            raise ValueError(f"PairRelationClassifier: labels {unknown} are not among {list(PAIR_LABELS)}")
        self.labels = tuple(labels)
        self.encoder = encoder
        self.batch_size = batch_size
        self.max_relations = max_relations
        self.max_distance = max_distance
        self.relation_threshold = relation_threshold
        self.device = device
        self.head: nn.Linear | None = None

    @property
    def init_kwargs(self) -> dict[str, Any]:
        return {**super().init_kwargs, "labels": list(self.labels)}

    def _build_heads(self, hidden_size: int) -> None:
        # (a, b, a * b, |a - b|), their cosine, the distance one-hot.
        self.head = nn.Linear(4 * hidden_size + 1 + self.max_distance, len(self.labels))

    # -- training API --------------------------------------------------------------------
    def logits_from_vectors(self, earlier: torch.Tensor, later: torch.Tensor, distances: Sequence[int]) -> torch.Tensor:
        """Logits ``[n, len(labels)]`` from the two events' encoder vectors (``[n, hidden]``
        each) and how many events apart they are (>= 1); differentiable."""
        if earlier.shape != later.shape or len(distances) != len(earlier) or any(d < 1 for d in distances):
            raise ValueError(f"PairRelationClassifier: vectors {tuple(earlier.shape)} / {tuple(later.shape)} need one "
                             f"distance >= 1 per pair, got {len(distances)} (smallest {min(distances, default=None)})")
        self.warm_up()
        if not len(earlier):
            return torch.zeros(0, len(self.labels), device=self.device)
        a, b = earlier.to(self.device), later.to(self.device)
        cosine = F.cosine_similarity(a, b, dim=-1).unsqueeze(-1)
        apart = torch.tensor([min(d, self.max_distance) - 1 for d in distances], device=a.device)
        features = [a, b, a * b, (a - b).abs(), cosine, F.one_hot(apart, self.max_distance).to(a.dtype)]
        return self.head(torch.cat(features, dim=-1))

    def pair_logits(self, pairs: Sequence[tuple[str, str]], distances: Sequence[int]) -> torch.Tensor:
        """Logits ``[len(pairs), len(labels)]`` for (earlier event text, later event text) pairs
        ``distances`` events apart in their session (>= 1); each distinct text is encoded once."""
        if isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(p, str) for p in pairs):
            raise TypeError("PairRelationClassifier.pair_logits takes a list of (earlier, later) pairs, got one pair")
        if len(distances) != len(pairs):
            raise ValueError(f"PairRelationClassifier: one distance per pair, got {len(distances)} for {len(pairs)} pairs")
        texts = list(dict.fromkeys(text for pair in pairs for text in pair))
        index = {text: i for i, text in enumerate(texts)}
        vectors = self.encode_texts(texts)
        earlier = vectors[[index[a] for a, _ in pairs]] if pairs else vectors
        later = vectors[[index[b] for _, b in pairs]] if pairs else vectors
        return self.logits_from_vectors(earlier, later, distances)

    def targets(self, labels: Sequence[str]) -> torch.Tensor:
        """Class indices of ``labels`` (a ValueError names a label the head does not know)."""
        index = {label: i for i, label in enumerate(self.labels)}
        unknown = sorted({label for label in labels if label not in index})
        if unknown:
            raise ValueError(f"PairRelationClassifier: labels {unknown} are not among the head's {list(self.labels)}")
        return torch.tensor([index[label] for label in labels], dtype=torch.long)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor, class_weights: torch.Tensor | None = None) -> torch.Tensor:
        """Cross-entropy against class indices (``targets``); ``class_weights`` (one per label)
        up-weights the rare relation labels against the dominant ``none``."""
        if logits.ndim != 2 or logits.shape[0] != targets.shape[0]:
            raise ValueError(f"loss: logits {tuple(logits.shape)} vs targets {tuple(targets.shape)}")
        if class_weights is not None:
            if class_weights.shape != (len(self.labels),):
                raise ValueError(f"loss: class_weights {tuple(class_weights.shape)}, expected ({len(self.labels)},)")
            class_weights = class_weights.to(logits.device, logits.dtype)
        return F.cross_entropy(logits, targets.to(logits.device, torch.long), weight=class_weights)

    def label_probabilities(self, pairs: Sequence[tuple[str, str]], distances: Sequence[int]) -> torch.Tensor:
        """Probabilities ``[len(pairs), len(labels)]`` of each label (``labels`` order) per pair
        (``distances`` as ``pair_logits``'), in eval mode, no gradient."""
        if not pairs:
            return torch.zeros(0, len(self.labels))
        with self.inference():
            return self.pair_logits(pairs, distances).float().softmax(-1)

    def predict(self, pairs: Sequence[tuple[str, str]], distances: Sequence[int]) -> list[tuple[str, float]]:
        """(label, probability of being related) per pair (``distances`` as ``pair_logits``'):
        the most probable relation label when that probability exceeds ``relation_threshold``,
        else ``none``; in eval mode."""
        if not pairs:  # nothing to classify: no reason to load the encoder
            return []
        none = self.labels.index(NO_RELATION)
        probabilities = self.label_probabilities(pairs, distances)
        with torch.inference_mode():
            related = 1.0 - probabilities[:, none]
            index = probabilities.masked_fill(torch.arange(len(self.labels), device=probabilities.device) == none, -1.0).argmax(-1)
        return [(self.labels[i] if p > self.relation_threshold else NO_RELATION, p)
                for i, p in zip(index.tolist(), related.tolist())]

    # -- the stage -----------------------------------------------------------------------
    def forward(self, batch: list[RelateIn]) -> list[RelateOut]:
        # All sessions' pairs in one call: their events go through the encoder together, in full batches.
        pairs = [canonical_pairs(len(item.events)) for item in batch]
        texts = [[event_text(e) for e in item.events] for item in batch]
        flat = [(text[i], text[j]) for text, ij in zip(texts, pairs) for i, j in ij]
        predictions = iter(self.predict(flat, [j - i for ij in pairs for i, j in ij]))
        out = []
        for ij in pairs:
            found = [(p, Relation(i, j, label)) for (i, j), (label, p) in zip(ij, predictions) if label != NO_RELATION]
            if self.max_relations is not None and len(found) > self.max_relations:
                kept = sorted(range(len(found)), key=lambda k: -found[k][0])[: self.max_relations]
                found = [found[k] for k in sorted(kept)]  # back in canonical order
            out.append(RelateOut(tuple(relation for _, relation in found)))
        return out
