"""Configs: YAML trees of ``_component_`` nodes, the one way memlab builds things.

A node ``{_component_: memlab.pkg.Class, a: 1, b: {...}}`` means ``Class(a=1, b=<b built>)``.
Nodes are built depth-first. A node that appears twice through a YAML anchor (``&lm`` /
``*lm``) is built once and shared, which is how several stages share one LM.

* ``_base_: path.yaml`` (relative to the file) makes a file an override of another: the base
  is loaded and this file's keys are merged into it (dicts recursively, anything else replaced;
  a node that names another ``_component_`` keeps only the base arguments its class takes).
  Ablations are written this way. A merge edits a copy of the node it reaches: overriding
  ``answerer.lm.n_ctx`` in a file gives the answerer its own LM and leaves the other stages'
  shared one alone (anchors do not reach across files).
* Command-line overrides are dotted keys: ``answerer.lm.temperature=0``,
  ``reranker._component_=memlab.stages.rerank.CrossEncoderReranker``. The value is read as
  YAML (``null``, numbers, lists); setting a key under a null node creates the node; a new
  ``_component_`` keeps only the node's arguments the new class takes (as ``_base_`` does).
  An override edits the node in place: ``answerer.lm.n_threads=2`` changes the LM every stage
  shares through the anchor (the usual intent on a command line: one model, other settings).
* The root node is the pipeline. Its ``eval`` key (judge settings, ...) is for the runner and
  not passed to the constructor.
* ``validate`` checks every node against its constructor signature (unknown and missing
  arguments, non-``memlab.*`` paths) before anything is built, so a typo fails in
  milliseconds, not after a model has loaded.
"""

from __future__ import annotations

import copy
import inspect
import os
from pathlib import Path
from typing import Any

import yaml

from memlab.stage import StageError, import_memlab_class

COMPONENT = "_component_"
BASE = "_base_"
RUNNER_KEYS = ("eval",)


class ConfigError(ValueError):
    """A config that cannot be loaded, overridden, validated or built (message has the path)."""


def load_config(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Load a YAML config (resolving ``_base_``) and apply dotted ``key=value`` overrides."""
    tree = _load_with_base(Path(path), seen=())
    for override in overrides:
        apply_override(tree, override)
    return tree


def _load_with_base(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: _base_ cycle through {[str(p) for p in seen]}")
    try:
        tree = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {e}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: a config must be a mapping at the top level")
    base = tree.pop(BASE, None)
    if base is None:
        return tree
    merged = _load_with_base(path.parent / base, seen + (path,))
    return _merge(merged, tree)


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        if COMPONENT in override and override[COMPONENT] != base.get(COMPONENT):
            base = _arguments_accepted(base, override[COMPONENT])
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base[key], value) if key in base else value
        return out
    return override


def _arguments_accepted(base: dict[str, Any], component: str) -> dict[str, Any]:
    """The base node's arguments that ``component`` also takes (e.g. the shared ``lm`` when an
    ablation swaps one answerer class for another); the rest belonged to the old class."""
    try:
        params = inspect.signature(import_memlab_class(component)).parameters
    except (StageError, TypeError, ValueError):
        return {}  # validation reports the bad path later
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        # ``**collaborators`` (e.g. ``memlab.stage.load_stage``): keep the injected components
        # (a shared ``lm``), not the old class's settings, which a checkpoint records itself.
        return {k: v for k, v in base.items() if k in params or (isinstance(v, dict) and COMPONENT in v)}
    return {k: v for k, v in base.items() if k in params}


def apply_override(tree: dict[str, Any], override: str) -> None:
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {override!r} must look like dotted.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"override {override!r}: value is not valid YAML ({e})") from None
    parts = key.strip().split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part) if isinstance(node, dict) else None
        if child is None:
            child = {}
            node[part] = child
        if not isinstance(child, dict):
            raise ConfigError(f"override {override!r}: {'.'.join(parts[: i + 1])} is not a mapping")
        node = child
    if parts[-1] == COMPONENT and node.get(COMPONENT) not in (None, value):
        # Swapping the class: keep only the arguments the new one takes, as a ``_base_`` merge does.
        kept = _arguments_accepted(node, value)
        node.clear()
        node.update(kept)
    node[parts[-1]] = value


def split_runner_keys(tree: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pipeline node, runner settings such as ``eval``)."""
    pipeline = {k: v for k, v in tree.items() if k not in RUNNER_KEYS}
    runner = {k: tree[k] for k in RUNNER_KEYS if k in tree}
    return pipeline, runner


def validate(tree: Any, where: str = "") -> None:
    """Raise ``ConfigError`` listing every problem found in the tree (nothing is built)."""
    problems: list[str] = []
    _validate(tree, where or "<root>", problems, set())
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))


def _validate(node: Any, where: str, problems: list[str], seen: set[int]) -> None:
    if isinstance(node, list):
        for i, item in enumerate(node):
            _validate(item, f"{where}[{i}]", problems, seen)
        return
    if not isinstance(node, dict) or id(node) in seen:
        return
    seen.add(id(node))
    for key, value in node.items():
        if key != COMPONENT:
            _validate(value, f"{where}.{key}", problems, seen)
    if COMPONENT not in node:
        return
    try:
        target = import_memlab_class(node[COMPONENT])
    except StageError as e:
        problems.append(f"{where}: {e}")
        return
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return
    params = signature.parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    given = {k for k in node if k != COMPONENT}
    if not accepts_any:
        for key in sorted(given - set(params)):
            problems.append(f"{where}.{key}: {node[COMPONENT]} has no argument {key!r} "
                            f"(it takes {sorted(params)})")
    for name, p in params.items():
        if p.default is inspect.Parameter.empty and p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
        ) and name not in given:
            problems.append(f"{where}: {node[COMPONENT]} needs argument {name!r}")


def instantiate(tree: Any) -> Any:
    """Build the objects of a (validated) tree; shared nodes become shared objects."""
    validate(tree)
    return _build(tree, {})


def _build(node: Any, built: dict[int, Any]) -> Any:
    if isinstance(node, list):
        return [_build(item, built) for item in node]
    if not isinstance(node, dict):
        return node
    if id(node) in built:
        return built[id(node)]
    kwargs = {k: _build(v, built) for k, v in node.items() if k != COMPONENT}
    if COMPONENT in node:
        target = import_memlab_class(node[COMPONENT])
        try:
            obj = target(**kwargs)
        except ConfigError:
            raise
        except (TypeError, ValueError) as e:
            raise ConfigError(f"building {node[COMPONENT]}: {e}") from e
    else:
        obj = kwargs
    built[id(node)] = obj
    return obj


def build_pipeline(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()):
    """Load, override, validate and build a pipeline config. Returns (pipeline, runner settings, tree)."""
    tree = load_config(path, overrides)
    pipeline_node, runner = split_runner_keys(tree)
    if COMPONENT not in pipeline_node:
        raise ConfigError(f"{path}: the top level must be a pipeline node with {COMPONENT}")
    validate(pipeline_node)
    return _build(pipeline_node, {}), runner, copy.deepcopy(tree)


def dump_config(tree: dict[str, Any]) -> str:
    return yaml.safe_dump(tree, sort_keys=False)
