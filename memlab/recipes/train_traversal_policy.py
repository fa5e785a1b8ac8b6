"""Train MAGMA's traversal policy from evidence supervision (issue 5).

    memlab train train_traversal_policy --config configs/train/traversal_policy.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation, one MAGMA memory per
conversation, each question's anchors computed once, the policy to train), ``train`` (an
explicit loop; validation recall@10 of the MAGMA retrieval after every epoch, early stopping),
``save_checkpoint`` (the best policy), then one evaluation on the held-out conversations with
the trained and the initial (Table 6) weights, written next to the checkpoint.

Objective: at every beam step the policy ranks the candidate nodes by cumulative score; where
a candidate holds gold evidence (``memlab.training.traversal.traversal_targets``), the loss is
the negative log of the softmax mass (over log-scores) of the evidence candidates, which
pushes evidence nodes up the beam. Anchors are fixed inputs (they come from retrieval).

The memories are built by the ``pipeline`` config with whatever slow path it has: the default
config turns it off (``event_extractor: null``, ``consolidator: null``), so the graphs have the
temporal and semantic edge spaces only and training needs no LLM. The weights of edge types
absent from the graphs receive no gradient and keep their initial values.

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir,
seed``, ``progress`` (a progress bar), ``data {...}`` (as the other recipes), ``validation``
(the ``SlotRecallEvaluator`` node: ``pipeline`` and ``pipeline_overrides`` build the MAGMA
memories trained and scored on, ``slot`` the traverser's), ``stage`` (the ``TraversalPolicy``
``_component_`` node, ``trainable: true``), ``optim {lr (Adam), epochs}``, ``patience`` (epochs).
Early stopping reads the validation recall@10. The policy is a handful of scalars trained on
the CPU: no accelerator, no ``precision``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from memlab.bounds import PositiveFloat, PositiveInt
from memlab.clock import active_seconds
from memlab.config import instantiate
from memlab.stage import Stage
from memlab.stages.traverse import TraversalPolicy, TraverseIn
from memlab.training import (
    ConversationSettings,
    EarlyStopping,
    MetricsLog,
    evaluator_node,
    record_training,
    start_recipe,
)
from memlab.training.supervision import evaluable_questions
from memlab.training.traversal import RetrievalPairs, SlotRecallEvaluator, magma_event_units, traversal_targets


@dataclass
class PolicyOptimiser:
    """Adam over the policy's few weights: its learning rate and epochs over the training walks."""

    lr: PositiveFloat = 0.05
    epochs: PositiveInt = 5


@dataclass
class Settings(ConversationSettings):
    progress: bool = True
    #: MAGMA's temporal and semantic edges only (no LLM): the memories trained and scored on.
    validation: SlotRecallEvaluator = field(default_factory=evaluator_node(
        "memlab.training.traversal.SlotRecallEvaluator", pipeline="magma",
        pipeline_overrides={"event_extractor": None, "consolidator": None}, slot="traverser", ks=[10], baseline=False))
    stage: TraversalPolicy = field(default_factory=lambda: {"_component_": "memlab.stages.traverse.TraversalPolicy",
                                                            "trainable": True})
    optim: PolicyOptimiser = field(default_factory=PolicyOptimiser)
    patience: PositiveInt = 2


@dataclass
class Walk:
    """One training question: its memory, the traversal input and the evidence nodes."""

    question: Any
    memory: Any
    inputs: TraverseIn
    targets: frozenset[str]


@dataclass
class Run:
    settings: Settings
    out: Path
    pipeline: Any = None
    policy: Any = None
    walks: list[Walk] = field(default_factory=list)
    validation: RetrievalPairs | None = None
    evaluation: RetrievalPairs | None = None
    split: dict[str, list[str]] = field(default_factory=dict)
    optimizer: Any = None
    log: MetricsLog | None = None
    evaluator: SlotRecallEvaluator | None = None


def setup(config: dict[str, Any]) -> Run:
    settings, parts = start_recipe(config, Settings(recipe="train_traversal_policy"))
    run = Run(settings=settings, out=Path(settings.output_dir), split=parts.ids())
    train, validation, evaluation = parts
    run.evaluator = instantiate(settings.validation)
    run.pipeline = run.evaluator.pipeline_named("pipeline")  # the one the evaluator scores with
    for conversation in train:
        memory = run.pipeline.build(conversation.history())
        questions = evaluable_questions(conversation)
        targets = {t["question_id"]: t["targets"] for t in traversal_targets(questions, magma_event_units(memory))}
        for question in questions:
            if question.id not in targets:
                continue
            route, vector, fused, _ = run.pipeline.anchors(memory, question.as_query())
            inputs = TraverseIn(memory.graph, vector, route.intent, tuple(fused[: run.pipeline.anchor_k]),
                                run.pipeline.edge_types)
            run.walks.append(Walk(question, memory, inputs, frozenset(targets[question.id])))
    for part, conversations, key in (("validation", validation, "validation_ids"), ("evaluation", evaluation, "eval_ids")):
        try:
            setattr(run, part, run.evaluator.prepare(conversations))
        except ValueError as e:
            raise ValueError(f"the {part} conversations: {e}: nothing to score recall@10 on, choose other "
                             f"data.{key}") from e
    run.policy = instantiate(settings.stage)
    trainable = [p for p in run.policy.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("the policy has no trainable parameter: set stage.trainable=true")
    run.optimizer = torch.optim.Adam(trainable, lr=settings.optim.lr)
    run.log = MetricsLog.for_checkpoint(run.out)
    return run


def walk_loss(policy, walk: Walk) -> torch.Tensor | None:
    """Mean over beam steps that offer an evidence node of -log(softmax mass on evidence)."""
    out = policy.run_one(walk.inputs)
    losses = []
    for candidates, scores in out.steps:
        hits = [i for i, node in enumerate(candidates) if node in walk.targets]
        if hits and len(hits) < len(candidates):
            logits = torch.log(scores.clamp(min=1e-12))
            losses.append(torch.logsumexp(logits, 0) - torch.logsumexp(logits[hits], 0))
    return torch.stack(losses).mean() if losses else None


def recall(run: Run, policy, prepared: RetrievalPairs) -> float:
    """Mean evidence recall@10 of MAGMA's retrieval with ``policy`` as its traverser (the score of
    the ``SlotRecallEvaluator`` the checkpoint records); a ValueError when no pair has evidence
    to score (a mean of nothing is not a recall of 0)."""
    value = run.evaluator.primary(run.evaluator.score(policy, prepared))
    if value is None:
        raise ValueError(f"{run.evaluator.metric}: none of the {len(prepared.pairs)} questions has gold evidence to score")
    return value


def train(run: Run) -> dict[str, Any]:
    epochs = run.settings.optim.epochs
    stopper = EarlyStopping(patience=run.settings.patience)
    rng = random.Random(run.settings.seed)
    initial = recall(run, run.policy, run.validation)
    stopper.step(initial)
    save_checkpoint(run)  # the initial weights stay the answer unless training beats them
    run.log.write(epoch=0, validation_recall_at_10=initial)
    seen, train_seconds, best = 0, 0.0, {"epoch": 0, "validation_recall_at_10": initial}
    for epoch in range(1, epochs + 1):
        order = list(range(len(run.walks)))
        rng.shuffle(order)
        total, counted = 0.0, 0
        for i in tqdm(order, desc=f"policy epoch {epoch}", disable=not run.settings.progress):
            started = active_seconds()
            loss = walk_loss(run.policy, run.walks[i])
            if loss is not None:
                run.optimizer.zero_grad()
                loss.backward()
                run.optimizer.step()
                total, counted = total + loss.item(), counted + 1
            train_seconds += active_seconds() - started
            seen += 1
        score = recall(run, run.policy, run.validation)
        improved = stopper.step(score)
        run.log.write(epoch=epoch, loss=total / max(counted, 1), validation_recall_at_10=score, best=stopper.best,
                      walks_per_second=seen / train_seconds, weights=describe(run.policy))
        if improved:
            best = {"epoch": epoch, "validation_recall_at_10": score}
            save_checkpoint(run)
        if stopper.should_stop:
            break
    return {"epochs": epoch, "walks": len(run.walks), "train_seconds": round(train_seconds, 1),
            "walks_per_second": round(seen / max(train_seconds, 1e-9), 1), "best": best}


def describe(policy) -> dict[str, Any]:
    return {"weight": policy.weight.detach().tolist(), "lambda1": policy.lambda1.item(),
            "lambda2": policy.lambda2.item(), "gamma": policy.gamma.item()}


def save_checkpoint(run: Run) -> Path:
    return run.policy.save(run.out)


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    trained = Stage.load(run.out)
    summary.update(
        split=run.split, checkpoint=str(run.out), trained_weights=describe(trained),
        evaluation={"recall@10_initial": recall(run, instantiate(run.settings.stage), run.evaluation),
                    "recall@10_trained": recall(run, trained, run.evaluation),
                    "questions": len(run.evaluation.pairs)},
    )
    record_training(run.out, run.settings, summary, run.evaluator)
    return summary
