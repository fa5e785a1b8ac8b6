"""Train CompassMem's relation extractor as a pair classifier, distilled from the prompted one (issue 23).

    memlab train train_relation_extractor --config configs/train/relation_extractor.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation; each part's teacher
sessions replayed from the response cache by ``memlab.training.teacher.teacher_sessions``; the
labelled pairs of ``memlab.training.relations.relation_examples``; stage, optimiser), ``train``
(``memlab.training.loop.fit``, validation scores after every epoch, early stopping), ``save_checkpoint``
(the best stage), then one evaluation on the held-out conversations (the extractor, the
majority relation of the held-out pairs, and the majority label of the training pairs as a
``MajorityRelationExtractor``), written next to the checkpoint as ``training.json``.

Objective: cross-entropy of each canonical pair's label (the 11 relation labels + ``none``),
each class weighted ``(n / (k * n_c)) ** class_weight_power`` (0: unweighted) since ``none``
dominates. Early stopping reads the validation ``metric`` (default ``macro_f1``, over all pairs).

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir,
seed, precision``, ``progress`` (a progress bar), ``data {...}`` (as the other recipes),
``teacher_config`` (the CompassMem config whose cached prompted construction gives the labels)
and ``teacher_overrides``, ``keep_failed`` (also sessions whose teacher calls failed),
``stage`` (a ``PairRelationClassifier`` ``_component_`` node), ``optim {lr, head_lr (null:
lr; the head starts from scratch), weight_decay, epochs, batch_size, warmup_fraction,
max_steps}``, ``class_weight_power``, ``patience``
(epochs), ``metric`` (``macro_f1``, ``macro_f1_relations`` or ``accuracy``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import torch

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.config import PipelineConfig, instantiate
from memlab.stage import Stage
from memlab.stages.relate import MajorityRelationExtractor, PairRelationClassifier
from memlab.training import (
    GradientSettings,
    MetricsLog,
    Optimiser,
    encoder_stage,
    prepare_training,
    record_training,
    start_recipe,
    total_steps,
)
from memlab.training.evaluators import RelationEvaluator
from memlab.training.loop import Optimisation, fit, shuffled_batches
from memlab.training.relations import class_weights, evaluate_relation_extractor, majority_label, relation_examples
from memlab.training.teacher import TEACHER_CONFIG, teacher_sessions

#: The validation metrics early stopping can read.
Metric = Literal["macro_f1", "macro_f1_relations", "accuracy"]


@dataclass
class Settings(GradientSettings):
    teacher_config: PipelineConfig = TEACHER_CONFIG
    teacher_overrides: list[str] = field(default_factory=list)
    keep_failed: bool = False
    stage: PairRelationClassifier = field(default_factory=encoder_stage("memlab.stages.relate.PairRelationClassifier"))
    optim: Optimiser = field(default_factory=lambda: Optimiser(lr=1e-4, epochs=5, batch_size=32))
    class_weight_power: NonNegativeFloat = 0.5
    patience: PositiveInt = 2
    metric: Metric = "macro_f1"


#: The validation scores early stopping can read (``evaluate_relation_extractor``'s).
METRICS = get_args(Metric)


@dataclass
class Run:
    config: dict[str, Any]
    out: Path
    stage: Any = None
    examples: Any = None  # the training pairs (a datasets.Dataset)
    sessions: dict[str, list] = field(default_factory=dict)  # part -> teacher sessions
    split: dict[str, list[str]] = field(default_factory=dict)
    weights: Any = None
    accelerator: Any = None
    optimizer: Any = None
    scheduler: Any = None
    log: MetricsLog | None = None
    evaluator: RelationEvaluator | None = None
    teacher_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    vectors: dict[str, Any] | None = None  # event text -> encoder vector, when the encoder is frozen


def part_sessions(config: dict[str, Any], part: str, conversations: list) -> tuple[list, dict[str, int]]:
    """The teacher sessions of one part of the split (and the replay's counts); a ValueError when
    none is cached, so a run never trains or selects on nothing."""
    found, counts = teacher_sessions(conversations, config["teacher_config"], list(config["teacher_overrides"] or []))
    usable = [s for s in found if len(s.events) >= 2 and (config["keep_failed"] or not s.failed)]
    if not usable:
        raise ValueError(
            f"no cached teacher session for the {part} conversations {[c.id for c in conversations]} "
            f"({dict(counts)}; of {len(found)} replayed, none has two events and no failed call): run the prompted "
            f"construction of {config['teacher_config']} on them first (it fills the response cache), or choose "
            "other data.eval_ids / data.validation_ids")
    return found, dict(counts)


def setup(config: dict[str, Any]) -> Run:
    config, parts = start_recipe(config, Settings(recipe="train_relation_extractor"))
    run = Run(config=config, out=Path(config["output_dir"]), split=parts.ids())
    train, validation, evaluation = parts
    counts = run.teacher_counts
    for part, conversations in (("train", train), ("validation", validation), ("evaluation", evaluation)):
        run.sessions[part], counts[part] = part_sessions(config, part, conversations)
    run.examples = relation_examples(run.sessions["train"], keep_failed=config["keep_failed"],
                                     teacher_counts=counts["train"], teacher_config=config["teacher_config"])
    run.evaluator = RelationEvaluator(teacher=config["teacher_config"],
                                      teacher_overrides=list(config["teacher_overrides"] or []),
                                      keep_failed=config["keep_failed"])
    run.stage = instantiate(config["stage"])
    unknown = sorted(set(run.examples["label"]) - set(run.stage.labels))
    if unknown:
        raise ValueError(f"the training pairs have labels {unknown} the classifier's head lacks ({list(run.stage.labels)})")
    if run.stage.encoder.frozen:  # the encoder never changes: encode every training event once
        texts = sorted(set(run.examples["earlier"]) | set(run.examples["later"]))
        run.vectors = dict(zip(texts, run.stage.encode_texts(texts)))
    run.weights = class_weights(run.examples["label"], run.stage.labels, float(config["class_weight_power"]))
    run.stage, run.optimizer, run.scheduler, run.accelerator = prepare_training(run.stage, config, len(run.examples))
    run.log = MetricsLog.for_checkpoint(run.out)
    return run


def batch_loss(stage, rows: list[dict[str, Any]], weights, vectors: dict[str, Any] | None = None):
    """The weighted cross-entropy of a batch of labelled pairs (from ``vectors``, the event
    texts' precomputed encoder vectors, when given)."""
    distances = [row["target"] - row["source"] for row in rows]
    if vectors is None:
        logits = stage.pair_logits([(row["earlier"], row["later"]) for row in rows], distances)
    else:
        logits = stage.logits_from_vectors(torch.stack([vectors[row["earlier"]] for row in rows]),
                                           torch.stack([vectors[row["later"]] for row in rows]), distances)
    return stage.loss(logits, stage.targets([row["label"] for row in rows]), weights)


def train(run: Run) -> dict[str, Any]:
    optim, metric = run.config["optim"], run.config["metric"]
    rng = random.Random(int(run.config["seed"]))
    rows = run.examples.to_list()
    stage = run.accelerator.unwrap_model(run.stage)

    def validate() -> dict[str, Any]:
        scores = run.evaluator.score(stage, (run.sessions["validation"], run.teacher_counts["validation"]))
        return {k: scores[k] for k in METRICS}

    return fit(Optimisation(run.stage, run.accelerator, run.optimizer, run.scheduler),
               n_steps=total_steps(len(run.examples), optim),
               epoch_batches=lambda: shuffled_batches(rows, int(optim["batch_size"]), rng),
               batch_loss=lambda batch: batch_loss(stage, batch, run.weights, run.vectors),
               save=lambda: save_checkpoint(run), log=run.log, validate=validate,
               metric=lambda scores: scores[metric] or 0.0,  # None: no relation label anywhere, nothing to F1
               patience=int(run.config["patience"]), unit="pairs", progress=run.config["progress"],
               desc="relations")


def save_checkpoint(run: Run) -> Path:
    return run.accelerator.unwrap_model(run.stage).save(run.out)


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    best = Stage.load(run.out)
    held_out = run.sessions["evaluation"]
    train_majority = majority_label(run.examples["label"])
    baseline = evaluate_relation_extractor(MajorityRelationExtractor(train_majority), held_out,
                                           keep_failed=run.config["keep_failed"])
    summary.update(
        split=run.split, pairs=len(run.examples), checkpoint=str(run.out), device=str(run.accelerator.device),
        dataset_card=run.examples.info.description,
        evaluation=run.evaluator.score(best, (held_out, run.teacher_counts["evaluation"])),
        evaluation_train_majority={"label": train_majority, **{k: baseline[k] for k in METRICS}},
    )
    record_training(run.out, run.config, summary, run.evaluator)
    return summary
