"""Committed rows of the headline sweep replay from the committed response cache with no model call.

The rows, from ``configs/sweeps/locomo_conv26_conv30.yaml`` and committed in
``eval/runs/locomo_conv26_conv30``: ``rag_turns`` (answers and CORRECT/WRONG verdicts of the 1.5B
model) and ``rag_turns_best_calibrated_answerer`` and ``rag_turns_best_trained_answerer_1_5b`` (issue 83:
the LoRA-tuned 0.5B and 1.5B answerers, served by transformers, over EmbeddingGemma and the trained
reranker; their cached answers were made under the adapters' former identity and copied to the
present one with ``memlab cache copy-model``). Six of each row's conv-26 questions,
drawn by the runner's seeded sample, are run again from the committed shards into an empty cache,
with any llama.cpp model load and any transformers generation made to raise: every answer, score and
verdict must be the committed one. (The trained answerer's tokenizer and weights still load: the
context budget counts its tokens.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.embed.packaged import KNOWN_EMBEDDER_MODELS
from memlab.eval.runner import RunOptions, run_config
from memlab.eval.sweep import load_sweep
from memlab.lm.hf import HFLM
from memlab.lm.llamacpp import LlamaCppLM

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "configs" / "sweeps" / "locomo_conv26_conv30.yaml"
ROWS = REPO / "eval" / "runs" / "locomo_conv26_conv30"
COMPARED = ("prediction", "gold", "retrieved", "f1_locomo", "f1_amem", "judge", "recall@10", "abstained")
GEMMA = pytest.mark.skipif(not KNOWN_EMBEDDER_MODELS["embeddinggemma-300m"].target.exists(),
                           reason="memlab models install embeddinggemma-300m")


@pytest.mark.slow
@pytest.mark.skipif(not (REPO.parent / "shared" / "data" / "locomo").is_dir(), reason="needs ../shared/data")
@pytest.mark.parametrize("name", ["rag_turns", pytest.param("rag_turns_best_calibrated_answerer", marks=GEMMA),
                                  pytest.param("rag_turns_best_trained_answerer_1_5b", marks=GEMMA)])
def test_a_committed_sweep_row_replays_with_no_model_call(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache.sqlite"))

    def no_model(self):
        raise AssertionError(f"{self.model}: a replay must not load a model")

    def no_generation(self, requests):
        raise AssertionError(f"{self.model}: a replay must not generate")

    monkeypatch.setattr(LlamaCppLM, "_load", no_model)
    monkeypatch.setattr(HFLM, "_generate", no_generation)
    monkeypatch.chdir(REPO)  # the configs' checkpoint paths are relative to the repository
    assert main(["cache", "import", "eval/caches"]) == 0
    sweep = load_sweep(SWEEP)
    row = next(r for r in sweep.rows if r.name == name)
    q = sweep.questions
    _, metrics = run_config(row.config, sweep.row_overrides(row), data=q.data, conversations=["conv-26"],
                            options=RunOptions(categories=q.categories, sample_questions=6, progress=False),
                            errata=q.errata, out=tmp_path / "replay")
    assert metrics["failed_questions"] == 0 and metrics["n_questions"] == 6
    committed_rows = (ROWS / name / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    committed = {r["question_id"]: r for r in map(json.loads, committed_rows)}
    for replayed in map(json.loads, (tmp_path / "replay" / "predictions.jsonl").open(encoding="utf-8")):
        original = committed[replayed["question_id"]]
        assert {k: replayed.get(k) for k in COMPARED} == {k: original.get(k) for k in COMPARED}
