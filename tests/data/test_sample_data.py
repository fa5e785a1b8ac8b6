"""The embedded sample: shipped in the package, valid LoCoMo, and rich enough for fast tests."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime, timedelta
from importlib import resources

import pytest

from memlab.data import SAMPLE_PATH, load_dataset, load_sample, read_sample
from memlab.types import LOCOMO_CATEGORIES


@pytest.fixture(scope="module")
def sample():
    (conversation,), report = read_sample()
    return conversation, report


def test_shipped_as_package_data():
    shipped = resources.files("memlab.data") / "samples" / "sample_locomo.json"
    assert shipped.is_file()
    assert SAMPLE_PATH.is_file() and SAMPLE_PATH.name == "sample_locomo.json"
    assert load_sample() == load_dataset(SAMPLE_PATH)


def test_raw_file_has_the_exact_locomo_layout():
    (raw,) = json.loads(SAMPLE_PATH.read_text())
    assert set(raw) == {"sample_id", "conversation", "qa"}
    body = raw["conversation"]
    for key in body:
        assert key in ("speaker_a", "speaker_b") or re.fullmatch(r"session_\d+(_date_time)?", key), key
    for n in range(1, 6):
        for i, turn in enumerate(body[f"session_{n}"], start=1):
            assert set(turn) <= {"speaker", "dia_id", "text", "blip_caption"}
            assert turn["dia_id"] == f"D{n}:{i}"
    for item in raw["qa"]:
        answer_key = "adversarial_answer" if item["category"] == 5 else "answer"
        assert set(item) == {"question", answer_key, "evidence", "category"}


def test_size_and_coverage(sample):
    conversation, report = sample
    assert len(conversation.speakers) == 2
    assert len(conversation.sessions) >= 4
    turns = [t for _, t in conversation.turns()]
    assert len(turns) >= 60
    assert {t.speaker for t in turns} == set(conversation.speakers)
    assert sum(1 for t in turns if t.image_caption) >= 1
    categories = Counter(q.category for q in conversation.questions)
    assert set(categories) == set(LOCOMO_CATEGORIES.values())
    assert len(conversation.questions) >= 16
    # Spread over weeks, in order.
    times = [s.timestamp for s in conversation.sessions]
    assert times == sorted(times) and times[-1] - times[0] > timedelta(weeks=8)
    # Clean data: the only "quirk" is the deliberate LoCoMo-style integer answer.
    assert set(report.quirks) == {"integer_answer"}


def test_every_evidence_id_resolves(sample):
    conversation, _ = sample
    turn_ids = {t.id for _, t in conversation.turns()}
    for question in conversation.questions:
        assert question.evidence, question.id
        assert set(question.evidence) <= turn_ids, question.id


def test_temporal_answers_are_resolved_dates_before_the_telling(sample):
    """A resolved date ("4 March 2023") is an absolute date no later than the session that
    mentions it, and at most a few weeks before it (the sample only uses "yesterday",
    "last Saturday", "three days ago", "two weeks ago", and "next month" resolved later)."""
    conversation, _ = sample
    session_of = {t.id: s for s, t in conversation.turns()}
    resolved = 0
    for question in conversation.questions:
        if question.category != "temporal":
            continue
        try:
            when = datetime.strptime(question.answer, "%d %B %Y")
        except ValueError:
            assert re.fullmatch(r"\d{4}", question.answer), question.answer
            continue
        told = max(session_of[e].timestamp for e in question.evidence)
        assert told - timedelta(days=21) <= when <= told, question.id
        assert not any(word in question.answer.lower() for word in ("ago", "last", "yesterday", "next"))
        resolved += 1
    assert resolved >= 5
