"""Prompted synthesizer: embedding clusters within a session, then one LLM call per cluster.

How "related" is decided (the paper leaves it open): the session's units are embedded and
clustered greedily in extraction order with **complete link** — a unit may join a cluster
only if its cosine similarity to *every* member is at least ``threshold`` and the cluster
has fewer than ``max_cluster`` units; of the clusters it may join it takes the one whose
weakest link to it is strongest (the earliest on a tie), otherwise it starts a new cluster.
Why complete link: single link chained unrelated facts (A~B and B~C put A and C in one
merge although A and C are unrelated), and average link still lets a close pair carry an
unrelated third fragment into a merge; a false merge loses facts, a missed merge only
leaves two entries, so the strict criterion is the safe one. Clusters of one unit
are committed as they are. A cluster whose fragments all say the same thing (identical
text, e.g. the same fact from two overlapping windows) is merged without a call. Any other
cluster gets one call on ``prompt`` (section 2.2, written), which returns a consolidated
statement, replacing the fragments, and optionally an abstract, kept beside it. When the
call fails the fragments are committed unmerged (no information is lost) and the failure
is counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from memlab.bounds import NonNegativeFloat, PositiveInt, Range
from memlab.dates import format_day
from memlab.embed.base import Embedder
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.synthesize.base import SynthesizeIn, SynthesizeOut, Synthesizer, merged_unit
from memlab.types import MemoryUnit

SCHEMA = object_schema({"consolidated": {"type": "string"}, "abstract": {"type": "string"}})


@dataclass(frozen=True)
class Cluster:
    """Related fragments of one session (the unit of one synthesis call)."""

    item: SynthesizeIn
    index: int
    fragments: tuple[MemoryUnit, ...]


@dataclass(frozen=True)
class Merge:
    consolidated: MemoryUnit | None
    abstract: MemoryUnit | None
    fragments: tuple[MemoryUnit, ...]


def complete_link_clusters(vectors: np.ndarray, threshold: float, max_cluster: int) -> list[list[int]]:
    """Greedy complete-link clustering of unit vectors in input order (see the module docstring)."""
    clusters: list[list[int]] = []
    similarity = vectors @ vectors.T if len(vectors) else np.zeros((0, 0))
    for i in range(len(vectors)):
        best, best_link = None, threshold
        for cluster in clusters:
            weakest = float(similarity[i, cluster].min())
            if len(cluster) < max_cluster and weakest >= best_link and (best is None or weakest > best_link):
                best, best_link = cluster, weakest
        if best is None:
            clusters.append([i])
        else:
            best.append(i)
    return clusters


class PromptedSynthesizer(PromptedStage, Synthesizer):
    """See the module docstring. ``embedder`` should be the memory's embedder (one encoder)."""

    def __init__(
        self,
        lm: LM,
        embedder: Embedder,
        prompt: str = "simplemem/synthesize",
        threshold: Annotated[float, Range(0, 1, open_min=True)] = 0.7,
        max_cluster: Annotated[int, Range(min=2)] = 5,
        max_tokens: PositiveInt = 200,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.embedder = embedder
        self.prompt = load_prompt(prompt)
        self.threshold = threshold
        self.max_cluster = max_cluster

    def clusters(self, item: SynthesizeIn) -> list[Cluster]:
        if not item.units:
            return []
        vectors = np.asarray(self.embedder.encode([u.text for u in item.units]), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        groups = complete_link_clusters(vectors, self.threshold, self.max_cluster)
        return [Cluster(item, k, tuple(item.units[i] for i in group)) for k, group in enumerate(groups)]

    def forward(self, batch: list[SynthesizeIn]) -> list[SynthesizeOut]:  # type: ignore[override]
        clusters = [cluster for item in batch for cluster in self.clusters(item)]
        needs_call = [c for c in clusters if len({f.text.casefold() for f in c.fragments}) > 1]
        merges = dict(zip((id(c) for c in needs_call), PromptedStage.forward(self, needs_call)))  # type: ignore[arg-type]
        outputs: dict[int, tuple[list[MemoryUnit], list[MemoryUnit]]] = {id(item): ([], []) for item in batch}
        for cluster in clusters:
            units, abstracts = outputs[id(cluster.item)]
            if len(cluster.fragments) == 1:
                units.append(cluster.fragments[0])
                continue
            merge = merges.get(id(cluster)) or self.identical(cluster)
            if merge.consolidated is None:
                units.extend(merge.fragments)
            else:
                units.append(merge.consolidated)
            if merge.abstract is not None:
                abstracts.append(merge.abstract)
        return [SynthesizeOut(units=tuple(outputs[id(i)][0]), abstracts=tuple(outputs[id(i)][1])) for i in batch]

    # -- one cluster -------------------------------------------------------------------------
    def unit_id(self, cluster: Cluster, suffix: str) -> str:
        return f"{cluster.item.conversation_id}/{cluster.item.session_id}/{suffix}{cluster.index}"

    def consolidated(self, cluster: Cluster, text: str) -> MemoryUnit:
        unit = merged_unit(self.unit_id(cluster, "syn"), text, cluster.fragments)
        unit.attributes["merged_from"] = [f.id for f in cluster.fragments]
        return unit

    def identical(self, cluster: Cluster) -> Merge:
        return Merge(self.consolidated(cluster, cluster.fragments[0].text), None, cluster.fragments)

    def render(self, cluster: Cluster) -> ChatRequest:  # type: ignore[override]
        time = cluster.item.session_time
        fragments = "\n".join(f"- {f.text}" for f in cluster.fragments)
        text = self.prompt.render(session_time=format_day(time) if time else "an unknown date", fragments=fragments)
        return self.request(text, json_schema=SCHEMA)

    def parse(self, text: str, cluster: Cluster) -> Merge:  # type: ignore[override]
        data = parse_json(text, SCHEMA)
        consolidated = " ".join(str(data["consolidated"]).split())
        if not consolidated:
            raise ParseError("empty consolidated entry")
        entry = self.consolidated(cluster, consolidated)
        abstract_text = " ".join(str(data["abstract"]).split())
        abstract = None
        if abstract_text and abstract_text.casefold() != consolidated.casefold():
            abstract = merged_unit(self.unit_id(cluster, "abs"), abstract_text, cluster.fragments, kind="abstract")
            abstract.attributes["summarises"] = [entry.id]
        return Merge(entry, abstract, cluster.fragments)

    def fallback(self, cluster: Cluster, error: str) -> Merge:  # type: ignore[override]
        return Merge(None, None, cluster.fragments)
