"""A published row replays from the committed response cache with no model call.

The row: Mnemis on the embedded sample (``memlab run configs/pipelines/mnemis.yaml --sessions 2
--max-questions 5``, in the Mnemis narrative beside its runs, ``eval/runs/conv26-s4/README.md``), 45 build calls and about 15 query calls of the 1.5B model. The cache is
imported into an empty one and loading a llama.cpp model raises, so any request the cache does
not hold fails, and the run would record failed questions instead of the published figures.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.lm.llamacpp import LlamaCppLM

REPO = Path(__file__).resolve().parents[2]
COMMAND = "memlab run configs/pipelines/mnemis.yaml --sessions 2 --max-questions 5"
PUBLISHED_IN = REPO / "eval" / "runs" / "conv26-s4" / "README.md"


def published_row() -> dict[str, float]:
    text = " ".join(PUBLISHED_IN.read_text(encoding="utf-8").split())
    found = re.search(r"\*\*Embedded sample\*\* \(`" + re.escape(COMMAND) + r"`[^)]*\): F1 ([0-9.]+), R@5 ([0-9.]+); "
                      r"build (\d+) LLM calls", text)
    assert found, f"{PUBLISHED_IN} no longer has the row of `{COMMAND}`"
    return {"f1_locomo": float(found[1]), "recall@5": float(found[2]), "build_calls": int(found[3])}


@pytest.mark.slow
def test_the_mnemis_sample_row_replays_from_the_committed_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache.sqlite"))

    def no_model(self):
        raise AssertionError(f"{self.model}: a replay must not load a model")

    monkeypatch.setattr(LlamaCppLM, "_load", no_model)
    monkeypatch.chdir(REPO)
    assert main(["cache", "import", "eval/caches"]) == 0
    out = tmp_path / "run"
    assert main([*COMMAND.split()[1:], "--out", str(out), "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    row = published_row()
    assert metrics["failed_questions"] == 0 and metrics["n_questions"] == 5
    assert round(metrics["overall"]["f1_locomo"], 3) == row["f1_locomo"]
    assert round(metrics["overall"]["recall@5"], 3) == row["recall@5"]
    assert metrics["usage"]["build"]["llm_calls"] == row["build_calls"]
