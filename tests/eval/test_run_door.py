"""What ``run_config`` refuses before anything runs, and what a run folder may hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.eval.runner import RunOptions, run_config

REPO = Path(__file__).resolve().parents[2]
LOCOMO_DEV = REPO / ".." / "shared" / "data" / "locomo" / "locomo10_dev.json"
RAG = REPO / "configs" / "pipelines" / "rag_turns.yaml"
RERANKED = REPO / "configs" / "pipelines" / "rag_turns_reranked.yaml"
QUIET = RunOptions(retrieval_only=True, progress=False, max_questions=1)


def needs_dev():
    if not LOCOMO_DEV.is_file():
        pytest.skip("../shared/data/locomo/locomo10_dev.json is not available")


def test_a_trained_stage_is_not_scored_on_its_own_training_conversations(tmp_path, monkeypatch):
    """The committed reranker learnt from conv-41..44 and validated on conv-47."""
    needs_dev()
    monkeypatch.chdir(REPO)
    with pytest.raises(ValueError, match=r"trained stages would be scored on conversations they learnt from "
                                         r"\(.*reranker-minilm-turns: conv-41, conv-47\).*--allow-training-overlap"):
        run_config(RERANKED, data=LOCOMO_DEV, conversations=["conv-41", "conv-26", "conv-47"], sessions=1,
                   options=QUIET, out=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()

    folder, metrics = run_config(RERANKED, data=LOCOMO_DEV, conversations=["conv-41"], sessions=1,
                                 options=RunOptions(retrieval_only=True, progress=False, max_questions=1,
                                                    allow_training_overlap=True), out=tmp_path / "allowed")
    (checkpoint, ids), = metrics["training_overlap"].items()
    assert checkpoint.endswith("checkpoints/reranker-minilm-turns") and ids == ["conv-41"]
    assert json.loads((folder / "metrics.json").read_text())["training_overlap"] == metrics["training_overlap"]

    _, held_out = run_config(RERANKED, data=LOCOMO_DEV, conversations=["conv-26"], sessions=1, options=QUIET,
                             out=tmp_path / "held-out")
    assert held_out["training_overlap"] == {}


def test_unknown_categories_are_refused_not_run_as_an_empty_set(tmp_path):
    for categories, unknown in [(("multihop",), r"\['multihop'\]"), (("multi-hop", "temprl"), r"\['temprl'\]")]:
        with pytest.raises(ValueError, match=rf"categories {unknown} are not in the embedded sample"):
            run_config(RAG, options=RunOptions(retrieval_only=True, progress=False, categories=categories),
                       out=tmp_path / "x")
    with pytest.raises(ValueError, match="max_questions must be >= 1"):
        RunOptions(max_questions=0)


def test_a_run_folder_never_mixes_two_runs(tmp_path, monkeypatch):
    out = tmp_path / "run"
    run_config(RAG, options=QUIET, out=out)
    first = json.loads((out / "metrics.json").read_text())

    # A second run killed midway leaves the first run whole: its config beside its metrics.
    import memlab.eval.runner as runner

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_benchmark", killed)
    with pytest.raises(KeyboardInterrupt):
        run_config(RAG, ["top_k=3"], options=QUIET, out=out)
    assert json.loads((out / "metrics.json").read_text()) == first
    assert "top_k: 3" not in (out / "config.yaml").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging folder left behind


def test_out_that_is_not_a_run_folder_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"holds files that are not a memlab run \(notes.txt\)"):
        run_config(RAG, options=QUIET, out=tmp_path)
    with pytest.raises(ValueError, match="is a file, not a folder"):
        run_config(RAG, options=QUIET, out=tmp_path / "notes.txt")
    with pytest.raises(ValueError, match="notes.txt is a file, so nothing can be written under it"):
        run_config(RAG, options=QUIET, out=tmp_path / "notes.txt" / "run")
    assert (tmp_path / "notes.txt").read_text() == "mine"
