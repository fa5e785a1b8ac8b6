"""mem0 (the ``mem0ai`` package) as a memlab pipeline: mem0 builds and searches its own memory, memlab answers.

What runs is mem0's own ``Memory``, unchanged: its extraction prompt and the parsing of the reply,
its hash de-duplication, its faiss store, its history database and its search. In mem0 2.x the
open-source ``add`` is one LLM call that extracts new facts (the ADD-only "additive" pipeline);
the separate ADD/UPDATE/DELETE decision call of mem0 1.x, which the SimpleMem paper's Mem0 rows
ran, is gone. mem0's BM25 and entity boosts need spaCy's ``en_core_web_sm``, which mem0 downloads
from GitHub at run time; without it (as for anyone who installs ``mem0ai`` without its ``nlp``
extra) mem0 logs one warning and searches by meaning alone, as here.

memlab supplies the parts mem0 is configured with: its model and embedder are memlab's ``LM`` and
``Embedder`` behind a loopback OpenAI-compatible gateway (``memlab.peers.gateway``), so every call
goes through memlab's response cache and usage meter; its faiss index and history database live
in a folder of their own, removed once the conversation's questions are answered; its telemetry
is off (``MEM0_TELEMETRY=False`` before mem0 is imported; an import made earlier with telemetry
on is refused), and its home folder (``MEM0_DIR``) is memlab's, not ``~/.mem0``.

The conversation goes in as it happened: each session's turns, ``turns_per_add`` at a time, as
user messages ``"Speaker: text"`` (mem0 reads only the user's side of a chat, and both LoCoMo
speakers are people), scoped to the conversation (``user_id``). Each memory carries the ids of
the turns of its ``add`` call in its metadata, which is its provenance for evidence recall.

Dates (``session_date``). mem0's extraction prompt gives the model an "Observation Date" and a
"Current Date", both today's date by mem0's clock; the open-source ``add`` refuses a timestamp
(platform only). ``stamped`` passes the session's date the two ways the package allows: as the
memories' ``created_at`` metadata, and as custom instructions of the ``add`` call naming the day
to resolve relative dates against. ``none`` adds the messages alone, as most users do, so mem0
dates every memory today (mem0 issue #3944). Either way mem0's clock reads ``today`` (a config
value: the day the row was first built) while mem0 runs, because the date it puts into its
prompts would otherwise change the prompts every day and no row could replay from the cache.

Answering: ``top_k`` memories of mem0's search whose score reaches ``threshold`` (mem0's
default 0.1), each as ``[day] memory`` with the day mem0 stored, go to memlab's answer stage;
``retrieve`` ranks at least ``RECALL_DEPTH`` memories (threshold 0) for recall@k.

Failures: each error mem0 logs while it adds (a reply that does not parse as its JSON, a store
write that failed) and each ``add`` the model refused (a prompt over the context window) is one
``Failure`` of stage ``mem0.add``, with the reply it could not use; ``stats()`` counts the adds,
those that stored nothing, the facts the model extracted, those mem0 dropped (a duplicate of a
stored memory, an item without text) and the memories stored.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, time, timezone
from pathlib import Path
from typing import Any, Iterator, Literal

from memlab.bounds import NonNegativeFloat, NonNegativeInt, PositiveInt
from memlab.dates import format_day
from memlab.embed.base import Embedder
from memlab.errors import MemlabError
from memlab.lm.base import LM
from memlab.memory.structure import span_structure
from memlab.peers.gateway import ModelGateway
from memlab.pipelines.base import RECALL_DEPTH, Pipeline, dated_text
from memlab.pipelines.context_budget import answer_budget, fit_units
from memlab.stage import Failure
from memlab.stages.answer import Answerer, AnswerIn
from memlab.types import Answer, History, MemoryUnit, Query, Retrieved, Session, Trace

SOURCE_KEY = "memlab_source_ids"
SESSION_KEY = "memlab_session"
_MAX_MEMORIES = 100_000


class PeerError(MemlabError, RuntimeError):
    """A peer package that is missing or set up in a way memlab cannot run faithfully."""


def import_mem0(home: Path) -> Any:
    """The ``mem0`` package, imported with telemetry off and ``home`` as its folder (module docstring)."""
    import sys

    if "mem0" not in sys.modules:
        os.environ["MEM0_TELEMETRY"] = "False"
        os.environ["MEM0_DIR"] = str(home)
        home.mkdir(parents=True, exist_ok=True)
    try:
        import mem0
        import mem0.memory.telemetry as telemetry
    except ImportError:
        raise PeerError("the mem0 pipeline needs the mem0ai package: pip install -e '.[peers]'") from None
    if telemetry.MEM0_TELEMETRY:
        raise PeerError("mem0 was imported with its telemetry on before memlab could turn it off: "
                        "set MEM0_TELEMETRY=False in the environment")
    return mem0


def default_home() -> Path:
    """mem0's home folder under memlab's cache folder (``$MEMLAB_CACHE``'s folder or ~/.cache/memlab)."""
    cache = os.environ.get("MEMLAB_CACHE")
    base = Path(cache).parent if cache else Path.home() / ".cache" / "memlab"
    return base / "peers" / "mem0"


@contextmanager
def clock_reading(day: date) -> Iterator[None]:
    """mem0's clock (the ``datetime`` its prompts and its memory module read) stopped at noon of ``day``."""
    import mem0.configs.prompts as prompts
    import mem0.memory.main as main

    class Stopped(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return datetime.combine(day, time(12), tzinfo=tz or timezone.utc)

    saved = prompts.datetime, main.datetime
    prompts.datetime = main.datetime = Stopped
    try:
        yield
    finally:
        prompts.datetime, main.datetime = saved


class _ErrorsLogged(logging.Handler):
    """Collects the errors mem0 logs (its own way of reporting a reply it could not use)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass
class Mem0Memory:
    """One conversation's mem0 ``Memory`` (``peer``), the gateway serving it and its folder."""

    peer: Any
    gateway: ModelGateway
    user_id: str
    folder: Path
    sessions: dict[str, str] = field(default_factory=dict)
    adds: int = 0
    empty_adds: int = 0
    failed_adds: int = 0
    facts_extracted: int = 0
    facts_stored: int = 0
    #: The memories as they were when the store was closed (the runner reports on a released memory).
    closed_with: list[MemoryUnit] | None = None

    def memories(self) -> list[MemoryUnit]:
        if self.closed_with is not None:
            return list(self.closed_with)
        listed = self.peer.get_all(filters={"user_id": self.user_id}, top_k=_MAX_MEMORIES)["results"]
        return [unit_of(item) for item in listed]

    def close(self) -> None:
        """Close mem0's store and remove its folder, keeping the memories for the report."""
        if self.closed_with is not None:
            return
        try:
            self.closed_with = self.memories()
            self.peer.close()
        finally:
            self.closed_with = self.closed_with if self.closed_with is not None else []
            self.gateway.__exit__(None, None, None)
            shutil.rmtree(self.folder, ignore_errors=True)

    def save(self, folder: Path) -> None:
        raise PeerError("a mem0 memory is mem0's own store, which memlab does not save (--save-memory)")

    def stats(self) -> dict[str, Any]:
        return {"adds": self.adds, "adds_storing_nothing": self.empty_adds, "failed_adds": self.failed_adds,
                "facts_extracted": self.facts_extracted, "facts_dropped": self.facts_extracted - self.facts_stored,
                "memories": len(self.memories()), "gateway_refused": len(self.gateway.log.refused)}

    def structure(self) -> dict[str, Any]:
        units = self.memories()
        degenerate = [] if units else ["no memory stored"]
        if self.adds and self.empty_adds / self.adds > 0.5:
            degenerate.append(f"{self.empty_adds} of {self.adds} adds stored nothing")
        return {**span_structure(units, "unit"), "degenerate": degenerate}


def facts_in(reply: str) -> int:
    """How many facts an extraction reply holds, read with mem0's own helpers (0 when it does not
    parse): what the model extracted, against which ``add``'s results show what mem0 kept."""
    from mem0.memory.utils import extract_json, remove_code_blocks

    try:
        facts = json.loads(extract_json(remove_code_blocks(reply)), strict=False).get("memory", [])
    except (ValueError, AttributeError):
        return 0
    return len(facts) if isinstance(facts, list) else 0


def unit_of(item: dict[str, Any]) -> MemoryUnit:
    """A memlab unit of one memory as mem0 returns it (search or get_all)."""
    metadata = item.get("metadata") or {}
    created = item.get("created_at")
    return MemoryUnit(
        id=str(item["id"]),
        text=str(item.get("memory", "")),
        source_ids=tuple(metadata.get(SOURCE_KEY, ())),
        timestamp=datetime.fromisoformat(created) if created else None,
        kind="mem0",
        attributes={"session": metadata.get(SESSION_KEY)},
    )


class Mem0(Pipeline):
    """mem0's ``Memory`` over one conversation, answered by memlab's ``answerer`` (module docstring).

    ``extraction_max_tokens`` and ``temperature`` are mem0's LLM settings (its defaults are 2000
    and 0.1; memlab decodes greedily, as every row). ``home``: mem0's folder (None: under
    memlab's cache folder); ``workdir``: where each conversation's store is made (None: the
    system's temporary folder).
    """

    query_settings = ("answerer", "top_k", "threshold", "max_context_tokens", "reserve_tokens")

    def __init__(
        self,
        lm: LM,
        embedder: Embedder,
        answerer: Answerer,
        session_date: Literal["stamped", "none"] = "stamped",
        today: str = "2026-12-05",
        turns_per_add: PositiveInt = 2,
        extraction_max_tokens: PositiveInt = 2000,
        temperature: NonNegativeFloat = 0.0,
        top_k: PositiveInt = 10,
        threshold: NonNegativeFloat = 0.1,
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
        self.extraction_max_tokens = extraction_max_tokens
        self.temperature = temperature
        self.top_k = top_k
        self.threshold = threshold
        self.max_context_tokens = max_context_tokens
        self.reserve_tokens = reserve_tokens
        self.home = Path(home) if home else default_home()
        self.workdir = workdir
        self._peer_failures: list[Failure] = []

    # -- building --------------------------------------------------------------------------

    def build(self, history: History) -> Mem0Memory:
        memory = self._open(history.id)
        try:
            for session in history.sessions:
                for start in range(0, len(session.turns), self.turns_per_add):
                    self._add(memory, session, session.turns[start:start + self.turns_per_add])
        except BaseException:
            memory.close()
            raise
        return memory

    def _open(self, user_id: str) -> Mem0Memory:
        mem0 = import_mem0(self.home)
        folder = Path(tempfile.mkdtemp(prefix="memlab-mem0-", dir=self.workdir))
        gateway = ModelGateway(self.lm, self.embedder, default_max_tokens=self.extraction_max_tokens).__enter__()
        try:
            peer = mem0.Memory.from_config({
                "llm": {"provider": "openai", "config": {
                    "model": self.lm.name, "api_key": "memlab", "openai_base_url": gateway.base_url,
                    "temperature": self.temperature, "max_tokens": self.extraction_max_tokens}},
                "embedder": {"provider": "huggingface", "config": {
                    "huggingface_base_url": gateway.base_url, "api_key": "memlab",
                    "embedding_dims": self.embedder.dim}},
                "vector_store": {"provider": "faiss", "config": {
                    "collection_name": "memlab", "path": str(folder / "faiss"),
                    "embedding_model_dims": self.embedder.dim}},
                "history_db_path": str(folder / "history.db"),
            })
        except BaseException:
            gateway.__exit__(None, None, None)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return Mem0Memory(peer=peer, gateway=gateway, user_id=user_id, folder=folder)

    def _add(self, memory: Mem0Memory, session: Session, turns: tuple) -> None:
        messages = [{"role": "user", "content": turn.render()} for turn in turns]
        metadata: dict[str, Any] = {SOURCE_KEY: [t.id for t in turns], SESSION_KEY: session.id}
        instructions = None
        if self.session_date == "stamped" and session.timestamp is not None:
            metadata["created_at"] = session.timestamp.replace(tzinfo=session.timestamp.tzinfo or timezone.utc).isoformat()
            day = format_day(session.timestamp)
            instructions = (f"These messages were sent on {day}. Resolve relative dates ('yesterday', "
                            f"'last week') against {day}, and write absolute dates.")
        memory.adds += 1
        errors = _ErrorsLogged()
        logger = logging.getLogger("mem0")
        logger.addHandler(errors)
        try:
            with clock_reading(self.today):
                stored = memory.peer.add(messages, user_id=memory.user_id, metadata=metadata, prompt=instructions)["results"]
        except Exception as exc:
            if memory.gateway.fatal is not None:
                raise memory.gateway.fatal from exc
            memory.failed_adds += 1
            self._peer_failures.append(Failure("mem0.add", f"{type(exc).__name__}: {exc}", memory.gateway.log.last_reply))
            return
        finally:
            logger.removeHandler(errors)
        if memory.gateway.fatal is not None:
            raise memory.gateway.fatal
        reply = memory.gateway.log.last_reply
        for message in errors.messages:
            self._peer_failures.append(Failure("mem0.add", message, reply))
        memory.facts_extracted += facts_in(reply)
        memory.facts_stored += len(stored)
        if not stored:
            memory.empty_adds += 1

    # -- answering -------------------------------------------------------------------------

    def _search(self, memory: Mem0Memory, query: Query, depth: int, threshold: float) -> list[Retrieved]:
        with clock_reading(self.today):
            found = memory.peer.search(query.text, filters={"user_id": memory.user_id}, top_k=depth,
                                       threshold=threshold)["results"]
        if memory.gateway.fatal is not None:
            raise memory.gateway.fatal
        return [Retrieved(unit_of(item), float(item.get("score") or 0.0)) for item in found]

    def retrieve(self, memory: Mem0Memory, query: Query) -> list[Retrieved]:
        return self._search(memory, query, max(self.top_k, RECALL_DEPTH), 0.0)

    def answer_many(self, memory: Mem0Memory, queries: list[Query]) -> list[Answer]:
        rankings = [self.retrieve(memory, query) for query in queries]
        count, budget = answer_budget(self.answerer, self.max_context_tokens, self.reserve_tokens)
        shown = [fit_units([r.unit for r in ranking[: self.top_k] if r.score >= self.threshold], count, budget)
                 for ranking in rankings]
        contexts = ["\n".join(dated_text(unit) for unit in units) for units in shown]
        outputs = self.answerer([AnswerIn(q.text, context, q.timestamp) for q, context in zip(queries, contexts)])
        answers = []
        for ranking, units, context, out in zip(rankings, shown, contexts, outputs):
            trace = Trace()
            trace.add("retrieve", mode="mem0.search", units=[u.id for u in units], threshold=self.threshold)
            trace.add("answer", text=out.text, error=out.error)
            answers.append(Answer(text=out.text, retrieved=ranking, context=context, shown=len(units),
                                  error=out.error, trace=trace))
        return answers

    def answer(self, memory: Mem0Memory, query: Query) -> Answer:
        return self.answer_many(memory, [query])[0]

    # -- the rest of the contract ----------------------------------------------------------

    def release(self, memory: Mem0Memory) -> None:
        memory.close()

    def failures(self) -> list[Failure]:
        return [*self._peer_failures, *super().failures()]
