"""Train CompassMem's explorer policy (SKIP / EXPAND / ANSWER + next nodes) from evidence supervision.

    memlab train train_explorer_policy --config configs/train/explorer_policy.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation, one CompassMem memory per
conversation built by the ``pipeline`` config, the navigation states of every part, the policy
to train), ``train`` (``memlab.training.loop.fit``; validation action accuracy every ``eval_every`` steps,
early stopping), ``save_checkpoint`` (the best policy), then one evaluation on the held-out
conversations, written next to the checkpoint as ``training.json``.

Supervision (``memlab.training.navigation.navigation_examples``): gold evidence + the memory's
provenance label each state of a simulated exploration (dense top ``top_k`` of the question, then
breadth over relation edges); the question is the one subgoal. ``top_k`` and ``max_next`` are
the pipeline's own, so the states look like those its search will hand the policy.

Objective: ``ExplorerPolicy.loss``: action cross-entropy, weighted per action by
``(most frequent count / count) ** class_balance`` (0: unweighted; SKIP dominates the states),
plus the relevance, satisfaction and next-node binary cross-entropies. A batch holds the states
of consecutive questions (questions shuffled), so it shares their texts and encodes fewer.

The memories and states come from the ``validation`` evaluator (a ``NavigatorEvaluator`` node):
its ``pipeline`` builds the memories, whatever that config holds: the default
(``configs/pipelines/compassmem_trained_construction.yaml``: trained segmenter and relation extractor)
builds with no LLM call. A pipeline without relation edges gives states without neighbours:
the next-node head then gets no training signal.

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir,
seed, precision`` (no/fp16/bf16; ignored on CPU), ``progress``, ``data {...}`` (as the other
recipes), ``validation`` (the ``NavigatorEvaluator`` node: ``pipeline`` and ``pipeline_overrides``,
``hops`` and ``max_states`` of the simulated states, ``metric`` for early stopping,
``action_accuracy`` or ``balanced_accuracy``), ``stage`` (the ``ExplorerPolicy`` ``_component_``
node), ``optim {lr (encoder),
head_lr (heads), weight_decay, epochs, batch_size (states per step), warmup_fraction, max_steps}``,
``class_balance``, ``eval_every`` (steps), ``patience`` (evaluations), ``calibrate_next_threshold``
(after training, the next-node threshold with the best validation F1 is saved with the policy).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import torch

from memlab.bounds import PositiveInt, UnitFloat
from memlab.config import instantiate
from memlab.stage import Stage
from memlab.stages.navigate import ACTIONS, ExplorerPolicy
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
from memlab.training.loop import Optimisation, fit
from memlab.training.navigation import NavigationStates, NavigatorEvaluator, NavigatorMetric, row_inputs, row_target


@dataclass
class Settings(GradientSettings):
    validation: NavigatorEvaluator = field(default_factory=evaluator_node(
        "memlab.training.navigation.NavigatorEvaluator"))
    stage: ExplorerPolicy = field(default_factory=encoder_stage("memlab.stages.navigate.ExplorerPolicy"))
    optim: Optimiser = field(default_factory=lambda: Optimiser(lr=5e-4, head_lr=3e-3, epochs=3, batch_size=16))
    class_balance: UnitFloat = 0.5
    eval_every: PositiveInt = 100
    patience: PositiveInt = 3
    #: After training, set the policy's ``next_threshold`` to the one of ``NEXT_THRESHOLDS`` with
    #: the best validation next-node F1 (positive next nodes are a few percent of the neighbours,
    #: so at 0.5 the head names none and EXPAND walks no edge).
    calibrate_next_threshold: bool = False


METRICS = get_args(NavigatorMetric)
#: The next-node thresholds ``calibrate_next_threshold`` tries.
NEXT_THRESHOLDS = tuple(round(0.05 * k, 2) for k in range(1, 11))


@dataclass
class Run:
    settings: Settings
    out: Path
    stage: Any = None
    questions: list[list[tuple[Any, Any]]] = field(default_factory=list)  # (inputs, target) states per question
    datasets: dict[str, NavigationStates] = field(default_factory=dict)  # train / validation / evaluation
    split: dict[str, list[str]] = field(default_factory=dict)
    action_weights: torch.Tensor | None = None
    majority: str = "SKIP"
    accelerator: Any = None
    optimizer: Any = None
    scheduler: Any = None
    log: MetricsLog | None = None
    evaluator: NavigatorEvaluator | None = None


def setup(config: dict[str, Any]) -> Run:
    settings, split = start_recipe(config, Settings(recipe="train_explorer_policy"))
    run = Run(settings=settings, out=Path(settings.output_dir), split=split.ids())
    parts = split._asdict()
    run.evaluator = instantiate(settings.validation)
    for part, conversations in parts.items():
        run.datasets[part] = run.evaluator.prepare(conversations)
        if not len(run.datasets[part].examples):
            raise ValueError(f"the {part} conversations {run.split[part]} give no navigation state (no question of "
                             "categories 1-4 whose evidence an event holds): choose other data")
    by_question: dict[str, list] = defaultdict(list)
    for row in run.datasets["train"].examples:
        by_question[row["question_id"]].append((row_inputs(row), row_target(row)))
    run.questions = list(by_question.values())
    counts = Counter(row["action"] for row in run.datasets["train"].examples)
    run.majority = run.evaluator.majority = counts.most_common(1)[0][0]  # the baseline a score is beside
    top = max(counts.values())
    balance = settings.class_balance
    run.action_weights = torch.tensor([(top / counts[a]) ** balance if counts[a] else 1.0 for a in ACTIONS])

    run.stage = instantiate(settings.stage)
    run.stage, run.optimizer, run.scheduler, run.accelerator = prepare_training(run.stage, settings, len(run.datasets["train"].examples))
    run.log = MetricsLog.for_checkpoint(run.out)
    return run


def batches(run: Run, rng: random.Random) -> list[list[tuple[Any, Any]]]:
    """The training states, questions shuffled, cut into ``optim.batch_size`` consecutive states."""
    questions = list(run.questions)
    rng.shuffle(questions)
    states = [state for question in questions for state in question]
    size = run.settings.optim.batch_size
    return [states[start:start + size] for start in range(0, len(states), size)]


def batch_loss(stage, batch: list[tuple[Any, Any]], action_weights: torch.Tensor | None) -> torch.Tensor:
    items = [inputs for inputs, _ in batch]
    return stage.loss(stage.logits(items), [target for _, target in batch], items, action_weights)


def validate(run: Run, part: str = "validation") -> dict[str, Any]:
    stage = run.accelerator.unwrap_model(run.stage)
    return run.evaluator.score(stage, run.datasets[part])


def train(run: Run) -> dict[str, Any]:
    rng = random.Random(run.settings.seed)
    # Step 0 is the initial weights: they stay the answer unless training beats them.
    summary = fit(Optimisation(run.stage, run.accelerator, run.optimizer, run.scheduler),
                  n_steps=total_steps(len(run.datasets["train"].examples), run.settings.optim),
                  epoch_batches=lambda: batches(run, rng),
                  batch_loss=lambda batch: batch_loss(run.stage, batch, run.action_weights),
                  save=lambda: save_checkpoint(run), log=run.log, validate=lambda: validate(run),
                  metric=run.evaluator.primary, patience=run.settings.patience,
                  eval_every=run.settings.eval_every, validate_first=True, unit="states",
                  progress=run.settings.progress, desc="explorer policy")
    return {**summary, "action_weights": dict(zip(ACTIONS, run.action_weights.tolist()))}


def save_checkpoint(run: Run) -> Path:
    return run.accelerator.unwrap_model(run.stage).save(run.out)


def calibrate_next_threshold(run: Run, stage: ExplorerPolicy) -> dict[str, Any]:
    """Set ``stage.next_threshold`` to the one of ``NEXT_THRESHOLDS`` with the best validation
    next-node F1 (the highest such one on a tie: fewer nodes named); return it and its scores."""
    scored = []
    for threshold in NEXT_THRESHOLDS:
        stage.next_threshold = threshold
        scored.append((threshold, run.evaluator.score(stage, run.datasets["validation"])))
    threshold, best = max(scored, key=lambda item: (item[1]["next_f1"] or 0.0, item[0]))
    stage.set_setting("next_threshold", threshold)
    return {"next_threshold": threshold, **{key: best[key] for key in ("next_precision", "next_recall", "next_f1")}}


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    best = Stage.load(run.out)  # the early-stopped best, exactly as a user will load it
    if run.settings.calibrate_next_threshold:
        summary["calibration"] = calibrate_next_threshold(run, best)
        best.save(run.out)
    final = run.evaluator.score(best, run.datasets["evaluation"])
    summary.update(split=run.split, checkpoint=str(run.out), device=str(run.accelerator.device), evaluation=final,
                   supervision={part: data.examples.info.description for part, data in run.datasets.items()})
    record_training(run.out, run.settings, summary, run.evaluator)
    return summary
