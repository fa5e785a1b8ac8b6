"""Fit the TF-IDF router (``memlab.stages.route.TfidfRouter``) on LoCoMo question types (issue 25).

    memlab train fit_tfidf_router --config configs/train/router_tfidf.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation, supervision), ``fit`` (the
vocabulary and idf from the training questions, then each head by L2-regularised multinomial
logistic regression, full batch, L-BFGS), ``select`` (the regularisation ``C`` from ``c_grid``
with the best question-type accuracy on the validation conversations), a final fit on training
and validation conversations with that ``C``, saved via ``Stage.save``, and one evaluation on
the held-out conversations, written next to the checkpoint as ``training.json``.

Supervision (``memlab.training.route.routing_examples``): the question-type head learns
the four answerable LoCoMo types (adversarial questions carry no type label, since they read like
ordinary questions), the intent and complexity heads their derived labels on every question.
The objective is sklearn's: mean cross-entropy + ||W||^2 / (2 C n) per head.

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir, seed``,
``data {path, eval_ids, validation_ids, conversations, max_questions, sessions}``, ``stage``
(``_component_`` node; its ``vocabulary`` is fitted here), ``min_count`` (a term's least number
of training questions),
``optim {c_grid, lr, max_iterations}`` (L-BFGS's step size and iterations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from memlab.bounds import PositiveFloat, PositiveInt
from memlab.clock import active_seconds
from memlab.config import instantiate
from memlab.stage import Stage
from memlab.stages.route import TfidfRouter
from memlab.stages.route.linear import fit_vocabulary
from memlab.stages.route.neural import IGNORE_INDEX
from memlab.training import ConversationSettings, ConversationSplit, evaluator_node, record_training, start_recipe
from memlab.training.route import RouterEvaluator, routing_examples


@dataclass
class LbfgsSettings:
    """The logistic heads' fit: each regularisation strength of ``c_grid`` is scored on the
    validation conversations, the best refitted on train + validation; L-BFGS's step size and
    iterations."""

    c_grid: list[PositiveFloat] = field(default_factory=lambda: [0.3, 1.0, 3.0, 10.0, 30.0])
    lr: PositiveFloat = 1.0
    max_iterations: PositiveInt = 200


@dataclass
class Settings(ConversationSettings):
    stage: TfidfRouter = field(default_factory=lambda: {"_component_": "memlab.stages.route.TfidfRouter"})
    min_count: PositiveInt = 1
    optim: LbfgsSettings = field(default_factory=LbfgsSettings)
    #: How a router is scored: C selection, held-out evaluation, ``memlab evaluate-stage``.
    validation: RouterEvaluator = field(default_factory=evaluator_node("memlab.training.route.RouterEvaluator"))


def targets(stage, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Class indices per head; a label the head does not have (adversarial) is ignored."""
    out = {}
    for name, labels in stage.labels.items():
        index = {label: i for i, label in enumerate(labels)}
        out[name] = torch.tensor([index.get(row[name], IGNORE_INDEX) for row in rows])
    return out


def fit(settings: Settings, conversations, c: float) -> Stage:
    """A router fitted on ``conversations`` with regularisation ``c``."""
    rows = list(routing_examples(conversations))
    texts = [row["question"] for row in rows]
    vocabulary, idf = fit_vocabulary(texts, settings.min_count)
    stage = instantiate({**settings.stage, "vocabulary": vocabulary})
    stage.idf.copy_(torch.tensor(idf))
    features = stage.features(texts)
    labelled = targets(stage, rows)
    parameters = list(stage.heads.parameters())
    optimizer = torch.optim.LBFGS(parameters, lr=settings.optim.lr, max_iter=settings.optim.max_iterations,
                                  line_search_fn="strong_wolfe")
    penalty = 1.0 / (2.0 * c * len(rows))

    def closure():
        optimizer.zero_grad()
        logits = {name: head(features) for name, head in stage.heads.items()}
        loss = stage.loss(logits, labelled)
        loss = loss + penalty * sum((head.weight ** 2).sum() for head in stage.heads.values())
        loss.backward()
        return loss

    stage.train()
    optimizer.step(closure)
    stage.eval()
    return stage


def setup(config: dict[str, Any]) -> tuple[Settings, ConversationSplit]:
    """The checked settings and their conversations."""
    return start_recipe(config, Settings(recipe="fit_tfidf_router"))


def main(config: dict[str, Any]) -> dict[str, Any]:
    settings, parts = setup(config)
    train, validation, evaluation = parts
    started = active_seconds()
    selection = {}
    evaluator = instantiate(settings.validation)
    checked, held_out = evaluator.prepare(validation), evaluator.prepare(evaluation)
    grid = settings.optim.c_grid
    for c in grid:
        selection[str(c)] = evaluator.primary(evaluator.score(fit(settings, train, float(c)), checked))
    best_c = float(max(grid, key=lambda c: selection[str(c)]))
    stage = fit(settings, [*train, *validation], best_c)
    seconds = active_seconds() - started
    out = Path(settings.output_dir)
    stage.save(out)
    loaded = Stage.load(out)  # scored exactly as a user will load it
    summary = {
        "split": parts.ids(),
        "selection": {"validation_accuracy_by_c": selection, "c": best_c},
        "vocabulary": len(stage.vocabulary), "fit_seconds": round(seconds, 1),
        "evaluation": evaluator.score(loaded, held_out), "checkpoint": str(out),
    }
    record_training(out, settings, summary, evaluator)
    return summary
