"""Data files a careless or hostile source could hand over: each a DataError naming the file and
the place, a counted quirk, or cleaned text; never a crash later in a build."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from memlab.data import DataError, load_dataset, read_locomo, read_longmemeval

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "assets" / "longmemeval_tiny.json"
PROCESSED = ROOT / ".." / "shared" / "data" / "longmemeval_s_sample"


def locomo(answer=None, dates=("1:56 pm on 8 May, 2023", "1:14 pm on 25 May, 2023"), text="Hi"):
    qa = {"question": "What?", "answer": "yes" if answer is None else answer, "evidence": ["D1:1"], "category": 4}
    return [{
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "A", "speaker_b": "B",
            "session_1_date_time": dates[0], "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": text}],
            "session_2_date_time": dates[1], "session_2": [{"speaker": "B", "dia_id": "D2:1", "text": "Bye"}],
        },
        "qa": [qa],
    }]


def write(tmp_path, data, name="data.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, allow_nan=True))
    return path


@pytest.mark.parametrize("answer", [["a", "b"], True, {"x": 1}, math.nan, math.inf])
def test_locomo_gold_answer_that_is_no_string_or_number_is_refused(tmp_path, answer):
    path = write(tmp_path, locomo(answer=answer))
    with pytest.raises(DataError, match=r"conversation 1 \(conv-x\): qa 0: 'answer' must be a string or a number"):
        read_locomo(path)


def test_locomo_numeric_answer_is_kept_and_counted(tmp_path):
    (conv,), report = read_locomo(write(tmp_path, locomo(answer=2022)))
    assert conv.questions[0].answer == "2022"
    assert report.quirks["integer_answer"] == 1


def test_locomo_sessions_out_of_order_are_a_counted_warning(tmp_path):
    (conv,), report = read_locomo(write(tmp_path, locomo(dates=("1:56 pm on 8 May, 2023", "1:14 pm on 2 May, 2023"))))
    assert report.quirks["sessions_out_of_order"] == 1
    assert "sessions_out_of_order 1" in report.summary()
    assert [s.id for s in conv.sessions] == ["session_1", "session_2"]  # LoCoMo's order is kept


def test_locomo_conversation_with_every_session_empty_is_refused(tmp_path):
    data = locomo()
    data[0]["conversation"]["session_1"] = data[0]["conversation"]["session_2"] = []
    data[0]["evidence"] = []
    data[0]["qa"][0]["evidence"] = []
    with pytest.raises(DataError, match=r"conversation 1 \(conv-x\): has 1 questions but no session with a turn"):
        read_locomo(write(tmp_path, data))


def test_lone_surrogate_in_data_is_cleaned_at_load(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps(locomo(text="Look \ud83d at this"), ensure_ascii=True))
    (conv,), _ = read_locomo(path)
    text = conv.sessions[0].turns[0].text
    assert text == "Look  at this"
    text.encode("utf-8")  # what a tokenizer does first: a lone surrogate raised here


def test_deeply_nested_or_huge_number_json_is_a_data_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match="cannot be parsed as JSON"):
        load_dataset(deep)
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(locomo())[:-1] + ', {"n": ' + "9" * 5000 + "}]")
    with pytest.raises(DataError, match="cannot be parsed as JSON"):
        load_dataset(huge)


def test_official_answer_session_ids_of_the_wrong_type(tmp_path):
    data = json.loads(TINY.read_text())
    data[0]["answer_session_ids"] = 5
    with pytest.raises(DataError, match=r"question 1 \(tiny_commute\): answer_session_ids must be a list of session ids"):
        read_longmemeval(write(tmp_path, data, "lme.json"))


def processed_copy(tmp_path, edit_question=None, edit_session=None) -> Path:
    if not (PROCESSED / "questions.jsonl").is_file():
        pytest.skip("../shared/data/longmemeval_s_sample is not available")
    folder = tmp_path / "processed"
    folder.mkdir()
    questions = [json.loads(line) for line in (PROCESSED / "questions.jsonl").read_text().splitlines()]
    sessions = [json.loads(line) for line in (PROCESSED / "sessions.jsonl").read_text().splitlines()]
    if edit_question:
        edit_question(questions)
    if edit_session:
        edit_session(sessions)
    (folder / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (folder / "sessions.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return folder


@pytest.mark.parametrize(
    ("edit_question", "edit_session", "message"),
    [
        (None, lambda s: s[0].__setitem__("metadata", ["information_extraction"]),
         r"sessions.jsonl: line 1 \(session sharegpt_yywfIrx_0\): metadata must be an object, found list"),
        (None, lambda s: s[0]["turns"][0].__setitem__("metadata", []),
         r"sessions.jsonl: line 1 \(session sharegpt_yywfIrx_0\): turn 1 metadata must be an object, found list"),
        (lambda q: q[0].__setitem__("constraints", ["abstention_expected"]), None,
         r"questions.jsonl: line 1 \(question e47becba\): constraints must be an object, found list"),
        (lambda q: q[0]["ground_truth"].__setitem__("supporting_session_ids", 5), None,
         r"questions.jsonl: line 1 \(question e47becba\): ground_truth.supporting_session_ids must be a list"),
        (lambda q: q[0]["ground_truth"].__setitem__("supporting_session_ids", "abc"), None,  # issue 82
         r"questions.jsonl: line 1 \(question e47becba\): ground_truth.supporting_session_ids must be a list of "
         r"session ids, found str"),
        (None, lambda s: s[1]["turns"][0].__setitem__("id", s[0]["turns"][0]["id"]),
         r"sessions.jsonl: line 2 \(session [^)]+\): turn id '[^']+' is also used by session sharegpt_yywfIrx_0"),
    ],
)
def test_processed_fields_of_the_wrong_type_are_data_errors(tmp_path, edit_question, edit_session, message):
    folder = processed_copy(tmp_path, edit_question, edit_session)
    with pytest.raises(DataError, match=message):
        read_longmemeval(folder)
