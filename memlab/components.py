"""Components: what a ``_component_`` node names, and one check of a value against its declared type.

A component is a class or function of the ``memlab`` package, named by its dotted path
(``import_memlab_class``); anything outside the package is refused. A component that moved
keeps its old path in ``MOVED``, so a node a checkpoint recorded before the move still builds. Its constructor's
annotations declare what each argument takes (``int``, ``float``, ``bool``, ``str``,
``Literal``, unions, lists, mappings, another component's class) and the ranges of
``memlab.bounds``. ``mismatch(value, hint)`` is the one check of a value against such an
annotation: ``memlab.config.validate`` applies it to every node of a config before anything is
built, and ``Stage`` to the arguments of every stage constructed in code, so a range is
stated once, where the argument is declared, and checked the same way wherever it arrives.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import importlib
import inspect
import os
import types
import typing
from collections.abc import Mapping
from pathlib import PurePath
from typing import Annotated, Any, Literal, Union

from memlab.bounds import Range
from memlab.errors import MemlabError

COMPONENT = "_component_"


class ComponentError(MemlabError, ValueError):
    """A component path that names nothing importable in memlab."""


class Unbuilt:
    """``Annotated`` metadata of a parameter that takes a config rather than what it builds: a
    config file's path, a shipped config's name, or a component node. The value is checked with
    the tree around it but handed over as it is, for the receiver to build when it needs to and
    to record whole (an evaluator's pipeline: ``memlab.config.PipelineConfig``)."""

    def __repr__(self) -> str:
        return "Unbuilt()"


def takes_unbuilt(hint: Any) -> bool:
    """Whether the annotation ``hint`` marks a parameter that takes a config as data (``Unbuilt``)."""
    return typing.get_origin(hint) is Annotated and any(isinstance(m, Unbuilt) for m in hint.__metadata__)


def is_config_reference(value: Any) -> bool:
    """Whether ``value`` has the shape an ``Unbuilt`` parameter takes: a non-blank file path or
    name, or a component node."""
    return bool(isinstance(value, str) and value.strip() or isinstance(value, dict) and COMPONENT in value)


#: Old component path -> where it lives now: checkpoints' ``training.json`` record evaluator
#: nodes by path, and a record is never rewritten.
MOVED: dict[str, str] = {
    f"memlab.training.evaluators.{name}": f"memlab.training.{module}.{name}"
    for module, name in (("rerank", "RerankerEvaluator"), ("route", "RouterEvaluator"),
                         ("segmentation", "SegmenterEvaluator"), ("relations", "RelationEvaluator"),
                         ("navigation", "NavigatorEvaluator"), ("selection", "GlobalSelectorEvaluator"),
                         ("traversal", "SlotRecallEvaluator"), ("retrieve", "RetrieverEvaluator"))
}


def import_memlab_class(path: str) -> Any:
    """Import ``memlab.x.y.Name`` (or where ``MOVED`` says it went); anything outside the
    ``memlab`` package is refused."""
    if not isinstance(path, str) or not (path == "memlab" or path.startswith("memlab.")):
        raise ComponentError(f"only memlab.* classes can be instantiated, got {path!r}")
    path = MOVED.get(path, path)
    module_name, _, attr = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ComponentError(f"cannot import {module_name!r} for {path!r}: {e}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ComponentError(f"{module_name!r} has no attribute {attr!r}") from None


def parameters(target: Any) -> tuple[dict[str, tuple[bool, Any]] | None, bool]:
    """``({name: (required, annotation or None)}, takes any keyword)`` for what a node may pass
    to ``target``; ``(None, True)`` where no signature can be read."""
    if isinstance(target, type):  # the __init__ that declares the arguments, with its module's names
        target = next((vars(k)["__init__"] for k in target.__mro__ if "__init__" in vars(k)), object.__init__)
        skip_self = True
    else:
        skip_self = False
    function = inspect.unwrap(target)  # Stage wraps __init__ to record its arguments
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None, True
    namespace = getattr(function, "__globals__", {})
    params: dict[str, tuple[bool, Any]] = {}
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    for name, p in list(signature.parameters.items())[int(skip_self):]:
        if p.kind not in variadic:
            params[name] = (p.default is inspect.Parameter.empty and p.kind is not inspect.Parameter.POSITIONAL_ONLY,
                            _resolve(p.annotation, namespace))
    return params, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())


@dataclasses.dataclass(frozen=True)
class Signature:
    """What a node's ``_component_`` path declares, read in one call (``signature``): the class or
    function it names, its ``parameters`` (None where none can be read), whether it takes any
    keyword, and the parameters that take a config as data (``Unbuilt``)."""

    target: Any
    params: dict[str, tuple[bool, Any]] | None
    accepts_any: bool
    unbuilt: frozenset[str]


def signature(path: str) -> Signature:
    """``path``'s ``Signature``; ``ComponentError`` where it names nothing importable in memlab."""
    target = import_memlab_class(path)
    params, accepts_any = parameters(target)
    unbuilt = frozenset(name for name, (_, hint) in (params or {}).items() if takes_unbuilt(hint))
    return Signature(target, params, accepts_any, unbuilt)


def _resolve(annotation: Any, namespace: dict[str, Any]) -> Any:
    """The annotation as an object (modules use ``from __future__ import annotations``); None
    where it says nothing or names what only a type checker sees."""
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        try:
            return eval(annotation, namespace)  # noqa: S307 - annotations of memlab's own code
        except Exception:
            return None
    return annotation


_SEQUENCES = (list, tuple, collections.abc.Sequence)
_MAPPINGS = (dict, collections.abc.Mapping)


def mismatch(value: Any, hint: Any) -> str | None:
    """Why ``value`` (as YAML gives it) does not fit the annotation ``hint`` (``"must be an
    integer"``, ``"must be >= 1"``); None when it fits or ``hint`` says nothing checkable."""
    if hint is None or hint is Any or isinstance(hint, (str, typing.TypeVar)):
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if takes_unbuilt(hint):
        return None if is_config_reference(value) else "must be a config file, a shipped config's name or a component node"
    if origin is Annotated:
        problem = mismatch(value, args[0])
        ranges = [m for m in hint.__metadata__ if isinstance(m, Range)]
        return problem or next((r.problem(value) for r in ranges if r.problem(value)), None)
    if origin in (Union, types.UnionType):
        problems = [mismatch(value, arg) for arg in args]
        if None in problems:
            return None
        # right type, out of range: say that, not "must be an integer or null"
        ranged = [p for arg, p in zip(args, problems) if mismatch(value, _bare(arg)) is None]
        # a component of the wrong class: say which class it is
        wrong_class = [p for p in problems if p.endswith(" is not one)")]
        return (ranged or wrong_class or [f"must be {describe(hint)}"])[0]
    if origin is Literal:
        return None if any(value == a and type(value) is type(a) for a in args) else f"must be {describe(hint)}"
    if origin in _SEQUENCES:
        if not isinstance(value, (list, tuple)):
            return f"must be {describe(hint)}"
        if origin is tuple and args and args[-1] is not Ellipsis:
            items = list(args)
            if len(items) != len(value):
                return f"must be {describe(hint)}"
        else:
            items = [args[0] if args else None] * len(value)
        bad = any(mismatch(v, h) is not None for v, h in zip(value, items))
        return f"must be {describe(hint)}" if bad else None
    if origin in _MAPPINGS:
        if not isinstance(value, dict) or COMPONENT in value:
            return f"must be {describe(hint)}"
        key_hint, value_hint = args if len(args) == 2 else (None, None)
        bad = any(mismatch(k, key_hint) is not None or mismatch(v, value_hint) is not None for k, v in value.items())
        return f"must be {describe(hint)}" if bad else None
    if origin is not None:
        hint = origin  # ``Stage[In, Out]`` and the like: the class
    if not isinstance(hint, type):
        return None  # Callable, ... : nothing a YAML value can be checked against
    if hint is type(None):
        ok = value is None
    elif hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:  # YAML reads ``temperature: 0`` as an int
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif hint in (list, tuple):
        ok = isinstance(value, (list, tuple))
    elif issubclass(hint, (os.PathLike, PurePath)):
        ok = isinstance(value, (str, os.PathLike))
    elif hint.__module__ == "builtins":
        ok = isinstance(value, hint)
    elif issubclass(hint, SettingsGroup) and isinstance(value, dict) and COMPONENT not in value:
        return _group_mismatch(value, hint)
    else:  # a class: a component node builds it
        return _component_mismatch(value, hint)
    return None if ok else f"must be {describe(hint)}"


def _group_mismatch(value: dict[str, Any], group: type) -> str | None:
    """Why a mapping does not fit the ``SettingsGroup`` ``group``: an unknown field, or the first
    field whose value does not fit its annotation."""
    params, _ = parameters(group)
    params = params or {}
    unknown = sorted(set(value) - set(params))
    if unknown:
        return f"has no setting {unknown[0]!r} ({group.__name__} takes {sorted(params)})"
    for name, field_value in value.items():
        problem = mismatch(field_value, params[name][1])
        if problem is not None:  # the caller names the component and the argument that own the group
            return f"has {name}={field_value!r}, which {problem}"
    return None


def _component_mismatch(value: Any, cls: type) -> str | None:
    if isinstance(value, cls):
        return None
    if not (isinstance(value, dict) and COMPONENT in value):
        return f"must be {describe(cls)}"
    try:
        target = import_memlab_class(value[COMPONENT])
    except ComponentError:
        return None  # reported on the node itself
    # A function may say what a node of it builds (``load_stage``: its checkpoint's saved class).
    built = target if isinstance(target, type) else getattr(target, "builds", lambda node: None)(value)
    if isinstance(built, type) and not issubclass(built, cls):
        return f"must be {describe(cls)} ({built.__name__} is not one)"
    return None


def _bare(hint: Any) -> Any:
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


def describe(hint: Any) -> str:
    hint = _bare(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in _SEQUENCES:
        item = args[0] if args and (origin is not tuple or args[-1] is Ellipsis or len(set(args)) == 1) else None
        return f"a list of {_plural(item)}" if item is not None else "a list"
    if origin in _MAPPINGS:
        return "a mapping"
    names = {type(None): "null", bool: "true or false", int: "an integer", float: "a number", str: "a string",
             list: "a list", tuple: "a list", dict: "a mapping"}
    if hint in names:
        return names[hint]
    if isinstance(hint, type) and issubclass(hint, (os.PathLike, PurePath)):
        return "a path"
    if isinstance(hint, type) and issubclass(hint, SettingsGroup):
        return f"a mapping of {hint.__name__} fields"
    cls = origin or hint
    name = getattr(cls, "__name__", str(cls))
    vowel_sound = "AEFHILMNORSX" if name.isupper() else "AEIOUaeiou"  # "an LM", "an Answerer"
    article = "an" if name[:1] in vowel_sound else "a"
    return f"{article} {name} component" if isinstance(cls, type) and cls.__module__ != "builtins" else f"{article} {name}"


def _plural(hint: Any) -> str:
    description = describe(hint)
    words = {"an integer": "integers", "a number": "numbers", "true or false": "booleans", "null": "nulls"}
    if description in words:
        return words[description]
    return description.split(" ", 1)[1] + "s" if description.startswith(("a ", "an ")) else description


def constraint_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` breaks what ``hint`` declares beyond its type (a ``Range``, a ``Literal``'s
    choices), or None. Values of another type are not judged here: in code that is the type
    checker's job, in a config ``mismatch``'s."""
    if hint is None or hint is Any or isinstance(hint, (str, typing.TypeVar)):
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        if mismatch(value, args[0]) is not None:
            return None
        ranges = [m for m in hint.__metadata__ if isinstance(m, Range)]
        return constraint_problem(value, args[0]) or next((r.problem(value) for r in ranges if r.problem(value)), None)
    if origin in (Union, types.UnionType):
        fitting = [arg for arg in args if mismatch(value, _bare(arg)) is None]
        problems = [constraint_problem(value, arg) for arg in fitting]
        return None if not fitting or None in problems else problems[0]
    if origin is Literal and isinstance(value, tuple({type(a) for a in args})):
        return None if any(value == a and type(value) is type(a) for a in args) else f"must be {describe(hint)}"
    return None


def check_arguments(owner: type, params: dict[str, tuple[bool, Any]], arguments: dict[str, Any]) -> None:
    """A ValueError naming the first of ``arguments`` (declared by ``params``, as ``parameters``
    gives them for ``owner``'s ``__init__``) whose value breaks its declared range or choices: the
    check every stage and pipeline built in code gets, the one ``memlab.config.validate`` applies
    to a config."""
    for name, value in arguments.items():
        hint = params.get(name, (False, None))[1]
        problem = constraint_problem(value, hint)
        if problem is not None:
            raise ValueError(f"{owner.__name__}: {name} {problem}, got {value!r}")


def checked_init(init: Any) -> Any:
    """``init`` whose outermost call (not a subclass's ``super().__init__``) first checks its
    arguments with ``check_arguments``."""
    signature = inspect.signature(init)
    # read on the first call, once the module that declares ``init`` has every name its annotations use
    declared = functools.cache(lambda: parameters(init)[0] or {})

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        if not self.__dict__.get("_arguments_checked"):
            self.__dict__["_arguments_checked"] = True
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            _build_groups(declared(), bound.arguments)
            check_arguments(type(self), declared(), dict(list(bound.arguments.items())[1:]))
            args, kwargs = bound.args[1:], bound.kwargs
        init(self, *args, **kwargs)

    return checked


def _build_groups(params: dict[str, tuple[bool, Any]], arguments: dict[str, Any]) -> None:
    """Each mapping given for a ``SettingsGroup`` argument (declared by ``params``) built into its group."""
    for name, (_, hint) in params.items():
        if isinstance(hint, type) and issubclass(hint, SettingsGroup) and isinstance(arguments.get(name), Mapping):
            arguments[name] = hint(**arguments[name])


class SettingsGroup:
    """Base of a frozen dataclass that groups some of a component's settings by the phase that
    reads them (CompassMem's ``construction`` and ``search``). A config gives a group as a mapping
    of the fields it changes (``search: {top_k: 3}``, ``search.top_k=3``), checked field by field
    (``mismatch``), and the component builds it with the other fields at their defaults. Its
    fields' declared ranges and choices are checked when it is made, in code or from a config, and
    a list given for a tuple field becomes a tuple, so that the group stays hashable."""

    def __post_init__(self) -> None:
        params = _group_parameters(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, list) and typing.get_origin(_bare(params[field.name][1])) is tuple:
                object.__setattr__(self, field.name, tuple(value))
        check_arguments(type(self), params, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


@functools.cache
def _group_parameters(group: type[SettingsGroup]) -> dict[str, tuple[bool, Any]]:
    """A group's declared fields, read once per class (a group is made for every component built)."""
    return parameters(group)[0] or {}


class CheckedArguments:
    """Mixin for a component base class (pipelines, LMs, embedders): every subclass's
    ``__init__`` checks its arguments' declared ranges and choices, built in code or from a config."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = checked_init(cls.__dict__["__init__"])  # type: ignore[method-assign]
