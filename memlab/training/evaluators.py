"""Stage evaluators: one trained stage scored on conversations, the same way wherever it is scored.

Contract
--------
An evaluator (the sentence-transformers pattern) is a component: a dataclass built from a
``_component_`` config node whose fields are plain settings, so ``node()`` gives that node back
and a recipe records it in its checkpoint's ``training.json`` (``evaluator``), where ``memlab
evaluate-stage`` rebuilds it. One evaluator per trainable stage family (``family``):

* ``prepare(conversations)`` does what does not depend on the stage, once: first-stage
  candidates, teacher labels, built memories. It returns the evaluator's own frozen dataclass
  (its ``Prepared``: ``Candidates``, ``TeacherLabels`` ...), the only thing ``score`` takes; a
  recipe that needs the same data to train on reads it from there. Memories and candidates come from a pipeline
  config (``build`` + ``retrieve_many``), so each first stage exists once, in its pipeline.
  The pipeline is a ``PipelineConfig`` (a file, a shipped name or a node) with its overrides;
  it is built once per evaluator, and ``node()`` records it resolved, so a checkpoint's
  evaluator does not change when a config file does.
* ``score(stage, prepared) -> dict`` scores a stage on it (a recipe validates every N steps on
  one ``prepare``); ``evaluator(stage, conversations)`` does both.
* ``metric`` names the figure of a ``score`` result that a recipe selects and stops early on;
  ``primary(result)`` reads it (a dotted key reaches into a nested result).
* Nothing here reads a gold answer into a stage: gold evidence and categories only score.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from memlab.bounds import PositiveInt
from memlab.config import Overrides, PipelineConfig, build_pipeline, load_config
from memlab.data.prefix import first_questions
from memlab.stage import Stage
from memlab.stages.global_select import GlobalSelector
from memlab.stages.navigate import Navigator
from memlab.stages.relate import RelationExtractor
from memlab.stages.rerank import Reranker
from memlab.stages.retrieve import TrainableEmbedder
from memlab.stages.route import IntentRouter
from memlab.stages.segment import Segmenter
from memlab.training.stage_eval import mean_recalls
from memlab.types import Conversation

if TYPE_CHECKING:
    from memlab.training.teacher import TeacherSession


# -- what prepare gives score ---------------------------------------------------------------
@dataclass(frozen=True)
class Candidates:
    """Per question with evidence, the first stage's top units (``reranker_candidates``' items:
    ``question_id, conversation_id, question, category, evidence, candidates``)."""

    items: tuple[dict[str, Any], ...]

    def __len__(self) -> int:
        return len(self.items)

    def first(self, n: int | None) -> Candidates:
        """The first ``n`` questions (all of them with None)."""
        return self if n is None else Candidates(self.items[:n])


@dataclass(frozen=True)
class Questions:
    """The conversations whose questions a router is scored on."""

    conversations: tuple[Conversation, ...]


@dataclass(frozen=True)
class TeacherLabels:
    """The prompted teacher's replayed construction of each session (failed calls included) and
    the counts of what the replay skipped (``teacher_sessions``)."""

    sessions: tuple[TeacherSession, ...]
    counts: Mapping[str, int]


@dataclass(frozen=True)
class NavigationStates:
    """The evidence-labelled navigation states of the built memories (``navigation_examples``)."""

    examples: Any


@dataclass(frozen=True)
class SelectionMemories:
    """Each conversation's Mnemis memory (by id), the conversations, and the pipeline that built them."""

    memories: Mapping[str, Any]
    conversations: tuple[Conversation, ...]
    pipeline: Any


@dataclass(frozen=True)
class RetrievalPairs:
    """The pipeline whose slot is swapped, and each question with evidence beside its built memory."""

    pipeline: Any
    pairs: tuple[tuple[Any, Any], ...]


@dataclass(frozen=True)
class PipelineTree:
    """A validated pipeline tree (its embedder to be replaced) and the conversations to build."""

    tree: Mapping[str, Any]
    conversations: tuple[Conversation, ...]


Prepared = TypeVar("Prepared")


@dataclass
class StageEvaluator(Generic[Prepared]):
    """Base class of stage evaluators; the contract is in this module's docstring."""

    #: The stage family the evaluator scores (``check`` refuses a stage of another).
    family: ClassVar[type] = Stage
    #: Its ``PipelineConfig`` fields, each with the field of its overrides.
    configs: ClassVar[dict[str, str]] = {}
    #: The figure of a ``score`` result a recipe selects and stops early on (``primary``);
    #: each evaluator names its default.
    metric: str = ""

    def prepare(self, conversations: Sequence[Conversation]) -> Prepared:  # pragma: no cover - abstract
        raise NotImplementedError

    def score(self, stage: Any, prepared: Prepared) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def primary(self, result: Mapping[str, Any]) -> float | None:
        """The figure of ``result`` named by the evaluator's ``metric`` (a dotted key reaches into
        a nested result); a KeyError naming what the result holds when it has no such figure."""
        value: Any = result
        for key in self.metric.split("."):
            if not isinstance(value, Mapping) or key not in value:
                raise KeyError(f"{type(self).__name__}: no {self.metric!r} in its result "
                               f"(it holds {sorted(result)})")
            value = value[key]
        return value

    def __call__(self, stage: Any, conversations: Sequence[Conversation]) -> dict[str, Any]:
        self.check(stage)
        return self.score(stage, self.prepare(conversations))

    def check(self, stage: Any) -> None:
        """A TypeError naming both when ``stage`` is not of the family this evaluator scores."""
        if not isinstance(stage, self.family):
            raise TypeError(f"{type(self).__name__} scores {self.family.__name__} stages, not {type(stage).__name__}")

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        """The figures a comparison table shows of a ``score`` result: metric -> (value, n)."""
        n = int(result.get("questions", 0))
        return {k: (v, n) for k, v in result.items() if isinstance(v, float)}

    def node(self) -> dict[str, Any]:
        """The config node that rebuilds this evaluator, its pipelines resolved: each the tree its
        file and overrides give now, the overrides applied."""
        cls = type(self)
        node = {"_component_": f"{cls.__module__}.{cls.__qualname__}", **dataclasses.asdict(self)}
        for name, overrides in self.configs.items():
            node[name], node[overrides] = load_config(getattr(self, name), getattr(self, overrides)), []
        return node

    def pipeline_named(self, name: str, adjust: Mapping[str, Any] | None = None) -> Any:
        """The pipeline of the ``PipelineConfig`` field ``name`` (+ its overrides, then ``adjust``:
        dotted keys to values), built on first use and shared by every later ``prepare``."""
        key = json.dumps([name, adjust], sort_keys=True, default=str)
        built = self.__dict__.setdefault("_built_pipelines", {})  # not a field: node() leaves it out
        if key not in built:
            built[key] = _built(getattr(self, name), getattr(self, self.configs[name]), adjust or {})
        return built[key]


def _built(config: PipelineConfig, overrides: Overrides, adjust: Mapping[str, Any]) -> Any:
    """The pipeline of ``config`` with its (user's) ``overrides``, then the library's ``adjust``."""
    return build_pipeline(load_config(config, overrides), adjust)[0]


def first_stage(config: PipelineConfig, overrides: Overrides = (), depth: int | None = None) -> Any:
    """The first stage of the pipeline ``config`` (+ ``overrides``): the pipeline with its reranker
    off and, with ``depth``, ranking that deep (``top_k``). What a reranker re-scores and
    learns from, and where a retriever's hard negatives come from."""
    return _built(config, overrides, first_stage_adjustment(depth))


def first_stage_adjustment(depth: int | None) -> dict[str, Any]:
    """The overrides that make a pipeline its own first stage (``first_stage``)."""
    return {"reranker": None, **({"top_k": depth} if depth else {})}


@dataclass
class RerankerEvaluator(StageEvaluator[Candidates]):
    """Evidence recall@k of a reranker over a first stage's top ``depth`` (``evaluate_reranker``).

    The first stage is the pipeline of ``pipeline`` (+ ``pipeline_overrides``) without its
    reranker and with ``top_k=depth``: its memory of each conversation and its ranking of each
    question with evidence (``evaluable_questions``). ``rag_turns.yaml`` is MiniLM + BM25 fused by RRF;
    ``rag_turns_gemma.yaml`` EmbeddingGemma's dense ranking. ``max_questions`` keeps the first
    questions of each conversation only (a prompted reranker costs a call a question). Scoring
    no stage (None) gives the first stage's own order.
    """

    family: ClassVar[type] = Reranker
    configs: ClassVar[dict[str, str]] = {"pipeline": "pipeline_overrides"}

    metric: str = "reranked.recall@10"
    pipeline: PipelineConfig = "configs/pipelines/rag_turns.yaml"
    pipeline_overrides: list[str] = field(default_factory=list)
    depth: PositiveInt = 50
    ks: list[int] = field(default_factory=lambda: [1, 5, 10, 20])
    max_questions: PositiveInt | None = None

    def prepare(self, conversations: Sequence[Conversation]) -> Candidates:
        """Per question the first stage's top ``depth`` units, best first."""
        from memlab.training.stage_eval import reranker_candidates

        return Candidates(tuple(reranker_candidates(self.pipeline_named("pipeline", first_stage_adjustment(self.depth)),
                                                    first_questions(conversations, self.max_questions), self.depth)))

    def score(self, stage: Any, prepared: Candidates) -> dict[str, Any]:
        from memlab.training.stage_eval import evaluate_reranker

        return {**evaluate_reranker(stage, prepared.items, ks=tuple(self.ks)),
                "first_stage_pipeline": _label(self.pipeline)}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        ranking = result.get("reranked", result["first_stage"])  # no stage: the first stage's order
        return {k: (v, result["questions"]) for k, v in ranking.items()}


@dataclass
class RouterEvaluator(StageEvaluator[Questions]):
    """Question-type accuracy (4-way over categories 1-4, and 5-way), confusion, speed
    (``evaluate_router``); a router only ever sees the question text. ``max_questions`` keeps
    the first questions of each conversation only (a prompted router costs a call a question)."""

    family: ClassVar[type] = IntentRouter

    metric: str = "accuracy"
    max_questions: PositiveInt | None = None

    def prepare(self, conversations: Sequence[Conversation]) -> Questions:
        return Questions(tuple(first_questions(conversations, self.max_questions)))

    def score(self, stage: Any, prepared: Questions) -> dict[str, Any]:
        from memlab.training.stage_eval import evaluate_router

        return evaluate_router(stage, prepared.conversations)

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {"accuracy": (result["accuracy"], result["questions_4way"]),
                "accuracy_5way": (result["accuracy_5way"], result["questions"])}


@dataclass
class SegmenterEvaluator(StageEvaluator[TeacherLabels]):
    """Boundary F1 against the prompted CompassMem segmenter (the teacher, ``teacher``: a config
    whose construction LMs replay the response cache) on the sessions whose construction the
    cache holds (``evaluate_segmenter``), with span baselines."""

    family: ClassVar[type] = Segmenter
    configs: ClassVar[dict[str, str]] = {"teacher": "teacher_overrides"}
    metric: str = "f1"
    teacher: PipelineConfig = "configs/pipelines/compassmem_teacher.yaml"
    teacher_overrides: list[str] = field(default_factory=list)
    #: The fixed-span baseline's span (None: the teacher's mean event length on these sessions;
    #: a recipe records its training sessions' mean).
    baseline_span: PositiveInt | None = None

    def prepare(self, conversations: Sequence[Conversation]) -> TeacherLabels:
        """The teacher's sessions; a ValueError when none has a labelled position."""
        from memlab.training.segmentation import usable_sessions

        labels = _teacher_labels(self, conversations)
        if not usable_sessions(labels.sessions):
            raise ValueError(f"no cached teacher session for {[c.id for c in conversations]} ({dict(labels.counts)}): "
                             f"run the prompted build of {_label(self.teacher)} on them first")
        return labels

    def score(self, stage: Any, prepared: TeacherLabels) -> dict[str, Any]:
        from memlab.training.segmentation import evaluate_segmenter

        return {**evaluate_segmenter(stage, prepared.sessions, self.baseline_span), "teacher": dict(prepared.counts)}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {k: (result[k], result["labelled_positions"]) for k in ("precision", "recall", "f1")}


@dataclass
class RelationEvaluator(StageEvaluator[TeacherLabels]):
    """Pair labels against the prompted CompassMem relation extractor (the teacher) on every
    canonical event pair of the cached sessions (``evaluate_relation_extractor``)."""

    family: ClassVar[type] = RelationExtractor
    configs: ClassVar[dict[str, str]] = {"teacher": "teacher_overrides"}

    metric: str = "macro_f1"
    teacher: PipelineConfig = "configs/pipelines/compassmem_teacher.yaml"
    teacher_overrides: list[str] = field(default_factory=list)
    keep_failed: bool = False

    def prepare(self, conversations: Sequence[Conversation]) -> TeacherLabels:
        """The teacher's sessions; a ValueError when none has two events (and, unless
        ``keep_failed``, no failed call): no pair to score."""
        labels = _teacher_labels(self, conversations)
        if not any(len(s.events) >= 2 and (self.keep_failed or not s.failed) for s in labels.sessions):
            raise ValueError(f"no cached teacher session for {[c.id for c in conversations]} ({dict(labels.counts)}; "
                             f"of {len(labels.sessions)} replayed, none has two events"
                             f"{'' if self.keep_failed else ' and no failed call'}): run the prompted build of "
                             f"{_label(self.teacher)} on them first")
        return labels

    def score(self, stage: Any, prepared: TeacherLabels) -> dict[str, Any]:
        from memlab.training.relations import evaluate_relation_extractor

        return {**evaluate_relation_extractor(stage, prepared.sessions, self.keep_failed),
                "teacher": dict(prepared.counts), "keep_failed": self.keep_failed}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {k: (result[k], result["pairs"]) for k in ("accuracy", "macro_f1", "macro_f1_relations")}


@dataclass
class NavigatorEvaluator(StageEvaluator[NavigationStates]):
    """Action and next-node scores of an explorer policy on the evidence-labelled navigation
    states of the memories ``pipeline`` builds (``evaluate_explorer_policy``). The build calls
    whatever LM that config's construction stages use (the default builds without one)."""

    family: ClassVar[type] = Navigator
    configs: ClassVar[dict[str, str]] = {"pipeline": "pipeline_overrides"}

    metric: str = "action_accuracy"
    pipeline: PipelineConfig = "configs/pipelines/compassmem_trained_construction.yaml"
    pipeline_overrides: list[str] = field(default_factory=list)
    hops: PositiveInt = 2
    max_states: PositiveInt = 24
    #: The majority-action baseline's action (None: the scored states' own majority, an upper
    #: bound; a recipe records its training states' majority).
    majority: str | None = None

    def prepare(self, conversations: Sequence[Conversation]) -> NavigationStates:
        from memlab.training.navigation import navigation_examples

        pipeline = self.pipeline_named("pipeline")
        memories = {c.id: pipeline.build(c.history()) for c in conversations}
        return NavigationStates(navigation_examples(memories, conversations, top_k=pipeline.top_k, hops=self.hops,
                                                    max_states=self.max_states, max_next=pipeline.max_next))

    def score(self, stage: Any, prepared: NavigationStates) -> dict[str, Any]:
        from memlab.training.navigation import evaluate_explorer_policy

        return {**evaluate_explorer_policy(stage, prepared.examples, majority=self.majority),
                "pipeline": _label(self.pipeline)}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {k: (result[k], result["states"]) for k in ("action_accuracy", "balanced_accuracy")}


@dataclass
class GlobalSelectorEvaluator(StageEvaluator[SelectionMemories]):
    """System-2 descents scored against evidence on the memories of the Mnemis ``pipeline``,
    its build replayed from the response cache (``evaluate_global_selector``). Scoring no stage
    (None) scores the pipeline's own selector (the prompted one: its calls go to its LM)."""

    family: ClassVar[type] = GlobalSelector
    configs: ClassVar[dict[str, str]] = {"pipeline": "pipeline_overrides"}

    metric: str = "evidence_episode_recall"
    pipeline: PipelineConfig = "configs/pipelines/mnemis_replay.yaml"
    pipeline_overrides: list[str] = field(default_factory=list)
    max_share: float = 0.5

    def prepare(self, conversations: Sequence[Conversation]) -> SelectionMemories:
        from memlab.training.selection import build_memories

        pipeline = self.pipeline_named("pipeline")
        if pipeline.categorizer is None:
            raise ValueError(f"{_label(self.pipeline)}: builds no hierarchy (system2: false): nothing to select from")
        return SelectionMemories(build_memories(pipeline, conversations, _label(self.pipeline)),
                                 tuple(conversations), pipeline)

    def score(self, stage: Any, prepared: SelectionMemories) -> dict[str, Any]:
        from memlab.training.selection import evaluate_global_selector

        pipeline = prepared.pipeline
        selector = pipeline.global_selector if stage is None else stage
        return {**evaluate_global_selector(selector, prepared.memories, prepared.conversations,
                                           pipeline.selection_batch, self.max_share),
                "pipeline": _label(self.pipeline), "selector": type(selector).__name__}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        keys = ("evidence_episode_recall", "entity_recall", "entity_precision", "episode_share_per_question")
        return {k: (result[k], result["questions"]) for k in keys}


@dataclass
class SlotRecallEvaluator(StageEvaluator[RetrievalPairs]):
    """Evidence recall@k of a pipeline's retrieval with the stage in its ``slot`` (a dotted stage
    name, e.g. MAGMA's ``traverser``), over the questions with evidence (``evaluable_questions``); the
    memories are built once by ``pipeline`` (+ ``pipeline_overrides``), so the slot must not
    change what ``build`` makes. ``baseline`` adds the score of the slot's configured stage."""

    family: ClassVar[type] = Stage
    configs: ClassVar[dict[str, str]] = {"pipeline": "pipeline_overrides"}

    metric: str = "with_stage.recall@10"
    pipeline: PipelineConfig = "configs/pipelines/magma.yaml"
    pipeline_overrides: list[str] = field(default_factory=list)
    slot: str = "traverser"
    ks: list[int] = field(default_factory=lambda: [10])
    baseline: bool = True

    def prepare(self, conversations: Sequence[Conversation]) -> RetrievalPairs:
        from memlab.training.supervision import evaluable_questions

        pipeline = self.pipeline_named("pipeline")
        pairs = tuple((memory, q) for c in conversations for memory in [pipeline.build(c.history())]
                      for q in evaluable_questions(c))
        if not pairs:
            raise ValueError(f"{[c.id for c in conversations]}: no question with evidence to score (LoCoMo: categories 1-4)")
        return RetrievalPairs(pipeline, pairs)

    def recall(self, pipeline: Any, pairs: Sequence[tuple[Any, Any]]) -> dict[str, float | None]:
        rankings = [pipeline.retrieve(memory, question.as_query()) for memory, question in pairs]
        return mean_recalls([[r.unit for r in ranking] for ranking in rankings], [q.evidence for _, q in pairs], self.ks)

    def score(self, stage: Any, prepared: RetrievalPairs) -> dict[str, Any]:
        pipeline, pairs = prepared.pipeline, prepared.pairs
        result: dict[str, Any] = {"questions": len(pairs), "slot": self.slot, "pipeline": _label(self.pipeline)}
        if self.baseline:
            result["configured"] = self.recall(pipeline, pairs)
        old = pipeline.replace(self.slot, stage)
        try:
            result["with_stage"] = self.recall(pipeline, pairs)
        finally:
            if old is not None:
                pipeline.replace(self.slot, old)
        return result

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {k: (v, result["questions"]) for k, v in result["with_stage"].items()}


@dataclass
class RetrieverEvaluator(StageEvaluator[PipelineTree]):
    """Evidence recall@k of a trained embedder as the ``embedder`` of ``pipeline`` (+
    ``pipeline_overrides``): each conversation's memory built and each question of categories
    1-4 with evidence ranked with the stage's vectors."""

    family: ClassVar[type] = TrainableEmbedder
    configs: ClassVar[dict[str, str]] = {"pipeline": "pipeline_overrides"}
    metric: str = "recall@10"
    pipeline: PipelineConfig = "configs/pipelines/rag_turns.yaml"
    pipeline_overrides: list[str] = field(default_factory=list)
    ks: list[int] = field(default_factory=lambda: [1, 5, 10, 20])

    def prepare(self, conversations: Sequence[Conversation]) -> PipelineTree:
        from memlab.config import COMPONENT, ConfigError, split_runner_keys, validate

        tree = split_runner_keys(load_config(self.pipeline, self.pipeline_overrides))[0]
        if "embedder" not in tree or COMPONENT not in tree:
            raise ConfigError(f"{_label(self.pipeline)}: a RetrieverEvaluator needs a pipeline with an embedder")
        validate(tree)
        return PipelineTree(tree, tuple(conversations))

    def score(self, stage: Any, prepared: PipelineTree) -> dict[str, Any]:
        from memlab.config import instantiate
        from memlab.training.supervision import evaluable_questions

        pipeline = instantiate({**prepared.tree, "embedder": stage})
        rankings, questions = [], []
        for conversation in prepared.conversations:
            asked = evaluable_questions(conversation)
            if asked:
                memory = pipeline.build(conversation.history())
                rankings += pipeline.retrieve_many(memory, [q.as_query() for q in asked])
                questions += asked
        if not questions:
            raise ValueError(f"{[c.id for c in prepared.conversations]}: no question with evidence to score "
                             "(LoCoMo: categories 1-4)")
        units = [[r.unit for r in ranking] for ranking in rankings]
        return {**mean_recalls(units, [q.evidence for q in questions], self.ks), "questions": len(questions)}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {k: (v, result["questions"]) for k, v in result.items() if k.startswith("recall@")}


def _teacher_labels(evaluator: SegmenterEvaluator | RelationEvaluator,
                    conversations: Sequence[Conversation]) -> TeacherLabels:
    from memlab.training.teacher import teacher_sessions

    found, counts = teacher_sessions(conversations, pipeline=evaluator.pipeline_named("teacher"))
    return TeacherLabels(tuple(found), dict(counts))


def _label(config: PipelineConfig) -> str:
    """How a result names the pipeline it came from: its file or name, or a node's class."""
    return config if isinstance(config, str) else f"a {config.get('_component_', 'pipeline')} node"


def recorded_evaluator(checkpoint: str | os.PathLike, overrides: Sequence[str] = ()) -> StageEvaluator:
    """The evaluator a checkpoint's ``training.json`` records (``evaluator``: its node), with
    dotted ``key=value`` ``overrides`` applied (``depth=20``, ``pipeline=...``), validated and
    built. A ``StageError`` when ``checkpoint`` is no intact saved stage, a ``ConfigError``
    naming it when it records no evaluator."""
    from memlab.checkpoint import TRAINING_FILE, checked_manifest, json_object
    from memlab.config import COMPONENT, ConfigError, apply_override, instantiate

    checked_manifest(Path(checkpoint), check_files=True)  # a saved stage whose record is intact
    record = json_object(Path(checkpoint) / TRAINING_FILE)
    node = record.get("evaluator")
    if not (isinstance(node, dict) and COMPONENT in node):
        raise ConfigError(f"{checkpoint}: its {TRAINING_FILE} records no evaluator (a stage trained by a memlab "
                          "recipe records the one its validation used)")
    node = copy.deepcopy(node)
    for override in overrides:
        apply_override(node, override)
    evaluator = instantiate(node)
    if not isinstance(evaluator, StageEvaluator):
        raise ConfigError(f"{checkpoint}: its recorded evaluator {node[COMPONENT]} is not a StageEvaluator")
    return evaluator
