"""Mnemis's settings, grouped by the phase that reads them (the stages are the pipeline's own
arguments). In a config each group is a mapping of the fields it changes: ``search: {top_k: 30}``,
or ``search.top_k=30`` on the command line (Table 9's k); the others keep the defaults below.
Values the paper leaves open are settings here, with the defaults memlab chose.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.bounds import NonNegativeInt, PositiveInt, UnitFloat
from memlab.components import SettingsGroup
from memlab.pipelines.mnemis.search import TYPES


@dataclass(frozen=True)
class ConstructionSettings(SettingsGroup):
    """How ``build`` makes the base graph (section 2.1).

    Episodes of ``turns_per_episode`` turns, each read with the ``context_episodes`` before it;
    ``reflection``: the extractors' second pass for missed names and facts. A name joins an entity
    at cosine >= ``entity_threshold``, a fact duplicates one at >= ``fact_threshold``; the
    contradiction detector sees the ``invalidation_candidates`` most similar valid facts that
    share an entity and a predicate at >= ``predicate_similarity``."""

    turns_per_episode: PositiveInt = 4
    context_episodes: NonNegativeInt = 2
    reflection: bool = True
    entity_threshold: UnitFloat = 0.9
    fact_threshold: UnitFloat = 0.9
    invalidation_candidates: NonNegativeInt = 6
    predicate_similarity: UnitFloat = 0.35


@dataclass(frozen=True)
class HierarchySettings(SettingsGroup):
    """How the category hierarchy is built (section 2.2; ``mnemis.hierarchy``): each layer about
    ``compression_ratio`` times smaller than the one below, at most ``max_layers``, categorised in
    batches of ``category_batch`` nodes packing the ``category_cluster`` most similar together
    (null: one cluster a batch), rebuilt after every ``rebuild_every`` sessions (0: at the end only)."""

    compression_ratio: PositiveInt = 2
    max_layers: PositiveInt = 4
    category_batch: PositiveInt = 40
    category_cluster: PositiveInt | None = 8
    rebuild_every: NonNegativeInt = 0


@dataclass(frozen=True)
class SearchSettings(SettingsGroup):
    """How a question is answered (section 2.3; ``mnemis.search``): a memory built once serves any
    of these (``Pipeline.query_settings``).

    ``system1`` / ``system2`` switch the routes; ``top_k`` is Table 9's k; ``context`` lists the
    types the answerer is shown (Table 4: episodes for "RAG", entities and facts for "Graph");
    System-2 asks the selector about ``selection_batch`` nodes a call, and the reranker sees at
    most ``max_candidates`` a type."""

    system1: bool = True
    system2: bool = True
    context: tuple[str, ...] = TYPES
    top_k: PositiveInt = 10
    selection_batch: PositiveInt = 40
    max_candidates: PositiveInt = 60
