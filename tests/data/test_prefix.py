"""``first_sessions``: a conversation cut after N sessions keeps exactly the questions it can answer."""

from dataclasses import replace

import pytest

from memlab.data import load_sample
from memlab.data.prefix import first_sessions


def test_keeps_the_first_sessions_and_the_questions_whose_evidence_lies_in_them():
    conversation = load_sample()[0]
    cut = first_sessions(conversation, 2)
    assert cut.sessions == conversation.sessions[:2] and cut.id == conversation.id
    kept_turns = {turn.id for _, turn in cut.turns()}
    assert kept_turns == {t.id for s in conversation.sessions[:2] for t in s.turns}
    assert 0 < len(cut.questions) < len(conversation.questions)
    for question in conversation.questions:
        answerable = set(question.evidence) <= kept_turns
        assert (question in cut.questions) == answerable, question.id
    # a question citing one kept turn and one later turn is not answerable from the prefix
    assert any(set(q.evidence) & kept_turns and q not in cut.questions for q in conversation.questions)


def test_a_question_without_evidence_is_dropped_and_n_must_be_positive():
    conversation = load_sample()[0]
    bare = replace(conversation.questions[0], evidence=())
    cut = first_sessions(replace(conversation, questions=(bare, *conversation.questions[1:])), 5)
    assert bare not in cut.questions and len(cut.questions) == len(conversation.questions) - 1
    assert first_sessions(conversation, 99) == conversation
    with pytest.raises(ValueError, match="at least 1"):
        first_sessions(conversation, 0)


def test_the_annotations_of_cut_sessions_are_dropped_too():
    from memlab.types import SessionAnnotation

    conversation = load_sample()[0]
    notes = tuple(SessionAnnotation(session.id, summary=f"summary of {session.id}") for session in conversation.sessions)
    cut = first_sessions(replace(conversation, annotations=notes), 2)
    assert [a.session_id for a in cut.annotations] == [s.id for s in conversation.sessions[:2]]
