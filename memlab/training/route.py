"""The routing family: a router's supervision, how it is scored, and its evaluator.

* **Supervision** (``routing_examples``): question -> LoCoMo question type (5 classes),
  retrieval intent and complexity. LoCoMo has no intent labels; they are derived by this
  documented mapping (not by a teacher model):

  - ``intent`` = ``WHEN`` for temporal questions (and for adversarial questions matching a
    ``DEFAULT_INTENT_RULES["WHEN"]`` pattern: their category says nothing of what they ask); else ``WHY`` when the question asks for a
    reason or cause (any pattern of ``memlab.stages.route.rules.DEFAULT_INTENT_RULES["WHY"]``
    matches, case-insensitively); else ``ENTITY`` (MAGMA 3.3's T_q).
  - ``complexity`` = ``HIGH`` for multi-hop and open-domain questions (aggregation or
    reasoning over several facts), ``LOW`` otherwise (single-fact lookups; SimpleMem 2.3).

* **Scores** (``evaluate_router``): question-type accuracy over categories 1-4 (4-way; a
  prediction of "adversarial" or of nothing is wrong there), 5-way accuracy over all
  questions, the confusion matrix and the time per question. A router only ever gets
  ``RouteIn(question)``: never the gold category.
* **Evaluator** (``RouterEvaluator``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import datasets

from memlab.bounds import PositiveInt
from memlab.clock import active_seconds
from memlab.data.prefix import first_questions
from memlab.stages.route import IntentRouter
from memlab.training.evaluators import SCORING_BATCH, StageEvaluator
from memlab.training.supervision import dataset_with_card
from memlab.types import ANSWERABLE_CATEGORIES, LOCOMO_CATEGORIES, Conversation, Question

#: The figures of a ``RouterEvaluator`` result early stopping can read.
RouterMetric = Literal["accuracy", "accuracy_5way"]


# -- supervision ---------------------------------------------------------------------------
#: Label names of the routing columns (stored as strings; a classifier maps them to indexes).
QUESTION_TYPE_LABELS: tuple[str, ...] = tuple(LOCOMO_CATEGORIES[c] for c in sorted(LOCOMO_CATEGORIES))


INTENT_LABELS: tuple[str, ...] = ("WHY", "WHEN", "ENTITY")


COMPLEXITY_LABELS: tuple[str, ...] = ("LOW", "HIGH")


ROUTING_FEATURES = datasets.Features(
    {
        "conversation_id": datasets.Value("string"),
        "question_id": datasets.Value("string"),
        "question": datasets.Value("string"),
        "question_type": datasets.Value("string"),
        "intent": datasets.Value("string"),
        "complexity": datasets.Value("string"),
    }
)


HIGH_COMPLEXITY_TYPES: tuple[str, ...] = ("multi-hop", "open-domain")


def question_intent(question: Question) -> str:
    """WHEN for temporal questions, WHY for reason/cause questions, else ENTITY (module docstring)."""
    from memlab.stages.route.rules import DEFAULT_INTENT_RULES

    if question.category == "temporal":
        return "WHEN"
    # An adversarial question's category says nothing about what it asks; it reads like an
    # ordinary question, so its WHEN is read from the question like the rule router does.
    if question.category == "adversarial" and any(
        re.search(p, question.text, re.IGNORECASE) for p in DEFAULT_INTENT_RULES["WHEN"]
    ):
        return "WHEN"
    if any(re.search(p, question.text, re.IGNORECASE) for p in DEFAULT_INTENT_RULES["WHY"]):
        return "WHY"
    return "ENTITY"


def question_complexity(question: Question) -> str:
    return "HIGH" if question.category in HIGH_COMPLEXITY_TYPES else "LOW"


def routing_examples(conversations: Sequence[Conversation]) -> datasets.Dataset:
    """Every question with its LoCoMo type and derived intent / complexity (module docstring)."""
    rows = []
    for conversation in conversations:
        for question in conversation.questions:
            if question.category not in LOCOMO_CATEGORIES.values():
                raise ValueError(
                    f"question {question.id}: category {question.category!r} is not a LoCoMo category "
                    f"{list(LOCOMO_CATEGORIES.values())}"
                )
            rows.append({
                "conversation_id": conversation.id, "question_id": question.id, "question": question.text,
                "question_type": question.category, "intent": question_intent(question),
                "complexity": question_complexity(question),
            })
    card = f"""memlab routing supervision (memlab.training.route.routing_examples).
Rows: one LoCoMo question. question_type: the gold LoCoMo category (5 classes, by name).
intent and complexity are DERIVED by a fixed mapping (LoCoMo has no intent labels; no teacher model):
  intent = WHEN for temporal questions (and adversarial ones matching a DEFAULT_INTENT_RULES["WHEN"] pattern);
  else WHY when a DEFAULT_INTENT_RULES["WHY"] pattern matches the question
  (reason/cause); else ENTITY (MAGMA 3.3).
  complexity = HIGH for {list(HIGH_COMPLEXITY_TYPES)}, LOW otherwise (SimpleMem 2.3).
Conversations: {[c.id for c in conversations]}. Questions: {len(rows)}."""
    return dataset_with_card(rows, ROUTING_FEATURES, card)


# -- scores --------------------------------------------------------------------------------
NO_TYPE = "none"


def predict_question_types(router: "IntentRouter", questions: Sequence[str]) -> list[str]:
    """The router's question type per question (``NO_TYPE`` when it gives none).

    A classifier with ``predict(questions) -> [{"question_type": ...}, ...]`` (``QueryRouter``)
    is asked through it; any other router through ``forward`` on ``RouteIn(question)``.
    """
    from memlab.stages.route import RouteIn

    predictions: list[str] = []
    for start in range(0, len(questions), SCORING_BATCH):
        chunk = list(questions[start:start + SCORING_BATCH])
        if callable(getattr(router, "predict", None)):
            labels = [row.get("question_type") for row in router.predict(chunk)]
        else:
            labels = [out.question_type for out in router([RouteIn(text) for text in chunk])]
        if len(labels) != len(chunk):
            raise ValueError(f"the router gave {len(labels)} predictions for {len(chunk)} questions")
        predictions.extend(NO_TYPE if label is None else str(label) for label in labels)
    return predictions


def evaluate_router(router: "IntentRouter", conversations: Sequence[Conversation]) -> dict[str, Any]:
    """Question-type accuracy (4-way over categories 1-4, and 5-way), confusion matrix, speed."""
    questions = [q for conversation in conversations for q in conversation.questions]
    if not questions:
        raise ValueError("evaluate_router: the conversations have no questions")
    started = active_seconds()
    predicted = predict_question_types(router, [q.text for q in questions])
    seconds = active_seconds() - started
    confusion: dict[str, dict[str, int]] = {}
    for question, label in zip(questions, predicted):
        row = confusion.setdefault(question.category, {})
        row[label] = row.get(label, 0) + 1
    answerable = [(q, p) for q, p in zip(questions, predicted) if q.category in ANSWERABLE_CATEGORIES]
    return {
        "accuracy": sum(q.category == p for q, p in answerable) / len(answerable) if answerable else None,
        "accuracy_5way": sum(q.category == p for q, p in zip(questions, predicted)) / len(questions),
        "confusion": confusion,
        "questions": len(questions),
        "questions_4way": len(answerable),
        "seconds_per_question": seconds / len(questions),
    }


# -- evaluator -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Questions:
    """The conversations whose questions a router is scored on."""

    conversations: tuple[Conversation, ...]


@dataclass
class RouterEvaluator(StageEvaluator[Questions]):
    """Question-type accuracy (4-way over categories 1-4, and 5-way), confusion, speed
    (``evaluate_router``); a router only ever sees the question text. ``max_questions`` keeps
    the first questions of each conversation only (a prompted router costs a call a question)."""

    family: ClassVar[type] = IntentRouter

    metric: RouterMetric = "accuracy"
    max_questions: PositiveInt | None = None

    def prepare(self, conversations: Sequence[Conversation]) -> Questions:
        return Questions(tuple(first_questions(conversations, self.max_questions)))

    def score(self, stage: Any, prepared: Questions) -> dict[str, Any]:
        return evaluate_router(stage, prepared.conversations)

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {"accuracy": (result["accuracy"], result["questions_4way"]),
                "accuracy_5way": (result["accuracy_5way"], result["questions"])}


#: The label a router's missing question type gets in the confusion matrix.
