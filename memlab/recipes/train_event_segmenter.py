"""Train CompassMem's event segmenter by distillation of the prompted one.

    memlab train train_event_segmenter --config configs/train/event_segmenter.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation; the prompted segmenter's
events on each part replayed from the response cache by ``memlab.training.teacher``; the
boundary labels of ``memlab.training.segmentation.segmentation_examples``; the stage;
the optimiser), ``train`` (``memlab.training.loop.fit`` over batches of sessions, validation boundary F1
after every epoch, early stopping), ``save_checkpoint`` (the best stage), then one evaluation
on the held-out conversations against the teacher, beside the fixed-span baseline (span =
the training sessions' mean teacher event length), written into the checkpoint as
``training.json``.

Objective: binary cross-entropy of p(boundary before turn t) at the labelled positions of a
session (``BoundarySegmenter.loss`` with the mask of ``labelled_positions``: window edges and
failed windows of the teacher are not its decisions; ``pos_weight`` weighs the boundaries). With the encoder frozen
(the stage's default) the turn vectors are computed once and only the GRU and head train.

A part (train, validation, evaluation) with no cached teacher session is refused: the
prompted CompassMem build must have run on those conversations first (its calls are in the
response cache). Sessions with no labelled position (every call failed) are left out.

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir,
seed, precision``, ``progress`` (a progress bar), ``data {path, eval_ids, validation_ids,
conversations, max_questions}``, ``teacher {config, overrides}`` (the CompassMem config whose
cached construction gives the labels), ``stage`` (a ``BoundarySegmenter``
``_component_`` node), ``optim {lr, weight_decay, epochs, batch_size (sessions), warmup_fraction,
max_steps}``, ``pos_weight`` (null: unweighted), ``patience`` (epochs).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from memlab.bounds import PositiveFloat, PositiveInt
from memlab.config import ConfigError, instantiate
from memlab.stage import Stage
from memlab.stages.segment import BoundarySegmenter
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
from memlab.training.evaluators import SegmenterEvaluator
from memlab.training.loop import Optimisation, fit, shuffled_batches
from memlab.training.segmentation import (
    TEACHER_SOURCE,
    boundary_f1,
    boundary_targets,
    labelled_positions,
    mean_event_length,
    segmentation_examples,
    session_boundaries,
    usable_sessions,
)
from memlab.training.teacher import TEACHER_CONFIG, teacher_sessions


@dataclass
class TeacherSettings:
    """The CompassMem config whose cached prompted construction gives the boundary labels."""

    config: str = TEACHER_CONFIG
    overrides: list[str] = field(default_factory=list)


@dataclass
class Settings(GradientSettings):
    teacher: TeacherSettings = field(default_factory=TeacherSettings)
    stage: BoundarySegmenter = field(default_factory=encoder_stage("memlab.stages.segment.BoundarySegmenter"))
    optim: Optimiser = field(default_factory=lambda: Optimiser(lr=1e-3, epochs=30, batch_size=8))
    pos_weight: PositiveFloat | None = None
    patience: PositiveInt = 5


@dataclass
class Run:
    config: dict[str, Any]
    out: Path
    stage: Any = None
    examples: Any = None  # the training data set (its card says where the labels came from)
    training: list = field(default_factory=list)  # TeacherSession, the usable ones
    sessions: list = field(default_factory=list)  # training sessions, in the data set's order
    targets: list = field(default_factory=list)
    masks: list = field(default_factory=list)  # 1 at the labelled positions of each training session
    vectors: list | None = None  # turn vectors of the training sessions, when the encoder is frozen
    validation_vectors: list | None = None  # and of the validation sessions
    validation_gold: list = field(default_factory=list)  # the validation sessions' teacher boundaries
    validation_positions: list = field(default_factory=list)  # and their labelled positions
    validation: list = field(default_factory=list)  # TeacherSession
    evaluation: list = field(default_factory=list)
    baseline_span: int = 1  # the fixed-span baseline's span: the training sessions' mean teacher event length
    split: dict[str, list[str]] = field(default_factory=dict)
    teacher_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    accelerator: Any = None
    optimizer: Any = None
    scheduler: Any = None
    log: MetricsLog | None = None
    evaluator: SegmenterEvaluator | None = None


def cached_teacher(part: str, conversations, config: dict[str, Any]) -> tuple[list, dict[str, int]]:
    """The teacher sessions of one part of the split (failed ones included) and
    ``teacher_sessions``' counts; a part with no usable session is an error saying what to run first."""
    teacher = config["teacher"]
    found, counts = teacher_sessions(conversations, teacher["config"], list(teacher["overrides"] or []))
    if not usable_sessions(found):
        ids = [c.id for c in conversations]
        raise ConfigError(f"train_event_segmenter: no cached teacher session for the {part} conversations {ids} "
                          f"({dict(counts)}): run the prompted build of "
                          f"{teacher['config']} on them first, so the response cache holds its segmenter calls")
    return found, dict(counts)


def setup(config: dict[str, Any]) -> Run:
    config, parts = start_recipe(config, Settings(recipe="train_event_segmenter"))
    run = Run(config=config, out=Path(config["output_dir"]), split=parts.ids())
    train, validation, evaluation = parts
    training, run.teacher_counts["train"] = cached_teacher("train", train, config)
    for part, conversations in (("validation", validation), ("evaluation", evaluation)):
        found, run.teacher_counts[part] = cached_teacher(part, conversations, config)
        setattr(run, part, usable_sessions(found))
    source = f"{TEACHER_SOURCE}; teacher config {config['teacher']['config']} {list(config['teacher']['overrides'])}"
    run.examples = segmentation_examples(training, run.teacher_counts["train"], source)
    run.training = usable_sessions(training)
    by_id = {(t.conversation_id, t.session.id): t.session for t in run.training}
    run.sessions = [by_id[(row["conversation_id"], row["session_id"])] for row in run.examples]
    run.targets = [boundary_targets(row["boundaries"], len(row["turns"])) for row in run.examples]
    run.masks = [boundary_targets(row["positions"], len(row["turns"])) for row in run.examples]
    run.baseline_span = max(1, round(mean_event_length(run.training)))
    run.evaluator = SegmenterEvaluator(teacher=config["teacher"]["config"],
                                       teacher_overrides=list(config["teacher"]["overrides"] or []),
                                       baseline_span=run.baseline_span)
    run.stage = instantiate(config["stage"])
    run.stage, run.optimizer, run.scheduler, run.accelerator = prepare_training(run.stage, config, len(run.sessions))
    stage = run.accelerator.unwrap_model(run.stage)
    run.validation_gold = [session_boundaries(t.session, t.events) for t in run.validation]
    run.validation_positions = [labelled_positions(t) for t in run.validation]
    if stage.encoder.frozen:  # the encoder never changes: encode every training and validation turn once
        with torch.no_grad():
            run.vectors = stage.encode_sessions(run.sessions)
            run.validation_vectors = stage.encode_sessions([t.session for t in run.validation])
    run.log = MetricsLog.for_checkpoint(run.out)
    return run


def validation_scores(run: Run) -> dict[str, float]:
    """Boundary precision / recall / F1 at the validation sessions' labelled positions (their
    frozen turn vectors reused from ``setup`` when there are some)."""
    stage = run.accelerator.unwrap_model(run.stage)
    sessions = [t.session for t in run.validation]
    return boundary_f1(stage.predict_boundaries(sessions, run.validation_vectors), run.validation_gold,
                       run.validation_positions)


def train(run: Run) -> dict[str, Any]:
    optim, pos_weight = run.config["optim"], run.config["pos_weight"]
    rng = random.Random(int(run.config["seed"]))
    stage = run.accelerator.unwrap_model(run.stage)

    def batch_loss(batch: list[int]) -> torch.Tensor:
        if run.vectors is not None:
            logits = stage.logits_from_vectors([run.vectors[i] for i in batch])
        else:
            logits = stage.boundary_logits([run.sessions[i] for i in batch])
        return stage.loss(logits, [run.targets[i] for i in batch], pos_weight, [run.masks[i] for i in batch])

    return fit(Optimisation(run.stage, run.accelerator, run.optimizer, run.scheduler),
               n_steps=total_steps(len(run.sessions), optim),
               epoch_batches=lambda: shuffled_batches(range(len(run.sessions)), int(optim["batch_size"]), rng),
               batch_loss=batch_loss, save=lambda: save_checkpoint(run), log=run.log,
               validate=lambda: validation_scores(run), metric=lambda scores: scores["f1"],
               patience=int(run.config["patience"]), unit="sessions", progress=run.config["progress"],
               desc="segmenter")


def save_checkpoint(run: Run) -> Path:
    return run.accelerator.unwrap_model(run.stage).save(run.out)


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    best = Stage.load(run.out)
    summary.update(split=run.split, checkpoint=str(run.out), device=str(run.accelerator.device),
                   teacher=run.teacher_counts, dataset_card=run.examples.info.description,
                   sessions={"train": len(run.sessions), "validation": len(run.validation),
                             "evaluation": len(run.evaluation)},
                   evaluation=run.evaluator.score(best, (run.evaluation, run.teacher_counts["evaluation"])))
    record_training(run.out, run.config, summary, run.evaluator)
    return summary

