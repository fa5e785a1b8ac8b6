"""Fine-tune a reranker on LoCoMo evidence supervision (issue 5).

    memlab train finetune_reranker --config configs/train/reranker.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation, supervision, stage,
optimiser), ``train`` (``memlab.training.loop.fit``: periodic validation and early stopping),
``save_checkpoint`` (the best stage, via ``Stage.save``), then one final evaluation on the
held-out conversations, written next to the checkpoint as ``training.json``.

Objective: for each (question, positive unit) the stage scores the positive against the
question's negatives (drawn from the first stage's top ``validation.depth``, BM25 and dense or dense
alone, the list the reranker re-scores at inference; ``memlab.training.rerank.rerank_examples``) and
is trained with a softmax cross-entropy over that group (the positive is the target): a
ranking loss, since recall@k only depends on the order of the candidates. The first stage is the
one of the ``validation`` evaluator (a ``RerankerEvaluator`` node: its ``pipeline`` and ``depth``):
its memories give the training units and negatives, and its ranking the candidates that evaluator
scores validation and held-out recall on (the evaluator the checkpoint records, which ``memlab
evaluate-stage`` rebuilds).

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir,
seed, precision`` (no/fp16/bf16; ignored on CPU), ``progress`` (a progress bar), ``data {path,
eval_ids, validation_ids, conversations, max_questions, final_fit}`` (``final_fit``: train on every
conversation for the configured length, with no validation and no held-out score), ``validation``
(the ``RerankerEvaluator`` node: ``pipeline`` and ``pipeline_overrides`` the first stage,
``rag_turns.yaml``, dense + BM25 fused by RRF, or ``rag_turns_gemma.yaml``, EmbeddingGemma alone,
its reranker never used; ``depth`` the candidates re-scored; ``metric`` the figure early stopping
reads, e.g. reranked.recall@10), ``stage`` (the reranker's ``_component_`` node), ``negatives,
negative_sampling`` (uniform/top), ``optim {lr, weight_decay, epochs, batch_size (groups per step),
warmup_fraction, max_steps}``, ``eval_every`` (steps), ``patience`` (evaluations),
``validation_questions`` (cap).
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from memlab.bounds import PositiveInt
from memlab.config import instantiate
from memlab.stage import Stage
from memlab.stages.rerank import CrossEncoderReranker
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
from memlab.training.rerank import Candidates, RerankerEvaluator, rerank_examples


@dataclass
class Settings(GradientSettings):
    validation: RerankerEvaluator = field(default_factory=evaluator_node("memlab.training.rerank.RerankerEvaluator"))
    stage: CrossEncoderReranker = field(default_factory=encoder_stage("memlab.stages.rerank.CrossEncoderReranker"))
    negatives: PositiveInt = 8
    negative_sampling: Literal["uniform", "top"] = "uniform"
    optim: Optimiser = field(default_factory=lambda: Optimiser(lr=2e-5, epochs=2, batch_size=16))
    eval_every: PositiveInt = 100
    patience: PositiveInt = 3
    validation_questions: PositiveInt | None = None


@dataclass
class Run:
    settings: Settings
    out: Path
    stage: Any = None
    groups: list[tuple[str, list[str]]] = field(default_factory=list)  # (question, [positive, negatives...])
    validation: Candidates | None = None
    evaluation: Candidates | None = None
    split: dict[str, list[str]] = field(default_factory=dict)
    evaluator: RerankerEvaluator | None = None
    accelerator: Any = None
    optimizer: Any = None
    scheduler: Any = None
    log: MetricsLog | None = None


def build_groups(dataset) -> list[tuple[str, list[str]]]:
    """One group per (question, positive): the positive first, then the question's negatives."""
    positives, negatives, questions = defaultdict(list), defaultdict(list), {}
    for row in dataset:
        questions[row["question_id"]] = row["question"]
        (positives if row["label"] == 1 else negatives)[row["question_id"]].append(row["text"])
    return [(questions[q], [p, *negatives[q]]) for q in questions for p in positives[q] if negatives[q]]


def setup(config: dict[str, Any]) -> Run:
    settings, parts = start_recipe(config, Settings(recipe="finetune_reranker"), final_fit_supported=True)
    run = Run(settings=settings, out=Path(settings.output_dir), split=parts.ids())
    train, validation, evaluation = parts
    run.evaluator = instantiate(settings.validation)
    examples = rerank_examples(train, run.evaluator.first_stage(), negatives=settings.negatives,
                               candidates=run.evaluator.depth, seed=settings.seed, sampling=settings.negative_sampling)
    run.groups = build_groups(examples)
    if not run.groups:
        raise ValueError("no training groups: the training conversations have no question with evidence")
    # Validation runs several times: ``validation_questions`` caps its cost (the first N questions).
    if validation:
        run.validation = run.evaluator.prepare(validation).first(settings.validation_questions)
    if evaluation:
        run.evaluation = run.evaluator.prepare(evaluation)

    run.stage = instantiate(settings.stage)
    run.stage, run.optimizer, run.scheduler, run.accelerator = prepare_training(run.stage, settings, len(run.groups))
    run.log = MetricsLog.for_checkpoint(run.out)
    return run


def group_loss(stage, batch: list[tuple[str, list[str]]]) -> torch.Tensor:
    queries = [question for question, texts in batch for _ in texts]
    texts = [text for _, group in batch for text in group]
    logits = stage.score_pairs(queries, texts)
    losses = [F.cross_entropy(chunk.unsqueeze(0), torch.zeros(1, dtype=torch.long, device=chunk.device))
              for chunk in torch.split(logits, [len(group) for _, group in batch])]
    return torch.stack(losses).mean()


def validate(run: Run) -> dict[str, Any]:
    """The validation result (the reranked order's and the first stage's recalls)."""
    return run.evaluator.score(run.accelerator.unwrap_model(run.stage), run.validation)


def train(run: Run) -> dict[str, Any]:
    batch_size = run.settings.optim.batch_size
    rng = random.Random(run.settings.seed)
    # A final fit (no validation conversation) trains the configured length and keeps the last step.
    baseline = None
    if run.validation:
        baseline = run.evaluator.score(None, run.validation)["first_stage"]
        run.log.write(step=0, validation_first_stage=baseline)
    summary = fit(Optimisation(run.stage, run.accelerator, run.optimizer, run.scheduler),
                  n_steps=total_steps(len(run.groups), run.settings.optim),
                  epoch_batches=lambda: shuffled_batches(run.groups, batch_size, rng),
                  batch_loss=lambda batch: group_loss(run.stage, batch), save=lambda: save_checkpoint(run),
                  log=run.log, validate=(lambda: validate(run)) if run.validation else None,
                  metric=run.evaluator.primary, patience=run.settings.patience,
                  eval_every=run.settings.eval_every, unit="pairs",
                  count=lambda batch: sum(len(texts) for _, texts in batch), progress=run.settings.progress,
                  desc="reranker")
    return {**summary, "validation_first_stage": baseline}


def save_checkpoint(run: Run) -> Path:
    return run.accelerator.unwrap_model(run.stage).save(run.out)


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    best = Stage.load(run.out)  # the early-stopped best, exactly as a user will load it
    final = run.evaluator.score(best, run.evaluation) if run.evaluation else None
    summary.update(split=run.split, groups=len(run.groups), evaluation=final, checkpoint=str(run.out),
                   device=str(run.accelerator.device))
    record_training(run.out, run.settings, summary, run.evaluator)
    return summary
