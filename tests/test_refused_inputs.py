"""Inputs that cannot be used, refused by the real ``memlab`` command in a subprocess (issue 82): a
re-sealed checkpoint with an ill-typed argument, two runs that share question ids but not
questions, errata that conflict or name a question the data lacks, a conversation with no session,
a LongMemEval id list given as a string. Each ends with exit 2 and one line, no traceback, and
every input byte for byte as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from memlab.checkpoint import seal_checkpoint
from tests.test_inputs_intact import CONFIG, checksums, memlab, one_error_line, saved  # noqa: F401 - a fixture

REPO = Path(__file__).resolve().parents[1]
SAMPLE_FIX = {"conversation": "sample-1", "qa_index": 0, "question": "What subject does Tomas teach?",
              "error_type": "HALLUCINATION", "correct_answer": "Organic chemistry", "correct_evidence": ["D1:2"]}
PROCESSED = REPO.parent / "shared" / "data" / "longmemeval_s_sample"


def _refused(tmp_path: Path, arguments: list[str], expected: str, inputs: list[Path]) -> None:
    before = checksums(*inputs)
    line = one_error_line(memlab(*arguments, cwd=tmp_path))
    assert expected in line, line
    assert checksums(*inputs) == before


def test_a_resealed_checkpoint_with_an_ill_typed_argument(tmp_path):
    checkpoint = tmp_path / "policy"
    shutil.copytree(REPO / "checkpoints" / "traversal-policy", checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    config["kwargs"]["beam_width"] = "ten"
    (checkpoint / "config.json").write_text(json.dumps(config))
    seal_checkpoint(checkpoint)
    _refused(tmp_path, ["evaluate-stage", str(checkpoint)],
             "saved argument beam_width of TraversalPolicy must be an integer, got 'ten'", [checkpoint])


def test_runs_that_share_ids_but_not_questions(saved, tmp_path):  # noqa: F811 - the fixture
    other = tmp_path / "other"
    shutil.copytree(saved / "run", other)
    rows = [json.loads(line) for line in (other / "predictions.jsonl").read_text().splitlines()]
    rows[0]["gold"] += " (another version of the data)"
    (other / "predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    _refused(tmp_path, ["report", str(saved / "run"), str(other), "--out", str(tmp_path / "report")],
             "share question ids but not questions: 1 of", [saved / "run", other])
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("entries, expected", [
    ([SAMPLE_FIX, {**SAMPLE_FIX, "correct_answer": "Physics"}], "entries 0 and 1 both correct sample-1:q0, differently"),
    ([{**SAMPLE_FIX, "qa_index": 999}], "sample-1 has no question qa_index 999"),
], ids=["conflicting-duplicates", "unknown-index"])
def test_errata_that_conflict_or_name_a_question_the_data_lacks(tmp_path, entries, expected):
    errata = tmp_path / "errata.json"
    errata.write_text(json.dumps(entries))
    _refused(tmp_path, ["run", CONFIG, "--retrieval-only", "--no-progress", "--errata", str(errata),
                        "--out", str(tmp_path / "run")], expected, [errata])
    assert not (tmp_path / "run").exists()


def test_a_conversation_with_no_session(tmp_path):
    data = tmp_path / "data.json"
    data.write_text(json.dumps([{
        "sample_id": "conv-x", "conversation": {"speaker_a": "A", "speaker_b": "B",
                                                "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": []},
        "qa": [{"question": "What?", "answer": "yes", "evidence": [], "category": 4}]}]))
    _refused(tmp_path, ["run", CONFIG, "--retrieval-only", "--no-progress", "--data", str(data),
                        "--out", str(tmp_path / "run")], "conversation 1 (conv-x): has 1 questions but no session",
             [data])


@pytest.mark.skipif(not (PROCESSED / "questions.jsonl").is_file(), reason="needs ../shared/data/longmemeval_s_sample")
def test_a_longmemeval_id_list_given_as_a_string(tmp_path):
    folder = tmp_path / "lme"
    shutil.copytree(PROCESSED, folder)
    questions = [json.loads(line) for line in (folder / "questions.jsonl").read_text().splitlines()]
    questions[0]["ground_truth"]["supporting_session_ids"] = "abc"
    (folder / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    _refused(tmp_path, ["run", CONFIG, "--retrieval-only", "--no-progress", "--data", str(folder),
                        "--out", str(tmp_path / "run")], "supporting_session_ids must be a list of session ids, found str",
             [folder])
