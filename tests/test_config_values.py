"""Config values are checked against their constructor's annotation and declared range
(``memlab.bounds``) when a config is validated, before anything is built or loaded."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Annotated, Literal

import pytest
from torch import nn

from memlab.bounds import PositiveInt, Range
from memlab.components import mismatch as _mismatch
from memlab.components import parameters as _parameters
from memlab.config import ConfigError, build_pipeline, load_config, validate
from memlab.embed.base import Embedder
from memlab.lm.base import LM

REPO = Path(__file__).resolve().parents[1]
RAG_TURNS = REPO / "configs/pipelines/rag_turns.yaml"


def _refusal(config: Path, *overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        build_pipeline(config, list(overrides))
    message = str(info.value)
    assert "\n" not in message and message.startswith("invalid config: ")  # validation, not a build
    return message


@pytest.mark.parametrize("override, expected", [
    ("candidates=abc", "candidates='abc' must be an integer (RAG.candidates)"),
    ("rrf_k=-10", "rrf_k=-10 must be >= 0 (RAG.rrf_k)"),
    ("top_k=2.5", "top_k=2.5 must be an integer (RAG.top_k)"),
    ("top_k=true", "top_k=True must be an integer (RAG.top_k)"),
    ("top_k=0", "top_k=0 must be >= 1 (RAG.top_k)"),
    ("segmenter=5", "segmenter=5 must be a Segmenter component (RAG.segmenter)"),
    ("segmenter=null", "segmenter=None must be a Segmenter component (RAG.segmenter)"),
    ("segmenter._component_=memlab.stages.rerank.FusionReranker",
     "segmenter=<memlab.stages.rerank.FusionReranker> must be a Segmenter component (FusionReranker is not one)"),
    ("answerer.lm=abc", "answerer.lm='abc' must be an LM component (PromptedAnswerer.lm)"),
    ("answerer.temperature=-0.5", "answerer.temperature=-0.5 must be >= 0 (PromptedAnswerer.temperature)"),
    ("answerer.max_tokens=[64]", "answerer.max_tokens=[64] must be an integer (PromptedAnswerer.max_tokens)"),
    ("answerer.lm.n_ctx=big", "answerer.lm.n_ctx='big' must be an integer (LlamaCppLM.n_ctx)"),
    ("answerer.lm.verbose=2", "answerer.lm.verbose=2 must be true or false (LlamaCppLM.verbose)"),
    ("segmenter.with_date=yesplease", "segmenter.with_date='yesplease' must be true or false"),
    ("reranker={a: 1}", "reranker={...} must be a Reranker component or null (RAG.reranker)"),
])
def test_a_wrong_value_is_refused_before_anything_is_built(override, expected):
    assert expected in _refusal(RAG_TURNS, override)


def test_every_problem_is_listed_on_one_line():
    message = _refusal(RAG_TURNS, "candidates=abc", "rrf_k=-10", "top_k=2.5", "segmenter=5")
    assert message.count(" must be ") == 4


@pytest.mark.parametrize("override", [
    "answerer.temperature=0",      # YAML reads 0 as an int: fine for a float
    "answerer.temperature=0.7",
    "answerer.temperature=1e-3",   # read as a float (YAML 1.2), not PyYAML's string
    "answerer.lm.n_threads=null",  # int | None
    "reranker=null",
    "rrf_k=0",                     # reciprocal ranks count from 1: k=0 is valid
    "reranker._component_=memlab.stage.load_stage",  # a function: no class to check (the path is)
])
def test_a_right_value_passes(override):
    tree = load_config(RAG_TURNS, [override])
    if "load_stage" in override:
        tree["reranker"]["path"] = "checkpoints/x"
    tree.pop("eval")
    validate(tree)


def test_a_range_inside_an_optional_is_reported_as_a_range():
    node = {"_component_": "memlab.pipelines.fullcontext.FullContext",
            "answerer": {"_component_": "memlab.stages.answer.PromptedAnswerer",
                         "lm": {"_component_": "memlab.lm.llamacpp.LlamaCppLM"}},
            "max_context_tokens": 0}
    with pytest.raises(ConfigError, match=r"max_context_tokens=0 must be >= 1 \(FullContext"):
        validate(node)
    validate({**node, "max_context_tokens": None})


def test_arguments_a_variant_passes_on_are_checked_too():
    # EMemG(**shared) hands synonym_threshold to EMem (pipelines.base.extends_signature): EMem's annotation applies
    node = load_config(REPO / "configs/pipelines/emem_g.yaml", ["synonym_threshold=2", "damping=-1", "synonym_capp=1"])
    node.pop("eval")
    with pytest.raises(ConfigError) as info:
        validate(node)
    message = str(info.value)
    assert "synonym_threshold=2 must be in [0, 1] (EMemG.synonym_threshold)" in message
    assert "damping=-1 must be in (0, 1)" in message  # EMemG's own argument: open, as PPR needs
    assert "has no argument 'synonym_capp'" in message


def test_annotation_forms():
    assert _mismatch("dense", Literal["dense", "bm25"]) is None
    assert _mismatch("sparse", Literal["dense", "bm25"]) == "must be one of 'dense', 'bm25'"
    assert _mismatch(1, Literal[True]) is not None  # 1 == True, but not a bool
    assert _mismatch([1, "a"], tuple[int, str]) is None
    assert _mismatch([1], tuple[int, str]) == "must be a list"
    assert _mismatch([1, 2], list[str]) == "must be a list of strings"
    assert _mismatch(("a",), list[str] | tuple[str, ...]) is None
    assert _mismatch({"x": ["a", "b"]}, dict[str, list[str]]) is None
    assert _mismatch({"x": [1]}, dict[str, list[str]]) == "must be a mapping"
    assert _mismatch(0.5, Annotated[float, Range(0, 1)]) is None
    assert _mismatch(3, Annotated[int, Range(max=2)]) == "must be <= 2"
    assert _mismatch(-1, PositiveInt | None) == "must be >= 1"
    assert _mismatch("x", PositiveInt | None) == "must be an integer or null"
    assert _mismatch("checkpoints/x", str | Path) is None


def test_the_runner_keys_are_checked_too():
    assert "eval=5 must be a mapping" in str(pytest.raises(ConfigError, build_pipeline, RAG_TURNS, ["eval=5"]).value)
    assert "eval has no key 'jugde'" in str(pytest.raises(ConfigError, build_pipeline, RAG_TURNS, ["eval.jugde=1"]).value)
    assert "eval.judge=3 must be null or a judge component" in str(
        pytest.raises(ConfigError, build_pipeline, RAG_TURNS, ["eval.judge=3"]).value)
    message = str(pytest.raises(ConfigError, build_pipeline, RAG_TURNS, [
        "eval.judge._component_=memlab.eval.judge.MagmaGraderJudge", "eval.judge.runs=0"]).value)
    assert "needs argument 'lm'" in message


def test_a_checkpoint_that_is_not_there_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"building memlab.stage.load_stage: .*not a saved stage"):
        build_pipeline(RAG_TURNS, ["reranker._component_=memlab.stage.load_stage", f"reranker.path={tmp_path}"])


def _buildable_classes():
    """Every class a config can build: the stages, pipelines, LMs and embedders of memlab."""
    for package in ("memlab.stages", "memlab.pipelines", "memlab.lm", "memlab.embed"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                if isinstance(obj, type) and obj.__module__ == module.__name__ and issubclass(obj, (nn.Module, LM, Embedder)):
                    yield obj


BUILDABLE = sorted(set(_buildable_classes()), key=lambda c: f"{c.__module__}.{c.__qualname__}")


@pytest.mark.parametrize("cls", BUILDABLE, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_constructor_argument_is_checkable_and_its_default_fits(cls):
    """An annotation the checker cannot resolve would leave that argument unchecked, silently;
    a declared range that excludes the default is a wrong range."""
    params, _ = _parameters(cls)
    defaults = {}
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass) and klass.__module__.startswith("memlab"):
            defaults.update(inspect.signature(inspect.unwrap(vars(klass)["__init__"])).parameters)
    for name, (_, hint) in params.items():
        if name not in defaults:
            continue  # nn.Module's own
        assert hint is not None, f"{cls.__name__}.{name}: no annotation the config check can read"
        default = defaults[name].default
        if default is not inspect.Parameter.empty and default is not None:
            assert _mismatch(default, hint) is None, f"{cls.__name__}.{name}={default!r}: {_mismatch(default, hint)}"


def test_unreadable_config_files_are_one_line_config_errors(tmp_path):
    (tmp_path / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    (tmp_path / "base_number.yaml").write_text("_base_: 5\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "tab.yaml").write_text("a:\n\tb: 1\n")
    for path, expected in ((tmp_path, "is a directory"), (tmp_path / "binary.yaml", "not UTF-8 text"),
                           (tmp_path / "base_number.yaml", "_base_ must be a file name"),
                           (tmp_path / "empty.yaml", "mapping at the top level"),
                           (tmp_path / "tab.yaml", "invalid YAML"),
                           (tmp_path / "missing.yaml", "not found")):
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert expected in str(info.value) and "\n" not in str(info.value)


def test_exponent_floats_are_floats_in_files_and_overrides(tmp_path):
    (tmp_path / "c.yaml").write_text("lr: 1e-4\nname: 1e\n")
    assert load_config(tmp_path / "c.yaml", ["wd=2E-2"]) == {"lr": 1e-4, "name": "1e", "wd": 0.02}
