"""Fine-tune a bi-encoder retriever on LoCoMo evidence supervision (issue 25).

    memlab train finetune_retriever --config configs/train/retriever.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation, supervision, stage,
optimiser), ``train`` (``memlab.training.loop.fit``: periodic validation and early stopping),
``save_checkpoint`` (the best stage, via ``Stage.save``), then one evaluation on the held-out
conversations, written next to the checkpoint as ``training.json``.

Objective: InfoNCE. A batch holds ``optim.batch_size`` questions; each brings one of its evidence
turns (drawn anew every epoch, so a question with several is one group, never its own in-batch
negative) and ``negatives`` hard negatives, the best-ranked non-evidence turns of the BM25 and
dense rankings of the ``validation`` evaluator's ``pipeline`` with its packaged embedder
(``memlab.training.rerank.rerank_examples``, ``sampling="top"``).
Each question is scored against every document of the batch (the other questions' evidence
and negatives are in-batch negatives) and trained to pick its own evidence turn.

Validation and evaluation rank with that ``pipeline`` and the trained embedder in its slot
(``validation``: a ``memlab.training.retrieve.RetrieverEvaluator`` node, the evaluator the
checkpoint records); early stopping on its ``metric``.

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir,
seed, precision, progress``, ``data {path, eval_ids, validation_ids, conversations,
max_questions, sessions}``, ``validation`` (the evaluator node; its ``pipeline`` and
``pipeline_overrides`` the pipeline config whose embedder slot the retriever fills: it mines hard
negatives with its own embedder and scores with the stage's; its ``metric``, e.g. recall@10), ``stage`` (the retriever's ``_component_`` node), ``negatives``,
``candidates`` (ranking depth the negatives come from), ``optim {lr, weight_decay, epochs,
batch_size, warmup_fraction, max_steps}``, ``eval_every`` (steps), ``patience`` (evaluations).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from memlab.bounds import PositiveInt
from memlab.config import instantiate
from memlab.stage import Stage
from memlab.stages.retrieve import BiEncoderEmbedder
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
from memlab.training.rerank import rerank_examples
from memlab.training.retrieve import PipelineTree, RetrieverEvaluator


@dataclass
class Settings(GradientSettings):
    validation: RetrieverEvaluator = field(default_factory=evaluator_node("memlab.training.retrieve.RetrieverEvaluator"))
    stage: BiEncoderEmbedder = field(default_factory=encoder_stage("memlab.stages.retrieve.BiEncoderEmbedder"))
    negatives: PositiveInt = 2
    candidates: PositiveInt = 20
    optim: Optimiser = field(default_factory=lambda: Optimiser(lr=5e-4, epochs=3, batch_size=32))
    eval_every: PositiveInt = 25
    patience: PositiveInt = 3


@dataclass
class Group:
    question: str
    positives: list[str]
    negatives: list[str]


@dataclass
class Run:
    settings: Settings
    out: Path
    stage: Any = None
    groups: list[Group] = field(default_factory=list)
    validation: PipelineTree | None = None
    evaluation: PipelineTree | None = None
    split: dict[str, list[str]] = field(default_factory=dict)
    evaluator: RetrieverEvaluator | None = None
    accelerator: Any = None
    optimizer: Any = None
    scheduler: Any = None
    log: MetricsLog | None = None


def build_groups(dataset) -> list[Group]:
    """One group per question: all its evidence turns and its hard negatives."""
    groups: dict[str, Group] = {}
    for row in dataset:
        group = groups.setdefault(row["question_id"], Group(row["question"], [], []))
        (group.positives if row["label"] == 1 else group.negatives).append(row["text"])
    return [g for g in groups.values() if g.positives]


def setup(config: dict[str, Any]) -> Run:
    settings, parts = start_recipe(config, Settings(recipe="finetune_retriever"))
    run = Run(settings=settings, out=Path(settings.output_dir), split=parts.ids())
    train, validation, evaluation = parts
    run.evaluator = instantiate(settings.validation)
    examples = rerank_examples(train, run.evaluator.first_stage(),
                               negatives=settings.negatives, candidates=settings.candidates, seed=settings.seed,
                               sampling="top")
    run.validation, run.evaluation = run.evaluator.prepare(validation), run.evaluator.prepare(evaluation)
    run.groups = build_groups(examples)
    if not run.groups:
        raise ValueError("no training groups: the training conversations have no question with evidence")
    run.stage = instantiate(settings.stage)
    run.stage, run.optimizer, run.scheduler, run.accelerator = prepare_training(run.stage, settings, len(run.groups))
    run.log = MetricsLog.for_checkpoint(run.out)
    return run


def batch_loss(stage, batch: list[Group], rng: random.Random) -> torch.Tensor:
    """InfoNCE of each question against the batch's documents (its drawn evidence turn is the target)."""
    documents = [rng.choice(group.positives) for group in batch]
    documents += [negative for group in batch for negative in group.negatives]
    queries = stage.embed([group.question for group in batch], is_query=True)
    vectors = stage.embed(documents, is_query=False)
    return stage.loss(queries, vectors, torch.arange(len(batch)))


def validate(run: Run, prepared: PipelineTree) -> dict[str, Any]:
    return run.evaluator.score(run.accelerator.unwrap_model(run.stage), prepared)


def train(run: Run) -> dict[str, Any]:
    batch_size = run.settings.optim.batch_size
    rng = random.Random(run.settings.seed)
    # Step 0 is the untrained stage (the packaged encoder): training must beat it to replace it.
    summary = fit(Optimisation(run.stage, run.accelerator, run.optimizer, run.scheduler),
                  n_steps=total_steps(len(run.groups), run.settings.optim),
                  # InfoNCE needs in-batch negatives: a last batch of one is left out
                  epoch_batches=lambda: [b for b in shuffled_batches(run.groups, batch_size, rng) if len(b) >= 2],
                  batch_loss=lambda batch: batch_loss(run.stage, batch, rng), save=lambda: save_checkpoint(run),
                  log=run.log, validate=lambda: validate(run, run.validation), metric=run.evaluator.primary,
                  patience=run.settings.patience, eval_every=run.settings.eval_every, validate_first=True,
                  unit="questions", progress=run.settings.progress, desc="retriever")
    return summary


def save_checkpoint(run: Run) -> Path:
    return run.accelerator.unwrap_model(run.stage).save(run.out)


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    best = Stage.load(run.out)  # the early-stopped best, exactly as a user will load it
    untrained = instantiate(run.settings.stage)
    summary.update(split=run.split, groups=len(run.groups), checkpoint=str(run.out),
                   device=str(run.accelerator.device),
                   evaluation=run.evaluator.score(best, run.evaluation),
                   evaluation_untrained=run.evaluator.score(untrained, run.evaluation))
    record_training(run.out, run.settings, summary, run.evaluator)
    return summary
