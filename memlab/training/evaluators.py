"""Stage evaluators: one trained stage scored on conversations, the same way wherever it is scored.

Contract
--------
An evaluator (the sentence-transformers pattern) is a component: a dataclass built from a
``_component_`` config node whose fields are plain settings, so ``node()`` gives that node back
and a recipe records it in its checkpoint's ``training.json`` (``evaluator``), where ``memlab
evaluate-stage`` rebuilds it. One evaluator per trainable stage family (``family``), in that
family's module beside its supervision and scores (``memlab.training.rerank.RerankerEvaluator``,
``route``, ``retrieve``, ``segmentation``, ``relations``, ``navigation``, ``selection``,
``traversal``, ``fusion``); a recipe takes its evaluator as a config node, its ``validation`` setting.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from memlab.config import Overrides, PipelineConfig, build_pipeline, load_config
from memlab.eval.metrics import recall_at_k
from memlab.stage import Stage
from memlab.types import Conversation, MemoryUnit

Prepared = TypeVar("Prepared")
#: Questions a stage is given per call while it is scored (a reranker, a router).
SCORING_BATCH = 32


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


def first_stage_adjustment(depth: int | None) -> dict[str, Any]:
    """The overrides that make a pipeline its own first stage: its reranker off and, with ``depth``,
    ranking that deep (``top_k``). What a reranker re-scores and learns from, and where a
    retriever's hard negatives come from (the evaluators' ``first_stage()``)."""
    return {"reranker": None, **({"top_k": depth} if depth else {})}




















def pipeline_label(config: PipelineConfig) -> str:
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


def question_recalls(rankings: Sequence[Sequence[MemoryUnit]], evidence: Sequence[Sequence[str]],
                     k: int) -> list[float | None]:
    """Per question, the evidence recall@k of its ranking (None where it has no gold evidence)."""
    return [recall_at_k([u.source_ids for u in ranking], gold, k) for ranking, gold in zip(rankings, evidence)]


def mean_recalls(rankings: Sequence[Sequence[MemoryUnit]], evidence: Sequence[Sequence[str]],
                 ks: Sequence[int]) -> dict[str, float | None]:
    """Mean evidence recall@k of each ranking (units, best first) against its question's gold
    evidence turns, per k; None for a k no question has evidence to score."""
    out = {}
    for k in ks:
        values = [v for v in question_recalls(rankings, evidence, k) if v is not None]
        out[f"recall@{k}"] = sum(values) / len(values) if values else None
    return out
