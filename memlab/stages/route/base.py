"""Route family: a question -> the control signals that steer retrieval (MAGMA 3.3, stage 1).

A router decomposes a question into an **intent** (which edge types a traversal favours;
MAGMA's T_q in {WHY, WHEN, ENTITY}), an optional **question type** (a LoCoMo-style label,
used only to pick the answer prompt's dynamic instruction, MAGMA appendix C.2), a **time
window** (the question's time expressions resolved to absolute dates by the rule temporal
normaliser) and **keywords** for lexical matching.

Contract
--------
* ``RouteIn.reference`` is the time relative expressions are resolved against (the question
  date, or the latest time in memory when the question has none); without it there is no
  time window.
* ``RouteOut.intent`` is one of the router's ``intents``; ``question_type`` is one of its
  ``question_types`` or ``None``. ``complexity`` is SimpleMem's retrieval complexity
  (section 2.3: ``"LOW"`` for a single-fact lookup, ``"HIGH"`` for a question that needs
  several memories combined), or ``None`` from routers that do not estimate it. A router
  never sees a gold category.
* Implementations: ``RuleRouter`` (keyword patterns), ``PromptedRouter`` (a local or served
  LLM, JSON-schema constrained), ``QueryRouter`` (a trainable encoder with one classifier
  head per signal). Each fills the time window and keywords with ``query_signals``, the
  window by its injected ``normalizer`` (a ``TemporalNormalizer``; without one, no window).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from memlab.memory.index import tokenize
from memlab.stage import Stage
from memlab.stages.temporal import TemporalIn, TemporalNormalizer

#: MAGMA's intents (3.3, T_q).
INTENTS: tuple[str, ...] = ("WHY", "WHEN", "ENTITY")
#: LoCoMo-style question types, each with a dynamic instruction in the answer prompt (C.2).
QUESTION_TYPES: tuple[str, ...] = ("multi-hop", "temporal", "open-domain", "single-hop")


@dataclass(frozen=True)
class RouteIn:
    question: str
    reference: datetime | date | None = None


@dataclass(frozen=True)
class RouteOut:
    intent: str
    question_type: str | None = None
    #: Inclusive absolute date range named by the question, if any.
    time_window: tuple[date, date] | None = None
    keywords: tuple[str, ...] = ()
    error: str | None = None
    #: SimpleMem's retrieval complexity (2.3), "LOW" / "HIGH", or None when not estimated.
    complexity: str | None = None


class IntentRouter(Stage[RouteIn, RouteOut]):
    """Base class of the route family (``In = RouteIn``, ``Out = RouteOut``)."""

    In = RouteIn
    Out = RouteOut


class ClassifierRouter(IntentRouter):
    """A router that classifies the question with one head per label set (``self.labels``:
    head name -> its labels, in weight order) and routes by ``route_from_labels``; subclasses
    set ``labels``, ``default_intent`` and ``normalizer`` and implement ``predict``."""

    def predict(self, questions: list[str]) -> list[dict[str, str]]:
        """The arg-max label of every head for each question."""
        raise NotImplementedError

    @property
    def init_kwargs(self) -> dict[str, Any]:
        # The resolved labels: the saved weights' class order must not depend on what a
        # default says when the checkpoint is loaded.
        return {**super().init_kwargs, "heads": {name: list(labels) for name, labels in self.labels.items()}}

    @property
    def intents(self) -> tuple[str, ...]:
        return self.labels.get("intent", (self.default_intent,))

    def forward(self, batch: list[RouteIn]) -> list[RouteOut]:
        return [route_from_labels(item, labels, self.normalizer, self.default_intent)
                for item, labels in zip(batch, self.predict([item.question for item in batch]))]


_QUESTION_WORDS = frozenset(
    "what when where who whom whose which why how did does do is are was were has have had the a an of to in on "
    "for with and or at by about from as that this it its be been being would could should will can may might "
    "any some there their they them he she his her i you your me my we our us".split()
)


def query_signals(
    item: RouteIn, normalizer: TemporalNormalizer | None
) -> tuple[tuple[date, date] | None, tuple[str, ...]]:
    """The question's time window (union of its time expressions as ``normalizer`` resolves
    them; None without a normalizer or a reference) and keywords."""
    window = None
    if item.reference is not None and normalizer is not None:
        mentions = normalizer.run_one(TemporalIn(item.question, item.reference)).mentions
        if mentions:
            window = (min(m.start for m in mentions), max(m.end for m in mentions))
    words = [w for w in re.findall(r"[A-Za-z0-9']+", item.question) if w.lower() not in _QUESTION_WORDS]
    keywords = tuple(dict.fromkeys(w for w in words if tokenize(w)))
    return window, keywords


def route_from_labels(item: RouteIn, labels: dict[str, str], normalizer: TemporalNormalizer | None,
                      default_intent: str) -> RouteOut:
    """A classifier router's output: its predicted heads' labels (``intent``, ``question_type``,
    ``complexity``; a type that is no answer-prompt type routes as None) and the question's
    time window and keywords from ``query_signals``."""
    window, keywords = query_signals(item, normalizer)
    question_type = labels.get("question_type")
    return RouteOut(intent=labels.get("intent", default_intent),
                    question_type=question_type if question_type in QUESTION_TYPES else None,
                    time_window=window, keywords=keywords, complexity=labels.get("complexity"))
