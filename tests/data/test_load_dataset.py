"""``load_dataset`` tells LoCoMo from LongMemEval by content, and says so when it is neither."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from memlab.data import DataError, load_dataset, read_dataset

ROOT = Path(__file__).resolve().parents[2]
LOCOMO_DEV = ROOT / ".." / "shared" / "data" / "locomo" / "locomo10_dev.json"


def test_locomo_is_detected_whatever_the_file_name(tmp_path):
    if not LOCOMO_DEV.is_file():
        pytest.skip("../shared/data/locomo/locomo10_dev.json is not available")
    renamed = tmp_path / "data.txt"
    shutil.copy(LOCOMO_DEV, renamed)
    conversations, report = read_dataset(renamed)
    assert report.format == "locomo"
    assert [c.id for c in conversations][:2] == ["conv-26", "conv-30"]


def test_longmemeval_is_detected_whatever_the_file_name(tmp_path):
    renamed = tmp_path / "whatever.json"
    shutil.copy(ROOT / "tests" / "assets" / "longmemeval_tiny.json", renamed)
    conversations, report = read_dataset(renamed)
    assert report.format == "longmemeval"
    assert len(conversations) == 3


@pytest.mark.parametrize(
    ("content", "described"),
    [
        ([{"id": 1, "text": "hello"}], "a list of dict with keys ['id', 'text']"),
        ([], "an empty list"),
        ({"data": []}, "an object with keys ['data']"),
        ("just a string", "str"),
    ],
)
def test_neither_format_is_one_clear_error(tmp_path, content, described):
    path = tmp_path / "mystery.json"
    path.write_text(json.dumps(content))
    with pytest.raises(DataError) as excinfo:
        load_dataset(path)
    message = str(excinfo.value)
    assert message.startswith(f"{path}: is neither LoCoMo")
    assert message.endswith(described)


def test_missing_path_and_bad_json(tmp_path):
    with pytest.raises(DataError, match="missing.json: no such file or directory"):
        load_dataset(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("not json at all")
    with pytest.raises(DataError, match="bad.json: is not valid JSON"):
        load_dataset(bad)
    with pytest.raises(DataError, match="needs questions.jsonl"):
        load_dataset(tmp_path)
