"""The eval/ scripts: compare_rerankers.py and compare_routers.py refuse a conversation id the data lacks
(they used to drop it silently and score fewer conversations than asked); time_build.py times a build."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from memlab.data import SAMPLE_PATH

REPO = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "eval" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["compare_rerankers", "compare_routers"])
def test_an_unknown_conversation_id_exits_before_any_model_loads(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        _script(name).main(["--data", str(SAMPLE_PATH), "--conversations", "sample-1,conv-x"])
    assert exit_.value.code == 2
    assert "['conv-x'] are not in it (available: ['sample-1'])" in capsys.readouterr().err


def test_the_teacher_cache_script_refuses_an_unknown_conversation_before_any_model_loads(capsys):
    assert _script("compassmem_teacher_cache").main(["--data", str(SAMPLE_PATH), "sample-1", "conv-x"]) == 2
    assert "conv-x" in capsys.readouterr().err


def test_time_build_reports_a_builds_seconds_and_llm_calls(capsys):
    # rag_turns builds with the embedder alone: no LLM call, one line for the one conversation
    assert _script("time_build").main([str(REPO / "configs/pipelines/rag_turns.yaml"), "--data", str(SAMPLE_PATH),
                                       "--conversations", "sample-1"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["conversation"] == "sample-1" and line["llm_calls"] == 0 and line["build_seconds"] >= 0
    assert line["turns"] > 0 and "memory" in line


def test_time_build_refuses_training_conversations_and_unknown_ids(capsys):
    trained = str(REPO / "configs/pipelines/compassmem_trained_construction.yaml")
    assert _script("time_build").main([trained, "--data", str(SAMPLE_PATH), "--conversations", "conv-41"]) == 2
    assert "learnt from ['conv-41']" in capsys.readouterr().err
    assert _script("time_build").main([trained, "--data", str(SAMPLE_PATH), "--conversations", "conv-x"]) == 2
    assert "['conv-x'] are not in it" in capsys.readouterr().err


def test_retrieval_table_scores_rows_and_keeps_vectors(tmp_path, capsys):
    out, cache = tmp_path / "rows.jsonl", tmp_path / "vectors"
    args = ["--data", str(SAMPLE_PATH), "--out", str(out), "--vector-cache", str(cache)]
    assert _script("retrieval_table").main([*args, "bm25", "dense:minilm", "hybrid:minilm+dates"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["row"] for r in rows] == ["bm25", "dense:minilm", "hybrid:minilm+dates"]
    for row in rows:
        recalls = [row["overall"][f"recall@{k}"] for k in (1, 5, 10, 20, 50)]
        assert recalls == sorted(recalls) and 0.0 < recalls[-1] <= 1.0 and row["questions"] > 0
    assert rows[0]["build_seconds_per_conversation"] < rows[1]["build_seconds_per_conversation"]
    assert len(list(cache.glob("*.npz"))) == 3  # plain units, dated units, and the questions once
    assert "| dense:minilm |" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # a malformed row is refused before anything loads
        _script("retrieval_table").main([*args, "dense"])


def test_router_loco_scores_each_conversation_by_routers_that_never_saw_it(tmp_path, capsys):
    sample = json.loads(SAMPLE_PATH.read_text())[0]
    data = tmp_path / "three.json"
    data.write_text(json.dumps([{**sample, "sample_id": name} for name in ("tiny-a", "tiny-b", "tiny-c")]))
    assert _script("router_loco").main(["--data", str(data), "--out", str(tmp_path / "rows.jsonl")]) == 0
    rows = {r["router"]: r for r in map(json.loads, (tmp_path / "rows.jsonl").read_text().splitlines())}
    assert set(rows) == {"rule router", "TF-IDF + logistic regression", "frozen MiniLM + logistic regression"}
    assert all(set(r["per_conversation"]) == {"tiny-a", "tiny-b", "tiny-c"} for r in rows.values())
    assert "| rule router |" in capsys.readouterr().out
