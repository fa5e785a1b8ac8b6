"""The data memlab passes around: conversations, questions, memory units, answers.

All are frozen dataclasses. Loaders (``memlab.data``) produce ``Conversation`` objects: the
history (sessions of turns) and the gold questions. A pipeline is given neither a
``Conversation`` nor a ``Question``: it builds its memory from ``Conversation.history()`` (the
sessions only) and answers ``Question.as_query()`` (the text and date only), so no pipeline
can condition on a gold answer, category or evidence.

Ids a pipeline sees carry no label either. Loaders number sessions and turns by position
(``session_3``, ``D3:7``: LoCoMo's own scheme, applied to every dataset, since LongMemEval's
source ids name the evidence sessions ``answer_…``), and a history's or a query's id is an
opaque digest of the source id (``opaque_id``), which for LongMemEval marks abstention
questions with ``_abs``. The source ids stay on the gold side (``Conversation.id``,
``Question.id``), where selection and reports need them.
"""

from __future__ import annotations

import hashlib
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
class AuditedGold:
    """An audit's correction of one question's gold (``memlab.data.errata``): the answer and
    evidence the audit holds right, and the kind of error it found (``WRONG_CITATION`` keeps
    the answer and changes only the evidence)."""

    answer: str
    evidence: tuple[str, ...]
    error_type: str


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
    #: The audited gold where an errata file corrects this question (None: the gold stands);
    #: ``answer`` and ``evidence`` stay the original, comparable with the papers.
    audited: AuditedGold | None = None

    def as_query(self) -> "Query":
        """What a pipeline is asked: the text and date under an opaque id."""
        return Query(id=opaque_id("q", self.id), text=self.text, timestamp=self.timestamp)


@dataclass(frozen=True)
class Query:
    """What a pipeline sees of a question: its text and when it is asked, nothing gold."""

    id: str
    text: str
    timestamp: datetime | None = None


def opaque_id(prefix: str, source_id: str) -> str:
    """A stable id that tells nothing about ``source_id`` (``prefix`` + 12 hex digits of its digest)."""
    return f"{prefix}{hashlib.sha256(source_id.encode()).hexdigest()[:12]}"


def _turns(sessions: tuple[Session, ...]) -> Iterator[tuple[Session, Turn]]:
    for session in sessions:
        for turn in session.turns:
            yield session, turn


@dataclass(frozen=True)
class History:
    """What a pipeline builds its memory from: a conversation's sessions, no questions.

    ``id`` is opaque (``Conversation.history``); session and turn ids are positional.
    """

    id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]

    def turns(self) -> Iterator[tuple[Session, Turn]]:
        """Every turn in order, with the session it belongs to."""
        return _turns(self.sessions)


@dataclass(frozen=True)
class SessionEvent:
    """An event in a speaker's life that a session tells of (LoCoMo's ``event_summary``)."""

    speaker: str
    text: str


@dataclass(frozen=True)
class Observation:
    """An atomic fact about a speaker, with the ids of the turns it was read from."""

    speaker: str
    text: str
    source_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class SessionAnnotation:
    """The dataset's own notes on one session: gold-side supervision for training recipes.

    Contract: annotations live on ``Conversation.annotations`` only; ``History`` and ``Query``
    never carry them, so no pipeline can read them. ``session_id`` and every
    ``Observation.source_ids`` entry are ids of that conversation's sessions and turns after
    ``memlab.data.anonymise`` (``session_3``, ``D3:7``), remapped with them. ``date`` is the
    day the dataset dates the events on (None when it gives none); ``events``,
    ``observations`` and ``summary`` are empty when the dataset has none for the session.
    """

    session_id: str
    date: datetime | None = None
    events: tuple[SessionEvent, ...] = ()
    observations: tuple[Observation, ...] = ()
    summary: str = ""


@dataclass(frozen=True)
class Conversation:
    """A benchmark conversation: its history, its gold questions and the dataset's session
    annotations. ``id`` is the source's (``conv-26``, a LongMemEval question id); pipelines
    get ``history()``, which carries the sessions only."""

    id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...] = ()
    #: Gold side, for training recipes only (LoCoMo's event summaries, observations and
    #: session summaries), in session order, one per annotated session; empty when the
    #: dataset has none (LongMemEval). ``history()`` never copies it (see ``SessionAnnotation``).
    annotations: tuple[SessionAnnotation, ...] = ()

    def turns(self) -> Iterator[tuple[Session, Turn]]:
        """Every turn in order, with the session it belongs to."""
        return _turns(self.sessions)

    def history(self) -> History:
        """The sessions under an opaque id: all a pipeline may build from."""
        return History(id=opaque_id("c", self.id), speakers=self.speakers, sessions=self.sessions)


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

    @property
    def session(self) -> str | None:
        """The session the unit was made in (``attributes["session"]``, set by every segmenter)."""
        return self.attributes.get("session")


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
    the text actually given to the answering model (for context_tokens); ``shown``, when the
    pipeline says, how many of ``retrieved`` (a prefix) that text holds (for recall@context).
    """

    text: str
    retrieved: list[Retrieved] = field(default_factory=list)
    context: str = ""
    shown: int | None = None
    error: str | None = None
    trace: Trace = field(default_factory=Trace)
