"""The scripts of ``eval/`` are thin entry points over the library (CONTRIBUTING): no test imports
one, so this reads them. Every name a script takes from memlab must exist (a move in the library
would otherwise break a script silently), and a script imports nothing from another script."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

EVAL = Path(__file__).resolve().parents[2] / "eval"
SCRIPTS = sorted(EVAL.glob("*.py"))


def test_there_are_scripts_to_check():
    assert SCRIPTS and all(path.name != "__init__.py" for path in SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_a_script_imports_only_names_the_library_has(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            assert node.module.split(".")[0] in {"memlab", "__future__"} or \
                importlib.util.find_spec(node.module.split(".")[0]) is not None, f"{script.name}: {node.module}"
            if node.module.startswith("memlab"):
                module = importlib.import_module(node.module)
                missing = [alias.name for alias in node.names if not hasattr(module, alias.name)]
                assert not missing, f"{script.name}: {node.module} has no {missing}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert not (EVAL / f"{alias.name}.py").exists(), f"{script.name} imports the script {alias.name}"
