"""Train CompassMem's event segmenter: by distillation of the prompted one, or from LoCoMo's observations.

    memlab train train_event_segmenter --config configs/train/event_segmenter.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation; the prompted segmenter's
events on each part replayed from the response cache by ``memlab.training.teacher``; the
boundary labels of ``memlab.training.segmentation.segmentation_examples``; the stage;
the optimiser), ``train`` (``memlab.training.loop.fit`` over batches of sessions, validation boundary F1
after every epoch, early stopping), ``save_checkpoint`` (the best stage), then one evaluation
on the held-out conversations against the teacher, beside the fixed-span baseline (span =
the training sessions' mean teacher event length), written into the checkpoint as
``training.json``.

Labels (``labels``): ``teacher`` (the prompted segmenter's boundaries at the positions it decided,
``memlab.training.segmentation``) or ``observations`` (boundaries derived from LoCoMo's
observation annotations, ``memlab.training.observation_boundaries``: positions with no boundary
and gaps holding exactly one; ``observations {percentile, embedder}`` set how). Either way the
held-out conversations are scored against the teacher (where the cache holds it) and, with
``observations``, against the observation labels too, each beside its fixed-span baseline.

Objective: ``boundary_label_loss``, the negative log-likelihood of the labels (at a teacher's
labelled positions, the binary cross-entropy; ``pos_weight`` weighs the boundaries / gaps).
With the encoder frozen (the stage's default) the turn vectors are computed once and only the
head trains.

A part (train, validation, evaluation) with no cached teacher session is refused: the
prompted CompassMem build must have run on those conversations first (its calls are in the
response cache). With ``labels: observations`` only the evaluation part needs the teacher, and a
part whose conversations carry no observation is refused. Sessions with no labelled position (every call failed) are left out.

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir,
seed, precision``, ``progress`` (a progress bar), ``data {path, eval_ids, validation_ids,
conversations, max_questions}``, ``validation`` (the ``SegmenterEvaluator`` node: its ``teacher``
and ``teacher_overrides`` the CompassMem config whose cached construction gives the labels and
the held-out score; ``baseline_span`` null: the training labels' mean event length), ``labels`` (teacher | observations),
``observations {percentile, embedder}``, ``stage`` (a ``BoundarySegmenter`` or
``WindowBoundarySegmenter`` ``_component_`` node), ``optim {lr, weight_decay, epochs, batch_size (sessions), warmup_fraction,
max_steps}``, ``pos_weight`` (null: unweighted), ``patience`` (epochs).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import torch

from memlab.bounds import PositiveFloat, PositiveInt, Range
from memlab.config import ConfigError, instantiate
from memlab.embed import Embedder
from memlab.stage import Stage
from memlab.stages.segment import BoundarySegmenter
from memlab.stages.segment.neural import decode_boundaries
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
from memlab.training.observation_boundaries import (
    evaluate_on_observations,
    observation_examples,
    observation_labels,
)
from memlab.training.segmentation import (
    TEACHER_SOURCE,
    BoundaryLabels,
    SegmenterEvaluator,
    boundary_label_loss,
    label_f1,
    labelled_positions,
    mean_event_length,
    segmentation_examples,
    session_boundaries,
    usable_sessions,
)
from memlab.training.teacher import TeacherLabels


@dataclass
class ObservationSettings:
    """How boundaries are read from LoCoMo's observations (``memlab.training.observation_boundaries``):
    facts as similar as this ``percentile`` of cross-session fact pairs are one event; ``embedder``
    measures it."""

    percentile: Annotated[float, Range(0, 100)] = 90.0
    embedder: Embedder = field(default_factory=lambda: {"_component_": "memlab.embed.SentenceTransformerEmbedder"})


@dataclass
class Settings(GradientSettings):
    validation: SegmenterEvaluator = field(default_factory=evaluator_node(
        "memlab.training.segmentation.SegmenterEvaluator"))
    labels: Literal["teacher", "observations"] = "teacher"
    observations: ObservationSettings = field(default_factory=ObservationSettings)
    stage: BoundarySegmenter = field(default_factory=encoder_stage("memlab.stages.segment.BoundarySegmenter"))
    optim: Optimiser = field(default_factory=lambda: Optimiser(lr=1e-3, epochs=30, batch_size=8))
    pos_weight: PositiveFloat | None = None
    patience: PositiveInt = 5
    #: After training, set the stage's decoding threshold to the one of ``THRESHOLDS`` with the
    #: best validation F1 (gap labels spread p over a gap, so 0.5 is rarely right for them).
    calibrate_threshold: bool = False


#: The thresholds ``calibrate_threshold`` tries.
THRESHOLDS = tuple(round(0.05 * k, 2) for k in range(1, 19))


@dataclass
class Run:
    settings: Settings
    out: Path
    stage: Any = None
    examples: Any = None  # the training data set (its card says where the labels came from)
    sessions: list = field(default_factory=list)  # training sessions, in the data set's order
    labels: list = field(default_factory=list)  # their BoundaryLabels
    vectors: list | None = None  # turn vectors of the training sessions, when the encoder is frozen
    validation_sessions: list = field(default_factory=list)
    validation_labels: list = field(default_factory=list)
    validation_vectors: list | None = None  # turn vectors of the validation sessions
    evaluation: TeacherLabels | None = None
    evaluation_conversations: list = field(default_factory=list)
    observation_labels: dict = field(default_factory=dict)  # (conversation, session) -> BoundaryLabels, observations only
    baseline_span: int = 1  # the fixed-span baseline's span: the training labels' mean event length
    split: dict[str, list[str]] = field(default_factory=dict)
    teacher_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    accelerator: Any = None
    optimizer: Any = None
    scheduler: Any = None
    log: MetricsLog | None = None
    evaluator: SegmenterEvaluator | None = None


def teacher_part(run: Run, part: str, conversations) -> TeacherLabels:
    """The teacher's labels of one part of the split (``SegmenterEvaluator.prepare``: failed
    sessions included) and their counts in ``run.teacher_counts``; a part with no usable session
    is an error saying what to run first."""
    try:
        labels = run.evaluator.prepare(conversations)
    except ValueError as e:
        raise ConfigError(f"train_event_segmenter: the {part} conversations: {e}, so the response cache holds its "
                          "segmenter calls") from e
    run.teacher_counts[part] = dict(labels.counts)
    return labels


def setup(config: dict[str, Any]) -> Run:
    settings, parts = start_recipe(config, Settings(recipe="train_event_segmenter"))
    run = Run(settings=settings, out=Path(settings.output_dir), split=parts.ids())
    train, validation, evaluation = parts
    run.evaluator = instantiate(settings.validation)
    run.evaluation, run.evaluation_conversations = teacher_part(run, "evaluation", evaluation), list(evaluation)
    if settings.labels == "teacher":
        teacher_labels(run, train, validation)
    else:
        annotation_labels(run, train, validation, evaluation)
    if run.evaluator.baseline_span is None:  # the training labels' mean, known once they are
        run.evaluator.baseline_span = run.baseline_span
    run.stage = instantiate(settings.stage)
    run.stage, run.optimizer, run.scheduler, run.accelerator = prepare_training(run.stage, settings, len(run.sessions))
    stage = run.accelerator.unwrap_model(run.stage)
    if stage.encoder.frozen:  # the encoder never changes: encode every training and validation turn once
        with torch.no_grad():
            run.vectors = stage.encode_sessions(run.sessions)
            run.validation_vectors = stage.encode_sessions(run.validation_sessions)
    run.log = MetricsLog.for_checkpoint(run.out)
    return run


def teacher_labels(run: Run, train, validation) -> None:
    """Training and validation labels distilled from the prompted segmenter (its cached calls)."""
    training = teacher_part(run, "train", train).sessions
    found = teacher_part(run, "validation", validation).sessions
    source = f"{TEACHER_SOURCE}; teacher config {pipeline_label(run.evaluator.teacher)} {run.evaluator.teacher_overrides}"
    run.examples = segmentation_examples(training, run.teacher_counts["train"], source)
    kept = usable_sessions(training)
    by_id = {(t.conversation_id, t.session.id): t.session for t in kept}
    run.sessions = [by_id[(row["conversation_id"], row["session_id"])] for row in run.examples]
    run.labels = [BoundaryLabels.exact(row["boundaries"], row["positions"]) for row in run.examples]
    checked = usable_sessions(found)
    run.validation_sessions = [t.session for t in checked]
    run.validation_labels = [BoundaryLabels.exact(session_boundaries(t.session, t.events), labelled_positions(t))
                             for t in checked]
    run.baseline_span = max(1, round(mean_event_length(kept)))


def annotation_labels(run: Run, train, validation, evaluation) -> None:
    """Training, validation and evaluation labels read from LoCoMo's observations; a part with
    no observation is refused."""
    observations = run.settings.observations
    embedder = instantiate(observations.embedder)
    for part, conversations in (("train", train), ("validation", validation), ("evaluation", evaluation)):
        found = {(c.id, sid): labels for c in conversations
                 for sid, labels in observation_labels(c, embedder, float(observations.percentile)).items()}
        if not found:
            raise ConfigError(f"train_event_segmenter: labels: observations, but the {part} conversations "
                              f"{[c.id for c in conversations]} carry no observation annotations")
        run.observation_labels.update(found)
        if part == "train":
            run.examples = observation_examples(conversations, found, float(observations.percentile),
                                                str(embedder.identity))
    sessions = {(c.id, s.id): s for c in (*train, *validation) for s in c.sessions}
    run.sessions = [sessions[(row["conversation_id"], row["session_id"])] for row in run.examples]
    run.labels = [run.observation_labels[(row["conversation_id"], row["session_id"])] for row in run.examples]
    checked = [(c.id, s.id) for c in validation for s in c.sessions if (c.id, s.id) in run.observation_labels]
    run.validation_sessions = [sessions[key] for key in checked]
    run.validation_labels = [run.observation_labels[key] for key in checked]
    turns = sum(len(session.turns) for session in run.sessions)
    run.baseline_span = max(1, round(turns / sum(len(labels.gaps) + 1 for labels in run.labels)))


def validation_scores(run: Run) -> dict[str, float]:
    """Boundary precision / recall / F1 against the validation labels (``label_f1``; the frozen
    turn vectors reused from ``setup`` when there are some), at the stage's threshold, or with
    ``calibrate_threshold`` at the best of ``THRESHOLDS`` (the one calibration will pick)."""
    return stage_validation_scores(run, run.accelerator.unwrap_model(run.stage))


def stage_validation_scores(run: Run, stage: BoundarySegmenter) -> dict[str, float]:
    """``validation_scores`` of ``stage``."""
    probabilities = stage.boundary_probabilities(run.validation_sessions, run.validation_vectors)
    thresholds = THRESHOLDS if run.settings.calibrate_threshold else (stage.threshold,)
    scored = [(threshold, label_f1([decode_boundaries(p, threshold, stage.max_span, stage.peaks_only)
                                    for p in probabilities], run.validation_labels)) for threshold in thresholds]
    threshold, best = max(scored, key=lambda item: (item[1]["f1"], -item[0]))
    return {**best, "threshold": threshold}


def train(run: Run) -> dict[str, Any]:
    optim, pos_weight = run.settings.optim, run.settings.pos_weight
    rng = random.Random(run.settings.seed)
    stage = run.accelerator.unwrap_model(run.stage)

    def batch_loss(batch: list[int]) -> torch.Tensor:
        if run.vectors is not None:
            logits = stage.logits_from_vectors([run.vectors[i] for i in batch])
        else:
            logits = stage.boundary_logits([run.sessions[i] for i in batch])
        return boundary_label_loss(logits, [run.labels[i] for i in batch], pos_weight)

    return fit(Optimisation(run.stage, run.accelerator, run.optimizer, run.scheduler),
               n_steps=total_steps(len(run.sessions), optim),
               epoch_batches=lambda: shuffled_batches(range(len(run.sessions)), optim.batch_size, rng),
               batch_loss=batch_loss, save=lambda: save_checkpoint(run), log=run.log,
               validate=lambda: validation_scores(run), metric=lambda scores: scores["f1"],
               patience=run.settings.patience, unit="sessions", progress=run.settings.progress,
               desc="segmenter")


def calibrate_threshold(run: Run, stage: BoundarySegmenter) -> dict[str, Any]:
    """Set ``stage.threshold`` to the one of ``THRESHOLDS`` with the best validation F1 (the
    lowest such one on a tie); return it and its scores."""
    scores = stage_validation_scores(run, stage)
    stage.set_setting("threshold", scores["threshold"])
    return scores


def save_checkpoint(run: Run) -> Path:
    return run.accelerator.unwrap_model(run.stage).save(run.out)


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    best = Stage.load(run.out)
    if run.settings.calibrate_threshold:
        summary["threshold"] = calibrate_threshold(run, best)
        best.save(run.out)
    summary.update(split=run.split, checkpoint=str(run.out), device=str(run.accelerator.device),
                   labels=run.settings.labels, teacher=run.teacher_counts, dataset_card=run.examples.info.description,
                   sessions={"train": len(run.sessions), "validation": len(run.validation_sessions),
                             "evaluation": len(usable_sessions(run.evaluation.sessions))},
                   evaluation=run.evaluator.score(best, run.evaluation))
    if run.observation_labels:
        summary["evaluation_observations"] = evaluate_on_observations(
            best, run.evaluation_conversations, run.observation_labels, run.baseline_span)
    record_training(run.out, run.settings, summary, run.evaluator)
    return summary

