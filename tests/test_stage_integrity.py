"""Stage checkpoints carry the manifest memory folders have (``memlab.fileio``): a checkpoint
corrupted in any way is refused with a one-line ``StageError`` naming the problem, never
loaded on untrained weights and never a raw traceback (issue 22, section 4); and a loaded
stage says which conversations it learnt from (``trained_on``, ``trained_conversations``),
so a run can refuse to score it on them (issue 22, section 1)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from memlab.fileio import read_manifest
from memlab.held_out import trained_conversations
from memlab.stage import Stage, StageError, load_stage, seal_checkpoint
from memlab.stages.traverse.policy import TraversalPolicy
from tests.corruption import directory_instead, flip_byte, truncate

REPO = Path(__file__).resolve().parents[1]
COMMITTED = ("reranker-minilm-turns", "reranker-minilm-gemma", "router-minilm", "router-tfidf", "traversal-policy")
SPLIT = {"train": ["conv-41", "conv-42"], "validation": ["conv-47"], "evaluation": ["conv-26"]}
#: The committed stage checkpoints that record an evaluator (the trained answerer is a peft folder).
EVALUATED = sorted(p.parent.name for p in (REPO / "checkpoints").glob("*/training.json")
                   if (p.parent / "manifest.json").is_file() and '"evaluator"' in p.read_text())


class _Wrapped(Stage):
    """A composite with a tensor of its own around a child stage (a tree of two nodes with weights)."""

    def __init__(self, inner: Stage, shift: float = 0.0) -> None:
        super().__init__()
        self.inner = inner
        self.shift = nn.Parameter(torch.tensor([shift]))


@pytest.fixture
def wrapped_in_memlab(monkeypatch):
    """Saved stages must be importable from ``memlab``: lend the test class a place there."""
    import memlab.stage

    monkeypatch.setattr(_Wrapped, "__module__", "memlab.stage")
    monkeypatch.setattr(memlab.stage, "_Wrapped", _Wrapped, raising=False)


def _policy() -> TraversalPolicy:
    policy = TraversalPolicy(lambda2=0.7)
    with torch.no_grad():
        policy.weight[0, 1] = 9.0  # off its initial value, as training leaves it
    return policy


# -- corruption sweep ----------------------------------------------------------------------


def _edit_manifest(folder, edit):
    path = folder / "manifest.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))


def _set(key, value):
    return lambda m: {**m, key: value}


def _sealed(edit):
    """An edit followed by a new manifest: the checksums pass, so the check after them must catch it."""
    return lambda folder: (edit(folder), seal_checkpoint(folder))


def _nan_weights(folder):
    weights = folder / "model.safetensors"
    save_file({k: torch.full_like(v, float("nan")) for k, v in load_file(str(weights)).items()}, str(weights))


def _config_kwargs(folder, **kwargs):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "kwargs": {**config["kwargs"], **kwargs}}))


def _legacy(folder):
    """The format before manifests: versions.json instead."""
    (folder / "versions.json").write_text(json.dumps(json.loads((folder / "manifest.json").read_text())["versions"]))
    (folder / "manifest.json").unlink()


SHA = "0" * 64
CASES = {
    # what the manifest catches
    "weights deleted": (lambda f: (f / "model.safetensors").unlink(),
                        r"file model\.safetensors listed in the manifest is missing"),
    "weights truncated": (lambda f: truncate(f / "model.safetensors"),
                          r"file model\.safetensors is corrupted or truncated"),
    "weights byte flipped": (lambda f: flip_byte(f / "model.safetensors"),
                             r"file model\.safetensors is corrupted or truncated"),
    "weights full of NaN": (_nan_weights, r"file model\.safetensors is corrupted or truncated"),
    "weights a directory": (lambda f: directory_instead(f / "model.safetensors"),
                            r"model\.safetensors listed in the manifest is a directory, not a file"),
    "config byte flipped": (lambda f: flip_byte(f / "config.json"), r"file config\.json is corrupted or truncated"),
    "config a directory": (lambda f: directory_instead(f / "config.json"),
                           r"config\.json listed in the manifest is a directory, not a file"),
    "child weights deleted": (lambda f: (f / "inner" / "model.safetensors").unlink(),
                              r"file inner/model\.safetensors listed in the manifest is missing"),
    "child manifest deleted": (lambda f: (f / "inner" / "manifest.json").unlink(),
                               r"file inner/manifest\.json listed in the manifest is missing"),
    "child folder deleted": (lambda f: shutil.rmtree(f / "inner"), r"file inner/\S+ listed in the manifest is missing"),
    # the manifest itself
    "manifest deleted": (lambda f: (f / "manifest.json").unlink(),
                         r"no manifest\.json, so its files cannot be checked .*seal_checkpoint"),
    "manifest a directory": (lambda f: directory_instead(f / "manifest.json"), r"no manifest\.json"),
    "legacy versions.json only": (_legacy, r"no manifest\.json, so its files cannot be checked \(saved before"),
    "manifest not json": (lambda f: (f / "manifest.json").write_text("{trunc"), r"unreadable manifest \(JSONDecodeError"),
    "manifest a list": (lambda f: (f / "manifest.json").write_text("[]"),
                        r"malformed manifest \(a JSON list, not an object\)"),
    "files a list": (lambda f: _edit_manifest(f, _set("files", ["config.json"])), r"malformed manifest \('files' is list"),
    "files null": (lambda f: _edit_manifest(f, _set("files", None)), r"malformed manifest \('files' is NoneType"),
    "files a string": (lambda f: _edit_manifest(f, _set("files", "config.json")), r"malformed manifest \('files' is str"),
    "digest a number": (lambda f: _edit_manifest(f, _set("files", {"config.json": 1})),
                        r"malformed manifest \('files' gives config\.json the digest 1, not a sha256\)"),
    "file outside the folder": (lambda f: _edit_manifest(f, _set("files", {"/etc/passwd": SHA})),
                                r"malformed manifest \('files' lists '/etc/passwd', not a file inside the folder\)"),
    "weights unlisted": (lambda f: _edit_manifest(f, lambda m: {**m, "files": {
        k: v for k, v in m["files"].items() if k != "model.safetensors"}}),
        r"the manifest does not list model\.safetensors, so it cannot be checked"),
    "other format version": (lambda f: _edit_manifest(f, _set("format_version", 2)),
                             r"format version 2, this memlab reads version 1 \(saved by memlab .*\); "
                             r"load it with that memlab"),
    "other format": (lambda f: _edit_manifest(f, _set("format", "memlab.UnitMemory")),
                     r"holds 'memlab\.UnitMemory', not 'memlab\.Stage'"),
    "format version a string": (lambda f: _edit_manifest(f, _set("format_version", "1")),
                                r"malformed manifest \('format_version' is not an integer\)"),
    "trained_on a string": (lambda f: _edit_manifest(f, _set("trained_on", "conv-41")),
                            r"malformed manifest \('trained_on' is not a list of conversation ids\)"),
    # what passes the checksums (a hand edit, then sealed): the contents are checked too
    "sealed NaN weights": (_sealed(_nan_weights),
                           r"tree/model\.safetensors: non-finite weights \(NaN or inf\) in \['shift'\]"),
    "sealed truncated weights": (_sealed(lambda f: truncate(f / "model.safetensors")),
                                 r"model\.safetensors: cannot read weights \(SafetensorError"),
    "sealed weights deleted": (_sealed(lambda f: (f / "model.safetensors").unlink()),
                               r"no model\.safetensors, but _Wrapped has weights to load \(\['shift'\]\)"),
    "sealed child weights deleted": (_sealed(lambda f: (f / "inner" / "model.safetensors").unlink()),
                                     r"inner: no model\.safetensors, but TraversalPolicy has weights to load"),
    "sealed config a list": (_sealed(lambda f: (f / "config.json").write_text("[]")), r"malformed stage config"),
    "sealed kwargs of the wrong type": (_sealed(lambda f: _config_kwargs(f / "inner", intents=5)),
                                        r"inner/config\.json: saved argument intents of TraversalPolicy must be "),
    # issue 82: each annotated type of a saved argument, checked as a config's value is
    "sealed int a string": (_sealed(lambda f: _config_kwargs(f / "inner", beam_width="ten")),
                            r"saved argument beam_width of TraversalPolicy must be an integer, got 'ten'"),
    "sealed int a list": (_sealed(lambda f: _config_kwargs(f / "inner", max_depth=[5])),
                          r"saved argument max_depth of TraversalPolicy must be an integer, got \[5\]"),
    "sealed int out of range": (_sealed(lambda f: _config_kwargs(f / "inner", max_nodes=0)),
                                r"saved argument max_nodes of TraversalPolicy must be >= 1, got 0"),
    "sealed float a string": (_sealed(lambda f: _config_kwargs(f / "inner", lambda1="1.0")),
                              r"saved argument lambda1 of TraversalPolicy must be a number, got '1\.0'"),
    "sealed bool a number": (_sealed(lambda f: _config_kwargs(f / "inner", uniform=1)),
                             r"saved argument uniform of TraversalPolicy must be true or false, got 1"),
    "sealed str a number": (_sealed(lambda f: _config_kwargs(f / "inner", default_intent=3)),
                            r"saved argument default_intent of TraversalPolicy must be a string, got 3"),
    "sealed mapping a list": (_sealed(lambda f: _config_kwargs(f / "inner", weights=[1, 2])),
                              r"saved argument weights of TraversalPolicy must be a mapping or null, got \[1, 2\]"),
    "training record split a list": (lambda f: (f / "training.json").write_text(json.dumps({"split": ["conv-41"]})),
                                     r"training\.json: malformed training record"),
    "training record ids numbers": (lambda f: (f / "training.json").write_text(json.dumps({"split": {"train": [41]}})),
                                    r"training\.json: malformed training record"),
}


@pytest.mark.parametrize("corrupt, problem", CASES.values(), ids=CASES.keys())
def test_a_corrupted_checkpoint_is_refused_in_one_line(corrupt, problem, tmp_path, wrapped_in_memlab):
    folder = _Wrapped(_policy(), shift=0.5).save(tmp_path / "tree")
    (folder / "training.json").write_text(json.dumps({"split": SPLIT}))  # as a recipe writes it, after the save
    assert Stage.load(folder).inner.weight[0, 1].item() == 9.0
    corrupt(folder)
    for load in (Stage.load, load_stage):
        with pytest.raises(StageError, match=problem) as error:
            load(folder)
        assert type(error.value) is StageError and "\n" not in str(error.value)


def test_sealing_refuses_an_unreadable_training_record(tmp_path, wrapped_in_memlab):
    """Sealing records the split in the manifest, so a record it cannot read is refused there."""
    folder = _Wrapped(_policy(), shift=0.5).save(tmp_path / "tree")
    (folder / "training.json").write_text("{")
    with pytest.raises(StageError, match=r"training\.json: unreadable training record \(JSONDecodeError"):
        seal_checkpoint(folder)


def test_a_child_folder_loaded_alone_is_checked_by_its_own_manifest(tmp_path, wrapped_in_memlab):
    folder = _Wrapped(_policy()).save(tmp_path / "tree")
    assert Stage.load(folder / "inner").weight[0, 1].item() == 9.0
    flip_byte(folder / "inner" / "model.safetensors")
    with pytest.raises(StageError, match=r"inner: file model\.safetensors is corrupted or truncated"):
        Stage.load(folder / "inner")


def test_a_stage_with_non_finite_weights_is_never_saved(tmp_path):
    policy = _policy()
    with torch.no_grad():
        policy.gamma.fill_(float("inf"))
    refused = r"TraversalPolicy: refusing to save non-finite weights \(NaN or inf\) in \['gamma'\]"
    with pytest.raises(StageError, match=refused):
        policy.save(tmp_path / "p")
    assert not (tmp_path / "p").exists() and list(tmp_path.iterdir()) == []


def test_other_package_versions_are_only_logged(tmp_path, caplog):
    folder = _policy().save(tmp_path / "p")
    _edit_manifest(folder, lambda m: {**m, "versions": {**m["versions"], "torch": "0.0.1"}})
    with caplog.at_level(logging.INFO, logger="memlab.stage"):
        assert Stage.load(folder).weight[0, 1].item() == 9.0
    assert "saved with other package versions (torch 0.0.1 -> " in caplog.text


def test_sealing_a_legacy_checkpoint_keeps_its_files_and_versions(tmp_path):
    folder = _policy().save(tmp_path / "p")
    (folder / "training.json").write_text(json.dumps({"split": SPLIT}))
    _legacy(folder)
    versions = json.loads((folder / "versions.json").read_text())
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "versions.json"}
    seal_checkpoint(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "manifest.json"} == before
    manifest = read_manifest(folder, "memlab.Stage", 1)
    assert manifest["versions"] == versions and not (folder / "versions.json").exists()
    assert set(manifest["files"]) == {"config.json", "model.safetensors", "training.json"}
    assert Stage.load(folder).trained_on == {"conv-41", "conv-42", "conv-47"}


# -- committed checkpoints -----------------------------------------------------------------
@pytest.mark.parametrize("name", COMMITTED)
def test_committed_checkpoints_carry_a_manifest_that_checks(name):
    folder = REPO / "checkpoints" / name
    manifest = read_manifest(folder, "memlab.Stage", 1, required=("config.json", "model.safetensors", "training.json"))
    # top-level files; a child stage (router-tfidf's temporal normaliser) has a folder of its own
    assert {f for f in manifest["files"] if "/" not in f} == {"config.json", "model.safetensors", "training.json"}
    assert manifest["versions"]["torch"] == "2.13.0+cpu"  # the versions it was trained with, not today's
    assert not (folder / "versions.json").exists()


@pytest.mark.parametrize("name", EVALUATED)
def test_a_committed_checkpoints_evaluator_is_self_contained(name):
    """The evaluator a checkpoint records carries its pipelines as resolved trees, not as paths to
    files that may change (issue 81), and validates as it stands."""
    import json

    from memlab.components import import_memlab_class
    from memlab.config import validate
    from memlab.training.evaluators import StageEvaluator

    node = json.loads((REPO / "checkpoints" / name / "training.json").read_text())["evaluator"]
    for field, overrides in (("pipeline", "pipeline_overrides"), ("teacher", "teacher_overrides")):
        if field in node:
            assert isinstance(node[field], dict) and "_component_" in node[field], f"{name}: {field} is {node[field]!r}"
            assert node[overrides] == [], f"{name}: {overrides} {node[overrides]}"
    validate(node)
    evaluator = import_memlab_class(node["_component_"])  # recorded before the families moved out (MOVED)
    assert issubclass(evaluator, StageEvaluator) and evaluator.__module__ != "memlab.training.evaluators"


def test_a_committed_checkpoint_knows_its_training_conversations():
    policy = Stage.load(REPO / "checkpoints" / "traversal-policy")
    assert policy.trained_on == {"conv-41", "conv-42", "conv-43", "conv-44", "conv-47"}  # not conv-26/30: held out
    final = Stage.load(REPO / "checkpoints" / "reranker-minilm-gemma")  # the final fit: every dev conversation
    assert final.trained_on == {"conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47"}


# -- trained_on ----------------------------------------------------------------------------
def test_trained_on_comes_from_the_checkpoint_and_is_read_only(tmp_path):
    fresh = _policy()
    assert fresh.trained_on == frozenset() and fresh.loaded_from is None
    folder = fresh.save(tmp_path / "p")
    untrained = Stage.load(folder)
    assert untrained.trained_on == frozenset() and untrained.loaded_from == folder
    (folder / "training.json").write_text(json.dumps({"config": {}, "split": SPLIT}))
    trained = Stage.load(folder)
    assert trained.trained_on == {"conv-41", "conv-42", "conv-47"}  # train + validation, not the evaluation
    assert load_stage(folder).trained_on == trained.trained_on
    with pytest.raises(AttributeError):
        trained.trained_on = frozenset()
    # A save carries it over (the training record stays behind): a copy is no cleaner than its source.
    again = Stage.load(trained.save(tmp_path / "copy"))
    assert not (tmp_path / "copy" / "training.json").exists() and again.trained_on == trained.trained_on


def test_each_node_of_a_tree_keeps_its_own_trained_on(tmp_path, wrapped_in_memlab):
    folder = _policy().save(tmp_path / "policy")
    (folder / "training.json").write_text(json.dumps({"split": SPLIT}))
    tree = _Wrapped(Stage.load(folder), shift=0.5)
    loaded = Stage.load(tree.save(tmp_path / "tree"))
    assert loaded.trained_on == frozenset() and loaded.inner.trained_on == {"conv-41", "conv-42", "conv-47"}
    assert trained_conversations(loaded) == {str(tmp_path / "tree" / "inner"): {"conv-41", "conv-42", "conv-47"}}


def test_trained_conversations_walks_any_module_holding_stages(tmp_path):
    trained_folder = _policy().save(tmp_path / "trained")
    (trained_folder / "training.json").write_text(json.dumps({"split": {"train": ["conv-1"], "validation": []}}))
    holder = nn.Module()  # a pipeline is an nn.Module holding its stages the same way
    holder.traverser = Stage.load(trained_folder)
    holder.untrained = Stage.load(_policy().save(tmp_path / "untrained"))
    holder.built = _policy()
    assert trained_conversations(holder) == {str(trained_folder): {"conv-1"}}
    assert trained_conversations(holder.untrained) == {}
    assert trained_conversations(nn.Module()) == {}
