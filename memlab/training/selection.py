"""Evidence supervision for Mnemis's System-2 selector (the global_select family), and its evaluation.

Labels come from **gold evidence + the memory's provenance**, never from an LLM: on a
``MnemisMemory`` built for a training conversation (its base graph and hierarchy), each question
of categories 1-4 with evidence (``evaluable_questions``) labels the hierarchy's nodes
(``node_labels``):

* **Evidence episodes**: the episodes whose turns include an evidence turn.
* **Entity**: positive when one of its episodes is an evidence episode and it appears in at most
  ``max_share`` of the conversation's episodes. An entity found nearly everywhere (a speaker)
  reaches the evidence by reaching everything: selecting it narrows nothing, so it is not what a
  selection should learn to pick (System-1 and the re-ranker still see every episode).
* **Category**: positive when an entity below it is positive; **take all children** when, in
  addition, at least ``all_children_share`` of its children are positive (default all of them:
  at 0.5 the small hierarchies of two sessions made the top category's take-all nearly always
  right, and the selector learnt to take everything).

Rows (``selection_examples``) follow the descent the search makes, teacher-forced: the top layer
first, in calls of ``batch_size`` nodes, then the children of the positive categories (each node
once), down to the entities. A row is one selector call: the inputs (``GlobalSelectIn``: question,
node cards) and the flags per node. Questions with no positive node give rows whose every flag
is off (the selection should stop); the card counts them.

``evaluate_global_selector`` scores any ``GlobalSelector`` by the descent it actually makes
(``mnemis_search.global_selection``), not on teacher-forced rows: entity precision / recall
against the positive entities, how many of the question's evidence episodes the selected
entities reach (what System-2 adds to the candidates) and how many episodes it brings, calls
and seconds per question.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import datasets

from memlab.bounds import UnitFloat
from memlab.clock import active_seconds
from memlab.config import ConfigError, Overrides, PipelineConfig
from memlab.lm.cache_only import CacheMissError, live_stages
from memlab.pipelines.mnemis.memory import CATEGORY, MnemisMemory
from memlab.pipelines.mnemis.search import global_selection
from memlab.stages.global_select import GlobalSelectIn, GlobalSelector, HierarchyNode, SelectionTarget
from memlab.training.evaluators import StageEvaluator, pipeline_label
from memlab.training.supervision import dataset_with_card, evaluable_questions, ratio
from memlab.types import Conversation, Question

_NODE = {"key": datasets.Value("string"), "name": datasets.Value("string"),
         "tags": datasets.List(datasets.Value("string")), "summary": datasets.Value("string"),
         "layer": datasets.Value("int64")}
SELECTION_FEATURES = datasets.Features(
    {
        "conversation_id": datasets.Value("string"),
        "question_id": datasets.Value("string"),
        "question": datasets.Value("string"),
        "level": datasets.Value("int64"),
        "nodes": datasets.List(_NODE),
        "select": datasets.List(datasets.Value("bool")),
        "all_children": datasets.List(datasets.Value("bool")),
    }
)


#: The stages of a Mnemis build; their LMs must be cache-only here (``build_memories``).
BUILD_STAGES = ("entity_extractor", "describer", "fact_extractor", "contradiction_detector", "categorizer")
#: The Mnemis config whose build stages replay the prompted build from the response cache.
REPLAY_CONFIG = "configs/pipelines/mnemis_replay.yaml"


def build_memories(pipeline: Any, conversations: Sequence[Conversation], source: str = "the pipeline"
                   ) -> dict[str, MnemisMemory]:
    """Each conversation's memory built by the Mnemis ``pipeline`` (built from the config
    ``source``), whose build stages answer from the response cache only: a recipe never spends
    hours of model time. A ConfigError when a build stage's LM is not declared a ``CacheOnlyLM``
    (as ``REPLAY_CONFIG`` declares them); a ValueError saying how to fill the cache when it lacks
    a build."""
    live = live_stages(pipeline, BUILD_STAGES)
    if live:
        raise ConfigError(f"{source}: the Mnemis build's {', '.join(live)} would call a model; declare their lm a "
                          f"memlab.lm.cache_only.CacheOnlyLM (as {REPLAY_CONFIG} does)")
    memories = {}
    for conversation in conversations:
        try:
            memories[conversation.id] = pipeline.build(conversation.history())
        except CacheMissError as e:
            sessions = len(conversation.sessions)
            raise ValueError(f"{conversation.id} ({sessions} sessions): its Mnemis build is not in the response cache "
                             f"({e}); build it once with python eval/time_build.py CONFIG --data PATH --conversations "
                             f"{conversation.id} --sessions {sessions}, or memlab cache import an export") from None
    return memories


def evidence_episodes(memory: MnemisMemory, question: Question) -> set[str]:
    evidence = set(question.evidence)
    return {episode for episode, unit in memory.episodes.units.items() if evidence & set(unit.source_ids)}


def node_labels(memory: MnemisMemory, evidence: set[str], max_share: float = 0.5,
                all_children_share: float = 1.0) -> tuple[set[str], set[str]]:
    """(positive nodes, categories whose children are all to be taken) for the evidence
    episodes ``evidence`` (module docstring)."""
    limit = max_share * len(memory.episodes)
    positive = {entity for entity in memory.entities.units
                if len(episodes := memory.episodes_of([entity])) <= limit and evidence & set(episodes)}
    take_all: set[str] = set()
    for category in memory.graph.nodes(CATEGORY):
        if any(node in positive for node in memory.descendants(category)):
            positive.add(category)
    for category in memory.graph.nodes(CATEGORY):
        children = memory.children(category)
        if category in positive and children and \
                sum(child in positive for child in children) >= all_children_share * len(children):
            take_all.add(category)
    return positive, take_all


def descent_rows(memory: MnemisMemory, question: Question, positive: set[str], take_all: set[str],
                 batch_size: int) -> list[tuple[GlobalSelectIn, SelectionTarget, int]]:
    """The teacher-forced descent's calls: (inputs, target, level) per call (module docstring)."""
    rows = []
    level, seen, depth = memory.top_layer(), set(memory.top_layer()), 0
    while level:
        for start in range(0, len(level), batch_size):
            batch = level[start:start + batch_size]
            item = GlobalSelectIn(question.text, tuple(memory.hierarchy_node(n) for n in batch))
            rows.append((item, SelectionTarget(tuple(n in positive for n in batch),
                                               tuple(n in take_all for n in batch)), depth))
        below = [child for n in level if n in positive and memory.node_type(n) == CATEGORY
                 for child in memory.children(n)]
        level = [n for n in dict.fromkeys(below) if n not in seen]
        seen.update(level)
        depth += 1
    return rows


def selection_examples(memories: Mapping[str, MnemisMemory], conversations: Sequence[Conversation],
                       batch_size: int = 40, max_share: float = 0.5, all_children_share: float = 1.0
                       ) -> datasets.Dataset:
    """The rows of every evaluable question of ``conversations`` on its conversation's memory,
    with a dataset card naming the label source."""
    rows: list[dict[str, Any]] = []
    counts: Counter = Counter()
    for conversation in conversations:
        memory = memories[conversation.id]
        for question in evaluable_questions(conversation):
            positive, take_all = node_labels(memory, evidence_episodes(memory, question), max_share,
                                             all_children_share)
            counts["questions"] += 1
            counts["no_positive_entity"] += not any(memory.node_type(n) != CATEGORY for n in positive)
            for item, target, level in descent_rows(memory, question, positive, take_all, batch_size):
                rows.append({"conversation_id": conversation.id, "question_id": question.id, "question": item.question,
                             "level": level, "nodes": [vars_of(n) for n in item.nodes],
                             "select": list(target.select), "all_children": list(target.all_children)})
    nodes = sum(len(r["nodes"]) for r in rows)
    selected = sum(sum(r["select"]) for r in rows)
    card = f"""memlab System-2 selector supervision (memlab.training.selection.selection_examples).
Label source: gold evidence (LoCoMo evidence turn ids) + the memory's provenance (each episode's turns); no LLM.
Rows: one selector call of a teacher-forced descent (top layer first, {batch_size} nodes a call, then the children of
the positive categories): the question, the node cards (name, tags, summary, layer) and per node select / take-all
flags. An entity is positive when one of its episodes holds an evidence turn and it appears in at most {max_share:.0%}
of the episodes; a category when an entity below it is; take-all when at least {all_children_share:.0%} of its children
are positive.
Conversations: {[c.id for c in conversations]}. Questions: {counts["questions"]}; with no positive entity:
{counts["no_positive_entity"]}. Calls: {len(rows)}; nodes: {nodes}, of which selected: {selected}."""
    return dataset_with_card(rows, SELECTION_FEATURES, card)


def vars_of(node: HierarchyNode) -> dict[str, Any]:
    return {"key": node.key, "name": node.name, "tags": list(node.tags), "summary": node.summary, "layer": node.layer}


def row_inputs(row: Mapping[str, Any]) -> GlobalSelectIn:
    return GlobalSelectIn(row["question"], tuple(HierarchyNode(n["key"], n["name"], tuple(n["tags"]), n["summary"],
                                                               int(n["layer"])) for n in row["nodes"]))


def row_target(row: Mapping[str, Any]) -> SelectionTarget:
    return SelectionTarget(tuple(row["select"]), tuple(row["all_children"]))


# -- evaluation --------------------------------------------------------------------------------
def score_rows(selector: GlobalSelector, examples, batch_size: int = 64) -> dict[str, Any]:
    """Select precision / recall / F1 of ``selector``'s decisions on teacher-forced rows (the
    recipe's validation score: every call sees the nodes the gold descent reaches)."""
    rows = list(examples)
    hits = chosen = wanted = 0
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        for row, out in zip(chunk, selector([row_inputs(r) for r in chunk])):
            keys = {s.key for s in out.selected}
            gold = {n["key"] for n, flag in zip(row["nodes"], row["select"]) if flag}
            hits, chosen, wanted = hits + len(keys & gold), chosen + len(keys), wanted + len(gold)
    precision, recall = ratio(hits, chosen), ratio(hits, wanted)
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else 0.0
    return {"calls": len(rows), "select_precision": precision, "select_recall": recall, "select_f1": f1}


def evaluate_global_selector(selector: GlobalSelector, memories: Mapping[str, MnemisMemory],
                             conversations: Sequence[Conversation], batch_size: int = 40,
                             max_share: float = 0.5) -> dict[str, Any]:
    """The descent ``selector`` makes for every evaluable question, scored against evidence
    (module docstring); a ratio with nothing to count is None. LLM calls are counted on the
    selector's LMs, if it has any."""
    lms = list({id(m.lm): m.lm for m in selector.modules() if getattr(m, "lm", None) is not None}.values())
    before = sum(lm.usage.snapshot()["llm_calls"] for lm in lms)
    totals: Counter = Counter()
    started = active_seconds()
    for conversation in conversations:
        memory = memories[conversation.id]
        for question in evaluable_questions(conversation):
            evidence = evidence_episodes(memory, question)
            positive, _ = node_labels(memory, evidence, max_share)
            wanted = {n for n in positive if memory.node_type(n) != CATEGORY}
            descent = global_selection(memory, selector, question.text, batch_size)
            reached = set(memory.episodes_of(descent.entities))
            totals["questions"] += 1
            totals["calls"] += descent.calls
            totals["errors"] += len(descent.errors)
            totals["selected_entities"] += len(descent.entities)
            totals["entity_hits"] += len(wanted & set(descent.entities))
            totals["positive_entities"] += len(wanted)
            totals["episodes_reached"] += len(reached)
            totals["episode_share"] += len(reached) / max(len(memory.episodes), 1)
            if evidence:
                totals["with_evidence"] += 1
                totals["evidence_recall"] += len(reached & evidence) / len(evidence)
    seconds = active_seconds() - started
    n = totals["questions"]
    if not n:
        raise ValueError("evaluate_global_selector: no question of categories 1-4 with evidence to score")
    return {
        "questions": n,
        "entity_precision": ratio(totals["entity_hits"], totals["selected_entities"]),
        "entity_recall": ratio(totals["entity_hits"], totals["positive_entities"]),
        "evidence_episode_recall": ratio(totals["evidence_recall"], totals["with_evidence"]),
        "episodes_reached_per_question": totals["episodes_reached"] / n,
        "episode_share_per_question": totals["episode_share"] / n,
        "selected_entities_per_question": totals["selected_entities"] / n,
        "selector_calls_per_question": totals["calls"] / n,
        "llm_calls_per_question": (sum(lm.usage.snapshot()["llm_calls"] for lm in lms) - before) / n,
        "failed_calls": totals["errors"],
        "seconds_per_question": seconds / n,
    }


@dataclass(frozen=True)
class SelectionMemories:
    """Each conversation's Mnemis memory (by id), the conversations, and the pipeline that built them."""

    memories: Mapping[str, Any]
    conversations: tuple[Conversation, ...]
    pipeline: Any


@dataclass
class GlobalSelectorEvaluator(StageEvaluator[SelectionMemories]):
    """System-2 descents scored against evidence on the memories of the Mnemis ``pipeline``,
    its build replayed from the response cache (``evaluate_global_selector``). Scoring no stage
    (None) scores the pipeline's own selector (the prompted one: its calls go to its LM)."""

    family: ClassVar[type] = GlobalSelector
    configs: ClassVar[dict[str, str]] = {"pipeline": "pipeline_overrides"}

    metric: str = "evidence_episode_recall"
    pipeline: PipelineConfig = "configs/pipelines/mnemis_replay.yaml"
    pipeline_overrides: Overrides = field(default_factory=list)
    max_share: UnitFloat = 0.5

    def prepare(self, conversations: Sequence[Conversation]) -> SelectionMemories:
        pipeline = self.pipeline_named("pipeline")
        if pipeline.categorizer is None:
            raise ValueError(f"{pipeline_label(self.pipeline)}: builds no hierarchy (search.system2: false): nothing to select from")
        return SelectionMemories(build_memories(pipeline, conversations, pipeline_label(self.pipeline)),
                                 tuple(conversations), pipeline)

    def score(self, stage: Any, prepared: SelectionMemories) -> dict[str, Any]:
        pipeline = prepared.pipeline
        selector = pipeline.global_selector if stage is None else stage
        return {**evaluate_global_selector(selector, prepared.memories, prepared.conversations,
                                           pipeline.search_settings.selection_batch, self.max_share),
                "pipeline": pipeline_label(self.pipeline), "selector": type(selector).__name__}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        keys = ("evidence_episode_recall", "entity_recall", "entity_precision", "episode_share_per_question")
        return {k: (result[k], result["questions"]) for k in keys}
