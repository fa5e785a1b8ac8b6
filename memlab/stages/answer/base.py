"""Answer family: a question and the memory chosen for it -> a short answer.

``AnswerIn`` is the one way a pipeline gives an answerer more than the memory text: typed
optional fields, declared here once, that an answerer with a place for them in its prompt
reads and any other answerer ignores. They carry only what the pipeline itself derived
(a router's question type, never the gold category).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import visible_text
from memlab.stage import Stage

#: How an abstract is marked where abstracts and entries share one memory text.
ABSTRACT_MARK = "[ABSTRACT] "


@dataclass(frozen=True)
class AnswerIn:
    question: str
    #: The detailed memory entries given to the model, rendered by the pipeline, one per line.
    context: str
    #: When the question is asked, if known (LongMemEval gives it; LoCoMo does not).
    question_date: datetime | None = None
    #: Higher-level memory shown apart from the entries (SimpleMem's abstract representations).
    abstracts: tuple[str, ...] = ()
    #: The pipeline's own question type (MAGMA's router; a key of the answerer's instructions).
    question_type: str | None = None
    #: Constraints the pipeline derived for the question, as a clause ("the question concerns
    #: 1 May 2023 to 7 May 2023"); "" for none.
    constraints: str = ""

    def memory_text(self) -> str:
        """All the memory as one text, for answerers whose prompt has a single memory slot."""
        return "\n".join(part for part in (join_context(list(self.abstracts), []), self.context) if part)


def join_context(abstracts: list[str], entries: list[str]) -> str:
    """One line per entry, abstracts (marked with ``ABSTRACT_MARK``) first: ``memory_text`` of
    ``AnswerIn(context=join_context([], entries), abstracts=abstracts)``."""
    lines = [ABSTRACT_MARK + " ".join(a.split()) for a in abstracts]
    return "\n".join(lines + [" ".join(e.split()) for e in entries])


def split_context(text: str) -> tuple[list[str], list[str]]:
    """Inverse of ``join_context``: ``(abstracts, entries)`` of a memory text read back (from a
    run's predictions, say)."""
    abstracts, entries = [], []
    for line in text.splitlines():
        if line.startswith(ABSTRACT_MARK):
            abstracts.append(line[len(ABSTRACT_MARK):])
        elif line.strip():
            entries.append(line)
    return abstracts, entries


# "Answer:" / "FINAL ANSWER:" labels small models echo from the template, at the start.
_ANSWER_LABEL = re.compile(r"^(?:(?:final\s+)?answer\s*:\s*)+", re.IGNORECASE)


def clean_answer(text: str) -> str:
    """The answer in an answerer's completion, read the same way by every prompted answerer: the
    reply's visible text (``visible_text``: no reasoning block, chat special token, BOM ...)
    without a leading "Answer:" label. ``ParseError`` when no answer is left, or when the reply
    is only an unclosed reasoning block, so the stage retries and then counts the failure."""
    answer = _ANSWER_LABEL.sub("", visible_text(text).strip()).strip()
    if not answer:
        raise ParseError("empty answer")
    return answer


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
