"""Trainable router: a ``TextEncoder`` over the question + one linear classifier head per signal."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.bounds import PositiveInt
from memlab.stages.encoder import EncoderStage, TextEncoder
from memlab.stages.route.base import INTENTS, ClassifierRouter
from memlab.stages.temporal import TemporalNormalizer

#: Head name -> class labels. "adversarial" (LoCoMo's unanswerable category) is learnable but
#: is no answer-prompt type, so it routes as ``question_type=None``.
DEFAULT_HEADS: dict[str, list[str]] = {
    "question_type": ["multi-hop", "temporal", "open-domain", "single-hop", "adversarial"],
    "intent": ["WHY", "WHEN", "ENTITY"],
    "complexity": ["LOW", "HIGH"],
}
#: Class index that ``loss`` skips (a question with no label for that head).
IGNORE_INDEX = -100


class QueryRouter(EncoderStage, ClassifierRouter):
    """Predicts each head's label from the question text alone (never a gold category).

    ``forward`` reads the ``intent``, ``question_type`` and ``complexity`` heads when present;
    a missing ``intent`` head gives ``default_intent``, a missing other head ``None``. The
    time window and keywords come from ``query_signals`` with ``normalizer``. Weights load on first use and a
    LoRA checkpoint holds the adapter and the heads only (see ``memlab.stages.encoder``).

    Training API: ``logits`` (differentiable, one ``[batch, n_labels]`` tensor per head) and
    ``loss`` (sum over the heads given of the cross-entropy, ``IGNORE_INDEX`` skipped).
    """

    def __init__(
        self,
        encoder: TextEncoder,
        heads: dict[str, list[str]] | None = None,
        batch_size: PositiveInt = 64,
        device: str = "cpu",
        default_intent: str = "ENTITY",
        normalizer: TemporalNormalizer | None = None,
    ) -> None:
        super().__init__()
        heads = DEFAULT_HEADS if heads is None else heads
        if not isinstance(heads, dict) or not heads:
            raise ValueError("QueryRouter: heads must be a non-empty mapping of head name -> labels")
        for name, labels in heads.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"QueryRouter: head name {name!r} must be an identifier")
            if not isinstance(labels, (list, tuple)) or len(labels) < 2 or len(set(labels)) != len(labels):
                raise ValueError(f"QueryRouter: head {name!r} needs at least two distinct labels, got {labels!r}")
        if "intent" in heads and not set(heads["intent"]) <= set(INTENTS):
            raise ValueError(f"QueryRouter: intent labels {heads['intent']} must be among {INTENTS}")
        if "intent" in heads and default_intent not in heads["intent"]:
            raise ValueError(f"QueryRouter: default_intent {default_intent!r} is not one of {heads['intent']}")
        self.labels = {name: tuple(labels) for name, labels in heads.items()}
        self.encoder = encoder
        self.batch_size = batch_size
        self.device = device
        self.default_intent = default_intent
        self.normalizer = normalizer
        self.heads: nn.ModuleDict | None = None

    def _build_heads(self, hidden_size: int) -> None:
        self.heads = nn.ModuleDict({name: nn.Linear(hidden_size, len(labels)) for name, labels in self.labels.items()})

    def logits(self, questions: list[str]) -> dict[str, torch.Tensor]:
        """``{head: [len(questions), n_labels]}``; differentiable."""
        if isinstance(questions, str):
            raise TypeError("QueryRouter.logits takes a list of questions, got a single str")
        self.warm_up()
        pooled = self.encoder(list(questions))
        return {name: head(pooled) for name, head in self.heads.items()}

    def loss(self, logits: dict[str, torch.Tensor], targets: dict[str, torch.Tensor]) -> torch.Tensor:
        """Sum of the cross-entropies of the heads in ``targets`` (class indices, -100 ignored)."""
        unknown = sorted(set(targets) - set(logits))
        if unknown:
            raise ValueError(f"QueryRouter.loss: targets for unknown heads {unknown} (heads: {sorted(logits)})")
        if not targets:
            raise ValueError("QueryRouter.loss: no targets given")
        total = None
        for name, target in targets.items():
            target = target.to(logits[name].device, torch.long)
            if (target != IGNORE_INDEX).any():
                term = F.cross_entropy(logits[name], target, ignore_index=IGNORE_INDEX)
            else:  # an all-ignored head adds nothing (cross_entropy would give NaN)
                term = logits[name].sum() * 0.0
            total = term if total is None else total + term
        return total

    def predict(self, questions: list[str]) -> list[dict[str, str]]:
        """The arg-max label of every head for each question."""
        out: list[dict[str, str]] = []
        with self.inference():
            for start in range(0, len(questions), self.batch_size):
                chunk = self.logits(list(questions[start:start + self.batch_size]))
                best = {name: values.argmax(-1).tolist() for name, values in chunk.items()}
                for row in range(len(questions[start:start + self.batch_size])):
                    out.append({name: self.labels[name][best[name][row]] for name in best})
        return out
