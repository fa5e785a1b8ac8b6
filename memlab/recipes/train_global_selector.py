"""Train Mnemis's System-2 selector (global_select family) from evidence supervision.

    memlab train train_global_selector --config configs/train/global_selector.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation, one Mnemis memory per
conversation built by the ``pipeline`` config from the response cache, the selector calls of a
teacher-forced descent for every part, the selector to train), ``train`` (``memlab.training.loop.fit``;
validation select-F1 every ``eval_every`` steps, early stopping), ``save_checkpoint`` (the best
selector), then one evaluation of the descents it makes on the held-out conversations, written
next to the checkpoint as ``training.json``.

Supervision (``memlab.training.selection.selection_examples``): gold evidence + each episode's
turns label the hierarchy's nodes (an entity reaching an evidence episode without being
everywhere; a category above one). The memories are those of the prompted Mnemis build, replayed
from the response cache (``build_memories``): building them takes the 1.5B model about 45 s an
episode, so the recipe never does; a build the cache lacks is an error naming the command that
fills it.

Objective: ``TrainedGlobalSelector.loss``: binary cross-entropy on select (positives weighted by
``positive_weight``) plus on take-all-children for the categories.

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir,
seed, precision`` (no/fp16/bf16; ignored on CPU), ``progress``, ``data {...}`` (as the other
recipes, with ``sessions``: the prefix whose build is cached), ``validation`` (the
``GlobalSelectorEvaluator`` node: ``pipeline`` and ``pipeline_overrides``, the replayed Mnemis
build, and ``max_share``, above which an entity is no target, in the labels and the scores),
``stage`` (the ``TrainedGlobalSelector`` ``_component_`` node), ``supervision
{all_children_share}``, ``optim {lr, head_lr, weight_decay, epochs,
batch_size (calls per step), warmup_fraction, max_steps}``, ``positive_weight``, ``eval_every``
(steps), ``patience`` (evaluations).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from memlab.bounds import PositiveFloat, PositiveInt, UnitFloat
from memlab.config import instantiate
from memlab.stage import Stage
from memlab.stages.global_select import TrainedGlobalSelector
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
from memlab.training.selection import (
    GlobalSelectorEvaluator,
    SelectionMemories,
    row_inputs,
    row_target,
    score_rows,
    selection_examples,
)


@dataclass
class SelectionSupervision:
    """How a hierarchy call's evidence labels are made (``memlab.training.selection.selection_examples``;
    its ``max_share`` is the evaluator's)."""

    all_children_share: UnitFloat = 1.0


@dataclass
class Settings(GradientSettings):
    validation: GlobalSelectorEvaluator = field(default_factory=evaluator_node(
        "memlab.training.selection.GlobalSelectorEvaluator"))
    stage: TrainedGlobalSelector = field(default_factory=encoder_stage("memlab.stages.global_select.TrainedGlobalSelector"))
    supervision: SelectionSupervision = field(default_factory=SelectionSupervision)
    optim: Optimiser = field(default_factory=lambda: Optimiser(lr=5e-4, head_lr=3e-3, epochs=20, batch_size=8))
    positive_weight: PositiveFloat = 3.0
    eval_every: PositiveInt = 20
    patience: PositiveInt = 10


@dataclass
class Run:
    settings: Settings
    out: Path
    stage: Any = None
    memories: dict[str, SelectionMemories] = field(default_factory=dict)  # part -> its built memories
    datasets: dict[str, Any] = field(default_factory=dict)  # train / validation / evaluation rows
    split: dict[str, list[str]] = field(default_factory=dict)
    accelerator: Any = None
    optimizer: Any = None
    scheduler: Any = None
    log: MetricsLog | None = None
    evaluator: GlobalSelectorEvaluator | None = None


def setup(config: dict[str, Any]) -> Run:
    settings, parts = start_recipe(config, Settings(recipe="train_global_selector"))
    run = Run(settings=settings, out=Path(settings.output_dir), split=parts.ids())
    run.evaluator = instantiate(settings.validation)
    for part, conversations in parts._asdict().items():
        run.memories[part] = built = run.evaluator.prepare(conversations)  # refuses a pipeline with no hierarchy
        batch = built.pipeline.search_settings.selection_batch
        run.datasets[part] = selection_examples(built.memories, built.conversations, batch,
                                                max_share=run.evaluator.max_share,
                                                all_children_share=settings.supervision.all_children_share)
        if not len(run.datasets[part]):
            raise ValueError(f"the {part} conversations {run.split[part]} give no selector call (no question of "
                             "categories 1-4 with evidence): choose other data")
    run.stage = instantiate(settings.stage)
    run.stage, run.optimizer, run.scheduler, run.accelerator = prepare_training(run.stage, settings, len(run.datasets["train"]))
    run.log = MetricsLog.for_checkpoint(run.out)
    return run


def batches(run: Run, rng: random.Random) -> list[list[tuple[Any, Any]]]:
    rows = [(row_inputs(row), row_target(row)) for row in run.datasets["train"]]
    return shuffled_batches(rows, run.settings.optim.batch_size, rng)


def validate(run: Run, part: str = "validation") -> dict[str, Any]:
    return score_rows(run.accelerator.unwrap_model(run.stage), run.datasets[part])


def train(run: Run) -> dict[str, Any]:
    weight = run.settings.positive_weight
    rng = random.Random(run.settings.seed)

    def batch_loss(batch: list[tuple[Any, Any]]) -> torch.Tensor:
        items = [inputs for inputs, _ in batch]
        return run.stage.loss(run.stage.node_logits(items), [target for _, target in batch], items, weight)

    # Step 0 is the initial weights: they stay the answer unless training beats them.
    return fit(Optimisation(run.stage, run.accelerator, run.optimizer, run.scheduler),
               n_steps=total_steps(len(run.datasets["train"]), run.settings.optim),
               epoch_batches=lambda: batches(run, rng), batch_loss=batch_loss, save=lambda: save_checkpoint(run),
               log=run.log, validate=lambda: validate(run), metric=lambda scores: scores["select_f1"],
               patience=run.settings.patience, eval_every=run.settings.eval_every, validate_first=True,
               unit="calls", progress=run.settings.progress, desc="global selector")


def save_checkpoint(run: Run) -> Path:
    return run.accelerator.unwrap_model(run.stage).save(run.out)


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    best = Stage.load(run.out)  # the early-stopped best, exactly as a user will load it
    best.eval()
    final = run.evaluator.score(best, run.memories["evaluation"])
    summary.update(split=run.split, checkpoint=str(run.out), device=str(run.accelerator.device), evaluation=final,
                   teacher_forced_evaluation=score_rows(best, run.datasets["evaluation"]),
                   supervision={part: data.info.description for part, data in run.datasets.items()})
    record_training(run.out, run.settings, summary, run.evaluator)
    return summary
