"""Configs: YAML trees of ``_component_`` nodes, the one way memlab builds things.

A node ``{_component_: memlab.pkg.Class, a: 1, b: {...}}`` means ``Class(a=1, b=<b built>)``.
Nodes are built depth-first. A node that appears twice through a YAML anchor (``&lm`` /
``*lm``) is built once and shared, which is how several stages share one LM.

* A config is a file, or the name of one memlab ships (``rag_turns``, ``train/reranker``):
  the repository's ``configs/`` folder is package data (``memlab/configs``), so a name, or a
  library default written as ``configs/pipelines/rag_turns.yaml``, resolves from any working
  folder (``locate_config``). Paths inside a config (data, checkpoints) stay as given.
* ``_base_: path.yaml`` (relative to the file) makes a file an override of another: the base
  is loaded and this file's keys are merged into it (dicts recursively, anything else replaced;
  a node that names another ``_component_`` keeps only the base arguments its class takes).
  Ablations are written this way. A merge edits a copy of the node it reaches: overriding
  ``answerer.lm.n_ctx`` in a file gives the answerer its own LM and leaves the other stages'
  shared one alone (anchors do not reach across files). A node anchored in the overriding file
  is still one node after the merge (two stages sharing a trained checkpoint). ``_base_`` may
  also open any node below the top, resolved the same way (an evaluator's pipeline written as
  a file plus a few keys).
* Command-line overrides are dotted keys: ``answerer.lm.temperature=0``,
  ``reranker._component_=memlab.stages.rerank.CrossEncoderReranker``. The value is read as
  YAML (``null``, numbers, lists); setting a key under a null node creates the node; a new
  ``_component_`` keeps only the node's arguments the new class takes (as ``_base_`` does).
  An override edits the node in place: ``answerer.lm.n_threads=2`` changes the LM every stage
  shares through the anchor (the usual intent on a command line: one model, other settings).
* The root node is the pipeline. Its ``eval`` key (judge settings, ...) is for the runner and
  not passed to the constructor.
* ``validate`` checks every node against its constructor signature before anything is built:
  unknown and missing arguments, non-``memlab.*`` paths, and each value against its
  parameter's annotation (``int``, ``float``, ``bool``, ``str``, ``Literal``, unions, lists,
  mappings, a component of the annotated class) and declared range (``memlab.bounds``), so
  ``top_k=2.5`` or ``segmenter=5`` fails in milliseconds, not after a model has loaded.
* ``validate_settings`` applies the same checks to settings that are not built (a training
  recipe's): a dataclass declares them, fields and annotations like a constructor's.
* A component's settings may come in groups (``memlab.components.SettingsGroup``: CompassMem's
  ``search``): a config gives a group as a mapping of the fields it changes, checked field by
  field like any argument, and the component builds the group from it with the other fields at
  their defaults, so ``search.top_k=3`` overrides one setting of the group.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import yaml

from memlab.components import (
    COMPONENT,
    ComponentError,
    Unbuilt,
    is_config_reference,
    mismatch,
    parameters,
    signature,
    takes_unbuilt,
)
from memlab.errors import MemlabError

BASE = "_base_"
RUNNER_KEYS = ("eval",)
EVAL_KEYS = ("judge", "errata")  # what the runner reads under ``eval``


class ConfigError(MemlabError, ValueError):
    """A config that cannot be loaded, overridden, validated or built (message has the path)."""


class _Loader(yaml.SafeLoader):
    """YAML as the config files and overrides are read: ``1e-4`` is a float, as in YAML 1.2
    (PyYAML's YAML 1.1 wants ``1.0e-4`` and reads ``1e-4`` as a string, which the type check
    of a float argument would then refuse)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789.")
)


#: Overrides: command-line ``key=value`` strings, or a mapping of dotted keys to values (a sweep
#: file's, where a value may be a whole node).
Overrides = Sequence[str] | Mapping[str, Any]


#: The configs memlab ships: the repository's ``configs/`` folder, installed as ``memlab/configs``
#: (in a checkout a link to it, so an edited config is the one a name finds).
SHIPPED_CONFIGS = Path(__file__).parent / "configs"
#: How the repository's tree spells a shipped config's path (``configs/pipelines/rag_turns.yaml``).
SHIPPED_PREFIX = "configs"


def locate_config(reference: str | os.PathLike) -> Path:
    """The file a config reference names: a file, as given from the working folder; else a config
    memlab ships, by name (``rag_turns``; ``pipelines/rag_turns`` where a name is in two folders)
    or by its repository path (``configs/pipelines/rag_turns.yaml``, how library defaults and the
    evaluators checkpoints record name them). Anything else comes back as given, so loading it
    says what is wrong with that path; a name that is no shipped config is a ``ConfigError``
    listing the nearest ones."""
    path = Path(reference).expanduser()
    if path.is_file() or path.is_absolute():
        return path
    if path.suffix == "" and not path.exists():
        found = sorted(SHIPPED_CONFIGS.glob(f"{path}.yaml")) or sorted(SHIPPED_CONFIGS.glob(f"*/{path}.yaml"))
        if len(found) == 1:
            return found[0]
        if found:
            raise ConfigError(f"config name {str(reference)!r} is ambiguous: "
                              f"{', '.join(_shipped_name(f, qualified=True) for f in found)}")
        names = sorted({_shipped_name(f) for f in SHIPPED_CONFIGS.glob("*/*.yaml")})
        near = difflib.get_close_matches(path.name, names, n=4)
        raise ConfigError(f"{str(reference)!r} is neither a config file (from {Path.cwd()}) nor the name of a "
                          f"config memlab ships" + (f"; did you mean {', '.join(near)}?" if near else ""))
    if path.parts[:1] == (SHIPPED_PREFIX,) and not path.exists():
        shipped = SHIPPED_CONFIGS.joinpath(*path.parts[1:])
        if shipped.is_file():
            return shipped
    return path


def _shipped_name(file: Path, qualified: bool = False) -> str:
    return f"{file.parent.name}/{file.stem}" if qualified else file.stem


#: A pipeline given as its config, not built: a file, a shipped config's name or a pipeline node.
#: Validation reaches into it (a file is loaded and checked with the tree that names it); the
#: receiver builds it (``build_pipeline``) and records it resolved (``load_config``), so what
#: it recorded does not change when a file does.
PipelineConfig = Annotated[str | dict[str, Any], Unbuilt()]


def load_config(source: str | os.PathLike | Mapping[str, Any], overrides: Overrides = ()) -> dict[str, Any]:
    """Load a config: a YAML file or a shipped config's name (``locate_config``; resolving
    ``_base_``), or a node given as it is (copied). Then apply the overrides: dotted
    ``key=value`` strings, or a mapping of dotted keys to values, applied in order."""
    tree = copy.deepcopy(dict(source)) if isinstance(source, Mapping) else _load_with_base(locate_config(source), seen=())
    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            set_key(tree, key, copy.deepcopy(value), f"override {key}")
    else:
        for override in overrides:
            apply_override(tree, override)
    return tree


def _load_with_base(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: _base_ cycle through {[str(p) for p in seen]}")
    try:
        tree = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a YAML config (not UTF-8 text)") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: a config must be a mapping at the top level")
    base = tree.pop(BASE, None)
    tree = _nested_bases(tree, path, seen, {})
    if base is None:
        return tree
    return _merge(_base_tree(base, path, seen), tree)


def _base_tree(base: Any, path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    if not isinstance(base, str):
        raise ConfigError(f"{path}: {BASE} must be a file name, got {base!r}")
    return _load_with_base(path.parent / base, seen + (path,))


def _nested_bases(node: Any, path: Path, seen: tuple[Path, ...], done: dict[int, Any]) -> Any:
    """``node`` with every ``_base_`` below it merged (relative to ``path``'s folder, as at the top:
    an evaluator's ``pipeline: {_base_: ../pipelines/rag_turns.yaml, top_k: 20}``); a node that
    appears twice (an anchor) stays one node."""
    if id(node) in done:
        return done[id(node)]
    if isinstance(node, list):
        out: Any = [_nested_bases(item, path, seen, done) for item in node]
    elif isinstance(node, dict):
        out = {key: _nested_bases(value, path, seen, done) for key, value in node.items() if key != BASE}
        if BASE in node:
            out = _merge(_base_tree(node[BASE], path, seen), out)
    else:
        return node
    done[id(node)] = out
    return out


def _merge(base: Any, override: Any, done: dict[int, Any] | None = None) -> Any:
    """``override`` merged into ``base``. A node anchored in the override file (``&x`` ... ``*x``)
    stays one node: its first occurrence (the anchor) is merged and every alias gets that result."""
    done = {} if done is None else done
    if id(override) in done:
        return done[id(override)]
    if isinstance(base, dict) and isinstance(override, dict):
        if COMPONENT in override and override[COMPONENT] != base.get(COMPONENT):
            base = _arguments_accepted(base, override[COMPONENT])
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base[key], value, done) if key in base else done.get(id(value), value)
        done[id(override)] = out
        return out
    if isinstance(override, dict):
        done[id(override)] = override
    return override


def _arguments_accepted(base: dict[str, Any], component: str) -> dict[str, Any]:
    """The base node's arguments that ``component`` also takes (e.g. the shared ``lm`` when an
    ablation swaps one answerer class for another); the rest belonged to the old class."""
    try:
        declared = signature(component)
    except ComponentError:
        return {}  # validation reports the bad path later
    params = declared.params or {}
    if declared.accepts_any:
        # ``**collaborators`` (e.g. ``memlab.stage.load_stage``): keep the injected components
        # (a shared ``lm``), not the old class's settings, which a checkpoint records itself.
        return {k: v for k, v in base.items() if k in params or (isinstance(v, dict) and COMPONENT in v)}
    return {k: v for k, v in base.items() if k in params}


def apply_override(tree: dict[str, Any], override: str) -> None:
    """Apply one command-line override, ``dotted.key=value`` (the value read as YAML)."""
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {override!r} must look like dotted.key=value")
    try:
        value = yaml.load(raw, Loader=_Loader) if raw.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"override {override!r}: value is not valid YAML ({' '.join(str(e).split())})") from None
    set_key(tree, key, value, f"override {override!r}")


def set_key(tree: dict[str, Any], key: str, value: Any, what: str) -> None:
    """Set the dotted ``key`` of ``tree`` to ``value`` (module docstring: a key under a null node
    creates it; a new ``_component_`` keeps only the arguments the new class takes); ``what``
    names the override in an error."""
    if not key.strip():
        raise ConfigError(f"{what}: the key is empty")
    parts = key.strip().split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part) if isinstance(node, dict) else None
        if child is None:
            child = {}
            node[part] = child
        if not isinstance(child, dict):
            raise ConfigError(f"{what}: {'.'.join(parts[: i + 1])} is not a mapping")
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
    """Raise ``ConfigError`` listing every problem found in the tree (nothing is built), on one line."""
    problems: list[str] = []
    _validate(tree, where, problems, set())
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems))


def _validate(node: Any, where: str, problems: list[str], seen: set[int]) -> None:
    if isinstance(node, list):
        for i, item in enumerate(node):
            _validate(item, f"{where}[{i}]", problems, seen)
        return
    if not isinstance(node, dict) or id(node) in seen:
        return
    seen.add(id(node))
    here = where or "<root>"
    declared = None
    if COMPONENT in node:
        try:
            declared = signature(node[COMPONENT])
        except ComponentError as e:
            problems.append(f"{here}: {e}")
    for key, value in node.items():
        if declared is not None and key in declared.unbuilt:
            _validate_unbuilt(value, _join(where, key), problems)
        elif key != COMPONENT:
            _validate(value, _join(where, key), problems, seen)
    if declared is None or declared.params is None:
        return
    params, given = declared.params, {k for k in node if k != COMPONENT}
    for key in sorted(given - set(params)):
        if not declared.accepts_any:
            problems.append(f"{_join(where, key)}: {node[COMPONENT]} has no argument {key!r} "
                            f"(it takes {sorted(params)})")
        elif _is_setting(node[key]):
            # ``**collaborators`` (``load_stage``) passes injected components on; a plain
            # setting there would be dropped unseen, since a checkpoint records its own.
            problems.append(f"{_join(where, key)}={_show(node[key])}: {node[COMPONENT]} takes {sorted(params)} and "
                            "components to pass on, not other settings")
    owner = getattr(declared.target, "__name__", node[COMPONENT])
    for name, (required, hint) in params.items():
        if name not in given:
            if required:
                problems.append(f"{here}: {node[COMPONENT]} needs argument {name!r}")
            continue
        problem = mismatch(node[name], hint)
        if problem is not None:
            problems.append(f"{_join(where, name)}={_show(node[name])} {problem} ({owner}.{name})")


def _validate_unbuilt(value: Any, where: str, problems: list[str]) -> None:
    """A pipeline given as data, checked now: a file or name is loaded (``mismatch`` reports a
    value of another shape)."""
    if not is_config_reference(value):
        return
    try:
        pipeline_node, runner = split_runner_keys(load_config(value))
        validate_runner_keys(runner)
    except ConfigError as e:
        problems.append(f"{where}: {str(e).removeprefix('invalid config: ')}")
        return
    if COMPONENT not in pipeline_node:
        problems.append(f"{where}: must be a pipeline config, a node with {COMPONENT}")
    _validate(pipeline_node, where, problems, set())


def validate_settings(settings: dict[str, Any], defaults: Any, where: str = "") -> dict[str, Any]:
    """``settings`` over ``defaults`` (an instance of a dataclass declaring them: a training
    recipe's), as a plain dict; ``ConfigError`` listing every problem, on one line.

    Each field is an argument: an unknown key, or a value that does not fit the field's
    annotation (``mismatch``, ranges included), is refused as it is on a component node. A plain
    mapping under a field whose default is a dataclass (``optim``, ``data``) is checked the same
    way one level down and merged over that default; a component node (a recipe's ``stage``) is
    validated whole and kept as it is, for the recipe to build.
    """
    problems: list[str] = []
    merged = _settings(settings, defaults, where, problems)
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems))
    return merged


def _settings(settings: Any, defaults: Any, where: str, problems: list[str]) -> dict[str, Any]:
    schema = type(defaults)
    params, _ = parameters(schema)
    params = params or {}
    if not isinstance(settings, dict) or COMPONENT in settings:
        problems.append(f"{where}={_show(settings)} must be a mapping of {schema.__name__}'s settings")
        return {}
    for key in sorted(set(settings) - set(params)):
        problems.append(f"{_join(where, key)}: no such setting (it takes {sorted(params)})")
    merged: dict[str, Any] = {}
    for name, (_, hint) in params.items():
        default = getattr(defaults, name)
        section = dataclasses.is_dataclass(default)
        if name not in settings:
            merged[name] = dataclasses.asdict(default) if section else copy.deepcopy(default)
        elif section:
            merged[name] = _settings(settings[name], default, _join(where, name), problems)
        else:
            value = merged[name] = settings[name]
            if takes_unbuilt(hint):
                _validate_unbuilt(value, _join(where, name), problems)
            else:
                _validate(value, _join(where, name), problems, set())  # the component nodes inside
            problem = mismatch(value, hint)
            if problem is not None:
                problems.append(f"{_join(where, name)}={_show(value)} {problem} ({schema.__name__}.{name})")
    return merged


def _is_setting(value: Any) -> bool:
    """Whether ``value`` is a plain YAML value (a scalar, a list, a mapping that is no component
    node), not a component node or an object a caller built and put in the tree."""
    if isinstance(value, dict):
        return COMPONENT not in value
    return value is None or isinstance(value, (str, int, float, bool, list))


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return f"<{value[COMPONENT]}>" if COMPONENT in value else "{...}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    declared = signature(node[COMPONENT]) if COMPONENT in node else None
    unbuilt = declared.unbuilt if declared is not None else frozenset()
    kwargs = {k: copy.deepcopy(v) if k in unbuilt else _build(v, built) for k, v in node.items() if k != COMPONENT}
    if declared is not None:
        try:
            obj = declared.target(**kwargs)
        except ConfigError:
            raise
        except (TypeError, ValueError, MemlabError) as e:  # a MemlabError: ``load_stage`` of a bad checkpoint
            raise ConfigError(f"building {node[COMPONENT]}: {e}") from e
    else:
        obj = kwargs
    built[id(node)] = obj
    return obj


def build_pipeline(source: str | os.PathLike | Mapping[str, Any], overrides: Overrides = ()):
    """Load (a file, a shipped name or a node: ``load_config``), override, validate and build a
    pipeline config. Returns (pipeline, runner settings, tree)."""
    tree = load_config(source, overrides)
    pipeline_node, runner = validate_pipeline_tree(tree, "the pipeline node" if isinstance(source, Mapping) else source)
    return _build(pipeline_node, {}), runner, copy.deepcopy(tree)


def validate_pipeline_tree(tree: dict[str, Any], path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check a loaded pipeline config (``path`` names it in errors) without building anything;
    returns (pipeline node, runner settings)."""
    pipeline_node, runner = split_runner_keys(tree)
    if COMPONENT not in pipeline_node:
        raise ConfigError(f"{path}: the top level must be a pipeline node with {COMPONENT}")
    validate(pipeline_node)
    validate_runner_keys(runner)
    return pipeline_node, runner


def validate_runner_keys(runner: dict[str, Any]) -> None:
    """The ``eval`` node: null or a mapping of ``EVAL_KEYS``; ``judge`` null or a component node
    (checked like the pipeline's), so a typo there fails now, not when the judge is first used;
    ``errata`` null or a path (``memlab.data.errata``)."""
    settings = runner.get("eval")
    if settings is None:
        return
    if not isinstance(settings, dict) or COMPONENT in settings:
        raise ConfigError(f"invalid config: eval={_show(settings)} must be a mapping with the keys {list(EVAL_KEYS)}")
    unknown = sorted(set(settings) - set(EVAL_KEYS))
    if unknown:
        raise ConfigError(f"invalid config: eval has no key {unknown[0]!r} (it takes {list(EVAL_KEYS)})")
    judge = settings.get("judge")
    if judge is not None and not (isinstance(judge, dict) and COMPONENT in judge):
        raise ConfigError(f"invalid config: eval.judge={_show(judge)} must be null or a judge component")
    validate(judge, "eval.judge")
    errata = settings.get("errata")
    if errata is not None and not (isinstance(errata, str) and errata.strip()):
        raise ConfigError(f"invalid config: eval.errata={_show(errata)} must be null or the path of an errata file")


def paths_named(tree: Any, skip: Sequence[str] = (), where: str = "") -> dict[str, str]:
    """``{dotted key: path}`` for every string value of ``tree`` naming an existing file or folder
    (as given, from the working folder): what building or running the config reads, which an
    output must not destroy (``memlab.fileio.refuse_writing_into``). ``skip``: keys left out (the
    output's own)."""
    found: dict[str, str] = {}
    if isinstance(tree, Mapping):
        items: Any = tree.items()
    elif isinstance(tree, list | tuple):
        items = enumerate(tree)
    else:
        return found
    for key, value in items:
        name = _join(where, key)
        if name in skip:
            continue
        if isinstance(value, str):
            if value.strip() and "\n" not in value and len(value) < 4096 and Path(value).expanduser().exists():
                found[name] = value
        else:
            found.update(paths_named(value, skip, name))
    return found


def dump_config(tree: dict[str, Any]) -> str:
    return yaml.safe_dump(tree, sort_keys=False)
