"""Declared constraints hold where they are declared (issue 81, the residue): no subclass weakens a
parent's constrained parameter (a ``Literal`` or a ``Range`` turned back into a bare type, which
validation could no longer see), and constrained parameters are read as annotated, not rechecked by
hand in a second, drifting copy."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import typing
from pathlib import Path

import memlab
from memlab.components import parameters

ROOT = Path(memlab.__file__).parent
CONSTRAINED = (typing.Literal, typing.Annotated)


def _classes():
    for module in pkgutil.walk_packages([str(ROOT)], "memlab."):
        if module.name.endswith("__main__"):
            continue
        loaded = importlib.import_module(module.name)
        for _, cls in inspect.getmembers(loaded, inspect.isclass):
            if cls.__module__ == loaded.__name__ and "__init__" in vars(cls):
                yield cls


def _constrained(hint) -> bool:
    return typing.get_origin(hint) in CONSTRAINED


def test_no_subclass_weakens_a_constrained_parameter():
    weakened = []
    for cls in _classes():
        own, _ = parameters(cls)
        for parent in cls.__mro__[1:]:
            if "__init__" not in vars(parent) or parent.__module__ == "builtins" or not parent.__module__.startswith(
                    "memlab"):
                continue
            inherited, _ = parameters(parent)
            for name, (_, hint) in (inherited or {}).items():
                mine = (own or {}).get(name, (False, None))[1]
                if _constrained(hint) and mine is not None and not _constrained(mine):
                    weakened.append(f"{cls.__module__}.{cls.__name__}.{name}: {mine!r} under {parent.__name__}'s "
                                    f"{hint!r}")
            break  # the nearest declaring parent is the contract
    assert weakened == []


def test_no_hand_range_check_repeats_an_annotation():
    """``if x < 1: raise ValueError`` beside ``x: PositiveInt``: the annotation already refuses it,
    from code and from a config alike."""
    repeated = []
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__init__"):
            annotated = {a.arg for a in function.args.args + function.args.kwonlyargs if a.annotation is not None
                         and any(word in ast.unparse(a.annotation) for word in
                                 ("PositiveInt", "NonNegativeInt", "PositiveFloat", "NonNegativeFloat", "UnitFloat",
                                  "Literal"))}
            for node in ast.walk(function):
                if isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body):
                    bounds = _bounds(node.test)  # a parameter against constants (a cross-field check is not one)
                    if bounds and bounds <= annotated:
                        repeated.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node.test)}")
    assert repeated == []


def _bounds(test: ast.expr) -> set[str] | None:
    """The names ``test`` compares with constants only (``x < 1 or y > 2``), None for any other test."""
    parts = test.values if isinstance(test, ast.BoolOp) else [test]
    names = set()
    for part in parts:
        if not (isinstance(part, ast.Compare) and isinstance(part.left, ast.Name)
                and all(isinstance(c, ast.Constant) for c in part.comparators)):
            return None
        names.add(part.left.id)
    return names
