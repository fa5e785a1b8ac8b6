"""memlab's import order: each package imports only from its own layer or the ones below it,
and no module imports itself back through others (DESIGN.md, "Layout"). Lazy imports inside
functions count: they are dependencies all the same."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1] / "memlab"
#: Lowest first. A top-level module or package of memlab belongs to exactly one layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("", "errors", "bounds", "components", "types", "text", "clock", "dates", "versions", "fileio", "prompts",
     "llama_build_flags"),
    ("data",),
    ("lm", "embed"),
    ("stage", "checkpoint", "memory", "telemetry", "held_out"),
    ("config",),
    ("stages",),
    ("pipelines", "peers"),
    ("eval", "reporting"),
    ("training",),
    ("cli", "recipes"),
)
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _module(path: Path) -> str:
    parts = ("memlab",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # ``from memlab.x import y`` may import the module memlab.x.y itself
                targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_has_a_layer():
    assert {_top(m) for m in _imports()} <= set(LEVEL)


def test_no_package_imports_upward():
    upward = sorted(f"{m} imports {t}" for m, targets in _imports().items() for t in targets
                    if LEVEL[_top(t)] > LEVEL[_top(m)])
    assert upward == []


def test_data_imports_nothing_of_memlab_but_types_text_cleaning_and_the_error_base():
    graph = _imports()
    assert {t for m, ts in graph.items() if _top(m) == "data" for t in ts if _top(t) != "data"} \
        <= {"memlab.types", "memlab.text", "memlab.errors"}


def test_no_import_cycle():
    graph = nx.DiGraph([(m, t) for m, targets in _imports().items() for t in targets
                        if not m.startswith(t + ".")])  # a package's __init__ re-exporting its modules is no cycle
    assert list(nx.simple_cycles(graph)) == []


def test_loading_a_config_imports_no_torch():
    """Config → Contract (the house's whiteboard): reading and checking a config needs no stage code
    and no torch; a bad checkpoint met while building is caught as any ``MemlabError``."""
    import subprocess
    import sys

    code = "import sys, memlab.config; print(sorted(m for m in ('torch', 'memlab.stage') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT.parent)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
