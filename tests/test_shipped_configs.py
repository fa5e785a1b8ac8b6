"""Configs by name: the repository's configs/ ships as package data and resolves from any working folder."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import memlab.config
from memlab.cli import main
from memlab.config import SHIPPED_CONFIGS, ConfigError, load_config, locate_config
from memlab.eval.sweep import SweepError, load_sweep

REPO = Path(__file__).resolve().parents[1]
CONFIG_FILES = sorted((REPO / "configs").rglob("*.yaml"))


def test_the_package_ships_the_repository_configs():
    shipped = sorted(p.relative_to(SHIPPED_CONFIGS) for p in SHIPPED_CONFIGS.rglob("*.yaml"))
    assert shipped == [p.relative_to(REPO / "configs") for p in CONFIG_FILES]


def test_names_and_repository_paths_resolve_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rag_turns = SHIPPED_CONFIGS / "pipelines" / "rag_turns.yaml"
    assert locate_config("rag_turns") == rag_turns
    assert locate_config("pipelines/rag_turns") == rag_turns
    assert locate_config("configs/pipelines/rag_turns.yaml") == rag_turns  # a library default, a recorded evaluator
    assert load_config("rag_turns_best")["reranker"]["rrf_k"] == 10  # its _base_ chain resolves inside the package
    assert len(load_sweep("locomo_conv26_conv30").rows) > 1  # rows' configs are relative to the shipped sweep


def test_every_shipped_name_is_unique_and_finds_its_file():
    for path in CONFIG_FILES:
        assert locate_config(path.stem).resolve() == path.resolve()


def test_a_file_in_the_working_folder_wins_over_a_shipped_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mine = Path("configs/pipelines/rag_turns.yaml")
    mine.parent.mkdir(parents=True)
    mine.write_text("_component_: memlab.pipelines.rag.RAG\ntop_k: 3\n")
    assert locate_config(str(mine)) == mine
    assert load_config(str(mine))["top_k"] == 3
    (tmp_path / "rag_turns").mkdir()  # a folder of that name is not a config; loading says so
    with pytest.raises(ConfigError, match="is a directory"):
        load_config("rag_turns")


def test_an_unknown_name_lists_the_nearest_and_an_ambiguous_one_its_folders(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"'rag_turn' is neither a config file .*did you mean rag_turns"):
        load_config("rag_turn")
    with pytest.raises(SweepError, match="nor the name of a config memlab ships"):
        load_sweep("no_such_sweep")
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.yaml").write_text("k: 1\n")
    monkeypatch.setattr(memlab.config, "SHIPPED_CONFIGS", tmp_path)
    monkeypatch.chdir(tmp_path / "a")
    with pytest.raises(ConfigError, match="ambiguous: a/x, b/x"):
        locate_config("x")
    assert locate_config("b/x") == tmp_path / "b" / "x.yaml"


def test_memlab_run_by_name_from_outside_the_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "rag_turns", "--retrieval-only", "--max-questions", "2", "--no-progress", "--out", "out"]) == 0
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["overall"]["n"] == 2
    assert main(["run", "rag_turn", "--out", "other"]) == 2  # a misspelt name: one error, nothing written
    assert not (tmp_path / "other").exists()


def test_the_built_wheel_resolves_names_without_the_checkout(tmp_path):
    """What pip installs from a wheel (no link to the checkout's configs/) finds a config by name and
    a recipe's nested pipeline by its repository path."""
    wheels, site, source = tmp_path / "wheels", tmp_path / "site", tmp_path / "source"
    # built from a copy of what the wheel is made of: setuptools reuses a checkout's build/ folder,
    # which still ships a config renamed since it was made
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in ("memlab", "configs"):
        shutil.copytree(REPO / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)], check=True)
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), *wheels.glob("memlab-*.whl")],
                   check=True)
    probe = ("from memlab.config import locate_config, load_config, SHIPPED_CONFIGS; "
             "import memlab; assert not SHIPPED_CONFIGS.is_symlink(), SHIPPED_CONFIGS; "
             "print(locate_config('rag_turns')); print(len(list(SHIPPED_CONFIGS.rglob('*.yaml')))); "
             "print(locate_config(load_config('reranker')['validation']['pipeline']))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(site / "memlab/configs/pipelines/rag_turns.yaml"), str(len(CONFIG_FILES)),
                   str(site / "memlab/configs/pipelines/rag_turns.yaml")]
