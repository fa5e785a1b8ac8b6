"""Stages compared under one evaluator: what ``memlab compare-stages CONFIG`` runs.

A comparison config names an ``evaluator`` (a ``StageEvaluator`` node) and ``rows``, each row
``{stage: NODE | null, evaluator: {SETTING: VALUE ...}}``: the stage to score (a component
node, a checkpoint through ``memlab.stage.load_stage``, or null for the evaluator's reference
without a stage, e.g. a reranker's first-stage order) and the evaluator settings this row
changes (another first-stage pipeline ...). Both keys are optional; a row set to null is left
out (``rows.NAME=null`` drops one from the command line). Rows that share their
evaluator settings share one ``prepare`` (candidates, memories, teacher labels are made once).

With ``loco`` (``--loco``) every conversation is scored on its own, leave-one-conversation-out:
``loco.trainings`` lists recipes to train first, one fold per held-out conversation C into
``FOLDS/C`` (C held out, the conversation after C in the data's order for early stopping, the
rest for training; a fold whose ``training.json`` exists is kept, so a run resumes), and a row's
``{conversation}`` in any string of its stage node is C, so ``path: runs/routers/{conversation}``
scores each conversation with the stage that never saw it. Without ``loco`` the selected
conversations are scored together.

A stage is never scored on a conversation it learnt from unless ``allow_training_overlap``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memlab.config import COMPONENT, ConfigError, instantiate, validate
from memlab.held_out import refuse_training_overlap
from memlab.training.evaluators import StageEvaluator
from memlab.types import Conversation

#: The keys of a comparison config.
KEYS = ("evaluator", "rows", "loco")
ROW_KEYS = ("stage", "evaluator")
FOLD = "{conversation}"


def check_comparison(tree: dict[str, Any]) -> None:
    """A ConfigError naming every problem of a comparison config (nothing is built)."""
    unknown = sorted(set(tree) - set(KEYS))
    if unknown:
        raise ConfigError(f"a comparison config has no key {unknown[0]!r} (it takes {list(KEYS)})")
    evaluator, rows = tree.get("evaluator"), tree.get("rows")
    if not (isinstance(evaluator, dict) and COMPONENT in evaluator):
        raise ConfigError("a comparison config needs an evaluator: a StageEvaluator component node")
    if not isinstance(rows, dict) or not rows:
        raise ConfigError("a comparison config needs rows: a mapping of row names to {stage, evaluator}")
    for name, row in rows.items():
        if row is None:
            continue
        if not isinstance(row, dict) or set(row) - set(ROW_KEYS):
            raise ConfigError(f"rows.{name}: a row is a mapping with the keys {list(ROW_KEYS)}")
        if not isinstance(row.get("evaluator") or {}, dict):
            raise ConfigError(f"rows.{name}.evaluator: the evaluator settings this row changes, as a mapping")
        validate({**evaluator, **(row.get("evaluator") or {})}, f"rows.{name}.evaluator")
        stage = row.get("stage")
        if stage is not None:
            validate(_fold_node(stage, "C"), f"rows.{name}.stage")
    validate(evaluator, "evaluator")
    for i, training in enumerate((tree.get("loco") or {}).get("trainings") or []):
        missing = [k for k in ("recipe", "config", "folds") if not isinstance(training.get(k), str)]
        if missing:
            raise ConfigError(f"loco.trainings[{i}] needs {missing} (a recipe name, its config, the folds folder)")


def _fold_node(node: Any, conversation: str) -> Any:
    """``node`` with ``{conversation}`` in its strings replaced by ``conversation``."""
    if isinstance(node, dict):
        return {k: _fold_node(v, conversation) for k, v in node.items()}
    if isinstance(node, list):
        return [_fold_node(v, conversation) for v in node]
    return node.replace(FOLD, conversation) if isinstance(node, str) else node


def train_folds(trainings: Sequence[dict[str, Any]], data: str, ids: Sequence[str],
                log: Callable[[dict[str, Any]], None] = lambda record: None) -> None:
    """Each training's recipe once per held-out conversation of ``ids``, into ``FOLDS/<id>``."""
    from memlab.training.recipes import load_recipe_config, run_recipe

    if len(ids) < 3:
        raise ConfigError("leave-one-out with a validation conversation needs at least 3 conversations")
    for training in trainings:
        for i, held in enumerate(ids):
            folder = Path(training["folds"]) / held
            if (folder / "training.json").is_file():
                continue
            config = load_recipe_config(training["config"], [
                *(training.get("overrides") or []), f"output_dir={folder}", f"data.path={data}",
                f"data.eval_ids=[{held}]", f"data.validation_ids=[{ids[(i + 1) % len(ids)]}]",
                f"data.conversations=[{','.join(ids)}]"])
            if config["recipe"] != training["recipe"]:
                raise ConfigError(f"{training['config']} is a config for recipe {config['recipe']!r}, "
                                  f"not {training['recipe']!r}")
            summary = run_recipe(training["recipe"], config)
            log({"trained": training["recipe"], "held_out": held, "evaluation": summary.get("evaluation")})


def compare(tree: dict[str, Any], conversations: Sequence[Conversation], loco: bool = False,
            allow_training_overlap: bool = False, data: str | None = None,
            log: Callable[[dict[str, Any]], None] = lambda record: None) -> dict[str, Any]:
    """Score every row of the comparison ``tree`` on ``conversations`` (module docstring):
    ``{row: {"result": ..., "headline": {metric: {value, n}}}}``, or with ``loco``
    ``{row: {"folds": {id: result}, "headline": {metric: {mean_over_conversations, pooled, n}}}}``."""
    check_comparison(tree)
    if loco:
        trainings = (tree.get("loco") or {}).get("trainings") or []
        if trainings:
            if data is None:
                raise ConfigError("training folds needs the data file (--data)")
            train_folds(trainings, data, [c.id for c in conversations], log)
        parts = [(c.id, [c]) for c in conversations]
    else:
        parts = [("all", list(conversations))]
    evaluators: dict[str, StageEvaluator] = {}
    prepared: dict[tuple[str, str], Any] = {}
    results: dict[str, dict[str, Any]] = {}
    for part, selected in parts:
        for name, row in tree["rows"].items():
            if row is None:  # a row set to null is left out (an override drops one)
                continue
            node = {**tree["evaluator"], **(row.get("evaluator") or {})}
            key = json.dumps(node, sort_keys=True)
            evaluator = evaluators.setdefault(key, instantiate(copy.deepcopy(node)))
            stage = None if row.get("stage") is None else instantiate(_fold_node(row["stage"], part))
            if stage is not None:
                evaluator.check(stage)
                refuse_training_overlap(stage, selected, allow_training_overlap)
                stage.eval()
            if (key, part) not in prepared:
                prepared[(key, part)] = evaluator.prepare(selected)
            result = evaluator.score(stage, prepared[(key, part)])
            log({"row": name, "conversations": [c.id for c in selected], **result})
            entry = results.setdefault(name, {"folds": {}, "headlines": []})
            entry["folds"][part] = result
            entry["headlines"].append(evaluator.headline(result))
    for entry in results.values():
        headlines = entry.pop("headlines")
        entry["headline"] = (mean_over_folds(headlines) if loco else
                             {m: {"value": v, "n": n} for m, (v, n) in headlines[0].items()})
        if not loco:
            entry["result"] = entry.pop("folds")["all"]
    return results


def mean_over_folds(headlines: Sequence[dict[str, tuple[float | None, int]]]) -> dict[str, dict[str, float | int]]:
    """Per headline metric: its mean over the folds (each conversation counts once), its mean
    pooled over their items, and the number of items."""
    out: dict[str, dict[str, float | int]] = {}
    for metric in dict.fromkeys(m for h in headlines for m in h):
        pairs = [h[metric] for h in headlines if metric in h and h[metric][0] is not None]
        n = sum(count for _, count in pairs)
        if pairs:
            out[metric] = {"mean_over_conversations": sum(v for v, _ in pairs) / len(pairs),
                           "pooled": sum(v * count for v, count in pairs) / n if n else None, "n": n}
    return out


def markdown_table(results: dict[str, dict[str, Any]]) -> str:
    """Rows by headline metric, ``value (n)``; leave-one-out rows show the mean over conversations."""
    metrics = list(dict.fromkeys(m for row in results.values() for m in row["headline"]))
    lines = [f"| row | {' | '.join(metrics)} |", "|---|" + "---|" * len(metrics)]
    for name, row in results.items():
        cells = []
        for metric in metrics:
            figure = row["headline"].get(metric, {})
            value = figure.get("mean_over_conversations", figure.get("value"))
            cells.append("-" if value is None else f"{value:.3f} ({figure['n']})")
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines)
