"""eval/compare_rerankers.py and eval/compare_routers.py refuse a conversation id the data lacks
(they used to drop it silently and score fewer conversations than asked)."""

from __future__ import annotations

import importlib.util
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
