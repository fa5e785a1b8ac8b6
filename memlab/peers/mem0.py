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

Answering (``memlab.peers.base``): ``top_k`` memories of mem0's search whose score reaches
``threshold`` (mem0's default 0.1), each as ``[day] memory`` with the day mem0 stored;
``retrieve`` ranks at least ``RECALL_DEPTH`` memories (threshold 0) for recall@k.

Failures: each error mem0 logs while it adds (a reply that does not parse as its JSON, a store
write that failed) and each ``add`` the model refused (a prompt over the context window) is one
``Failure`` of stage ``mem0.add``; ``stats()`` counts the adds, those that stored nothing, the
facts the model extracted, those mem0 dropped (a duplicate of a stored memory, an item without
text) and the memories stored.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Any, Iterator

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.dates import format_day
from memlab.peers.base import PeerError, PeerMemory, PeerPipeline, naive_utc, noon
from memlab.pipelines.base import extends_signature
from memlab.types import MemoryUnit, Query, Retrieved, Session, Turn

SOURCE_KEY = "memlab_source_ids"
SESSION_KEY = "memlab_session"
_MAX_MEMORIES = 100_000


def import_mem0(home: Path) -> Any:
    """The ``mem0`` package, imported with telemetry off and ``home`` as its folder (module docstring)."""
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


@contextmanager
def clock_reading(day: date) -> Iterator[None]:
    """mem0's clock (the ``datetime`` its prompts and its memory module read) stopped at noon of ``day``."""
    import mem0.configs.prompts as prompts
    import mem0.memory.main as main

    class Stopped(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return noon(day) if tz is None else noon(day).astimezone(tz)

    saved = prompts.datetime, main.datetime
    prompts.datetime = main.datetime = Stopped
    try:
        yield
    finally:
        prompts.datetime, main.datetime = saved


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
        timestamp=naive_utc(datetime.fromisoformat(created)) if created else None,
        kind="mem0",
        attributes={"session": metadata.get(SESSION_KEY)},
    )


class Mem0Memory(PeerMemory):
    """One conversation's mem0 ``Memory`` (``peer``), scoped to ``user_id``, and its counts."""

    def __init__(self, peer: Any, user_id: str, **opened: Any) -> None:
        super().__init__(**opened)
        self.peer = peer
        self.user_id = user_id
        self.adds = self.empty_adds = self.facts_extracted = self.facts_stored = 0

    def _listed(self) -> list[MemoryUnit]:
        listed = self.peer.get_all(filters={"user_id": self.user_id}, top_k=_MAX_MEMORIES)["results"]
        return [unit_of(item) for item in listed]

    def _close_store(self) -> None:
        self.peer.close()

    def stats(self) -> dict[str, Any]:
        return {"adds": self.adds, "adds_storing_nothing": self.empty_adds, "failed_adds": self.failed_adds,
                "facts_extracted": self.facts_extracted, "facts_dropped": self.facts_extracted - self.facts_stored,
                "memories": len(self.memories()), "gateway_refused": len(self.gateway.log.refused)}

    def structure(self) -> dict[str, Any]:
        from memlab.memory.structure import span_structure

        units = self.memories()
        degenerate = [] if units else ["no memory stored"]
        if self.adds and self.empty_adds / self.adds > 0.5:
            degenerate.append(f"{self.empty_adds} of {self.adds} adds stored nothing")
        return {**span_structure(units, "unit"), "degenerate": degenerate}


class Mem0(PeerPipeline):
    """mem0's ``Memory`` over one conversation, answered by memlab's ``answerer`` (module docstring).

    ``extraction_max_tokens`` and ``temperature`` are mem0's LLM settings (its defaults are 2000
    and 0.1; memlab decodes greedily, as every row); ``threshold`` is its search's (0.1).
    """

    peer = "mem0"
    peer_logger = "mem0"
    query_settings = PeerPipeline.query_settings + ("threshold",)

    @extends_signature(PeerPipeline)
    def __init__(
        self,
        *,
        extraction_max_tokens: PositiveInt = 2000,
        temperature: NonNegativeFloat = 0.0,
        threshold: NonNegativeFloat = 0.1,
        **shared: Any,
    ) -> None:
        super().__init__(**shared)
        self.extraction_max_tokens = extraction_max_tokens
        self.temperature = temperature
        self.threshold = threshold

    def _open(self, conversation_id: str) -> Mem0Memory:
        mem0 = import_mem0(self.home)
        folder = Path(tempfile.mkdtemp(prefix="memlab-mem0-", dir=self.workdir))
        gateway = self.gateway(self.extraction_max_tokens)
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
        return Mem0Memory(peer, conversation_id, gateway=gateway, folder=folder)

    def _add(self, memory: Mem0Memory, session: Session, turns: tuple[Turn, ...]) -> None:
        messages = [{"role": "user", "content": turn.render()} for turn in turns]
        metadata: dict[str, Any] = {SOURCE_KEY: [t.id for t in turns], SESSION_KEY: session.id}
        instructions = None
        if self.session_date == "stamped" and session.timestamp is not None:
            metadata["created_at"] = self.added_at(session).isoformat()
            day = format_day(session.timestamp)
            instructions = (f"These messages were sent on {day}. Resolve relative dates ('yesterday', "
                            f"'last week') against {day}, and write absolute dates.")
        memory.adds += 1

        def add() -> Any:
            with clock_reading(self.today):
                return memory.peer.add(messages, user_id=memory.user_id, metadata=metadata, prompt=instructions)

        added = self.through_peer(memory, add)
        if added is None:
            return
        stored = added["results"]
        memory.facts_extracted += facts_in(memory.gateway.log.last_reply)
        memory.facts_stored += len(stored)
        if not stored:
            memory.empty_adds += 1

    def _search(self, memory: Mem0Memory, query: Query, depth: int) -> list[Retrieved]:
        with clock_reading(self.today):
            found = memory.peer.search(query.text, filters={"user_id": memory.user_id}, top_k=depth,
                                       threshold=0.0)["results"]
        return [Retrieved(unit_of(item), float(item.get("score") or 0.0)) for item in found]

    def _shown(self, ranking: list[Retrieved]) -> list[MemoryUnit]:
        return [r.unit for r in ranking[: self.top_k] if r.score >= self.threshold]
