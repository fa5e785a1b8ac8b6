"""Audited gold: an errata file's corrections attached to loaded LoCoMo questions.

The file is a JSON list, one entry per corrected question (the format of the LoCoMo audit in
``shared/data/locomo/audit/errata_dev.json``)::

    {"conversation": "conv-26", "qa_index": 2, "question": "What fields would ...",
     "error_type": "HALLUCINATION", "correct_answer": "Counseling or mental health",
     "correct_evidence": ["D1:9", "D1:11"], ...}

``qa_index`` is the 0-based position in the conversation's ``qa`` list, so the question is
``<conversation>:q<qa_index>`` (``memlab.data.locomo``). The answer-changing error types
(``ANSWER_CHANGING``) replace the answer; every type replaces the evidence. Other keys
(``golden_answer``, ``reasoning`` ...) are the audit's notes and are not read.

``apply_errata`` sets ``Question.audited`` and leaves ``answer`` and ``evidence`` as they were:
a run scores both golds (``metrics.json["audited"]``), and no pipeline sees either. An entry
whose question text differs from the data's, whose evidence names no turn of its conversation,
or whose fields are malformed, two entries correcting one question differently, and an entry
for a loaded conversation naming a question it does not have are each a ``DataError`` naming the
file and the entry; an entry for a conversation not loaded (another selection) is counted, not
applied. Apply errata
to whole conversations, before a ``--sessions`` cut (``memlab.data.prefix.first_sessions``
keeps ``audited``): the audited evidence may name turns of later sessions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

from memlab.data.errors import DataError
from memlab.data.jsonfile import read_json
from memlab.types import AuditedGold, Conversation

#: Error types whose correction changes the answer (``WRONG_CITATION`` changes only the evidence).
ANSWER_CHANGING = frozenset({"HALLUCINATION", "TEMPORAL_ERROR", "ATTRIBUTION_ERROR", "INCOMPLETE", "AMBIGUOUS"})
ERROR_TYPES = ANSWER_CHANGING | {"WRONG_CITATION"}


@dataclass(frozen=True)
class Correction:
    """One entry of an errata file."""

    conversation_id: str
    qa_index: int
    question: str
    error_type: str
    answer: str
    evidence: tuple[str, ...]

    @property
    def question_id(self) -> str:
        return f"{self.conversation_id}:q{self.qa_index}"


def load_errata(path: str | PathLike[str]) -> tuple[Correction, ...]:
    """The corrections of the errata file at ``path``; a ``DataError`` naming the file (and the
    entry) when it cannot be read (as the data loader reads JSON: any nesting or number it
    refuses), an entry is malformed, or two entries correct one question differently (an
    entry repeated word for word counts once)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, f"an errata file is a JSON list of corrections, found {type(data).__name__}")
    corrections: dict[str, tuple[int, Correction]] = {}
    for index, entry in enumerate(data):
        correction = _correction(entry, index, path)
        earlier = corrections.setdefault(correction.question_id, (index, correction))
        if earlier[1] != correction:
            raise DataError(path, f"entries {earlier[0]} and {index} both correct {correction.question_id}, "
                                  "differently; keep the one that is right")
    return tuple(correction for _, correction in corrections.values())


def _correction(entry: Any, index: int, path: str | PathLike[str]) -> Correction:
    where = f"entry {index}"
    if not isinstance(entry, dict):
        raise DataError(path, f"{where}: expected an object, found {type(entry).__name__}")
    for key in ("conversation", "question", "error_type", "correct_answer"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise DataError(path, f"{where}: {key!r} must be a non-empty string, found {entry.get(key)!r:.60}")
    where = f"entry {index} ({entry['conversation']} qa {entry.get('qa_index')!r})"
    qa_index = entry.get("qa_index")
    if isinstance(qa_index, bool) or not isinstance(qa_index, int) or qa_index < 0:
        raise DataError(path, f"{where}: 'qa_index' must be an integer >= 0")
    if entry["error_type"] not in ERROR_TYPES:
        raise DataError(path, f"{where}: error_type {entry['error_type']!r} is not one of {sorted(ERROR_TYPES)}")
    evidence = entry.get("correct_evidence")
    if not isinstance(evidence, list) or not all(isinstance(e, str) and e.strip() for e in evidence):
        raise DataError(path, f"{where}: 'correct_evidence' must be a list of dia ids, found {evidence!r:.60}")
    return Correction(entry["conversation"], qa_index, entry["question"].strip(), entry["error_type"],
                      entry["correct_answer"].strip(), tuple(dict.fromkeys(e.strip() for e in evidence)))


def apply_errata(conversations: Sequence[Conversation], corrections: Sequence[Correction],
                 source: str | PathLike[str]) -> tuple[list[Conversation], dict[str, Any]]:
    """``conversations`` with ``Question.audited`` set from ``corrections`` (read from
    ``source``, named in errors), and what was applied: ``{file, entries, applied,
    answers_changed, evidence_changed, not_loaded}``."""
    by_id = {c.id: c for c in conversations}
    found: dict[str, dict[str, AuditedGold]] = {}
    counts = {"answers_changed": 0, "evidence_changed": 0, "not_loaded": 0}
    for index, correction in enumerate(corrections):
        conversation = by_id.get(correction.conversation_id)
        if conversation is None:  # a conversation this run did not load
            counts["not_loaded"] += 1
            continue
        where = f"entry {index} ({correction.question_id})"
        question = next((q for q in conversation.questions if q.id == correction.question_id), None)
        if question is None:
            raise DataError(source, f"{where}: {conversation.id} has no question qa_index {correction.qa_index} "
                                    f"({len(conversation.questions)} questions loaded); is the errata file for "
                                    "this version of the data?")
        if " ".join(question.text.split()) != " ".join(correction.question.split()):
            raise DataError(source, f"{where}: its question {correction.question!r:.80} is not the data's "
                                    f"{question.text!r:.80}; is the errata file for this version of the data?")
        turns = {turn.id for _, turn in conversation.turns()}
        unknown = [e for e in correction.evidence if e not in turns]
        if unknown:
            raise DataError(source, f"{where}: correct_evidence {unknown} names no turn of {conversation.id}")
        answer = correction.answer if correction.error_type in ANSWER_CHANGING else question.answer
        counts["answers_changed"] += answer != question.answer
        counts["evidence_changed"] += set(correction.evidence) != set(question.evidence)
        found.setdefault(conversation.id, {})[question.id] = AuditedGold(answer, correction.evidence,
                                                                         correction.error_type)
    corrected = [dataclasses.replace(c, questions=tuple(
        dataclasses.replace(q, audited=found[c.id][q.id]) if q.id in found.get(c.id, {}) else q
        for q in c.questions)) if c.id in found else c for c in conversations]
    applied = sum(len(questions) for questions in found.values())
    return corrected, {"file": str(source), "entries": len(corrections), "applied": applied, **counts}

