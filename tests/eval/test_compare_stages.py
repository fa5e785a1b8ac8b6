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
