"""``memlab.eval.progress``: an unfinished run's staging folder condensed into a record of what it
reached and cost (hand-written progress files, as ``run_benchmark`` writes them)."""

from __future__ import annotations

import json

import pytest

from memlab.eval.progress import read_progress


def _row(i: int) -> dict:
    return {"question_id": f"c:q{i}", "conversation_id": "c", "category": "temporal", "judge": 1.0, "f1_amem": 0.5,
            "cold_latency_s": 10.0 + i, "error": None, "prediction": "long text " * 50,
            "usage": {"llm_calls": 3, "prompt_tokens": 900, "completion_tokens": 20}}


def test_a_staged_attempt_is_read_as_its_answered_questions_and_finished_builds(tmp_path):
    build = {"conversation_id": "c", "build_seconds": 12.0,
             "build_usage": {"llm_calls": 40, "prompt_tokens": 9000, "completion_tokens": 3000,
                             "llm_seconds": 500.0, "latency_s": 12.0},
             "memory_stats": {"structure": {"degenerate": ["one category holds 40 of 44 entities"]}}}
    (tmp_path / "builds.jsonl.partial").write_text(json.dumps(build) + "\n")
    # the second answer was cut short by a killed process: no newline, not counted
    (tmp_path / "predictions.jsonl.partial").write_text(json.dumps(_row(0)) + "\n" + json.dumps(_row(1))[:40])
    progress = read_progress(tmp_path)
    assert progress["builds"] == [{"conversation_id": "c", "seconds": 500.0, "llm_calls": 40, "prompt_tokens": 9000,
                                   "completion_tokens": 3000,
                                   "degenerate": ["one category holds 40 of 44 entities"],
                                   "failures": {}, "reached": None}]
    assert len(progress["rows"]) == 1
    row = progress["rows"][0]
    assert row["question_id"] == "c:q0" and row["llm_calls"] == 3 and row["tokens"] == 920
    assert "prediction" not in row  # a small record: scores and costs, not the text


def test_a_staging_folder_with_nothing_yet_is_an_empty_record(tmp_path):
    assert read_progress(tmp_path) == {"rows": [], "builds": [], "building": None}


def test_a_build_still_running_is_read_as_its_cost_so_far(tmp_path):
    running = {"conversation_id": "d", "build_seconds": 30.0, "memory_stats": None,
               "build_usage": {"llm_calls": 7, "prompt_tokens": 70, "completion_tokens": 7, "llm_seconds": 90.0,
                               "latency_s": 30.0},
               "failures": {"mem0.add": 2}, "reached": {"turns": 14, "of": 369}}
    (tmp_path / "building.json.partial").write_text(json.dumps(running))
    assert read_progress(tmp_path)["building"] == {"conversation_id": "d", "seconds": 90.0, "llm_calls": 7,
                                                   "prompt_tokens": 70, "completion_tokens": 7, "degenerate": [],
                                                   "failures": {"mem0.add": 2}, "reached": {"turns": 14, "of": 369}}
    # the build ended between the two reads: it counts once, as finished
    (tmp_path / "builds.jsonl.partial").write_text(json.dumps({**running, "memory_stats": {}}) + "\n")
    progress = read_progress(tmp_path)
    assert progress["building"] is None and len(progress["builds"]) == 1
    (tmp_path / "building.json.partial").write_text("{half")
    with pytest.raises(ValueError, match="building.json.partial: not JSON"):
        read_progress(tmp_path)


def test_a_broken_line_inside_the_file_is_named(tmp_path):
    (tmp_path / "predictions.jsonl.partial").write_text(json.dumps(_row(0)) + "\n{oops\n" + json.dumps(_row(2)) + "\n")
    with pytest.raises(ValueError, match=r"predictions.jsonl.partial, line 2: not JSON"):
        read_progress(tmp_path)
