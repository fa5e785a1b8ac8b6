"""CompassMem's active multi-path search (section 4.3): planner, explorers, refinement.

One ``Search`` per query, run by ``explore``:

1. **Plan** (Eq. 7): the subgoal planner gives 2-5 subgoals and the satisfaction vector s
   starts at zeros. Without a planner (the "w/o subgoals" ablation) the question itself is
   the one subgoal.
2. **Localise** (4.3.2): the dense top ``top_k`` events go to the node selector; walking down
   the dense ranking (to ``topic_depth``), the first ``topic_clusters`` distinct topics each
   offer their ``cluster_candidates`` events most similar to the query to the cluster selector
   (one call, at most ``per_cluster`` per topic). The selected events start the search.
3. **Explore** (Eq. 9-11): ``explorers`` explorers share the visited set, the evidence and s,
   and one queue ordered by p(u) = max over unsatisfied subgoals of cos(v(s_u), v(h_j)) (all
   subgoals once every one is satisfied), recomputed as s changes. The explorers run as
   synchronous ticks: at each tick every active explorer takes the best node left in the
   queue, the navigator decides for all of them in one batch (concurrent requests on a
   served model), and the decisions are applied in explorer order. This is a faithful
   interleaving of the paper's parallel explorers that is also deterministic (a threaded run
   would order queue updates by timing, so two runs could differ) and costs nothing on a
   local model that serves one request at a time anyway. SKIP drops the node, EXPAND keeps
   it and queues the chosen neighbours, ANSWER keeps it and stops that explorer; each kept
   node records the subgoals it supports. A round ends when the queue is empty, no explorer
   is active (each answered or took ``max_steps`` steps), or ``max_kept`` nodes are kept.
4. **Refine** (Eq. 8): a round that ends with unsatisfied subgoals, while refinement rounds
   are left (``refinement_rounds``, 1 in B.2), asks the refiner for a new query aimed at them
   and localises and explores again with fresh explorers.
5. The evidence is the kept nodes; when none was kept, the initial top-k (4.3.3).

``max_steps`` and ``max_kept`` are budgets the paper leaves open (its appendix Table 4: 7.5
steps and 3.15 kept nodes per question on average, at most 11 steps on a path and 14 kept).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from memlab.embed.base import Embedder
from memlab.pipelines.compassmem.memory import EventMemory
from memlab.pipelines.compassmem.settings import SearchSettings
from memlab.stages.navigate import NavigateIn, NavigateOut, Navigator
from memlab.stages.refine import QueryRefiner, RefineIn
from memlab.stages.select import Candidate, NodeSelector, SelectIn
from memlab.stages.subgoal import SubgoalIn, SubgoalPlanner
from memlab.types import Query, Trace


class Searcher(Protocol):
    """What the search reads of its pipeline (``CompassMem``): the stages and the settings."""

    embedder: Embedder
    planner: SubgoalPlanner | None
    refiner: QueryRefiner | None
    selector: NodeSelector | None
    cluster_selector: NodeSelector | None
    navigator: Navigator
    search_settings: SearchSettings


@dataclass
class Explorer:
    steps: int = 0
    active: bool = True


@dataclass
class Search:
    """The state one query's search shares between its explorers, and what it found."""

    query: Query
    subgoals: tuple[str, ...]
    satisfied: list[bool]
    subgoal_vectors: np.ndarray
    visited: set[str] = field(default_factory=set)
    kept: dict[str, tuple[int, ...]] = field(default_factory=dict)
    queue: list[str] = field(default_factory=list)
    initial: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    path_lengths: list[int] = field(default_factory=list)
    actions: Counter = field(default_factory=Counter)
    max_queue: int = 0
    refinements: int = 0
    trace: Trace = field(default_factory=Trace)

    def stats(self) -> dict[str, object]:
        """The per-question search statistics of the paper's appendix Table 4."""
        done = sum(self.satisfied)
        return {
            "subgoals": len(self.subgoals), "satisfied_subgoals": done,
            "satisfaction": done / len(self.subgoals), "fully_satisfied": done == len(self.subgoals),
            "initial_nodes": self.starts[0] if self.starts else 0, "paths": sum(1 for n in self.path_lengths if n),
            "steps": sum(self.path_lengths), "path_lengths": [n for n in self.path_lengths if n],
            "actions": dict(self.actions), "max_queue": self.max_queue, "refinements": self.refinements,
            "kept": len(self.kept),
        }


def explore(pipeline: Searcher, memory: EventMemory, query: Query) -> Search:
    """Run the search of the module docstring for ``query``; returns its state (evidence = ``kept``)."""
    subgoals = (query.text,)
    if pipeline.planner is not None:
        plan = pipeline.planner([SubgoalIn(query.text, query.timestamp)])[0]
        subgoals = plan.subgoals or subgoals
        pipeline_trace = {"subgoals": list(subgoals), "error": plan.error}
    else:
        pipeline_trace = {"subgoals": list(subgoals), "error": None}
    search = Search(query, subgoals, [False] * len(subgoals), pipeline.embedder.encode_queries(list(subgoals)))
    search.trace.add("plan", **pipeline_trace)
    text = query.text
    for round_ in range(pipeline.search_settings.refinement_rounds + 1):
        if round_:
            out = pipeline.refiner([RefineIn(query.text, subgoals, tuple(search.satisfied),
                                             tuple(memory.unit(i).text for i in search.kept))])[0]
            text = out.query
            search.refinements += 1
            search.trace.add("refine", query=text, targets=list(out.targets), error=out.error)
        localise(pipeline, memory, search, text, first=round_ == 0)
        run_explorers(pipeline, memory, search)
        if all(search.satisfied) or len(search.kept) >= pipeline.search_settings.max_kept or pipeline.refiner is None:
            break
    return search


def localise(pipeline: Searcher, memory: EventMemory, search: Search, text: str, first: bool) -> None:
    """Step 2: the starting nodes of a round, queued."""
    depth = max(pipeline.search_settings.top_k, pipeline.search_settings.topic_depth if memory.topics is not None else 0)
    ranking = memory.index.search_dense(text, k=depth)
    top = [(hit.unit.id, hit.score) for hit in ranking[: pipeline.search_settings.top_k]]
    if first:
        search.initial = [event_id for event_id, _ in top]
    requests: list[tuple[object, SelectIn]] = []
    group = tuple(Candidate(memory.view(i), s) for i, s in top)
    if group:
        requests.append((pipeline.selector, SelectIn(text, (group,), search.subgoals, per_group=pipeline.search_settings.top_k,
                                                      limit=pipeline.search_settings.top_k)))
    clusters = topic_groups(pipeline, memory, ranking)
    if clusters:
        requests.append((pipeline.cluster_selector, SelectIn(text, clusters, search.subgoals,
                                                              per_group=pipeline.search_settings.per_cluster,
                                                              limit=pipeline.search_settings.per_cluster * len(clusters))))
    starts: list[str] = []
    for selector, item in requests:
        if selector is None:  # no LLM selection: every candidate starts
            keys = [c.view.key for g in item.groups for c in g]
        else:
            out = selector([item])[0]
            keys = list(out.selected)
            search.trace.add("select", candidates=[c.view.key for g in item.groups for c in g], selected=keys,
                             error=out.error)
        starts += [memory.id_of[k] for k in keys]
    fresh = [i for i in dict.fromkeys(starts) if i not in search.visited and i not in search.queue]
    search.queue += fresh
    search.starts.append(len(fresh))
    search.max_queue = max(search.max_queue, len(search.queue))


def topic_groups(pipeline: Searcher, memory: EventMemory, ranking) -> tuple[tuple[Candidate, ...], ...]:
    """The first ``topic_clusters`` distinct topics down the ranking, each with its members most
    similar to the query (the ranking's scores; members below it are not offered)."""
    if memory.topics is None or pipeline.search_settings.topic_clusters == 0:
        return ()
    score = {hit.unit.id: hit.score for hit in ranking}
    topics: list[int] = []
    for hit in ranking:
        topic = memory.topic_of(hit.unit.id)
        if topic is not None and topic not in topics:
            topics.append(topic)
        if len(topics) == pipeline.search_settings.topic_clusters:
            break
    groups = []
    for topic in topics:
        members = sorted((i for i in memory.topics.members(topic) if i in score), key=lambda i: -score[i])
        groups.append(tuple(Candidate(memory.view(i), score[i]) for i in members[: pipeline.search_settings.cluster_candidates]))
    return tuple(g for g in groups if g)


def priority(search: Search, vectors: np.ndarray) -> np.ndarray:
    """Eq. 11 for each row of ``vectors``: max cosine to an unsatisfied subgoal (to any when all are)."""
    open_goals = [i for i, done in enumerate(search.satisfied) if not done] or list(range(len(search.subgoals)))
    return (vectors @ search.subgoal_vectors[open_goals].T).max(1)


def run_explorers(pipeline: Searcher, memory: EventMemory, search: Search) -> None:
    """Step 3: one round of the shared-queue exploration."""
    explorers = [Explorer() for _ in range(pipeline.search_settings.explorers)]
    search.path_lengths += [0] * len(explorers)
    first = len(search.path_lengths) - len(explorers)
    while search.queue and len(search.kept) < pipeline.search_settings.max_kept:
        active = [n for n, e in enumerate(explorers) if e.active and e.steps < pipeline.search_settings.max_steps]
        if not active:
            break
        taken: list[tuple[int, str]] = []
        for n in active:
            if not search.queue:
                break
            scores = priority(search, memory.index.vectors(search.queue))
            node = search.queue.pop(int(scores.argmax()))
            search.visited.add(node)
            taken.append((n, node))
        items = [NavigateIn(search.query.text, search.subgoals, tuple(search.satisfied), memory.view(node),
                            tuple(memory.neighbours(node)), tuple(memory.view(k) for k in search.kept),
                            pipeline.search_settings.max_next) for _, node in taken]
        for (n, node), out in zip(taken, pipeline.navigator(items)):
            apply_decision(memory, search, explorers[n], node, out, pipeline.search_settings.max_kept)
            search.path_lengths[first + n] += 1
        search.max_queue = max(search.max_queue, len(search.queue))


def apply_decision(memory: EventMemory, search: Search, explorer: Explorer, node: str, out: NavigateOut,
                   max_kept: int) -> None:
    """Eq. 10 and the queue update for one explorer's decision at ``node``."""
    explorer.steps += 1
    search.actions[out.action] += 1
    if out.keeps and len(search.kept) < max_kept:
        search.kept[node] = out.satisfied
        for goal in out.satisfied:
            search.satisfied[goal] = True
    if out.action == "ANSWER":
        explorer.active = False
    for key in out.next_nodes:
        neighbour = memory.id_of[key]
        if neighbour not in search.visited and neighbour not in search.queue:
            search.queue.append(neighbour)
    search.trace.add("navigate", node=memory.key_of[node], action=out.action, next=list(out.next_nodes),
                     satisfied=list(out.satisfied), error=out.error)


def table4_statistics(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The appendix Table 4 figures over questions (each one's ``Search.stats()``): mean search
    steps (the explorers' summed path lengths), the share of questions refined at least once,
    mean events kept, mean initial nodes, mean subgoal satisfaction and the share of questions
    fully satisfied, and the actions taken in all. The paper reports about 7-9 steps, 70-83% of
    questions refined and 2-4 events kept a question."""
    n = len(stats)
    if not n:
        return {}

    def mean(key: str) -> float:
        return round(sum(float(s[key]) for s in stats) / n, 3)

    actions: Counter = Counter()
    for s in stats:
        actions.update(s["actions"])
    return {"questions": n, "mean_steps": mean("steps"),
            "refined_share": round(sum(s["refinements"] > 0 for s in stats) / n, 3), "mean_kept": mean("kept"),
            "mean_initial_nodes": mean("initial_nodes"), "mean_satisfaction": mean("satisfaction"),
            "fully_satisfied_share": round(sum(bool(s["fully_satisfied"]) for s in stats) / n, 3),
            "actions": dict(actions)}


def run_search_statistics(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Table 4's figures (``table4_statistics``) over a run's predictions, each answer's trace
    holding its ``search`` step, with what the paper's table reads beside them: time per
    question, subgoals, paths and their lengths, the action mix, the queue and kept-node spread."""
    import statistics

    found = [(row, step) for row in rows for step in (row.get("trace") or []) if step.get("step") == "search"]
    if not found:
        raise ValueError("no question of this run has a CompassMem search step in its trace")
    stats = [step for _, step in found]
    times = [row["latency_s"] for row, _ in found if row.get("latency_s") is not None]
    paths = [n for s in stats for n in s["path_lengths"]]
    table4 = table4_statistics(stats)
    total = sum(table4["actions"].values())
    return {
        **table4,
        "time_mean_s": statistics.fmean(times) if times else None,
        "time_median_s": statistics.median(times) if times else None,
        "subgoals_mean": statistics.fmean(s["subgoals"] for s in stats),
        "paths_mean": statistics.fmean(s["paths"] for s in stats),
        "path_length_mean": statistics.fmean(paths) if paths else 0.0, "path_length_max": max(paths, default=0),
        "action_share": {a: table4["actions"].get(a, 0) / total if total else 0.0 for a in ("EXPAND", "SKIP", "ANSWER")},
        "max_queue_mean": statistics.fmean(s["max_queue"] for s in stats),
        "kept_max": max(s["kept"] for s in stats), "no_kept": sum(s["kept"] == 0 for s in stats),
    }


def search_statistics_table(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """A markdown table of ``run_search_statistics`` results, one row per named run."""
    lines = ["| run | questions | subgoals | satisfied | fully | paths | steps | path len (max) | EXPAND / SKIP / ANSWER "
             "| refined | kept (max) | none kept |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in runs:
        share = s["action_share"]
        lines.append(
            f"| {name} | {s['questions']} | {s['subgoals_mean']:.2f} | {s['mean_satisfaction']:.1%} "
            f"| {round(s['fully_satisfied_share'] * s['questions'])} | {s['paths_mean']:.2f} | {s['mean_steps']:.2f} "
            f"| {s['path_length_mean']:.2f} ({s['path_length_max']}) "
            f"| {share['EXPAND']:.1%} / {share['SKIP']:.1%} / {share['ANSWER']:.1%} | {s['refined_share']:.1%} "
            f"| {s['mean_kept']:.2f} ({s['kept_max']}) | {s['no_kept']} |")
    return "\n".join(lines)
