"""A linear router over TF-IDF features of the question's words and word pairs (issue 25).

Measured leave-one-conversation-out on the dev conversations, a TF-IDF logistic regression
generalised better than the fine-tuned MiniLM router (``QueryRouter``), which had learned its
training conversations: question types are mostly marked by their wording ("When did",
"Would ... likely"), which n-gram weights capture from few examples.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn

from memlab.bounds import PositiveInt
from memlab.stages.route.base import INTENTS, QUESTION_TYPES, ClassifierRouter
from memlab.stages.route.neural import IGNORE_INDEX
from memlab.stages.temporal import TemporalNormalizer

#: Head name -> labels. The question type is one of the four answerable types: LoCoMo's
#: adversarial questions read like ordinary ones and carry no label for that head.
DEFAULT_HEADS: dict[str, list[str]] = {
    "question_type": list(QUESTION_TYPES),
    "intent": list(INTENTS),
    "complexity": ["LOW", "HIGH"],
}
_WORD = re.compile(r"\b\w\w+\b")


def terms(text: str) -> list[str]:
    """Lower-cased words of two or more characters and each pair of adjacent words."""
    words = _WORD.findall(text.lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


def fit_vocabulary(texts: list[str], min_count: int = 1) -> tuple[list[str], list[float]]:
    """The terms of ``texts`` seen at least ``min_count`` times, sorted, with their smoothed idf."""
    documents = Counter(term for text in texts for term in set(terms(text)))
    vocabulary = sorted(term for term, count in documents.items() if count >= min_count)
    n = len(texts)
    return vocabulary, [math.log((1 + n) / (1 + documents[term])) + 1.0 for term in vocabulary]


class TfidfRouter(ClassifierRouter):
    """One linear softmax head per signal over the question's TF-IDF vector (sublinear tf, L2-normed).

    ``vocabulary`` is fitted on the training questions (``fit_vocabulary``) and saved with the
    stage's arguments; the idf values and the heads are its weights. The time window and the
    keywords come from ``query_signals`` with ``normalizer``, as for every router.
    Training API: ``features``, ``logits`` and ``loss``, as ``QueryRouter``'s.
    """

    def __init__(
        self,
        vocabulary: list[str] | None = None,
        heads: dict[str, list[str]] | None = None,
        default_intent: str = "ENTITY",
        normalizer: TemporalNormalizer | None = None,
        batch_size: PositiveInt = 256,
    ) -> None:
        super().__init__()
        if not vocabulary or len(set(vocabulary)) != len(vocabulary):
            # None only so that a recipe's stage node can leave it to the recipe, which fits it
            raise ValueError("TfidfRouter: the vocabulary must be a non-empty list of distinct terms "
                             "(fit_vocabulary; memlab train fit_tfidf_router fits it)")
        heads = DEFAULT_HEADS if heads is None else heads
        if "intent" in heads and default_intent not in heads["intent"]:
            raise ValueError(f"TfidfRouter: default_intent {default_intent!r} is not one of {heads['intent']}")
        self.vocabulary = list(vocabulary)
        self._index = {term: i for i, term in enumerate(self.vocabulary)}
        self.labels = {name: tuple(labels) for name, labels in heads.items()}
        self.default_intent = default_intent
        self.normalizer = normalizer
        self.batch_size = batch_size
        self.register_buffer("idf", torch.ones(len(self.vocabulary)))
        self.heads = nn.ModuleDict({name: nn.Linear(len(self.vocabulary), len(labels))
                                    for name, labels in self.labels.items()})

    def features(self, questions: list[str]) -> torch.Tensor:
        """``[len(questions), len(vocabulary)]``: sublinear tf x idf, each row L2-normalised."""
        rows = torch.zeros(len(questions), len(self.vocabulary))
        for row, question in enumerate(questions):
            for term, count in Counter(terms(question)).items():
                if term in self._index:
                    rows[row, self._index[term]] = 1.0 + math.log(count)
        return F.normalize(rows * self.idf, dim=-1)

    def logits(self, questions: list[str]) -> dict[str, torch.Tensor]:
        features = self.features(list(questions))
        return {name: head(features) for name, head in self.heads.items()}

    def loss(self, logits: dict[str, torch.Tensor], targets: dict[str, torch.Tensor]) -> torch.Tensor:
        """Sum over the heads in ``targets`` of the cross-entropy (``IGNORE_INDEX`` skipped)."""
        terms_ = [F.cross_entropy(logits[name], target.long(), ignore_index=IGNORE_INDEX)
                  for name, target in targets.items() if (target != IGNORE_INDEX).any()]
        if not terms_:
            raise ValueError("TfidfRouter.loss: no labelled targets")
        return torch.stack(terms_).sum()

    def predict(self, questions: list[str]) -> list[dict[str, str]]:
        """The arg-max label of every head for each question."""
        out: list[dict[str, str]] = []
        with torch.inference_mode():
            for start in range(0, len(questions), self.batch_size):
                chunk = list(questions[start:start + self.batch_size])
                best = {name: values.argmax(-1).tolist() for name, values in self.logits(chunk).items()}
                out.extend({name: self.labels[name][best[name][row]] for name in best} for row in range(len(chunk)))
        return out
