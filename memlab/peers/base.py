"""What every peer pipeline shares: the peer's store in a folder of its own behind a gateway, the
conversation added as it happened, memlab's answer stage over what the peer finds.

Contract
--------
* ``build(history)`` opens the peer's store (``_open``: a fresh folder under ``workdir``, a
  ``ModelGateway`` serving memlab's LM and embedder, the peer's client pointed at it) and adds
  the conversation session by session, ``turns_per_add`` turns per call (``_add``), each
  dated by the session (``session_date: stamped``) or by the peer's own idea of now
  (``none``: the configured ``today``, so that prompts stay the same from run to run).
* ``retrieve(memory, query)`` is the peer's own search (``_search``), at least ``RECALL_DEPTH``
  deep; each unit carries the ids of the turns of the call that made it (its provenance).
* ``answer_many`` gives memlab's answerer the first ``top_k`` units (``_shown`` may drop some, as
  a peer's score threshold does), each as ``[day] text`` with the day the peer stored, cut to
  the answerer's context budget.
* ``release(memory)`` closes the store and removes its folder; the memory keeps what it held for
  the run's report. A memory is the peer's own store: it is not saved (``--save-memory``).
* What the peer could not use (a reply its parser rejected, a call the model refused) is a
  ``Failure`` of stage ``<peer>.add``, with the reply: one per error the peer logs (its own
  retries of a reply included), or one for an add that failed with nothing logged; a model that
  cannot be reached ends the build with its own error (``gateway.fatal``), never as a failed add.
"""

from __future__ import annotations

import logging
import os
import shutil
from abc import ABC, abstractmethod
from contextlib import contextmanager
from datetime import date, datetime, time, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

from memlab.bounds import NonNegativeInt, PositiveInt
from memlab.embed.base import Embedder
from memlab.errors import MemlabError
from memlab.lm.base import LM
from memlab.memory.base import Memory
from memlab.peers.gateway import ModelGateway
from memlab.pipelines.base import RECALL_DEPTH, Pipeline, dated_text
from memlab.pipelines.context_budget import answer_budget, fit_units
from memlab.stage import Failure
from memlab.stages.answer import Answerer, AnswerIn
from memlab.types import Answer, History, MemoryUnit, Query, Retrieved, Session, Trace, Turn


class PeerError(MemlabError, RuntimeError):
    """A peer package that is missing or set up in a way memlab cannot run faithfully."""


def peer_home(peer: str) -> Path:
    """A peer's own folder under memlab's cache folder (``$MEMLAB_CACHE``'s folder or ~/.cache/memlab)."""
    cache = os.environ.get("MEMLAB_CACHE")
    base = Path(cache).parent if cache else Path.home() / ".cache" / "memlab"
    return base / "peers" / peer


def noon(day: date) -> datetime:
    return datetime.combine(day, time(12), tzinfo=timezone.utc)


def naive_utc(moment: datetime | None) -> datetime | None:
    """A peer's time as memlab's units carry time: naive, in UTC (as the datasets' session dates)."""
    if moment is None or moment.tzinfo is None:
        return moment
    return moment.astimezone(timezone.utc).replace(tzinfo=None)


class _ErrorRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def errors_logged(logger: str) -> Iterator[list[str]]:
    """The messages of the errors ``logger`` (and its children) log meanwhile: how a peer reports a
    reply it could not use and went on without."""
    handler = _ErrorRecords()
    target = logging.getLogger(logger)
    target.addHandler(handler)
    try:
        yield handler.messages
    finally:
        target.removeHandler(handler)


class PeerMemory(Memory, ABC):
    """One conversation's store of a peer, the gateway serving it and its folder (module docstring)."""

    def __init__(self, gateway: ModelGateway, folder: Path) -> None:
        self.gateway = gateway
        self.folder = folder
        #: The memories as they were when the store was closed (the runner reports on a released memory).
        self.closed_with: list[MemoryUnit] | None = None
        #: Adds the peer could not make (``PeerPipeline.through_peer``).
        self.failed_adds = 0

    @abstractmethod
    def _listed(self) -> list[MemoryUnit]:
        """Every memory the open store holds."""

    @abstractmethod
    def _close_store(self) -> None:
        """Close the peer's store (its folder is removed after)."""

    def memories(self) -> list[MemoryUnit]:
        return list(self.closed_with) if self.closed_with is not None else self._listed()

    def close(self) -> None:
        """Close the store and remove its folder, keeping the memories for the report."""
        if self.closed_with is not None:
            return
        try:
            self.closed_with = self._listed()
            self._close_store()
        finally:
            self.closed_with = self.closed_with if self.closed_with is not None else []
            self.gateway.__exit__(None, None, None)
            shutil.rmtree(self.folder, ignore_errors=True)

    def save(self, folder: Path) -> None:
        raise PeerError(f"a {type(self).__name__} is the peer's own store, which memlab does not save (--save-memory)")


class PeerPipeline(Pipeline):
    """A peer library's memory answered by memlab's ``answerer`` (module docstring).

    ``constrain_json``: whether a JSON reply the peer asks for is decoded under a grammar, as
    llama.cpp's OpenAI-compatible server does (``memlab.peers.gateway``). ``home``: the peer's own
    folder (None: under memlab's cache folder); ``workdir``: where each conversation's store is
    made (None: the system's temporary folder).
    """

    #: The peer's name: its home folder and its failures' stage (``<peer>.add``).
    peer: str = ""
    #: The logger under which the peer reports a reply it could not use.
    peer_logger: str = ""
    query_settings = ("answerer", "top_k", "max_context_tokens", "reserve_tokens")

    def __init__(
        self,
        lm: LM,
        embedder: Embedder,
        answerer: Answerer,
        session_date: Literal["stamped", "none"] = "stamped",
        today: str = "2026-12-05",
        turns_per_add: PositiveInt = 2,
        constrain_json: bool = True,
        top_k: PositiveInt = 10,
        max_context_tokens: PositiveInt | None = None,
        reserve_tokens: NonNegativeInt = 512,
        home: str | None = None,
        workdir: str | None = None,
    ) -> None:
        super().__init__()
        self.lm = lm
        self.embedder = embedder
        self.answerer = answerer
        self.session_date = session_date
        try:
            self.today = date.fromisoformat(today)
        except ValueError:
            raise ValueError(f"today must be a date like 2026-12-05, not {today!r}") from None
        self.turns_per_add = turns_per_add
        self.constrain_json = constrain_json
        self.top_k = top_k
        self.max_context_tokens = max_context_tokens
        self.reserve_tokens = reserve_tokens
        self.home = Path(home) if home else peer_home(self.peer)
        self.workdir = workdir
        self._peer_failures: list[Failure] = []
        self._reached: dict[str, int] | None = None

    # -- what a peer implements ----------------------------------------------------------------

    @abstractmethod
    def _open(self, conversation_id: str) -> PeerMemory:
        """The peer's empty store for one conversation, its gateway open."""

    @abstractmethod
    def _add(self, memory: PeerMemory, session: Session, turns: tuple[Turn, ...]) -> None:
        """Add ``turns`` of ``session`` through the peer (``fail`` records what it could not use)."""

    @abstractmethod
    def _search(self, memory: PeerMemory, query: Query, depth: int) -> list[Retrieved]:
        """The peer's own search: ``depth`` units, best first."""

    def _shown(self, ranking: list[Retrieved]) -> list[MemoryUnit]:
        """The units of a ranking the answerer reads, before the context budget: the first ``top_k``."""
        return [r.unit for r in ranking[: self.top_k]]

    # -- shared ---------------------------------------------------------------------------------

    def added_at(self, session: Session) -> datetime:
        """The time an ``add`` of ``session`` is dated with (module docstring)."""
        if self.session_date == "stamped" and session.timestamp is not None:
            stamp = session.timestamp
            return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=timezone.utc)
        return noon(self.today)

    def fail(self, memory: PeerMemory, error: str) -> None:
        """Count one thing the peer could not use, with the reply it was given."""
        self._peer_failures.append(Failure(f"{self.peer}.add", error, memory.gateway.log.last_reply))

    def check_model(self, memory: PeerMemory, cause: BaseException | None = None) -> None:
        """Raise the model's own error when the gateway could not reach it."""
        if memory.gateway.fatal is not None:
            raise memory.gateway.fatal from cause

    def through_peer(self, memory: PeerMemory, add: Callable[[], Any]) -> Any | None:
        """``add()``, one call into the peer, with what it could not use counted (module docstring):
        each error the peer logs meanwhile is a failure (one per model reply it could not use, its
        own retries included); an exception is a failed add (None), and a failure of its own only
        where the peer logged nothing; a model that cannot be reached raises its own error."""
        result, failed = None, None
        with errors_logged(self.peer_logger) as errors:
            try:
                result = add()
            except Exception as exc:
                self.check_model(memory, exc)
                memory.failed_adds += 1
                failed = f"{type(exc).__name__}: {exc}"
        self.check_model(memory)
        for message in errors or ([failed] if failed else []):
            self.fail(memory, message)
        return result

    def build(self, history: History) -> PeerMemory:
        memory = self._open(history.id)
        reached = self._reached = {"turns": 0, "of": sum(len(session.turns) for session in history.sessions)}
        try:
            for session in history.sessions:
                for start in range(0, len(session.turns), self.turns_per_add):
                    turns = session.turns[start:start + self.turns_per_add]
                    self._add(memory, session, turns)
                    reached["turns"] += len(turns)
        except BaseException:
            memory.close()
            raise
        finally:
            self._reached = None
        return memory

    def build_reached(self) -> dict[str, int] | None:
        reached = self._reached
        return dict(reached) if reached is not None else None

    def gateway(self, max_tokens: int) -> ModelGateway:
        """An open gateway serving this pipeline's LM and embedder, each reply at most ``max_tokens``."""
        return ModelGateway(self.lm, self.embedder, max_tokens=max_tokens,
                            constrain_json=self.constrain_json).__enter__()

    def retrieve(self, memory: PeerMemory, query: Query) -> list[Retrieved]:
        ranking = self._search(memory, query, max(self.top_k, RECALL_DEPTH))
        self.check_model(memory)
        return ranking

    def answer_many(self, memory: PeerMemory, queries: list[Query]) -> list[Answer]:
        rankings = [self.retrieve(memory, query) for query in queries]
        count, budget = answer_budget(self.answerer, self.max_context_tokens, self.reserve_tokens)
        shown = [fit_units(self._shown(ranking), count, budget) for ranking in rankings]
        contexts = ["\n".join(dated_text(unit) for unit in units) for units in shown]
        outputs = self.answerer([AnswerIn(q.text, context, q.timestamp) for q, context in zip(queries, contexts)])
        answers = []
        for ranking, units, context, out in zip(rankings, shown, contexts, outputs):
            trace = Trace()
            trace.add("retrieve", mode=f"{self.peer}.search", units=[u.id for u in units])
            trace.add("answer", text=out.text, error=out.error)
            answers.append(Answer(text=out.text, retrieved=ranking, context=context, shown=len(units),
                                  error=out.error, trace=trace))
        return answers

    def answer(self, memory: PeerMemory, query: Query) -> Answer:
        return self.answer_many(memory, [query])[0]

    def release(self, memory: PeerMemory) -> None:
        memory.close()

    def _failed_calls(self) -> list[Failure]:
        return [*self._peer_failures, *super()._failed_calls()]
