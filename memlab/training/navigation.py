"""Evidence supervision for the explorer policy (CompassMem's navigate family), and its evaluation.

Labels come from **gold evidence + the memory's provenance**, never from an LLM: on an
``EventMemory`` built for a training conversation, each question of categories 1-4 with
evidence (``evaluable_questions``) is explored by a fixed simulation and every visited node
becomes one state (``navigation_states``):

* **Visit order**: the dense top ``top_k`` events of the question (``memory.index.search_dense``,
  as the search localises), then breadth-first over relation edges (either direction) up to
  ``hops`` edges away, at most ``max_states`` nodes.
* **Kept nodes** accumulate along the order: a node is kept when its label keeps it.
* **Action**: with ``held`` = the question's evidence turns held by some event of the memory
  and ``covered`` = those held by the kept nodes: SKIP when the node's provenance holds no
  evidence turn; else ANSWER when ``covered`` + the node's turns = ``held``; else EXPAND.
* **Next nodes**: a neighbour is positive when its provenance, or that of an event within
  ``hops`` edges of the current node through it (not back through the node), holds an
  evidence turn not covered once this decision is applied ("an EXPAND is right when it leads
  toward nodes whose provenance holds gold evidence").
* **Subgoals**: an LLM planner's subgoals are not available without LLM calls, so the question
  itself is the one subgoal; it is satisfied once a node holding evidence is kept, and the
  satisfaction target of a state is that subgoal when the node holds evidence.

The states' inputs are exactly what the search gives a navigator (``NavigateIn``: question
text, subgoals, ``EventView``s); the gold evidence only makes the labels. Questions whose
evidence no event holds are skipped and counted in the card. ``evaluate_explorer_policy``
scores any ``Navigator`` on such states against the always-EXPAND and majority-action
baselines.

``reach`` is a search-free bound on what walking one hop can gain: for a question, whether the
dense top K events, the top K plus every event one relation edge away (``n`` more), and the top
K plus the next ``n`` dense hits hold an evidence event (``eval/edge_reach.py`` pools it).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal

import datasets

from memlab.bounds import PositiveInt
from memlab.clock import active_seconds
from memlab.config import Overrides, PipelineConfig
from memlab.pipelines.compassmem.memory import RELATION, EventMemory
from memlab.stages.event_view import EventView
from memlab.stages.navigate import ACTIONS, ExplorerTarget, NavigateIn, Navigator, Neighbour
from memlab.training.evaluators import StageEvaluator, pipeline_label
from memlab.training.supervision import dataset_with_card, evaluable_questions, ratio
from memlab.types import Conversation, Question

_VIEW = {"key": datasets.Value("string"), "summary": datasets.Value("string"),
         "source_ids": datasets.List(datasets.Value("string")), "participants": datasets.List(datasets.Value("string")),
         "date": datasets.Value("string")}
NAVIGATION_FEATURES = datasets.Features(
    {
        "conversation_id": datasets.Value("string"),
        "question_id": datasets.Value("string"),
        # the inputs (NavigateIn)
        "question": datasets.Value("string"),
        "subgoals": datasets.List(datasets.Value("string")),
        "satisfied": datasets.List(datasets.Value("bool")),
        "node": _VIEW,
        "neighbours": datasets.List({"view": _VIEW, "relation": datasets.Value("string")}),
        "kept": datasets.List(_VIEW),
        "max_next": datasets.Value("int64"),
        # the labels (ExplorerTarget) and where the state lies (hops from a start node)
        "action": datasets.Value("string"),
        "next_nodes": datasets.List(datasets.Value("string")),
        "satisfied_targets": datasets.List(datasets.Value("int64")),
        "hop": datasets.Value("int64"),
    }
)


# -- states ------------------------------------------------------------------------------------
def adjacent(memory: EventMemory, event_id: str) -> list[str]:
    """The events one relation edge away (either direction), in the graph's order."""
    return list(dict.fromkeys(other for other, _, _ in memory.graph.neighbors(event_id, RELATION, direction="both")))


def visit_order(memory: EventMemory, starts: Sequence[str], hops: int) -> list[tuple[str, int]]:
    """``(event id, hops from the nearest start)``: the starts, then breadth-first up to ``hops``."""
    seen = dict.fromkeys(starts, 0)
    queue = deque(starts)
    while queue:
        node = queue.popleft()
        if seen[node] < hops:
            for other in adjacent(memory, node):
                if other not in seen:
                    seen[other] = seen[node] + 1
                    queue.append(other)
    return list(seen.items())


def leads_to(memory: EventMemory, start: str, avoid: str, wanted: Mapping[str, set[str]], uncovered: set[str],
             depth: int) -> bool:
    """Whether ``start`` or an event within ``depth`` edges of it (not through ``avoid``) holds
    a turn of ``uncovered`` (``wanted[id]``: the evidence turns an event holds)."""
    if not uncovered:
        return False
    seen, frontier = {start, avoid}, [start]
    for level in range(depth + 1):
        if any(wanted[n] & uncovered for n in frontier):
            return True
        if level < depth:
            frontier = list(dict.fromkeys(o for n in frontier for o in adjacent(memory, n) if o not in seen))
            seen.update(frontier)
    return False


def navigation_states(memory: EventMemory, question: Question, top_k: int = 5, hops: int = 2, max_states: int = 24,
                      max_next: int = 3) -> list[tuple[NavigateIn, ExplorerTarget, int]]:
    """``(inputs, target, hop)`` per visited node of ``question``'s simulated exploration (module
    docstring); empty when no event of ``memory`` holds its evidence."""
    if top_k < 1 or hops < 0 or max_states < 1 or max_next < 1:
        raise ValueError(f"navigation_states: need top_k, max_states, max_next >= 1 and hops >= 0; got {top_k}, "
                         f"{max_states}, {max_next}, {hops}")
    evidence = set(question.evidence)
    wanted = {i: set(memory.unit(i).source_ids) & evidence for i in memory.events()}
    held = set().union(*wanted.values()) if wanted else set()
    if not held:
        return []
    starts = [hit.unit.id for hit in memory.index.search_dense(question.text, k=top_k)]
    subgoals = (question.text,)
    kept: list[str] = []
    covered: set[str] = set()
    states = []
    for node, hop in visit_order(memory, starts, hops)[:max_states]:
        gain = wanted[node]
        action = "SKIP" if not gain else "ANSWER" if covered | gain >= held else "EXPAND"
        after = covered | gain
        neighbours = memory.neighbours(node)
        positive = tuple(n.view.key for n in neighbours
                         if leads_to(memory, memory.id_of[n.view.key], node, wanted, held - after, max(hops - 1, 0)))
        inputs = NavigateIn(question.text, subgoals, (bool(kept),), memory.view(node), tuple(neighbours),
                            tuple(memory.view(k) for k in kept), max_next)
        states.append((inputs, ExplorerTarget(action, positive, (0,) if gain else ()), hop))
        if gain:
            kept.append(node)
            covered = after
    return states


# -- rows <-> states ---------------------------------------------------------------------------
def _view_row(view: EventView) -> dict[str, Any]:
    return {"key": view.key, "summary": view.summary, "source_ids": list(view.source_ids),
            "participants": list(view.participants), "date": view.date.isoformat() if view.date else None}


def _row_view(row: Mapping[str, Any]) -> EventView:
    return EventView(row["key"], row["summary"], tuple(row["source_ids"]), tuple(row["participants"]),
                     datetime.fromisoformat(row["date"]) if row["date"] else None)


def state_row(inputs: NavigateIn, target: ExplorerTarget, **extra: Any) -> dict[str, Any]:
    return {**extra, "question": inputs.question, "subgoals": list(inputs.subgoals), "satisfied": list(inputs.satisfied),
            "node": _view_row(inputs.node), "kept": [_view_row(v) for v in inputs.kept], "max_next": inputs.max_next,
            "neighbours": [{"view": _view_row(n.view), "relation": n.relation} for n in inputs.neighbours],
            "action": target.action, "next_nodes": list(target.next_nodes),
            "satisfied_targets": list(target.satisfied)}


def row_inputs(row: Mapping[str, Any]) -> NavigateIn:
    """What a navigator is given for a data set row: the input columns only."""
    return NavigateIn(row["question"], tuple(row["subgoals"]), tuple(row["satisfied"]), _row_view(row["node"]),
                      tuple(Neighbour(_row_view(n["view"]), n["relation"]) for n in row["neighbours"]),
                      tuple(_row_view(v) for v in row["kept"]), int(row["max_next"]))


def row_target(row: Mapping[str, Any]) -> ExplorerTarget:
    return ExplorerTarget(row["action"], tuple(row["next_nodes"]), tuple(row["satisfied_targets"]))


def navigation_examples(memories_by_conversation: Mapping[str, EventMemory], conversations: Sequence[Conversation],
                        top_k: int = 5, hops: int = 2, max_states: int = 24, max_next: int = 3) -> datasets.Dataset:
    """One row per simulated state (``navigation_states``) of every evaluable question of
    ``conversations``, each on its conversation's memory; the card says how labels were made."""
    rows: list[dict[str, Any]] = []
    counts = Counter()
    for conversation in conversations:
        if conversation.id not in memories_by_conversation:
            raise ValueError(f"navigation_examples: no memory for conversation {conversation.id} "
                             f"(memories: {sorted(memories_by_conversation)})")
        memory = memories_by_conversation[conversation.id]
        for question in evaluable_questions(conversation):
            states = navigation_states(memory, question, top_k, hops, max_states, max_next)
            counts["questions" if states else "no_held_evidence"] += 1
            for inputs, target, hop in states:
                rows.append(state_row(inputs, target, conversation_id=conversation.id, question_id=question.id, hop=hop))
    actions = Counter(row["action"] for row in rows)
    neighbours = sum(len(row["neighbours"]) for row in rows)
    positives = sum(len(row["next_nodes"]) for row in rows)
    card = f"""memlab explorer-policy supervision (memlab.training.navigation.navigation_examples).
Label source: gold evidence (LoCoMo evidence turn ids) + the memory's provenance (each event's source turns); no LLM.
Rows: one navigator state: the inputs a CompassMem navigator is given (question, subgoals and their flags, current
node, typed neighbours, kept nodes, max_next) and its target (action, positive next nodes, satisfied subgoals).
Simulation per question (categories 1-4 with evidence): the dense top {top_k} events, then breadth-first over relation
edges up to {hops} hops, at most {max_states} states; a node is kept when it holds an evidence turn. Action: SKIP
without evidence; ANSWER when the kept nodes + this node hold every evidence turn held anywhere in memory; else EXPAND.
Next nodes: neighbours whose provenance, or that of an event within {hops} edges of the node through them, holds an
evidence turn still uncovered. Subgoals: the question is the one subgoal (an LLM planner's are not available without
LLM calls); its satisfaction target is set when the node holds evidence.
Conversations: {[c.id for c in conversations]}. Questions used: {counts["questions"]}; skipped because no event holds
their evidence: {counts["no_held_evidence"]}. States: {len(rows)}; actions: {dict(sorted(actions.items()))};
neighbours: {neighbours}, of which positive next nodes: {positives}."""
    return dataset_with_card(rows, NAVIGATION_FEATURES, card)


# -- evaluation --------------------------------------------------------------------------------
def evaluate_explorer_policy(policy: Navigator, examples, batch_size: int = 64, majority: str | None = None
                             ) -> dict[str, Any]:
    """Action accuracy, per-action recall (and their mean over the actions present,
    ``balanced_accuracy``) and next-node precision / recall / F1 of ``policy`` on the rows of
    ``examples`` (``navigation_examples``), with baselines: always EXPAND, the majority
    action (``majority``: the training data's; default the examples' own, an upper bound) and,
    for next nodes, the first ``max_next`` neighbours. A ratio with nothing to count is None."""
    rows = list(examples)
    if not rows:
        raise ValueError("evaluate_explorer_policy: no examples to score")
    targets = [row_target(row) for row in rows]
    inputs = [row_inputs(row) for row in rows]
    outputs, started = [], active_seconds()
    for start in range(0, len(inputs), batch_size):
        outputs += policy(inputs[start:start + batch_size])
    seconds = active_seconds() - started
    truth = Counter(t.action for t in targets)
    majority = majority or truth.most_common(1)[0][0]

    def next_scores(chosen: list[tuple[str, ...]]) -> dict[str, float | None]:
        hits = sum(len(set(c) & set(t.next_nodes)) for c, t in zip(chosen, targets))
        named, wanted = sum(len(c) for c in chosen), sum(len(t.next_nodes) for t in targets)
        return {"next_precision": ratio(hits, named), "next_recall": ratio(hits, wanted),
                "next_f1": ratio(2 * hits, named + wanted)}

    recall = {a: ratio(sum(o.action == a == t.action for o, t in zip(outputs, targets)), truth[a]) for a in ACTIONS}
    present = [r for r in recall.values() if r is not None]
    return {
        "states": len(rows),
        "action_accuracy": sum(o.action == t.action for o, t in zip(outputs, targets)) / len(rows),
        "balanced_accuracy": sum(present) / len(present),
        "action_recall": recall,
        "actions": {a: sum(o.action == a for o in outputs) for a in ACTIONS},
        "targets": {a: truth[a] for a in ACTIONS},
        **next_scores([o.next_nodes for o in outputs]),
        "seconds_per_decision": seconds / len(rows),
        "baselines": {
            # a constant action recalls all of its own class and none of the others
            "always_expand": {"action_accuracy": truth["EXPAND"] / len(rows),
                              "balanced_accuracy": (truth["EXPAND"] > 0) / len(present)},
            "majority": {"action": majority, "action_accuracy": truth[majority] / len(rows),
                         "balanced_accuracy": (truth[majority] > 0) / len(present)},
            "first_neighbours": next_scores([tuple(n.view.key for n in i.neighbours[: i.max_next]) for i in inputs]),
        },
    }


def reach(memory: EventMemory, question: Question, top_k: int) -> dict[str, bool | int] | None:
    """For one question: whether the top ``top_k``, the top plus its one-hop neighbours, and the
    top plus as many more dense hits hold an evidence turn; None when no event holds one."""
    evidence = set(question.evidence)
    holding = {i for i in memory.events() if set(memory.unit(i).source_ids) & evidence}
    if not holding:
        return None
    top = [hit.unit.id for hit in memory.index.search_dense(question.text, k=top_k)]
    neighbours = list(dict.fromkeys(o for node in top for o in adjacent(memory, node) if o not in top))
    ranked = [hit.unit.id for hit in memory.index.search_dense(question.text, k=top_k + len(neighbours))]
    return {"top": bool(holding & set(top)), "edges": bool(holding & set(top + neighbours)),
            "dense": bool(holding & set(ranked)), "added": len(neighbours)}


def reach_summary(rows: list[dict]) -> dict[str, float | int]:
    """``reach`` rows counted: the questions, how many each set reaches, the discordant ones."""
    n = len(rows)
    return {"questions": n, "top_k_holds": sum(r["top"] for r in rows),
            "with_edges_holds": sum(r["edges"] for r in rows), "with_dense_holds": sum(r["dense"] for r in rows),
            "only_edges": sum(r["edges"] and not r["dense"] for r in rows),
            "only_dense": sum(r["dense"] and not r["edges"] for r in rows),
            "mean_added": round(sum(r["added"] for r in rows) / n, 2) if n else 0}


@dataclass(frozen=True)
class NavigationStates:
    """The evidence-labelled navigation states of the built memories (``navigation_examples``)."""

    examples: Any


#: The figures of a ``NavigatorEvaluator`` result early stopping can read.
NavigatorMetric = Literal["action_accuracy", "balanced_accuracy"]


@dataclass
class NavigatorEvaluator(StageEvaluator[NavigationStates]):
    """Action and next-node scores of an explorer policy on the evidence-labelled navigation
    states of the memories ``pipeline`` builds (``evaluate_explorer_policy``). The build calls
    whatever LM that config's construction stages use (the default builds without one)."""

    family: ClassVar[type] = Navigator
    configs: ClassVar[dict[str, str]] = {"pipeline": "pipeline_overrides"}

    metric: NavigatorMetric = "action_accuracy"
    pipeline: PipelineConfig = "configs/pipelines/compassmem_trained_construction.yaml"
    pipeline_overrides: Overrides = field(default_factory=list)
    #: How the evidence labels are simulated (``navigation_examples``): breadth over relation
    #: edges from the start nodes, and the most states a question gives.
    hops: PositiveInt = 2
    max_states: PositiveInt = 24
    #: The majority-action baseline's action (None: the scored states' own majority, an upper
    #: bound; a recipe records its training states' majority).
    majority: str | None = None

    def prepare(self, conversations: Sequence[Conversation]) -> NavigationStates:
        pipeline = self.pipeline_named("pipeline")
        memories = {c.id: pipeline.build(c.history()) for c in conversations}
        return NavigationStates(navigation_examples(memories, conversations, top_k=pipeline.search_settings.top_k, hops=self.hops,
                                                    max_states=self.max_states, max_next=pipeline.search_settings.max_next))

    def score(self, stage: Any, prepared: NavigationStates) -> dict[str, Any]:
        return {**evaluate_explorer_policy(stage, prepared.examples, majority=self.majority),
                "pipeline": pipeline_label(self.pipeline)}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {k: (result[k], result["states"]) for k in ("action_accuracy", "balanced_accuracy")}
