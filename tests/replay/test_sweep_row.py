"""A committed row of the headline sweep replays from the committed response cache with no model call.

The row: ``rag_turns`` of ``configs/sweeps/locomo_conv26_conv30.yaml``, committed in
``eval/runs/locomo_conv26_conv30/rag_turns`` (answers and CORRECT/WRONG verdicts of the 1.5B model).
Six of its conv-26 questions, drawn by the runner's seeded sample, are run again from the committed
shards into an empty cache with loading any llama.cpp model made to raise: every answer, score and
verdict must be the committed one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.eval.runner import RunOptions, run_config
from memlab.eval.sweep import load_sweep
from memlab.lm.llamacpp import LlamaCppLM

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "configs" / "sweeps" / "locomo_conv26_conv30.yaml"
ROW = REPO / "eval" / "runs" / "locomo_conv26_conv30" / "rag_turns"
COMPARED = ("prediction", "gold", "retrieved", "f1_locomo", "f1_amem", "judge", "recall@10", "abstained")


@pytest.mark.slow
@pytest.mark.skipif(not (REPO.parent / "shared" / "data" / "locomo").is_dir(), reason="needs ../shared/data")
def test_a_committed_sweep_row_replays_with_no_model_call(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache.sqlite"))

    def no_model(self):
        raise AssertionError(f"{self.model}: a replay must not load a model")

    monkeypatch.setattr(LlamaCppLM, "_load", no_model)
    monkeypatch.chdir(REPO)  # the configs' checkpoint paths are relative to the repository
    assert main(["cache", "import", "eval/caches"]) == 0
    sweep = load_sweep(SWEEP)
    row = next(r for r in sweep.rows if r.name == "rag_turns")
    q = sweep.questions
    _, metrics = run_config(row.config, sweep.row_overrides(row), data=q.data, conversations=["conv-26"],
                            options=RunOptions(categories=q.categories, sample_questions=6, progress=False),
                            errata=q.errata, out=tmp_path / "replay")
    assert metrics["failed_questions"] == 0 and metrics["n_questions"] == 6
    committed = {r["question_id"]: r for r in map(json.loads, (ROW / "predictions.jsonl").open(encoding="utf-8"))}
    for replayed in map(json.loads, (tmp_path / "replay" / "predictions.jsonl").open(encoding="utf-8")):
        original = committed[replayed["question_id"]]
        assert {k: replayed.get(k) for k in COMPARED} == {k: original.get(k) for k in COMPARED}
