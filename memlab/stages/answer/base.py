"""Answer family: a question and the memory context chosen for it -> a short answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memlab.stage import Stage


@dataclass(frozen=True)
class AnswerIn:
    question: str
    #: The memory text given to the model (already selected and rendered by the pipeline).
    context: str
    #: When the question is asked, if known (LongMemEval gives it; LoCoMo does not).
    question_date: datetime | None = None


@dataclass(frozen=True)
class AnswerOut:
    text: str
    #: The model's reasoning, for answerers that reason before answering (kept for traces).
    reasoning: str = ""
    error: str | None = None


class Answerer(Stage[AnswerIn, AnswerOut]):
    """Base class of the answer family (``In = AnswerIn``, ``Out = AnswerOut``)."""

    In = AnswerIn
    Out = AnswerOut
