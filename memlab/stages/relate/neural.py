"""Trained relation extractor: a cross-encoder over event pairs with one head over the labels.

The ``TextEncoder`` reads (earlier event, later event) together, as ``CrossEncoderReranker``
reads (query, candidate); a linear head maps the pooled pair and the pair's distance onto
``RELATION_LABELS`` plus ``NO_RELATION``. The distance is how many events apart the two are in
the session (1: consecutive), one-hot up to ``max_distance``: the prompted teacher relates
consecutive events far more often than distant ones (BENCHMARKS.md), which no text shows. The
fuser's pair (an existing event, a new one: ``ClassifierFuser``) is read as consecutive. Where
``PromptedRelationExtractor`` asks a model for a session's relations in one call, this stage
classifies every canonical pair on its own, with no LLM.

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

from memlab.bounds import NonNegativeInt, PositiveInt, UnitFloat
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
    class order never depends on the code's default); they must include ``none``. ``lora_rank >
    0`` trains a LoRA adapter on the packaged MiniLM (the checkpoint holds the adapter and the
    head only), ``0`` fine-tunes it whole. ``max_length`` (tokens of the pair, the longer event
    trimmed first) and ``batch_size`` set the CPU cost, which is one encoder pass per pair: on 2
    cores, 12-19 pairs a second at 128 tokens (conv-41 cut into 3-turn events, 742 pairs: 40-66 s;
    2-turn events, 1,267 pairs: ~100 s on a busy machine). ``max_relations`` caps the relations
    kept per session (None: all); 12 is the prompted extractor's cap.

    Training API: ``pair_logits`` (differentiable ``[n, n_labels]`` logits for (earlier, later)
    text pairs and their distances), ``loss`` (cross-entropy, optional class weights since ``none`` dominates),
    ``predict`` (label and its probability per pair).
    """

    def __init__(
        self,
        labels: list[str] | None = None,
        encoder_path: str | None = None,
        lora_rank: NonNegativeInt = 8,
        lora_alpha: PositiveInt = 16,
        lora_targets: list[str] | None = None,
        max_length: PositiveInt = 128,
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
        if batch_size < 1:
            raise ValueError(f"PairRelationClassifier: batch_size must be >= 1, got {batch_size}")
        if max_relations is not None and max_relations < 1:
            raise ValueError(f"PairRelationClassifier: max_relations must be >= 1 or None, got {max_relations}")
        if max_distance < 1:
            raise ValueError(f"PairRelationClassifier: max_distance must be >= 1, got {max_distance}")
        self.labels = tuple(labels)
        self.encoder = TextEncoder(encoder_path, lora_rank=lora_rank, lora_alpha=lora_alpha, lora_targets=lora_targets,
                                   max_length=max_length)
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
        self.head = nn.Linear(hidden_size + self.max_distance, len(self.labels))

    # -- training API --------------------------------------------------------------------
    def pair_logits(self, pairs: Sequence[tuple[str, str]], distances: Sequence[int]) -> torch.Tensor:
        """Logits ``[len(pairs), len(labels)]`` for (earlier event text, later event text) pairs
        ``distances`` events apart in their session (>= 1); differentiable."""
        if isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(p, str) for p in pairs):
            raise TypeError("PairRelationClassifier.pair_logits takes a list of (earlier, later) pairs, got one pair")
        if len(distances) != len(pairs) or any(d < 1 for d in distances):
            raise ValueError(f"PairRelationClassifier: one distance >= 1 per pair, got {len(distances)} for "
                             f"{len(pairs)} pairs (smallest {min(distances, default=None)})")
        self.warm_up()
        if not pairs:
            return torch.zeros(0, len(self.labels), device=self.device)
        pooled = self.encoder(self.encoder.tokenize([a for a, _ in pairs], [b for _, b in pairs]))
        apart = torch.tensor([min(d, self.max_distance) - 1 for d in distances], device=pooled.device)
        return self.head(torch.cat([pooled, F.one_hot(apart, self.max_distance).to(pooled.dtype)], dim=-1))

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

    def predict(self, pairs: Sequence[tuple[str, str]], distances: Sequence[int]) -> list[tuple[str, float]]:
        """(label, probability of being related) per pair (``distances`` as ``pair_logits``'):
        the most probable relation label when that probability exceeds ``relation_threshold``,
        else ``none``; in eval mode, ``batch_size`` pairs at a time."""
        if not pairs:  # nothing to classify: no reason to load the encoder
            return []
        # Batches of similar length: padding to a batch's longest pair is most of the cost otherwise.
        order = sorted(range(len(pairs)), key=lambda k: len(pairs[k][0]) + len(pairs[k][1]))
        out: list[tuple[str, float]] = [("", 0.0)] * len(pairs)
        none = self.labels.index(NO_RELATION)
        is_none = torch.arange(len(self.labels), device=self.device) == none
        with self.inference():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start:start + self.batch_size]
                probabilities = self.pair_logits([pairs[k] for k in chunk], [distances[k] for k in chunk])
                probabilities = probabilities.float().softmax(-1)
                related = 1.0 - probabilities[:, none]
                index = probabilities.masked_fill(is_none, -1.0).argmax(-1)
                for k, i, p in zip(chunk, index.tolist(), related.tolist()):
                    out[k] = (self.labels[i] if p > self.relation_threshold else NO_RELATION, p)
        return out

    # -- the stage -----------------------------------------------------------------------
    def forward(self, batch: list[RelateIn]) -> list[RelateOut]:
        # All sessions' pairs go through the encoder together: full batches, one pass.
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
