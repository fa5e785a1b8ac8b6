"""Fine-tune a query router (question -> LoCoMo type, retrieval intent, complexity) (issue 5).

    memlab train finetune_router --config configs/train/router.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation, labelled questions from
``memlab.training.route.routing_examples``, stage, optimiser), ``train`` (``memlab.training.loop.fit``,
validation accuracy after every epoch, early stopping), ``save_checkpoint`` (the best stage),
then one evaluation on the held-out conversations (the ``memlab evaluate-stage`` metrics plus
each head's accuracy), written next to the checkpoint as ``training.json``.

Objective: the sum over heads of the cross-entropy of each head's label. Early stopping reads
the validation ``accuracy`` (question type over categories 1-4, the issue's metric).

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir,
seed, precision``, ``progress`` (a progress bar), ``data {path, eval_ids, validation_ids,
conversations, max_questions}``, ``stage`` (a ``QueryRouter`` ``_component_`` node; its
``heads`` name the label columns it learns), ``optim {lr, weight_decay, epochs, batch_size,
warmup_fraction, max_steps}``, ``patience`` (epochs), ``validation`` (the ``RouterEvaluator``
node; its ``metric``, ``accuracy`` or ``accuracy_5way``, is what early stopping reads).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import torch

from memlab.bounds import PositiveInt
from memlab.config import instantiate
from memlab.stage import Stage
from memlab.stages.route import QueryRouter
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
from memlab.training.loop import Optimisation, fit, shuffled_batches
from memlab.training.route import Questions, RouterEvaluator, RouterMetric, routing_examples
from memlab.types import ANSWERABLE_CATEGORIES


@dataclass
class Settings(GradientSettings):
    stage: QueryRouter = field(default_factory=encoder_stage("memlab.stages.route.QueryRouter"))
    optim: Optimiser = field(default_factory=lambda: Optimiser(lr=1e-4, epochs=10, batch_size=32))
    patience: PositiveInt = 3
    validation: RouterEvaluator = field(default_factory=evaluator_node("memlab.training.route.RouterEvaluator"))


#: The validation figures logged (``RouterEvaluator``'s accuracies).
METRICS = get_args(RouterMetric)


@dataclass
class Run:
    settings: Settings
    out: Path
    stage: Any = None
    examples: list[dict[str, Any]] = field(default_factory=list)
    validation: Questions | None = None
    evaluation: Questions | None = None
    split: dict[str, list[str]] = field(default_factory=dict)
    #: How the router is scored: validation, held-out evaluation, ``memlab evaluate-stage``.
    evaluator: RouterEvaluator | None = None
    accelerator: Any = None
    optimizer: Any = None
    scheduler: Any = None
    log: MetricsLog | None = None


def setup(config: dict[str, Any]) -> Run:
    settings, parts = start_recipe(config, Settings(recipe="finetune_router"))
    run = Run(settings=settings, out=Path(settings.output_dir), split=parts.ids())
    train, validation, evaluation = parts
    run.evaluator = instantiate(settings.validation)
    run.validation, run.evaluation = run.evaluator.prepare(validation), run.evaluator.prepare(evaluation)
    run.examples = list(routing_examples(train))
    if not run.examples:
        raise ValueError(f"no training questions: the training conversations {run.split['train']} have none")
    if run.evaluator.metric == "accuracy" and not any(q.category in ANSWERABLE_CATEGORIES
                                                  for c in validation for q in c.questions):
        raise ValueError(f"the validation conversations {run.split['validation']} have no question of categories "
                         "1-4, so their accuracy is undefined: choose other data.validation_ids or validation.metric=accuracy_5way")
    run.stage = instantiate(settings.stage)
    missing = [head for head in run.stage.labels if head not in run.examples[0]]
    if missing:
        raise ValueError(f"the router's heads {missing} have no label column in the routing data")
    run.stage, run.optimizer, run.scheduler, run.accelerator = prepare_training(run.stage, settings, len(run.examples))
    run.log = MetricsLog.for_checkpoint(run.out)
    return run


def targets(stage, batch: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Class indices per head (-100, ignored, for a label the head does not know)."""
    out = {}
    for head, labels in stage.labels.items():
        index = {label: i for i, label in enumerate(labels)}
        out[head] = torch.tensor([index.get(row[head], -100) for row in batch], dtype=torch.long)
    return out


def head_accuracy(stage, conversations) -> dict[str, float]:
    """Accuracy of every head on the (derived) labels of ``conversations``, all questions."""
    rows = list(routing_examples(conversations))
    predictions = stage.predict([row["question"] for row in rows])
    return {head: sum(p[head] == row[head] for p, row in zip(predictions, rows)) / len(rows)
            for head in stage.labels}


def train(run: Run) -> dict[str, Any]:
    batch_size = run.settings.optim.batch_size
    rng = random.Random(run.settings.seed)
    stage = run.accelerator.unwrap_model(run.stage)

    def batch_loss(batch: list[dict[str, Any]]) -> torch.Tensor:
        return stage.loss(run.stage.logits([row["question"] for row in batch]), targets(stage, batch))

    def validate() -> dict[str, float]:
        scores = run.evaluator.score(stage, run.validation)
        return {k: scores[k] for k in METRICS}

    return fit(Optimisation(run.stage, run.accelerator, run.optimizer, run.scheduler),
               n_steps=total_steps(len(run.examples), run.settings.optim),
               epoch_batches=lambda: shuffled_batches(run.examples, batch_size, rng), batch_loss=batch_loss,
               save=lambda: save_checkpoint(run), log=run.log, validate=validate, metric=run.evaluator.primary,
               patience=run.settings.patience, unit="examples", progress=run.settings.progress, desc="router")


def save_checkpoint(run: Run) -> Path:
    return run.accelerator.unwrap_model(run.stage).save(run.out)


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    best = Stage.load(run.out)
    summary.update(split=run.split, examples=len(run.examples), checkpoint=str(run.out),
                   device=str(run.accelerator.device), evaluation=run.evaluator.score(best, run.evaluation),
                   evaluation_heads=head_accuracy(best, run.evaluation.conversations))
    record_training(run.out, run.settings, summary, run.evaluator)
    return summary
