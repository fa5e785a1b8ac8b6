import re
from pathlib import Path

import pytest

from memlab.config import (
    ConfigError,
    apply_override,
    build_pipeline,
    instantiate,
    load_config,
    split_runner_keys,
    validate,
)
from memlab.eval.sweep import load_sweep
from memlab.training.comparison import check_comparison

REPO = Path(__file__).resolve().parents[1]
CONFIG_FILES = sorted((REPO / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_config_validates(path):
    tree = load_config(path)
    first = path.read_text().lstrip().splitlines()[0]
    assert first.startswith("#"), f"{path} must open with a comment saying how to run it"
    if path.parent.name == "train":
        validate(tree)
    elif path.parent.name == "compare":
        check_comparison(tree)
    elif path.parent.name == "sweeps":
        load_sweep(path)  # every row's config and overrides validated
    else:
        pipeline, _ = split_runner_keys(tree)
        assert "_component_" in pipeline
        validate(pipeline)


def test_configs_exist():
    names = {p.name for p in CONFIG_FILES}
    assert {"rag.yaml", "rag_turns.yaml", "fullcontext.yaml"} <= names


def test_unknown_argument_is_reported_with_its_path():
    tree = {"_component_": "memlab.stages.answer.PromptedAnswerer", "lm": None, "max_tokenz": 3}
    with pytest.raises(ConfigError, match=r"config: max_tokenz: .* has no argument 'max_tokenz'"):
        validate(tree)


def test_missing_argument_and_nested_errors_are_all_listed():
    tree = {
        "_component_": "memlab.pipelines.rag.RAG",
        "segmenter": {"_component_": "memlab.stages.segment.TurnSegmenter", "with_dat": True},
        "embedder": None,
    }
    with pytest.raises(ConfigError) as info:
        validate(tree)
    message = str(info.value)
    assert "segmenter.with_dat: " in message and "\n" not in message
    assert "needs argument 'answerer'" in message


def test_only_memlab_paths_are_instantiated():
    with pytest.raises(ConfigError, match="only memlab"):
        validate({"_component_": "os.system", "command": "echo hi"})


def test_unimportable_path_is_a_config_error():
    with pytest.raises(ConfigError, match="no attribute 'Nope'"):
        validate({"_component_": "memlab.stages.segment.Nope"})


def test_overrides_set_nested_values_and_create_under_null():
    tree = {"answerer": {"lm": {"temperature": 0.7}}, "reranker": None}
    apply_override(tree, "answerer.lm.temperature=0")
    apply_override(tree, "reranker._component_=memlab.stages.segment.TurnSegmenter")
    apply_override(tree, "top_k=[1, 2]")
    assert tree["answerer"]["lm"]["temperature"] == 0
    assert tree["reranker"] == {"_component_": "memlab.stages.segment.TurnSegmenter"}
    assert tree["top_k"] == [1, 2]
    with pytest.raises(ConfigError, match="dotted.key=value"):
        apply_override(tree, "no_equals_sign")
    with pytest.raises(ConfigError, match="is not a mapping"):
        apply_override(tree, "top_k.x=1")


def test_yaml_anchor_builds_one_shared_object(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "a: &seg {_component_: memlab.stages.segment.TurnSegmenter, with_date: false}\n"
        "b: *seg\n"
        "c: {_component_: memlab.stages.segment.TurnSegmenter}\n"
    )
    built = instantiate(load_config(path))
    assert built["a"] is built["b"]
    assert built["a"] is not built["c"]
    assert built["a"].with_date is False


def test_base_file_is_merged(tmp_path):
    (tmp_path / "base.yaml").write_text("x: {_component_: memlab.stages.segment.TokenChunkSegmenter, chunk_tokens: 64}\ny: 1\n")
    (tmp_path / "child.yaml").write_text("_base_: base.yaml\nx: {chunk_tokens: 128}\nz: 3\n")
    tree = load_config(tmp_path / "child.yaml", ["y=2"])
    assert tree == {"x": {"_component_": "memlab.stages.segment.TokenChunkSegmenter", "chunk_tokens": 128}, "y": 2, "z": 3}
    # another class keeps only the base arguments it takes (TurnSegmenter has no chunk_tokens)
    (tmp_path / "swap.yaml").write_text("_base_: base.yaml\nx: {_component_: memlab.stages.segment.TurnSegmenter}\n")
    assert load_config(tmp_path / "swap.yaml")["x"] == {"_component_": "memlab.stages.segment.TurnSegmenter"}
    (tmp_path / "loop.yaml").write_text("_base_: loop.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "loop.yaml")


def test_a_node_anchored_in_the_overriding_file_stays_one_node(tmp_path):
    (tmp_path / "base.yaml").write_text("x: {_component_: memlab.stages.segment.TokenChunkSegmenter, chunk_tokens: 64}\n"
                                        "y: {holder: 1}\n")
    (tmp_path / "child.yaml").write_text("_base_: base.yaml\nx: &seg {chunk_tokens: 128}\ny: {inner: *seg}\n")
    tree = load_config(tmp_path / "child.yaml", ["x.chunk_tokens=32"])
    # the alias gets the anchor's merged node (with the base's class), and an override reaches both
    assert tree["y"]["inner"] is tree["x"]
    assert tree["x"] == {"_component_": "memlab.stages.segment.TokenChunkSegmenter", "chunk_tokens": 32}


def test_a_base_below_the_top_merges_relative_to_its_file(tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "base.yaml").write_text("_component_: memlab.pipelines.rag.RAG\ntop_k: 10\nrrf_k: 60\n")
    (tmp_path / "train.yaml").write_text("evaluator:\n  _component_: memlab.training.rerank.RerankerEvaluator\n"
                                         "  pipeline: &first {_base_: pipelines/base.yaml, top_k: 50}\n"
                                         "again: *first\n")
    tree = load_config(tmp_path / "train.yaml", ["evaluator.pipeline.rrf_k=10"])
    assert tree["evaluator"]["pipeline"] == {"_component_": "memlab.pipelines.rag.RAG", "top_k": 50, "rrf_k": 10}
    assert tree["again"] is tree["evaluator"]["pipeline"]  # an anchored node stays one node
    (tmp_path / "pipelines" / "loop.yaml").write_text("x: {_base_: loop.yaml}\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "pipelines" / "loop.yaml")
    (tmp_path / "bad.yaml").write_text("x: {_base_: [1]}\n")
    with pytest.raises(ConfigError, match="_base_ must be a file name"):
        load_config(tmp_path / "bad.yaml")


def test_bad_files_give_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(tmp_path / "list.yaml")


def test_constructor_value_error_names_the_component():
    # (a single argument's range is refused by validation first: test_config_values)
    with pytest.raises(ConfigError, match="TrainedGlobalSelector.*min_selected 3 > max_selected 2"):
        instantiate({"_component_": "memlab.stages.global_select.TrainedGlobalSelector", "min_selected": 3,
                     "max_selected": 2, "encoder": {"_component_": "memlab.stages.encoder.TextEncoder"}})


def test_build_pipeline_loads_nothing_heavy():
    # Building the default RAG config must not load the LLM (lazy) so retrieval-only runs stay LLM-free.
    pipeline, runner, tree = build_pipeline(REPO / "configs/pipelines/rag_turns.yaml", ["top_k=3"])
    assert pipeline.top_k == 3
    assert runner == {"eval": {"judge": None}}
    lm = pipeline.answerer.lm
    assert lm._llm is None
    assert [name for name, _ in pipeline.named_stages()] == ["segmenter", "answerer"]



CHECKPOINT_CONFIGS = [p for p in CONFIG_FILES if p.parent.name in ("pipelines", "ablations")
                      and "memlab.stage.load_stage" in p.read_text()]


def _checkpoint_paths(node):
    if isinstance(node, dict):
        if node.get("_component_") == "memlab.stage.load_stage":
            yield node["path"]
        for value in node.values():
            yield from _checkpoint_paths(value)


@pytest.mark.parametrize("path", CHECKPOINT_CONFIGS, ids=lambda p: p.name)
def test_configs_with_a_committed_checkpoint_build(path, monkeypatch):
    """Every config that loads a trained stage finds its committed checkpoint and plugs in its weights."""
    import json

    import torch
    from safetensors.torch import load_file

    monkeypatch.chdir(REPO)  # checkpoint paths in configs are relative to the repository root
    pipeline, _, tree = build_pipeline(path)
    for checkpoint in _checkpoint_paths(tree):
        saved_class = json.loads((REPO / checkpoint / "config.json").read_text())["class"]
        saved = load_file(str(REPO / checkpoint / "model.safetensors"))
        matches = [s for _, s in pipeline.named_stages() if f"{type(s).__module__}.{type(s).__qualname__}" == saved_class
                   and all(torch.equal(s.state_dict()[k], v) for k, v in saved.items())]
        assert matches, f"{path.name}: no stage of the pipeline carries the weights of {checkpoint}"


def test_overriding_the_component_drops_the_old_class_settings():
    tree = load_config(REPO / "configs" / "pipelines" / "magma.yaml", [
        "traverser._component_=memlab.stage.load_stage", "traverser.path=checkpoints/traversal-policy",
        "answerer._component_=memlab.stages.answer.PromptedAnswerer",
    ])
    assert tree["traverser"] == {"_component_": "memlab.stage.load_stage", "path": "checkpoints/traversal-policy"}
    assert "lm" in tree["answerer"]  # the shared LM is an argument the new answerer takes too
    pipeline, _ = split_runner_keys(tree)
    validate(pipeline)


def test_the_unseen_data_config_resolves_dates_and_refuses_every_dev_conversation(tmp_path):
    from memlab.eval.runner import RunOptions, run_config

    tree = load_config(REPO / "configs" / "pipelines" / "rag_turns_unseen.yaml")
    assert tree["segmenter"]["normalizer"]["_component_"] == "memlab.stages.temporal.RuleTemporalNormalizer"
    assert tree["reranker"]["reranker"]["path"] == "checkpoints/reranker-minilm-gemma"
    assert tree["answerer"]["prompt"] == "compassmem/answer"  # the published prompt: memlab's lost on dev (BENCHMARKS)
    dev = REPO.parent / "shared" / "data" / "locomo" / "locomo10_dev.json"
    if not dev.is_file():
        pytest.skip("needs ../shared/data/locomo")
    with pytest.raises(ValueError, match=r"trained stages would be scored on conversations they learnt from"):
        run_config(REPO / "configs" / "pipelines" / "rag_turns_unseen.yaml", data=dev, conversations=["conv-30"],
                   options=RunOptions(progress=False), out=tmp_path / "run")


def test_the_final_trained_answerer_has_seen_every_dev_conversation():
    """The final fit's adapter serves rag_turns_unseen only, and records all 7 dev conversations,
    so the runner refuses it on any of them (HFLM.trained_on reads its training.json)."""
    from memlab.config import instantiate

    tree = load_config(REPO / "configs" / "pipelines" / "rag_turns_unseen_trained_answerer.yaml")
    assert tree["reranker"]["reranker"]["path"] == "checkpoints/reranker-minilm-gemma"  # rag_turns_unseen's final fit
    lm = instantiate(tree["answerer"]["lm"])  # no weights are loaded until it is asked
    assert lm.trained_on == {"conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47"}


def test_a_settings_group_takes_a_mapping_checked_and_merged_over_its_defaults():
    """An argument annotated with a ``SettingsGroup`` (CompassMem's ``construction`` and ``search``)
    takes a mapping of the fields it changes, checked field by field, and the component builds the
    group with the other fields at their defaults; a group made in code checks its own ranges."""
    from memlab.pipelines.compassmem.settings import ConstructionSettings, SearchSettings

    pipeline, _, _ = build_pipeline(REPO / "configs" / "pipelines" / "compassmem.yaml",
                                    ["search.top_k=3", "construction.edges=false", "relation_extractor=null"])
    assert pipeline.search_settings == SearchSettings(top_k=3)
    assert pipeline.construction == ConstructionSettings(edges=False) and pipeline.relation_extractor is None
    refusals = {"search.top_k=0": "search={...} has top_k=0, which must be >= 1 (CompassMem.search)",
                "search.depth=3": "search={...} has no setting 'depth'",
                "search=5": "search=5 must be a mapping of SearchSettings fields",
                "construction.merge_threshold=2": "has merge_threshold=2, which must be in [0, 1]"}
    for override, message in refusals.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            validate(load_config(REPO / "configs" / "pipelines" / "compassmem.yaml", [override]))
    with pytest.raises(ValueError, match="SearchSettings: top_k must be >= 1, got 0"):
        SearchSettings(top_k=0)
    from memlab.pipelines.mnemis.settings import SearchSettings as MnemisSearch

    mnemis = build_pipeline(REPO / "configs" / "pipelines" / "mnemis.yaml", ["search.context=[episodes, facts]"])[0]
    assert mnemis.search_settings == MnemisSearch(context=("episodes", "facts"))  # the YAML list kept as a tuple
    assert hash(mnemis.search_settings) == hash(MnemisSearch(context=["episodes", "facts"]))
