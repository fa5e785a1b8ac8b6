"""graphiti (the ``graphiti-core`` package, Zep's engine) as a memlab pipeline: graphiti builds and searches
its temporal knowledge graph, memlab answers.

What runs is graphiti's own ``Graphiti``, unchanged: ``add_episode`` (its entity extraction,
entity resolution against the graph, fact extraction, fact de-duplication and invalidation, the
facts' validity dates and the entities' summaries, each a prompt of its own) and its default
search (``Graphiti.search``: facts ranked by BM25 and cosine fused by reciprocal rank, no
cross-encoder). Its graph lives in an embedded Kuzu database in a folder of its own, removed once
the conversation's questions are answered. graphiti marks its Kuzu driver deprecated, but it is the
embedded driver that installs from the registry; its documented index call does nothing on Kuzu,
so memlab also makes the full-text indexes its search needs, with graphiti's own Kuzu operation.
Its telemetry is off (``GRAPHITI_TELEMETRY_ENABLED=false``, checked).

memlab supplies the parts graphiti is configured with: its ``OpenAIGenericClient`` (structured
output as JSON schema, which llama.cpp decodes under a grammar) and its ``OpenAIEmbedder`` reach
memlab's ``LM`` and ``Embedder`` through the loopback gateway (``memlab.peers.gateway``), so every
call goes through the response cache and the usage meter. ``max_tokens`` caps each reply at the
gateway (graphiti's generic client allows 16,384 "for local models", and its fact extraction asks
for 16,384 whatever the client says, which a looping 1.5B model fills in a quarter of an hour); its cross-encoder client is pointed at the gateway too, and the default
search never calls it.

The conversation goes in as it happened: each session's turns, ``turns_per_add`` at a time, as a
message episode (``Speaker: text`` lines, graphiti's message format), into the conversation's own
Kuzu database, in its default group (graphiti cannot add an episode with a group id on Kuzu).
``session_date: stamped`` gives each episode the session's date as its reference time, the way
graphiti is meant to be told when something was said; ``none`` gives the configured ``today``,
as a user passing the time of the call does. Each fact carries the ids of the turns of the episodes
it came from (its provenance) and is shown to the answerer with the day graphiti says it became
valid, or, where graphiti found no such day, the day it was said (the episode's reference time).

Failures: each error graphiti logs while it adds (a reply its parser rejected, once per attempt of
its own retries: greedy decoding gives a retried request the same reply), or an episode it could
not add with nothing logged (a call the model refused), is a ``Failure`` of stage ``graphiti.add``;
``stats()`` counts the episodes, those that failed, entities, facts and facts invalidated.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.peers.base import PeerError, PeerMemory, PeerPipeline, naive_utc
from memlab.pipelines.base import extends_signature
from memlab.types import MemoryUnit, Query, Retrieved, Session, Turn

TELEMETRY_VARIABLE = "GRAPHITI_TELEMETRY_ENABLED"


def import_graphiti() -> Any:
    """The ``graphiti_core`` package with its telemetry off (module docstring)."""
    os.environ[TELEMETRY_VARIABLE] = "false"
    try:
        import graphiti_core
        from graphiti_core.telemetry import telemetry
    except ImportError:
        raise PeerError("the graphiti pipeline needs graphiti-core with Kuzu: pip install -e '.[peers]'") from None
    if telemetry.is_telemetry_enabled():
        raise PeerError(f"graphiti's telemetry is still on with {TELEMETRY_VARIABLE}=false")
    return graphiti_core


class GraphitiMemory(PeerMemory):
    """One conversation's graphiti graph (``graph``), its event loop, its group and its counts."""

    def __init__(self, graph: Any, loop: asyncio.AbstractEventLoop, group_id: str, **opened: Any) -> None:
        super().__init__(**opened)
        self.graph = graph
        self.loop = loop
        self.group_id = group_id
        #: Each episode's turn ids, by episode uuid: the provenance of the facts made from it.
        self.episode_turns: dict[str, tuple[str, ...]] = {}
        self.episode_sessions: dict[str, str] = {}
        self.episodes = 0
        self._counts: dict[str, int] | None = None

    def run(self, coroutine: Any) -> Any:
        """``coroutine`` run to its end on the graph's loop. Interrupted (Ctrl-C, SIGTERM), graphiti's
        own tasks are cancelled before the interrupt goes on: left pending, they would resume in
        the next run (closing the store) and keep calling the model."""
        try:
            return self.loop.run_until_complete(coroutine)
        except BaseException:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            raise

    def unit_of(self, edge: Any) -> MemoryUnit:
        turns = tuple(dict.fromkeys(t for episode in edge.episodes for t in self.episode_turns.get(episode, ())))
        sessions = [self.episode_sessions[e] for e in edge.episodes if e in self.episode_sessions]
        return MemoryUnit(
            id=str(edge.uuid),
            text=str(edge.fact),
            source_ids=turns,
            timestamp=naive_utc(edge.valid_at or edge.reference_time),
            kind="graphiti_fact",
            attributes={"session": sessions[0] if sessions else None,
                        "invalid_at": edge.invalid_at.isoformat() if edge.invalid_at else None},
        )

    def _edges(self) -> list[Any]:
        from graphiti_core.edges import EntityEdge
        from graphiti_core.errors import GroupsEdgesNotFoundError

        try:
            return self.run(EntityEdge.get_by_group_ids(self.graph.driver, [self.group_id]))
        except GroupsEdgesNotFoundError:
            return []

    def _listed(self) -> list[MemoryUnit]:
        return [self.unit_of(edge) for edge in self._edges()]

    def counts(self) -> dict[str, int]:
        if self._counts is not None:
            return dict(self._counts)
        from graphiti_core.nodes import EntityNode

        edges = self._edges()
        entities = self.run(EntityNode.get_by_group_ids(self.graph.driver, [self.group_id]))
        return {"entities": len(entities), "facts": len(edges),
                "facts_invalidated": sum(1 for e in edges if e.invalid_at is not None or e.expired_at is not None)}

    def _close_store(self) -> None:
        try:
            self._counts = self.counts()
            self.run(self.graph.close())
        finally:
            self.loop.close()

    def stats(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "failed_episodes": self.failed_adds, **self.counts(),
                "gateway_refused": len(self.gateway.log.refused)}

    def structure(self) -> dict[str, Any]:
        from memlab.memory.structure import span_structure

        units = self.memories()
        counts = self.counts()
        degenerate = [] if units else ["no fact formed"]
        if not counts["entities"]:
            degenerate.append("no entity formed")
        return {**span_structure(units, "fact"), **counts, "degenerate": degenerate}


class Graphiti(PeerPipeline):
    """graphiti's temporal knowledge graph over one conversation, answered by memlab's ``answerer``
    (module docstring). ``temperature`` is its LLM client's (graphiti's default 1.0 with OpenAI;
    memlab decodes greedily, as every row); ``max_tokens`` caps each reply."""

    peer = "graphiti"
    peer_logger = "graphiti_core"

    @extends_signature(PeerPipeline)
    def __init__(
        self,
        *,
        max_tokens: PositiveInt = 2048,
        temperature: NonNegativeFloat = 0.0,
        **shared: Any,
    ) -> None:
        super().__init__(**shared)
        self.max_tokens = max_tokens
        self.temperature = temperature

    def _open(self, conversation_id: str) -> GraphitiMemory:
        import_graphiti()
        from graphiti_core import Graphiti as GraphitiCore
        from graphiti_core.cross_encoder.openai_reranker_client import OpenAIRerankerClient
        from graphiti_core.driver.kuzu_driver import KuzuDriver
        from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig
        from graphiti_core.llm_client.config import LLMConfig
        from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient

        folder = Path(tempfile.mkdtemp(prefix="memlab-graphiti-", dir=self.workdir))
        gateway = self.gateway(self.max_tokens)
        loop = asyncio.new_event_loop()
        try:
            llm = LLMConfig(api_key="memlab", model=self.lm.name, small_model=self.lm.name, base_url=gateway.base_url,
                            temperature=self.temperature, max_tokens=self.max_tokens)
            graph = GraphitiCore(
                graph_driver=KuzuDriver(db=str(folder / "graph.kuzu")),
                llm_client=OpenAIGenericClient(config=llm, max_tokens=self.max_tokens),
                embedder=OpenAIEmbedder(OpenAIEmbedderConfig(
                    api_key="memlab", base_url=gateway.base_url, embedding_model="memlab",
                    embedding_dim=self.embedder.dim)),
                cross_encoder=OpenAIRerankerClient(config=llm),
            )
            loop.run_until_complete(graph.build_indices_and_constraints())
            # graphiti 0.31.2's documented call above is a no-op on Kuzu, whose full-text indexes its
            # maintenance operations create; without them the default search fails (a Kuzu binder error).
            loop.run_until_complete(graph.driver.graph_ops.build_indices_and_constraints(graph.driver))
        except BaseException:
            loop.close()
            gateway.__exit__(None, None, None)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        # One Kuzu database per conversation is its partition: graphiti 0.31.2 cannot add an episode
        # with a group id on Kuzu (its request scoping reads a database name KuzuDriver never sets),
        # so episodes go to the default group, which is then the conversation's.
        from graphiti_core.helpers import get_default_group_id

        return GraphitiMemory(graph, loop, get_default_group_id(graph.driver.provider), gateway=gateway, folder=folder)

    def _add(self, memory: GraphitiMemory, session: Session, turns: tuple[Turn, ...]) -> None:
        from graphiti_core.nodes import EpisodeType

        memory.episodes += 1
        added = self.through_peer(memory, lambda: memory.run(memory.graph.add_episode(
            name=f"{session.id} {turns[0].id}",
            episode_body="\n".join(turn.render() for turn in turns),
            source_description="chat messages",
            reference_time=self.added_at(session),
            source=EpisodeType.message,
        )))
        if added is None:
            return
        memory.episode_turns[added.episode.uuid] = tuple(t.id for t in turns)
        memory.episode_sessions[added.episode.uuid] = session.id

    def _search(self, memory: GraphitiMemory, query: Query, depth: int) -> list[Retrieved]:
        edges = memory.run(memory.graph.search(query.text, num_results=depth))
        # graphiti returns its ranking without scores (reciprocal-rank fusion): the rank stands for one.
        return [Retrieved(memory.unit_of(edge), 1.0 / (1 + rank)) for rank, edge in enumerate(edges)]
