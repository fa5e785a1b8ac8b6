"""Positional ids for every dataset, so that no id a pipeline sees carries a label.

LongMemEval names its evidence sessions ``answer_<hash>`` and builds turn ids from session ids
(``answer_280352e9_turn_004``): kept as they are, they reach prompts (an event's ``<ref: …>``,
a compressor's turn list) and tell the model where the gold evidence is. Every loader therefore
ends with ``anonymise``: session k of a conversation (1-based, in the loader's time order) is
``session_k`` and its turn t is ``Dk:t`` (LoCoMo's own dia-id scheme, so LoCoMo's ids come out
unchanged), and the questions' evidence is rewritten onto the new turn ids, the only place
scoring needs the mapping. Conversation and question ids stay the source's on the gold side;
what a pipeline sees of them is opaque (``Conversation.history``, ``Question.as_query``).
"""

from __future__ import annotations

from dataclasses import replace

from memlab.types import Conversation, Session


def session_id(k: int) -> str:
    return f"session_{k}"


def turn_id(k: int, t: int) -> str:
    return f"D{k}:{t}"


def anonymise(conversation: Conversation) -> Conversation:
    """``conversation`` with positional session and turn ids and its evidence mapped onto them."""
    renamed: dict[str, str] = {}
    sessions = []
    for k, session in enumerate(conversation.sessions, start=1):
        turns = []
        for t, turn in enumerate(session.turns, start=1):
            renamed[turn.id] = turn_id(k, t)
            turns.append(replace(turn, id=renamed[turn.id]))
        sessions.append(Session(id=session_id(k), timestamp=session.timestamp, turns=tuple(turns)))
    questions = tuple(replace(q, evidence=tuple(renamed[e] for e in q.evidence)) for q in conversation.questions)
    return replace(conversation, sessions=tuple(sessions), questions=questions)
