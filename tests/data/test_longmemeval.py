"""The LongMemEval loader: the official JSON layout (a tiny fixture) and the processed sample."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from memlab.data import DataError, load_dataset, load_longmemeval, read_longmemeval

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "assets" / "longmemeval_tiny.json"
PROCESSED = ROOT / ".." / "shared" / "data" / "longmemeval_s_sample"


# ---------------------------------------------------------------- official layout


@pytest.fixture(scope="module")
def tiny():
    conversations, report = read_longmemeval(TINY)
    return {c.id: c for c in conversations}, report


def test_official_question_becomes_a_conversation(tiny):
    conversations, report = tiny
    assert list(conversations) == ["tiny_commute", "tiny_hamster_abs", "tiny_books"]
    conv = conversations["tiny_commute"]
    assert conv.speakers == ("user", "assistant")
    # Sorted by date, renumbered by position: the source ids (answer_commute ...) are gone.
    assert [s.id for s in conv.sessions] == ["session_1", "session_2", "session_3"]
    assert conv.sessions[0].timestamp == datetime(2023, 5, 10, 8, 30)
    assert [t.id for t in conv.sessions[0].turns] == ["D1:1", "D1:2", "D1:3"]
    assert "commute" in conv.sessions[0].turns[0].text  # what answer_commute said
    assert conv.sessions[0].turns[0].speaker == "user"
    assert conv.sessions[0].turns[1].timestamp == datetime(2023, 5, 10, 8, 30)
    (question,) = conv.questions
    assert question.id == question.conversation_id == "tiny_commute"
    assert question.category == "single-session-user"
    assert question.answer == "45 minutes each way"
    assert question.timestamp == datetime(2023, 6, 1, 10, 0)
    assert question.evidence == ("D1:1",)  # only the has_answer turn
    assert report.quirks["duplicate_session_renamed"] == 1


def test_official_abstention_and_evidence_fallback(tiny):
    conversations, report = tiny
    conv = conversations["tiny_hamster_abs"]
    (question,) = conv.questions
    assert question.category == "abstention"
    assert [s.id for s in conv.sessions] == ["session_1", "session_2"]  # filler_b, answer_pets
    # No turn of the answer session is flagged: the whole session is the evidence.
    assert question.evidence == ("D2:1", "D2:2")
    assert report.quirks["evidence_whole_session"] == 1


def test_official_integer_answer_unknown_answer_session_and_empty_session(tiny):
    conversations, report = tiny
    conv = conversations["tiny_books"]
    (question,) = conv.questions
    assert question.answer == "3"
    assert question.evidence == ("D1:1", "D2:1")  # answer_books_1, answer_books_2
    assert [s.id for s in conv.sessions] == ["session_1", "session_2"]
    assert report.quirks["integer_answer"] == 1
    assert report.quirks["evidence_dropped_unknown"] == 1
    assert report.quirks["empty_session"] == 1
    assert report.questions == Counter({"single-session-user": 1, "abstention": 1, "multi-session": 1})
    assert (report.conversations, report.sessions, report.turns) == (3, 7, 15)


def test_official_layout_is_detected_by_load_dataset():
    assert [c.id for c in load_dataset(TINY)] == ["tiny_commute", "tiny_hamster_abs", "tiny_books"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d[0].pop("haystack_dates"), "question 1: missing haystack_dates"),
        (lambda d: d[1]["haystack_dates"].pop(), "question 2 (tiny_hamster_abs): 2 haystack_session_ids, 1 haystack_dates"),
        (lambda d: d[0]["haystack_dates"].__setitem__(0, "May 20"), "session filler_a date 'May 20' is not a date"),
        (lambda d: d[2]["haystack_sessions"][0][0].pop("role"), "session answer_books_1 turn 1: role is missing"),
        (lambda d: d[2].__setitem__("question_id", "tiny_commute"), "question 3: question_id 'tiny_commute' appears twice"),
    ],
)
def test_official_wrong_structure_is_one_clear_error(tmp_path, edit, message):
    data = json.loads(TINY.read_text())
    edit(data)
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DataError) as excinfo:
        load_longmemeval(path)
    assert str(excinfo.value).startswith(f"{path}: ")
    assert message in str(excinfo.value)


def test_official_not_a_list(tmp_path):
    path = tmp_path / "lme.json"
    path.write_text('{"question_id": "x"}')
    with pytest.raises(DataError, match="expected a list of LongMemEval questions, found dict"):
        load_longmemeval(path)


# ---------------------------------------------------------------- processed layout


def raw_processed():
    if not (PROCESSED / "questions.jsonl").is_file():
        pytest.skip("../shared/data/longmemeval_s_sample is not available")
    questions = [json.loads(line) for line in (PROCESSED / "questions.jsonl").read_text().splitlines()]
    sessions = {s["id"]: s for s in map(json.loads, (PROCESSED / "sessions.jsonl").read_text().splitlines())}
    return questions, sessions


def parse_date(text):
    return datetime.strptime(text, "%Y/%m/%d (%a) %H:%M")


@pytest.fixture(scope="module")
def processed():
    raw_processed()
    conversations, report = read_longmemeval(PROCESSED)
    return {c.id: c for c in conversations}, report


def test_processed_questions_and_categories(processed):
    conversations, report = processed
    assert len(conversations) == 16
    assert report.questions == Counter(
        {"information_extraction": 4, "multi_session_reasoning": 4, "temporal": 4, "knowledge_update": 4}
    )
    question = conversations["e47becba"].questions[0]
    assert question.text == "What degree did I graduate with?"
    assert question.answer == "Business Administration"
    assert question.timestamp == datetime(2023, 5, 30, 23, 40)
    assert conversations["e47becba"].speakers == ("user", "assistant")


def expected_haystack(item, raw_sessions):
    """The raw sessions a question's haystack should hold, in order: every non-empty session
    dated no later than the question, whatever its category (no gold field chooses)."""
    asked_at = parse_date(item["ground_truth"]["valid_as_of"])
    chosen = [s for s in raw_sessions.values() if parse_date(s["timestamp"]) <= asked_at and s["turns"]]
    return sorted(chosen, key=lambda s: parse_date(s["timestamp"]))


def test_processed_haystack_is_every_session_up_to_the_question_date(processed):
    conversations, report = processed
    raw_questions, raw_sessions = raw_processed()
    for item in raw_questions:
        conv = conversations[item["id"]]
        expected = expected_haystack(item, raw_sessions)
        assert [[t.text for t in s.turns] for s in conv.sessions] == \
            [[t["content"].strip() for t in s["turns"]] for s in expected], item["id"]
        assert [s.id for s in conv.sessions] == [f"session_{k}" for k in range(1, len(expected) + 1)]
    assert report.quirks["evidence_after_question"] == 0
    assert len(conversations["gpt4_59149c77"].sessions) == 11  # the earliest question sees few sessions
    assert len(conversations["852ce960"].sessions) == 80  # the latest sees all 80 non-empty ones


def test_processed_evidence_is_the_flagged_turns_of_supporting_sessions(processed):
    conversations, report = processed
    raw_questions, raw_sessions = raw_processed()
    for item in raw_questions:
        position = {s["id"]: k for k, s in enumerate(expected_haystack(item, raw_sessions), start=1)}
        expected = []
        for sid in item["ground_truth"]["supporting_session_ids"]:
            turns = raw_sessions[sid]["turns"]
            flagged = [t for t, turn in enumerate(turns, start=1) if turn["metadata"]["has_answer"]]
            expected += [f"D{position[sid]}:{t}" for t in flagged or range(1, len(turns) + 1)]
        conv = conversations[item["id"]]
        assert conv.questions[0].evidence == tuple(expected), item["id"]
    (turn,) = [t for _, t in conversations["51a45a95"].turns() if t.id == conversations["51a45a95"].questions[0].evidence[0]]
    assert "coupon" in turn.text.lower()
    # 118b2229's supporting session has no has_answer turn: all its 8 turns are the evidence.
    assert len(conversations["118b2229"].questions[0].evidence) == 8
    assert report.quirks["evidence_whole_session"] == 4


def test_no_source_id_reaches_what_a_pipeline_sees(processed):
    """LongMemEval's ids name the evidence (answer_…) and abstention (…_abs): none survives."""
    conversations, _ = processed
    tiny = {c.id: c for c in load_longmemeval(TINY)}
    for conv in [*conversations.values(), *tiny.values()]:
        history = conv.history()
        seen = [history.id] + [q.as_query().id for q in conv.questions]
        seen += [s.id for s in history.sessions] + [t.id for _, t in history.turns()]
        assert not any("answer" in i or "_abs" in i or conv.id in i for i in seen), conv.id
        assert not hasattr(history, "questions")


def test_processed_accepts_the_questions_file_and_load_dataset(processed):
    conversations, _ = processed
    via_file = load_longmemeval(PROCESSED / "questions.jsonl")
    via_dataset = load_dataset(PROCESSED)
    assert [c.id for c in via_file] == [c.id for c in via_dataset] == list(conversations)
    assert via_file[0] == conversations[via_file[0].id]


def test_processed_supporting_session_after_the_question_is_not_added(tmp_path):
    raw_processed()
    folder = tmp_path / "processed"
    folder.mkdir()
    shutil.copy(PROCESSED / "sessions.jsonl", folder)
    item = json.loads((PROCESSED / "questions.jsonl").read_text().splitlines()[0])
    item["ground_truth"]["valid_as_of"] = "2023/01/01 (Sun) 00:00"  # before its own evidence
    (folder / "questions.jsonl").write_text(json.dumps(item) + "\n")
    (conv,), report = read_longmemeval(folder)
    assert all(s.timestamp <= datetime(2023, 1, 1) for s in conv.sessions)
    assert conv.questions[0].evidence == ()
    assert report.quirks["evidence_after_question"] == 1


def test_processed_folder_errors(tmp_path):
    folder = tmp_path / "processed"
    folder.mkdir()
    (folder / "questions.jsonl").write_text('{"id": "q1"}\n')
    with pytest.raises(DataError, match="needs sessions.jsonl, which is missing"):
        load_longmemeval(folder)
    (folder / "sessions.jsonl").write_text('{"id": "s1", "timestamp": "2023/05/20 (Sat) 02:21", "turns": []}\nnot json\n')
    with pytest.raises(DataError, match=r"sessions.jsonl: line 2 is not valid JSON"):
        load_longmemeval(folder)
    (folder / "sessions.jsonl").write_text('{"id": "s1", "timestamp": "2023/05/20 (Sat) 02:21", "turns": []}\n')
    with pytest.raises(DataError, match=r"questions.jsonl: line 1 \(question q1\): ground_truth must be an object"):
        load_longmemeval(folder)
    with pytest.raises(DataError, match="no such file or directory"):
        load_longmemeval(tmp_path / "nowhere")
