"""The data memlab passes around: conversations, questions, memory units, answers.

All are frozen dataclasses. Loaders (``memlab.data``) produce ``Conversation`` objects;
pipelines turn them into memory units and answer ``Query`` objects. A pipeline is never
given a ``Question``: the runner strips the gold answer, the gold category and the gold
evidence off before asking, so no pipeline can condition on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator

#: LoCoMo category codes -> names (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
#: 5 adversarial; checked against the data, some public repos swap them).
LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
#: Categories the papers average over ("overall" in metrics.json).
ANSWERABLE_CATEGORIES: tuple[str, ...] = ("multi-hop", "temporal", "open-domain", "single-hop")


@dataclass(frozen=True)
class Turn:
    """One utterance. ``id`` is LoCoMo's dia_id ("D3:7") or the source's turn id."""

    id: str
    speaker: str
    text: str
    timestamp: datetime | None = None
    image_caption: str | None = None

    def render(self) -> str:
        """The turn as a line of text, with its image described when there is one."""
        text = f"{self.speaker}: {self.text}"
        if self.image_caption:
            text += f" [shares an image: {self.image_caption}]"
        return text


@dataclass(frozen=True)
class Session:
    id: str
    timestamp: datetime | None
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """A benchmark question with its gold data. Never handed to a pipeline (see ``Query``)."""

    id: str
    conversation_id: str
    text: str
    answer: str
    category: str
    evidence: tuple[str, ...] = ()
    #: When the question is asked (LongMemEval's question_date); None for LoCoMo.
    timestamp: datetime | None = None

    def as_query(self) -> "Query":
        return Query(id=self.id, text=self.text, timestamp=self.timestamp)


@dataclass(frozen=True)
class Query:
    """What a pipeline sees of a question: its text and when it is asked, nothing gold."""

    id: str
    text: str
    timestamp: datetime | None = None


@dataclass(frozen=True)
class Conversation:
    id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...] = ()

    def turns(self) -> Iterator[tuple[Session, Turn]]:
        """Every turn in order, with the session it belongs to."""
        for session in self.sessions:
            for turn in session.turns:
                yield session, turn


@dataclass(frozen=True)
class MemoryUnit:
    """One retrievable piece of memory: a turn, a chunk, an event, an EDU ...

    ``source_ids`` is the provenance: the ids of the turns the unit was made from. It is
    what makes evidence recall exact for every pipeline, whatever its units are.
    """

    id: str
    text: str
    source_ids: tuple[str, ...]
    timestamp: datetime | None = None
    kind: str = "turn"
    speaker: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Retrieved:
    """A memory unit as ranked for one query (rank 0 is the best)."""

    unit: MemoryUnit
    score: float


@dataclass
class Trace:
    """What happened while answering one query, step by step (for debugging and reports)."""

    steps: list[dict[str, Any]] = field(default_factory=list)

    def add(self, step: str, **info: Any) -> None:
        self.steps.append({"step": step, **info})


@dataclass
class Answer:
    """A pipeline's answer to one query.

    ``retrieved`` is the ranked list the pipeline considered (for recall@k); ``context`` is
    the text actually given to the answering model (for context_tokens).
    """

    text: str
    retrieved: list[Retrieved] = field(default_factory=list)
    context: str = ""
    error: str | None = None
    trace: Trace = field(default_factory=Trace)
