"""Load a script of ``eval/`` as a module, for the tests of its functions (``eval/`` is no package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EVAL = Path(__file__).resolve().parents[1] / "eval"


def eval_script(name: str) -> ModuleType:
    """``eval/<name>.py``, executed; registered in ``sys.modules`` (a dataclass there looks its module up)."""
    spec = importlib.util.spec_from_file_location(name, EVAL / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
