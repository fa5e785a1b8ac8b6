"""The LoCoMo loader against the real dev file and against small hand-made files."""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from memlab.data import DataError, load_locomo, read_locomo
from memlab.types import LOCOMO_CATEGORIES

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
LOCOMO_DEV = SHARED / "data" / "locomo" / "locomo10_dev.json"

# Counted once from the raw JSON (session_N keys, turns in them, qa categories) and checked
# by hand against the file: conversation -> (sessions, turns, {category code: questions}).
EXPECTED = {
    "conv-26": (19, 419, {1: 32, 2: 37, 3: 13, 4: 70, 5: 47}),
    "conv-30": (19, 369, {1: 11, 2: 26, 4: 44, 5: 24}),
    "conv-41": (32, 663, {1: 31, 2: 27, 3: 8, 4: 86, 5: 41}),
    "conv-42": (29, 629, {1: 37, 2: 40, 3: 11, 4: 111, 5: 61}),
    "conv-43": (29, 680, {1: 31, 2: 26, 3: 14, 4: 107, 5: 64}),
    "conv-44": (28, 675, {1: 30, 2: 24, 3: 7, 4: 62, 5: 35}),
    "conv-47": (31, 689, {1: 20, 2: 34, 3: 13, 4: 83, 5: 40}),
}


@pytest.fixture(scope="module")
def dev():
    if not LOCOMO_DEV.is_file():
        pytest.skip("../shared/data/locomo/locomo10_dev.json is not available")
    conversations, report = read_locomo(LOCOMO_DEV)
    return {c.id: c for c in conversations}, report


def question(conversations, qid):
    conversation = conversations[qid.split(":")[0]]
    return next(q for q in conversation.questions if q.id == qid)


# ---------------------------------------------------------------- real dev file


def test_counts_per_conversation(dev):
    conversations, report = dev
    assert list(conversations) == list(EXPECTED)
    for cid, (n_sessions, n_turns, per_category) in EXPECTED.items():
        conversation = conversations[cid]
        assert len(conversation.sessions) == n_sessions, cid
        assert sum(len(s.turns) for s in conversation.sessions) == n_turns, cid
        got = Counter(q.category for q in conversation.questions)
        assert got == Counter({LOCOMO_CATEGORIES[code]: n for code, n in per_category.items()}), cid
    assert report.conversations == 7
    assert report.sessions == sum(v[0] for v in EXPECTED.values()) == 187
    assert report.turns == sum(v[1] for v in EXPECTED.values()) == 4124
    assert report.total_questions == 1347


def test_speakers_sessions_and_timestamps(dev):
    conversations, _ = dev
    conv = conversations["conv-26"]
    assert conv.speakers == ("Caroline", "Melanie")
    first = conv.sessions[0]
    assert first.id == "session_1"
    assert first.timestamp == datetime(2023, 5, 8, 13, 56)
    assert [s.id for s in conv.sessions] == [f"session_{n}" for n in range(1, 20)]
    turn = first.turns[2]
    assert (turn.id, turn.speaker, turn.timestamp) == ("D1:3", "Caroline", first.timestamp)
    assert turn.text.startswith("I went to a LGBTQ support group yesterday")
    for c in conversations.values():
        times = [s.timestamp for s in c.sessions]
        assert all(t is not None for t in times)


def test_images_become_captions(dev):
    conversations, report = dev
    turn = next(t for _, t in conversations["conv-26"].turns() if t.id == "D1:5")
    assert turn.image_caption == "a photo of a dog walking past a wall with a painting of a woman"
    assert "[shares an image: a photo of a dog" in turn.render()
    assert next(t for _, t in conversations["conv-26"].turns() if t.id == "D1:3").image_caption is None
    assert report.images == sum(1 for c in conversations.values() for _, t in c.turns() if t.image_caption)
    assert report.images > 800


def test_date_keys_without_session_are_skipped(dev):
    _, report = dev
    # conv-26 has session_1 .. session_35 dates but only 19 sessions.
    assert report.quirks["date_without_session"] == 16
    assert report.examples["date_without_session"][0] == "conv-26: session_20_date_time"


def test_adversarial_questions_keep_the_adversarial_answer(dev):
    conversations, report = dev
    plain = question(conversations, "conv-26:q0")
    assert (plain.category, plain.answer, plain.evidence) == ("temporal", "7 May 2023", ("D1:3",))
    adversarial = next(q for q in conversations["conv-26"].questions if q.category == "adversarial")
    assert adversarial.text == "What did Caroline realize after her charity race?"
    assert adversarial.answer == "self-care is important"
    # Two category-5 items carry both answers; the adversarial one is kept, consistently.
    both = question(conversations, "conv-26:q167")
    assert both.text == "Did Caroline make the black and white bowl in the photo?"
    assert (both.category, both.answer) == ("adversarial", "Yes")
    assert report.quirks["adversarial_with_answer"] == 2


def test_integer_answers_become_strings(dev):
    conversations, report = dev
    assert question(conversations, "conv-26:q1").answer == "2022"
    assert question(conversations, "conv-26:q40").answer == "2"
    assert report.quirks["integer_answer"] == 6
    assert all(isinstance(q.answer, str) and q.answer for c in conversations.values() for q in c.questions)


def test_malformed_evidence_is_repaired(dev):
    conversations, report = dev
    # "D:11:26" -> "D11:26"; "D8:6; D9:17" -> two ids.
    assert question(conversations, "conv-43:q18").evidence == (
        "D1:14", "D2:7", "D4:7", "D5:15", "D11:26", "D20:21", "D26:36"
    )
    assert question(conversations, "conv-26:q37").evidence == ("D8:6", "D9:17")
    assert report.quirks["evidence_repaired"] == 2


def test_bad_evidence_is_dropped_and_counted(dev):
    conversations, report = dev
    assert question(conversations, "conv-42:q88").evidence == ("D1:18", "D1:20")  # "D" dropped
    assert "D10:19" not in question(conversations, "conv-42:q58").evidence  # session 10 has 16 turns
    assert question(conversations, "conv-47:q38").evidence == ("D18:1", "D18:7")  # session 4 has 25 turns
    assert report.quirks["evidence_dropped_malformed"] == 1
    assert report.quirks["evidence_dropped_unknown"] == 2
    assert "conv-42:q58 D10:19 (no such turn)" in report.examples["evidence_dropped_unknown"]
    assert report.quirks["no_evidence"] == 2  # conv-26 q30 and q46 come with []


def test_every_evidence_id_resolves_and_ids_are_unique(dev):
    conversations, _ = dev
    qids = [q.id for c in conversations.values() for q in c.questions]
    assert len(qids) == len(set(qids))
    for c in conversations.values():
        turn_ids = {t.id for _, t in c.turns()}
        for q in c.questions:
            assert set(q.evidence) <= turn_ids, q.id
            assert q.conversation_id == c.id


def test_whitespace_is_stripped(dev):
    conversations, report = dev
    assert all(t.text == t.text.strip() for c in conversations.values() for _, t in c.turns())
    assert all(q.text == q.text.strip() for c in conversations.values() for q in c.questions)
    assert report.quirks["text_stripped"] > 0


def test_load_logs_one_summary_line(caplog):
    if not LOCOMO_DEV.is_file():
        pytest.skip("../shared/data/locomo/locomo10_dev.json is not available")
    with caplog.at_level(logging.INFO, logger="memlab.data.locomo"):
        conversations = load_locomo(LOCOMO_DEV)
    assert len(conversations) == 7
    lines = [r.getMessage() for r in caplog.records if r.name == "memlab.data.locomo"]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "7 conversations" in lines[0] and "evidence_repaired 2" in lines[0]


# ---------------------------------------------------------------- hand-made files


def make_sample(sample_id="conv-x", sessions=None, qa=None, **extra):
    sessions = sessions if sessions is not None else {
        1: ("1:56 pm on 8 May, 2023", [("Ann", "Hi Bo!"), ("Bo", "Hi Ann, I got a puppy yesterday.")]),
        2: ("10:00 am on 20 May, 2023", [("Ann", "How is the puppy?"), ("Bo", "Great, she is called Rex.")]),
    }
    conversation = {"speaker_a": "Ann", "speaker_b": "Bo"}
    for n, (date, turns) in sessions.items():
        if date is not None:
            conversation[f"session_{n}_date_time"] = date
        if turns is not None:
            conversation[f"session_{n}"] = [
                {"speaker": s, "dia_id": f"D{n}:{i}", "text": t} for i, (s, t) in enumerate(turns, start=1)
            ]
    qa = qa if qa is not None else [{"question": "What is Bo's dog called?", "answer": "Rex", "evidence": ["D2:2"], "category": 4}]
    return {"sample_id": sample_id, "conversation": conversation, "qa": qa, **extra}


def write(tmp_path, data, name="locomo.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_evidence_repair_rules(tmp_path):
    qa = [{
        "question": "When did Bo get a puppy?",
        "answer": "7 May 2023",
        "evidence": [" D1:2 ", "d1:2", "D1:2:5", "D 2 : 1", "D3:1", 7, "D2:2,D2:1"],
        "category": 2,
    }]
    conversations, report = read_locomo(write(tmp_path, [make_sample(qa=qa)]))
    assert conversations[0].questions[0].evidence == ("D1:2", "D2:1", "D2:2")
    assert report.quirks["evidence_repaired"] == 4  # " D1:2 ", "d1:2", "D 2 : 1", "D2:2,D2:1"
    assert report.quirks["evidence_duplicate"] == 2
    assert report.quirks["evidence_dropped_malformed"] == 2  # "D1:2:5" is ambiguous, 7 is no string
    assert report.quirks["evidence_dropped_unknown"] == 1  # D3:1


def test_missing_answer_is_skipped_but_keeps_later_ids(tmp_path):
    qa = [
        {"question": "What?", "evidence": ["D1:1"], "category": 4},
        {"question": "What is Bo's dog called?", "answer": "Rex", "evidence": "D2:2", "category": 4},
        {"question": "What is Ann's dog called?", "adversarial_answer": "Rex", "evidence": ["D2:2"], "category": "5"},
    ]
    conversations, report = read_locomo(write(tmp_path, [make_sample(qa=qa)]))
    questions = conversations[0].questions
    assert [q.id for q in questions] == ["conv-x:q1", "conv-x:q2"]
    assert questions[0].evidence == ("D2:2",)
    assert (questions[1].category, questions[1].answer) == ("adversarial", "Rex")
    assert report.quirks["missing_answer"] == 1


def test_single_sample_object_and_empty_session(tmp_path):
    sessions = {1: ("1:56 pm on 8 May, 2023", [("Ann", "Hi")]), 2: ("2:00 pm on 9 May, 2023", [])}
    data = make_sample(sessions=sessions, qa=[])
    conversations, report = read_locomo(write(tmp_path, data))
    assert [s.id for s in conversations[0].sessions] == ["session_1"]
    assert report.quirks["empty_session"] == 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"foo": 1}, "expected a list of LoCoMo conversations, found dict"),
        ([1], "conversation 1: expected an object, found int"),
        ([{"sample_id": "conv-x", "qa": []}], "conversation 1 (conv-x): 'conversation' must be an object, found null"),
        ([make_sample(sessions={1: (None, [("Ann", "Hi")])})], "conversation 1 (conv-x): session_1 has no date"),
        ([make_sample(sessions={1: ("yesterday", [("Ann", "Hi")])})], "session_1_date_time 'yesterday' is not a date"),
        ([make_sample(), make_sample(qa=[{"question": "Q?", "answer": "A", "evidence": [], "category": 6}])],
         "conversation 2 (conv-x): qa 0: category 6 is not one of [1, 2, 3, 4, 5]"),
        ([make_sample(), make_sample()], "conversation 2: sample_id 'conv-x' appears twice"),
        ([make_sample(qa="none")], "'qa' must be a list, found str"),
    ],
)
def test_wrong_structure_is_one_clear_error(tmp_path, data, message):
    path = write(tmp_path, data, name="bad_locomo.json")
    with pytest.raises(DataError) as excinfo:
        load_locomo(path)
    assert str(excinfo.value).startswith(str(path) + ": ")
    assert message in str(excinfo.value)


def test_turn_without_text_names_the_turn(tmp_path):
    data = make_sample()
    del data["conversation"]["session_2"][1]["text"]
    with pytest.raises(DataError, match=r"conversation 1 \(conv-x\): session_2 turn 2 \(D2:2\): 'text' must be a string"):
        load_locomo(write(tmp_path, [data]))


def test_missing_file_and_invalid_json(tmp_path):
    with pytest.raises(DataError, match="no such file or directory") as excinfo:
        load_locomo(tmp_path / "absent.json")
    assert "absent.json" in str(excinfo.value)
    assert isinstance(excinfo.value, ValueError)
    broken = tmp_path / "broken.json"
    broken.write_text('[{"sample_id": "conv-1",')
    with pytest.raises(DataError, match=r"broken.json: is not valid JSON \(line 1") as excinfo:
        load_locomo(broken)
    assert excinfo.value.__suppress_context__  # no chained json traceback
