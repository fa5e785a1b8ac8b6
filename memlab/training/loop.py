"""The optimisation loop the gradient recipes in ``train/`` share.

One optimiser step per batch (accelerate's autocast and backward, then the schedule), batches
drawn afresh each epoch, validation either every ``eval_every`` steps or after each epoch, early
stopping on one metric, and the best weights saved whenever validation improves. What differs
between recipes (what a batch is, its loss, what validation scores) comes in as callables, so a
recipe still reads top to bottom and its loop is this one.

Metrics log (``MetricsLog``), one line per validation: ``step`` (and ``epoch`` when validating per
epoch), ``loss`` (the last batch's), ``validation``, ``best`` and ``<unit>_per_second``. With
``validate_first`` the untrained stage is validated, logged as step 0 and saved first, so training
has to beat it to replace it. Without a validation (a final fit, ``data.final_fit``) the loop runs
its steps and saves the last weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from memlab.clock import active_seconds
from memlab.training.recipes import EarlyStopping, MetricsLog
from memlab.training.resume import Resumption


@dataclass
class Optimisation:
    """What one training run steps: the prepared stage, its accelerator, optimiser and schedule."""

    stage: torch.nn.Module
    accelerator: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any = None


def fit(
    run: Optimisation,
    *,
    n_steps: int,
    epoch_batches: Callable[[], Iterable[Sequence[Any]]],
    batch_loss: Callable[[Sequence[Any]], torch.Tensor],
    save: Callable[[], Any],
    log: MetricsLog,
    validate: Callable[[], dict[str, Any]] | None,
    metric: Callable[[dict[str, Any]], float],
    patience: int,
    eval_every: int | None = None,
    validate_first: bool = False,
    unit: str = "examples",
    count: Callable[[Sequence[Any]], int] = len,
    progress: bool = True,
    desc: str = "training",
    resume: Resumption | None = None,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train for at most ``n_steps`` steps; returns ``steps`` (and ``epochs`` when validating per
    epoch: ``eval_every`` None), ``train_seconds``, ``<unit>_seen``, ``<unit>_per_second`` and
    ``best`` (``{"step", ["epoch",] "validation"}`` of the saved weights; None for a final fit),
    and with ``validate_first`` the untrained stage's scores as ``validation_initial``.

    ``epoch_batches()`` gives one epoch of batches, shuffled by the recipe's own seeded generator
    and by nothing else, so that calling it again from the same seed gives the same epochs (a
    resumed run relies on it); ``batch_loss(batch)`` a differentiable loss, run under autocast;
    ``metric(scores)`` the number early stopping maximises; ``count(batch)`` how many ``unit`` a
    batch holds. With ``resume`` the state is saved every ``resume.every`` steps and after each
    validation, and a saved state is continued from (``memlab.training.resume``); it is removed
    once the run is complete. ``stop_after`` ends the run after that many steps with the schedule
    of all ``n_steps`` (a run boxed into the time a slow machine has: the summary's
    ``stopped_after``); continued from a state past it, the run ends at once, as it stands.
    """
    per_epoch = eval_every is None
    stopper = EarlyStopping(patience=patience)
    stage = run.accelerator.unwrap_model(run.stage)
    progress_state = resume.load(stage, run.optimizer, run.scheduler) if resume is not None else None
    at = progress_state or {"step": 0, "epoch": 0, "batch_in_epoch": 0, "seen": 0, "train_seconds": 0.0,
                            "loss": None, "best": None, "initial": {}, "stopper": [None, 0]}
    step, epoch, seen, train_seconds, loss = at["step"], at["epoch"], at["seen"], at["train_seconds"], at["loss"]
    best, initial = at["best"], at["initial"]
    stopper.best, stopper.bad_evaluations = at["stopper"]
    taken = at["batch_in_epoch"]  # batches of the current epoch already trained on

    def checkpoint() -> None:
        if resume is not None:
            resume.save(stage, run.optimizer, run.scheduler,
                        {"step": step, "epoch": epoch, "batch_in_epoch": taken, "seen": seen,
                         "train_seconds": train_seconds, "loss": loss, "best": best, "initial": initial,
                         "stopper": [stopper.best, stopper.bad_evaluations]})

    if progress_state is None and validate is not None and validate_first:
        scores = validate()
        stopper.step(metric(scores))
        save()
        log.write(step=0, validation=scores)
        best = {"step": 0, "validation": scores}
        initial = {"validation_initial": scores}
        checkpoint()

    def validation_point() -> None:
        nonlocal best
        scores = validate()
        improved = stopper.step(metric(scores))
        where = {"epoch": epoch, "step": step} if per_epoch else {"step": step}
        log.write(**where, loss=loss, validation=scores, best=stopper.best,
                  **{f"{unit}_per_second": seen / max(train_seconds, 1e-9)})
        if improved:
            best = {**where, "validation": scores}
            save()

    for _ in range(epoch):  # a resumed run: the epochs already run, drawn again to reach the same order
        epoch_batches()
    bar = tqdm(total=n_steps, initial=step, desc=desc, disable=not progress)
    last = n_steps if stop_after is None else min(n_steps, stop_after)
    while step < last and not stopper.should_stop:
        run.stage.train()
        for index, batch in enumerate(epoch_batches()):
            if index < taken:
                continue
            started = active_seconds()
            with run.accelerator.autocast():  # ``prepare`` wraps only forward, not the stages' scoring methods
                batch_loss_value = batch_loss(batch)
            run.accelerator.backward(batch_loss_value)
            run.optimizer.step()
            if run.scheduler is not None:
                run.scheduler.step()
            run.optimizer.zero_grad()
            train_seconds += active_seconds() - started
            loss = batch_loss_value.item()
            seen += count(batch)
            step, taken = step + 1, index + 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")
            validating = validate is not None and not per_epoch and (step % eval_every == 0 or step == n_steps)
            if validating:
                validation_point()
                run.stage.train()
            if validating or (resume is not None and step % resume.every == 0):
                checkpoint()
            if validating and stopper.should_stop:
                break
            if step >= last:
                break
        else:  # the epoch ran out
            epoch, taken = epoch + 1, 0
            if loss is None:
                raise ValueError(f"{desc}: an epoch gave no batch to train on")
            if validate is not None and per_epoch:
                validation_point()
            checkpoint()
            continue
        if step >= n_steps and validate is not None and per_epoch and taken:
            epoch, taken = epoch + 1, 0  # the last, partial epoch is validated as its own
            validation_point()
    bar.close()
    if validate is None:  # a final fit: the configured length, the last weights
        log.write(step=step, loss=loss, **{f"{unit}_per_second": seen / max(train_seconds, 1e-9)})
        save()
    if resume is not None:
        resume.clear()
    summary = {"steps": step, "train_seconds": round(train_seconds, 1), f"{unit}_seen": seen,
               f"{unit}_per_second": round(seen / max(train_seconds, 1e-9), 2), "best": best, **initial}
    if step < n_steps and not stopper.should_stop:
        summary["stopped_after"] = {"step": step, "of": n_steps}
    return {**summary, "epochs": epoch} if per_epoch else summary


def shuffled_batches(items: Sequence[Any], batch_size: int, rng) -> list[list[Any]]:
    """One epoch: ``items`` in an order drawn from ``rng``, cut into batches of ``batch_size``."""
    order = list(range(len(items)))
    rng.shuffle(order)
    return [[items[i] for i in order[start:start + batch_size]] for start in range(0, len(order), batch_size)]
