"""Mnemis: dual-route retrieval on a base graph and a hierarchy of categories.

Base graph ingestion (section 2.1; ``build``), session by session. A session is cut into
**episodes** of ``turns_per_episode`` consecutive turns; each episode is read with the
``context_episodes`` episodes before it as context.

1. Extraction, one batch per session (it depends on the text alone): the ``entity_extractor``
   names the episode's entities, then a reflection pass finds names it missed; the
   ``fact_extractor`` writes facts between those names, then a reflection pass
   (``construction.reflection: false`` skips both reflections).
2. Integration, episode by episode, in order: each name is resolved onto an existing entity
   (the same name, or a name embedding with cosine >= ``entity_threshold``: full-text plus
   name-embedding de-duplication) or becomes a new one, and gets its episodic edge; the
   ``describer`` updates the episode's entities' summaries and tags (one call); each fact is a
   duplicate of an existing fact between the same two entities (the same text or cosine >=
   ``fact_threshold``: the old edge records the episode) or a new edge, ``valid_at`` its own
   resolved date or else the episode's; then the ``contradiction_detector`` is shown the new
   facts beside the valid facts that could conflict with one of them (one call): facts on the
   same pair of entities, or on one of its entities with a similar predicate (the fact less its
   two entity names, cosine >= ``predicate_similarity``), the ``invalidation_candidates`` most
   similar ones. The paper does not say which edges are compared; a small model shown topic
   neighbours "finds" contradictions among them ("went to a support group" closed by "is keen
   on counseling"). Each fact it closes is closed at the episode's date (``invalid_at``) with
   the new fact that ended it and the quoted words (``invalidated_by``, ``contradiction``).

Dates are resolved in code (the fact extractor's temporal normaliser). Without a
``contradiction_detector`` no fact is ever closed.

Hierarchical graph (2.2; ``mnemis_hierarchy``) over all entities: rebuilt after every
``rebuild_every`` sessions and always at the end of the build, before any question (0: only
at the end). Values the paper leaves open are settings: ``compression_ratio``, ``max_layers``,
``category_batch`` and ``category_cluster`` (the most similar nodes packed together into a
batch; null: batches of one cluster each).

Retrieval (2.3; ``mnemis_search``): ``system1`` and ``system2`` switch the routes, the
``reranker`` orders their union per type (none: System-1's RRF order), ``top_k`` is k (Table
9) and ``context`` lists the types the answerer is shown (Table 4's "RAG": episodes; "Graph":
entities and facts). The ``answerer`` reads the unified context.

A configuration that reads episodes alone (System-1 only, ``search.context: [episodes]``: Table 4's
"System-1 RAG") builds the episodes alone: the graph it would never read costs no call, and its
structure block says so (no entities, no facts).

Settings are grouped by the phase that reads them (``mnemis.settings``): ``construction``,
``hierarchy`` and ``search`` (``search.top_k=30``, ``search.system2=false``).

``retrieve`` ranks what the answerer was shown, episodes then facts, then the question's
dense episode ranking (so recall@k is defined to ``RECALL_DEPTH``). Entities and categories are
left out of that ranking: an entity's provenance is every episode naming it (a speaker's covers
the conversation), which would make recall@k meaningless.
"""

from __future__ import annotations

from datetime import datetime, time

import numpy as np

from memlab.embed.base import Embedder
from memlab.pipelines.base import RECALL_DEPTH, Pipeline
from memlab.pipelines.mnemis.hierarchy import build_hierarchy
from memlab.pipelines.mnemis.memory import MnemisMemory
from memlab.pipelines.mnemis.search import (
    TYPES,
    Candidates,
    Descent,
    context_text,
    global_selection,
    ranked,
    system1,
    system2,
)
from memlab.pipelines.mnemis.settings import ConstructionSettings, HierarchySettings, SearchSettings
from memlab.stages.answer import Answerer, AnswerIn
from memlab.stages.categorize import Categorizer
from memlab.stages.contradict import ContradictIn, ContradictionDetector
from memlab.stages.describe import DescribeIn, EntityDescriber
from memlab.stages.entity import EntityExtractor, EntityIn
from memlab.stages.extraction import find_name
from memlab.stages.fact import Fact, FactExtractor, FactIn
from memlab.stages.global_select import GlobalSelector
from memlab.stages.rerank import Reranker
from memlab.types import Answer, History, MemoryUnit, Query, Retrieved, Session, Trace


class Mnemis(Pipeline):
    """The Mnemis pipeline (module docstring); every stage is a swappable slot."""

    query_settings = ("answerer", "global_selector", "reranker", "search")

    def __init__(
        self,
        embedder: Embedder,
        entity_extractor: EntityExtractor,
        describer: EntityDescriber,
        fact_extractor: FactExtractor,
        answerer: Answerer,
        contradiction_detector: ContradictionDetector | None = None,
        categorizer: Categorizer | None = None,
        global_selector: GlobalSelector | None = None,
        reranker: Reranker | None = None,
        construction: ConstructionSettings = ConstructionSettings(),
        hierarchy: HierarchySettings = HierarchySettings(),
        search: SearchSettings = SearchSettings(),
    ) -> None:
        super().__init__()
        if search.system2 and (categorizer is None or global_selector is None):
            raise ValueError("Mnemis: search.system2=true needs a categorizer and a global_selector "
                             "(or set search.system2: false)")
        if not (search.system1 or search.system2):
            raise ValueError("Mnemis: at least one of search.system1 and search.system2 must be on")
        unknown = [kind for kind in search.context if kind not in TYPES]
        if unknown or not search.context:
            raise ValueError(f"Mnemis: search.context lists types among {list(TYPES)}, got {list(search.context)}")
        self.embedder = embedder
        self.entity_extractor = entity_extractor
        self.describer = describer
        self.fact_extractor = fact_extractor
        self.contradiction_detector = contradiction_detector
        self.categorizer = categorizer if search.system2 else None
        self.global_selector = global_selector if search.system2 else None
        self.reranker = reranker
        self.answerer = answerer
        self.construction = construction
        self.hierarchy = hierarchy
        self.search_settings = search
        self.reads_graph = search.system2 or set(search.context) != {"episodes"}

    def built_parts(self) -> dict[str, bool]:
        """An episodes-only search builds no graph, and one without System-2 no hierarchy: a memory
        saved without them must not serve a search that reads them."""
        return {"graph": self.reads_graph, "hierarchy": self.categorizer is not None}

    # -- base graph ----------------------------------------------------------------------
    def load_memory(self, folder):
        return MnemisMemory.load(folder, self.embedder)

    def memory_structure(self, memory: MnemisMemory) -> dict:
        """The memory's shape; a pipeline that builds a hierarchy (System-2) but got no category
        over enough entities to fill two (``compression_ratio`` each) is degenerate: System-2
        then selects among the bare entities."""
        structure = memory.structure()
        enough = structure["entities"] >= 2 * self.hierarchy.compression_ratio
        if self.categorizer is not None and enough and not structure["layers"]:
            structure["degenerate"].append("no category above the entities")
        return structure

    def build(self, history: History) -> MnemisMemory:
        memory = MnemisMemory(self.embedder)
        sessions = [s for s in history.sessions if s.turns]
        for n, session in enumerate(sessions, start=1):
            self.ingest(memory, session)
            if self.hierarchy.rebuild_every and n % self.hierarchy.rebuild_every == 0 and n < len(sessions):
                self.build_hierarchy(memory)
        self.build_hierarchy(memory)
        return memory

    def build_hierarchy(self, memory: MnemisMemory) -> None:
        if self.categorizer is not None:
            settings = self.hierarchy
            report = build_hierarchy(memory, self.categorizer, ratio=settings.compression_ratio,
                                     max_layers=settings.max_layers, batch_size=settings.category_batch,
                                     cluster_size=settings.category_cluster)
            memory.counts["hierarchy_builds"] += 1
            memory.counts["dissolved_categories"] += report.dissolved
            memory.counts["rejected_category_replies"] += report.rejected_replies

    def episodes(self, session: Session) -> list[MemoryUnit]:
        size = self.construction.turns_per_episode
        return [MemoryUnit(f"episode:{session.id}:{i // size}", "\n".join(t.render() for t in turns),
                           tuple(t.id for t in turns), session.timestamp, "episode")
                for i in range(0, len(session.turns), size) for turns in [session.turns[i:i + size]]]

    def ingest(self, memory: MnemisMemory, session: Session) -> None:
        """One session: extraction for all its episodes, then integration in order (module docstring)."""
        episodes = self.episodes(session)
        if not self.reads_graph:
            for episode in episodes:
                memory.add_episode(episode)
            return
        texts = [e.text for e in memory.episodes.units.values()] + [e.text for e in episodes]
        offset = len(texts) - len(episodes)
        before = self.construction.context_episodes
        contexts = [tuple(texts[max(0, offset + i - before):offset + i]) for i in range(len(episodes))]
        names = self.extract_names(episodes, contexts)
        facts = self.extract_facts(episodes, contexts, names, session.timestamp)
        for episode, episode_names, episode_facts in zip(episodes, names, facts):
            self.integrate(memory, episode, episode_names, episode_facts)

    def extract_names(self, episodes: list[MemoryUnit], contexts: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
        outs = self.entity_extractor([EntityIn(e.text, c) for e, c in zip(episodes, contexts)])
        names = [out.names for out in outs]
        if self.construction.reflection:
            more = self.entity_extractor([EntityIn(e.text, c, n) for e, c, n in zip(episodes, contexts, names)])
            names = [n + out.names for n, out in zip(names, more)]
        return names

    def extract_facts(self, episodes: list[MemoryUnit], contexts: list[tuple[str, ...]],
                      names: list[tuple[str, ...]], reference: datetime | None) -> list[tuple[Fact, ...]]:
        items = [FactIn(e.text, n, c, reference=reference) for e, c, n in zip(episodes, contexts, names)]
        facts = [out.facts for out in self.fact_extractor(items)]
        if self.construction.reflection:
            again = self.fact_extractor([FactIn(i.episode, i.entities, i.context, f, i.reference)
                                         for i, f in zip(items, facts)])
            facts = [f + out.facts for f, out in zip(facts, again)]
        return facts

    def integrate(self, memory: MnemisMemory, episode: MemoryUnit, names: tuple[str, ...],
                  facts: tuple[Fact, ...]) -> None:
        memory.add_episode(episode)
        entity_of = {name: memory.resolve(name, self.construction.entity_threshold) for name in names}
        fresh = [name for name, entity_id in entity_of.items() if entity_id is None]
        entity_of.update(zip(fresh, memory.add_entities(fresh)))
        memory.counts["resolved_mentions"] += len(names) - len(fresh)
        for entity_id in entity_of.values():
            memory.mention(entity_id, episode.id)
        described = list(dict.fromkeys(entity_of.values()))
        item = DescribeIn(episode.text, tuple(memory.graph.node(e)["name"] for e in described),
                          tuple(memory.graph.node(e)["summary"] for e in described))
        out = self.describer([item])[0]
        memory.describe([(e, d.summary, d.tags) for e, d in zip(described, out.descriptions)])
        new = self.add_facts(memory, episode, facts, entity_of)
        self.invalidate(memory, episode, new)

    def add_facts(self, memory: MnemisMemory, episode: MemoryUnit, facts: tuple[Fact, ...],
                  entity_of: dict[str, str]) -> list[str]:
        """The episode's facts as edges (duplicates recorded on the existing edge); the new ids."""
        if not facts:
            return []
        vectors = self.embedder.encode([f.text for f in facts])
        new: list[str] = []
        for fact, vector in zip(facts, vectors):
            source = entity_of[find_name(fact.source, entity_of)]
            target = entity_of[find_name(fact.target, entity_of)]
            duplicate = self.duplicate_of(memory, fact.text, vector, source, target)
            if duplicate is not None:
                memory.seen_again(duplicate, episode.id)
                continue
            valid_at = datetime.combine(fact.valid_at, time()) if fact.valid_at else episode.timestamp
            new.append(memory.add_fact(source, target, fact.text, valid_at, episode.id))
        return new

    def duplicate_of(self, memory: MnemisMemory, text: str, vector: np.ndarray, source: str, target: str) -> str | None:
        between = [f for f in memory.facts_of([source])
                   if {memory.facts.get(f).attributes["source"], memory.facts.get(f).attributes["target"]}
                   == {source, target}]
        for fact_id in between:
            if memory.facts.get(fact_id).text.casefold() == text.casefold():
                return fact_id
        if between:
            sims = memory.facts.vectors(between) @ vector
            best = int(np.argmax(sims))
            if sims[best] >= self.construction.fact_threshold:
                return between[best]
        return None

    def invalidate(self, memory: MnemisMemory, episode: MemoryUnit, new: list[str]) -> None:
        """2.1's fact invalidation for the episode's new facts (module docstring)."""
        if self.contradiction_detector is None or not new or not self.construction.invalidation_candidates:
            return
        candidates = self.invalidation_candidates_of(memory, new)
        if not candidates:
            return
        rejected = self.contradiction_detector.rejected_replies
        out = self.contradiction_detector([ContradictIn(tuple(memory.facts.get(f).text for f in new),
                                                        tuple(memory.facts.get(f).text for f in candidates))])[0]
        memory.counts["rejected_invalidation_replies"] += self.contradiction_detector.rejected_replies - rejected
        for closing in out.closings:
            memory.invalidate(candidates[closing.existing], episode.timestamp, by=new[closing.new],
                              quote=closing.quote)

    def invalidation_candidates_of(self, memory: MnemisMemory, new: list[str]) -> list[str]:
        """The valid facts that could conflict with a new one (module docstring), most similar first."""
        ends = {f: memory.fact_ends(f) for f in new}
        existing = [f for f in memory.facts_of({e for pair in ends.values() for e in pair})
                    if f not in ends and memory.fact_edge(f)["invalid_at"] is None]
        if not existing:
            return []
        predicates = self.embedder.encode([memory.predicate(f) for f in existing + new])
        old_predicates, new_predicates = predicates[:len(existing)], predicates[len(existing):]
        predicate_sims = old_predicates @ new_predicates.T
        fact_sims = memory.facts.vectors(existing) @ memory.facts.vectors(new).T
        score: dict[str, float] = {}
        for i, fact_id in enumerate(existing):
            pair = memory.fact_ends(fact_id)
            for j, new_id in enumerate(new):
                shared = set(pair) & set(ends[new_id])
                similar = predicate_sims[i, j] >= self.construction.predicate_similarity
                if shared and (set(pair) == set(ends[new_id]) or similar):
                    score[fact_id] = max(score.get(fact_id, -1.0), float(fact_sims[i, j]))
        return sorted(score, key=lambda f: -score[f])[:self.construction.invalidation_candidates]

    # -- retrieval -----------------------------------------------------------------------
    def search(self, memory: MnemisMemory, query: Query) -> tuple[Candidates, list[Retrieved], Trace]:
        trace, settings = Trace(), self.search_settings
        first = system1(memory, query.text, settings.top_k) if settings.system1 else Candidates()
        second, descent = Candidates(), Descent()
        if self.global_selector is not None:
            descent = global_selection(memory, self.global_selector, query.text, settings.selection_batch)
            second = system2(memory, descent)
        chosen = ranked(memory, query.text, first, second, settings.top_k, self.reranker, settings.max_candidates,
                        self.embedder)
        trace.add("retrieve", system1={k: len(first.of(k)) for k in TYPES},
                  system2={k: len(second.of(k)) for k in TYPES},
                  selection_calls=descent.calls, selection_levels=descent.levels,
                  selected=[memory.key_of[n] for n in descent.categories + descent.entities][:50],
                  selection_errors=len(descent.errors))
        return chosen, self.ranking(memory, query, chosen), trace

    def ranking(self, memory: MnemisMemory, query: Query, chosen: Candidates) -> list[Retrieved]:
        shown = [memory.episodes.get(i) for i in chosen.episodes if "episodes" in self.search_settings.context]
        shown += [memory.facts.get(i) for i in chosen.facts if "facts" in self.search_settings.context]
        ranking = [Retrieved(unit, 1.0 / (rank + 1)) for rank, unit in enumerate(shown)]
        seen = {unit.id for unit in shown}
        dense = memory.episodes.search_dense(query.text, k=RECALL_DEPTH) if len(memory.episodes) else []
        return ranking + [hit for hit in dense if hit.unit.id not in seen]

    def retrieve(self, memory: MnemisMemory, query: Query) -> list[Retrieved]:
        return self.search(memory, query)[1]

    def answer(self, memory: MnemisMemory, query: Query) -> Answer:
        chosen, ranking, trace = self.search(memory, query)
        context = context_text(memory, chosen, self.search_settings.context)
        out = self.answerer([AnswerIn(query.text, context, query.timestamp)])[0]
        trace.add("answer", text=out.text, error=out.error)
        return Answer(text=out.text, retrieved=ranking, context=context, error=out.error, trace=trace)
