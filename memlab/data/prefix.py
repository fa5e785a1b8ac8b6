"""``first_sessions``: a conversation cut after its first N sessions, for cheaper runs; and
``first_questions``, its first N questions.

An LLM-built memory (MAGMA, SimpleMem, EMem) costs minutes per session on a CPU, so a full
LoCoMo conversation can take hours. Cutting the history keeps the run honest only if the
questions are cut with it: a question stays when every evidence turn it cites lies in the kept
sessions, and a question that cites no evidence is dropped, since nothing says the prefix can
answer it. Because the kept sessions are the same turns in the same order, a pipeline whose
build only looks backwards sends the same LLM requests as it does for the whole conversation,
and the response cache shares them between a prefix run and a later full run.
"""

from __future__ import annotations

from dataclasses import replace

from memlab.types import Conversation


def first_sessions(conversation: Conversation, n: int) -> Conversation:
    """``conversation`` with its first ``n`` sessions and the questions answerable from them."""
    if n < 1:
        raise ValueError(f"the number of sessions to keep must be at least 1, got {n}")
    sessions = conversation.sessions[:n]
    kept_turns = {turn.id for session in sessions for turn in session.turns}
    questions = tuple(q for q in conversation.questions if q.evidence and set(q.evidence) <= kept_turns)
    kept_sessions = {session.id for session in sessions}
    annotations = tuple(a for a in conversation.annotations if a.session_id in kept_sessions)
    return replace(conversation, sessions=sessions, questions=questions, annotations=annotations)


def first_questions(conversations: list[Conversation], n: int | None) -> list[Conversation]:
    """Each conversation with its first ``n`` questions only (None: all), its sessions whole: a
    quicker score, or a stage that costs an LLM call a question."""
    return [replace(c, questions=c.questions[:n]) if n else c for c in conversations]
