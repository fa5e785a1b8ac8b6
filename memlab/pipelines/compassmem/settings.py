"""CompassMem's settings, grouped by the phase that reads them (the stages are the pipeline's own
arguments). In a config each group is a mapping of the fields it changes: ``search: {top_k: 3}``,
or ``search.top_k=3`` on the command line; the others keep the defaults below (appendix B.2 where
the paper gives one).
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.bounds import NonNegativeInt, PositiveInt, UnitFloat
from memlab.components import SettingsGroup


@dataclass(frozen=True)
class ConstructionSettings(SettingsGroup):
    """How ``build`` makes the logic map (section 4.2).

    ``edges``: relation edges (Eq. 5; false: the relation extractor is not called).
    ``use_topics``: the topic layer and cluster selection. ``merge_threshold`` (B.2: 0.9) bounds a
    merge into e*; ``fusion_neighbours``: the earlier events each new one is compared with.
    ``topic_threshold`` / ``recluster_every`` (T = 4) / ``seed``: the topic layer's assignment,
    its k-means period and seed (``compassmem.topics``)."""

    edges: bool = True
    use_topics: bool = True
    merge_threshold: UnitFloat = 0.9
    fusion_neighbours: PositiveInt = 1
    topic_threshold: UnitFloat = 0.9
    recluster_every: PositiveInt = 4
    seed: int = 0


@dataclass(frozen=True)
class SearchSettings(SettingsGroup):
    """How a question searches the map (section 4.3; ``compassmem.search``): a memory built once
    serves any of these (``Pipeline.query_settings``).

    ``top_k`` (Figure 6's k): the initial dense top-k; ``topic_clusters`` (p), ``topic_depth``,
    ``cluster_candidates`` and ``per_cluster``: cluster selection over the topic layer;
    ``explorers`` share one queue, each at most ``max_steps`` steps, up to ``max_kept`` kept
    events and ``max_next`` neighbours expanded a step; ``refinement_rounds`` of the query when
    subgoals stay unsatisfied."""

    top_k: PositiveInt = 5
    topic_clusters: NonNegativeInt = 5
    topic_depth: PositiveInt = 50
    cluster_candidates: PositiveInt = 5
    per_cluster: PositiveInt = 3
    explorers: PositiveInt = 3
    max_steps: PositiveInt = 6
    max_kept: PositiveInt = 12
    max_next: PositiveInt = 3
    refinement_rounds: NonNegativeInt = 1
