"""Positional ids for every dataset, so that no id a pipeline sees carries a label.

LongMemEval names its evidence sessions ``answer_<hash>`` and builds turn ids from session ids
(``answer_280352e9_turn_004``): kept as they are, they reach prompts (an event's ``<ref: …>``,
a compressor's turn list) and tell the model where the gold evidence is. Every loader therefore
ends with ``anonymise``: session k of a conversation (1-based, in the loader's time order) is
``session_k`` and its turn t is ``Dk:t`` (LoCoMo's own dia-id scheme, so LoCoMo's ids come out
unchanged), and the questions' evidence is rewritten onto the new turn ids, the only place
scoring needs the mapping; the session annotations (``Conversation.annotations``, gold-side
supervision) are rewritten the same way: their session ids and their observations' source
ids. Conversation and question ids stay the source's on the gold side; what a pipeline sees
of them is opaque (``Conversation.history``, ``Question.as_query``).
"""

from __future__ import annotations

from dataclasses import replace

from memlab.types import Conversation, Session, SessionAnnotation


def session_id(k: int) -> str:
    return f"session_{k}"


def turn_id(k: int, t: int) -> str:
    return f"D{k}:{t}"


def anonymise(conversation: Conversation) -> Conversation:
    """``conversation`` with positional session and turn ids, and its evidence and session
    annotations mapped onto them."""
    renamed: dict[str, str] = {}
    renamed_sessions: dict[str, str] = {}
    sessions = []
    for k, session in enumerate(conversation.sessions, start=1):
        renamed_sessions[session.id] = session_id(k)
        turns = []
        for t, turn in enumerate(session.turns, start=1):
            renamed[turn.id] = turn_id(k, t)
            turns.append(replace(turn, id=renamed[turn.id]))
        sessions.append(Session(id=session_id(k), timestamp=session.timestamp, turns=tuple(turns)))
    questions = tuple(replace(q, evidence=tuple(renamed[e] for e in q.evidence)) for q in conversation.questions)
    annotations = tuple(
        _rename_annotation(conversation.id, a, renamed_sessions, renamed) for a in conversation.annotations
    )
    return replace(conversation, sessions=tuple(sessions), questions=questions, annotations=annotations)


def _rename_annotation(
    conversation_id: str, annotation: SessionAnnotation, sessions: dict[str, str], turns: dict[str, str]
) -> SessionAnnotation:
    # Loaders only annotate sessions they kept and cite turns they kept; anything else is a bug.
    if annotation.session_id not in sessions:
        raise ValueError(f"{conversation_id}: annotation of {annotation.session_id!r}, which is no session of it")
    observations = []
    for observation in annotation.observations:
        unknown = [i for i in observation.source_ids if i not in turns]
        if unknown:
            raise ValueError(f"{conversation_id}: observation cites {unknown[0]!r}, which is no turn of it")
        observations.append(replace(observation, source_ids=tuple(turns[i] for i in observation.source_ids)))
    return replace(annotation, session_id=sessions[annotation.session_id], observations=tuple(observations))
