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
``validation`` (the ``RelationEvaluator`` node: ``teacher`` and ``teacher_overrides`` the
CompassMem config whose cached prompted construction gives the labels, ``keep_failed`` also
sessions whose teacher calls failed, ``metric`` what early stopping reads: ``macro_f1``,
``macro_f1_relations`` or ``accuracy``),
``stage`` (a ``PairRelationClassifier`` ``_component_`` node), ``optim {lr, head_lr (null:
lr; the head starts from scratch), weight_decay, epochs, batch_size, warmup_fraction,
max_steps}``, ``class_weight_power``, ``patience`` (epochs).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import torch

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.config import instantiate
from memlab.stage import Stage
from memlab.stages.relate import MajorityRelationExtractor, PairRelationClassifier
from memlab.training import (
    GradientSettings,
    MetricsLog,
    Optimiser,
    encoder_stage,
    evaluator_node,
    prepare_training,
    record_training,
    start_recipe,
    total_steps,
)
from memlab.training.evaluators import pipeline_label
from memlab.training.loop import Optimisation, fit, shuffled_batches
from memlab.training.relations import (
    RelationEvaluator,
    RelationMetric,
    class_weights,
    evaluate_relation_extractor,
    majority_label,
    relation_examples,
)
from memlab.training.teacher import TeacherLabels


@dataclass
class Settings(GradientSettings):
    validation: RelationEvaluator = field(default_factory=evaluator_node("memlab.training.relations.RelationEvaluator"))
    stage: PairRelationClassifier = field(default_factory=encoder_stage("memlab.stages.relate.PairRelationClassifier"))
    optim: Optimiser = field(default_factory=lambda: Optimiser(lr=1e-4, epochs=5, batch_size=32))
    class_weight_power: NonNegativeFloat = 0.5
    patience: PositiveInt = 2


#: The validation scores logged (``evaluate_relation_extractor``'s).
METRICS = get_args(RelationMetric)


@dataclass
class Run:
    settings: Settings
    out: Path
    stage: Any = None
    examples: Any = None  # the training pairs (a datasets.Dataset)
    labels: dict[str, TeacherLabels] = field(default_factory=dict)  # part -> the teacher's sessions
    split: dict[str, list[str]] = field(default_factory=dict)
    weights: Any = None
    accelerator: Any = None
    optimizer: Any = None
    scheduler: Any = None
    log: MetricsLog | None = None
    evaluator: RelationEvaluator | None = None
    vectors: dict[str, Any] | None = None  # event text -> encoder vector, when the encoder is frozen


def part_labels(run: Run, part: str, conversations: list) -> TeacherLabels:
    """The teacher's sessions of one part of the split (``RelationEvaluator.prepare``); a
    ValueError naming the part when none has a pair to learn or score, so a run never trains or
    selects on nothing."""
    try:
        return run.evaluator.prepare(conversations)
    except ValueError as e:
        raise ValueError(f"the {part} conversations: {e} (it fills the response cache), or choose other "
                         "data.eval_ids / data.validation_ids") from e


def setup(config: dict[str, Any]) -> Run:
    settings, parts = start_recipe(config, Settings(recipe="train_relation_extractor"))
    run = Run(settings=settings, out=Path(settings.output_dir), split=parts.ids())
    train, validation, evaluation = parts
    run.evaluator = instantiate(settings.validation)
    for part, conversations in (("train", train), ("validation", validation), ("evaluation", evaluation)):
        run.labels[part] = part_labels(run, part, conversations)
    run.examples = relation_examples(run.labels["train"].sessions, keep_failed=run.evaluator.keep_failed,
                                     teacher_counts=dict(run.labels["train"].counts),
                                     teacher_config=pipeline_label(run.evaluator.teacher))
    run.stage = instantiate(settings.stage)
    unknown = sorted(set(run.examples["label"]) - set(run.stage.labels))
    if unknown:
        raise ValueError(f"the training pairs have labels {unknown} the classifier's head lacks ({list(run.stage.labels)})")
    if run.stage.encoder.frozen:  # the encoder never changes: encode every training event once
        texts = sorted(set(run.examples["earlier"]) | set(run.examples["later"]))
        run.vectors = dict(zip(texts, run.stage.encode_texts(texts)))
    run.weights = class_weights(run.examples["label"], run.stage.labels, settings.class_weight_power)
    run.stage, run.optimizer, run.scheduler, run.accelerator = prepare_training(run.stage, settings, len(run.examples))
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
    optim = run.settings.optim
    rng = random.Random(run.settings.seed)
    rows = run.examples.to_list()
    stage = run.accelerator.unwrap_model(run.stage)

    def validate() -> dict[str, Any]:
        scores = run.evaluator.score(stage, run.labels["validation"])
        return {k: scores[k] for k in METRICS}

    return fit(Optimisation(run.stage, run.accelerator, run.optimizer, run.scheduler),
               n_steps=total_steps(len(run.examples), optim),
               epoch_batches=lambda: shuffled_batches(rows, optim.batch_size, rng),
               batch_loss=lambda batch: batch_loss(stage, batch, run.weights, run.vectors),
               save=lambda: save_checkpoint(run), log=run.log, validate=validate,
               metric=lambda scores: run.evaluator.primary(scores) or 0.0,  # None: no relation label anywhere
               patience=run.settings.patience, unit="pairs", progress=run.settings.progress,
               desc="relations")


def save_checkpoint(run: Run) -> Path:
    return run.accelerator.unwrap_model(run.stage).save(run.out)


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    best = Stage.load(run.out)
    held_out = run.labels["evaluation"]
    train_majority = majority_label(run.examples["label"])
    baseline = evaluate_relation_extractor(MajorityRelationExtractor(train_majority), held_out.sessions,
                                           keep_failed=run.evaluator.keep_failed)
    summary.update(
        split=run.split, pairs=len(run.examples), checkpoint=str(run.out), device=str(run.accelerator.device),
        dataset_card=run.examples.info.description,
        evaluation=run.evaluator.score(best, held_out),
        evaluation_train_majority={"label": train_majority, **{k: baseline[k] for k in METRICS}},
    )
    record_training(run.out, run.settings, summary, run.evaluator)
    return summary
