"""LongMemEval (Wu et al., ICLR 2025) as ``Conversation`` objects, one per question.

Two layouts are read; ``load_longmemeval`` tells them apart by the path.

Official file (``longmemeval_s.json``, ``_m``, ``_oracle``): a JSON list of
``{question_id, question_type, question, answer, question_date, haystack_session_ids,
haystack_dates, haystack_sessions, answer_session_ids}``, each haystack session a list of
``{role, content, has_answer?}``. Each question is its own conversation:

* ``Conversation(id=question_id, speakers=("user", "assistant"))`` whose sessions are the
  question's haystack, ``Session(id=<haystack session id>, timestamp=<haystack date>)``;
* ``Turn(id=f"{session_id}:{n}", speaker=role)``, ``n`` counting from 1 like LoCoMo's dia ids;
* one ``Question(id=question_id, timestamp=question_date, category=question_type)``.

Processed folder (memory-arena's ``processed/``: ``questions.jsonl`` + ``sessions.jsonl``):
sessions form one pool (each tagged ``metadata.category``, which is ignored); questions carry
``category``, ``ground_truth.{answer, supporting_session_ids, valid_as_of}``, ``valid_as_of``
being LongMemEval's question date. A question's haystack is every session of the pool dated
no later than its ``valid_as_of``, chosen without any gold field: neither the category (the
pool's sessions are grouped by the category of the question that needed them) nor the
supporting sessions decide what the pipeline sees. A supporting session dated after the
question is not added; its evidence is dropped (``evidence_after_question``).
``Question.timestamp = valid_as_of``.

Decisions shared by both layouts
--------------------------------
* **Abstention.** Questions whose id ends in ``_abs`` (or with
  ``constraints.abstention_expected``) get ``category="abstention"``, whatever their type:
  LongMemEval reports abstention as its own ability, and a category is what reports group
  by. The id keeps the ``_abs`` suffix, so the original type remains traceable.
* **Evidence** (for recall@k): per answer/supporting session, the ids of its turns flagged
  ``has_answer``; a session with no flagged turn contributes all its turns
  (``evidence_whole_session``), since the session itself is the gold unit there.
* **Order.** Sessions are sorted by timestamp (stable), as memory systems ingest them in time.
* **Ids.** Sessions and turns are renumbered by position (``memlab.data.anonymise``): the
  source ids name the evidence sessions (``answer_…``) and must not reach a prompt. The
  conversation and question keep the source id on the gold side (``_abs`` included); a
  pipeline sees an opaque digest of it (``Conversation.history``, ``Question.as_query``).

Quirks counted in ``LoadReport.quirks``: ``integer_answer``, ``empty_session`` (skipped unless
it is evidence), ``duplicate_session_renamed`` (the same haystack id twice in one question,
a known LongMemEval-S sampling artefact; the second becomes ``"<id>#2"``),
``evidence_after_question`` (a supporting session dated after the question, so not in its
haystack), ``evidence_dropped_unknown`` (an answer session id not in the data),
``evidence_whole_session``, ``no_evidence``. A field of the wrong type (a list where an object
belongs, a number for ``answer_session_ids``) or a turn id used twice is a ``DataError``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from memlab.data.anonymise import anonymise
from memlab.data.dates import parse_date
from memlab.data.errors import DataError
from memlab.data.jsonfile import read_json, read_jsonl
from memlab.data.report import LoadReport
from memlab.types import Conversation, Question, Session, Turn

log = logging.getLogger(__name__)

FORMAT_OFFICIAL = "longmemeval"
FORMAT_PROCESSED = "longmemeval-processed"
ABSTENTION = "abstention"
SPEAKERS = ("user", "assistant")
QUESTIONS_FILE = "questions.jsonl"
SESSIONS_FILE = "sessions.jsonl"
#: LongMemEval writes "2023/05/20 (Sat) 02:21".
DATE_FORMATS = ("%Y/%m/%d (%a) %H:%M", "%Y/%m/%d %H:%M", "%Y/%m/%d", "%Y-%m-%d %H:%M", "%Y-%m-%d")
_OFFICIAL_KEYS = ("question_id", "question", "answer", "haystack_session_ids", "haystack_dates", "haystack_sessions")


def load_longmemeval(path: str | Path) -> list[Conversation]:
    """Conversations from an official LongMemEval ``.json`` file or a processed folder
    (or its ``questions.jsonl``); logs a one-line summary of what was handled."""
    conversations, report = read_longmemeval(path)
    log.info(report.summary())
    return conversations


def read_longmemeval(path: str | Path) -> tuple[list[Conversation], LoadReport]:
    """Like ``load_longmemeval``, also returning the report."""
    path = Path(path)
    if path.is_dir() or path.suffix == ".jsonl":
        return read_processed(path)
    return parse_official(read_json(path), source=str(path))


def looks_like_longmemeval(data: Any) -> bool:
    """Whether parsed JSON has the official LongMemEval shape (used to detect the format)."""
    first = data[0] if isinstance(data, list) and data else None
    return isinstance(first, dict) and "question_id" in first and "haystack_sessions" in first


def parse_longmemeval_date(text: Any) -> datetime | None:
    """A LongMemEval date ("2023/05/20 (Sat) 02:21"), or None when it is not one."""
    return parse_date(text, DATE_FORMATS)


# ---------------------------------------------------------------- official file


def parse_official(data: Any, source: str) -> tuple[list[Conversation], LoadReport]:
    """Conversations from already parsed official LongMemEval JSON."""
    if not isinstance(data, list):
        raise DataError(source, f"expected a list of LongMemEval questions, found {_kind(data)}")
    report = LoadReport(source=source, format=FORMAT_OFFICIAL)
    conversations = []
    seen: set[str] = set()
    for number, item in enumerate(data, start=1):
        conversation = _parse_official_item(item, number, source, report)
        if conversation.id in seen:
            raise DataError(source, f"question {number}: question_id {conversation.id!r} appears twice")
        seen.add(conversation.id)
        conversations.append(conversation)
    report.conversations = len(conversations)
    return conversations, report


def _parse_official_item(item: Any, number: int, source: str, report: LoadReport) -> Conversation:
    where = f"question {number}"
    if not isinstance(item, dict):
        raise DataError(source, f"{where}: expected an object, found {_kind(item)}")
    missing = [key for key in _OFFICIAL_KEYS if key not in item]
    if missing:
        raise DataError(source, f"{where}: missing {', '.join(missing)}")
    qid = _text(item["question_id"], f"{where}: question_id", source)
    where = f"question {number} ({qid})"
    ids, dates, bodies = item["haystack_session_ids"], item["haystack_dates"], item["haystack_sessions"]
    if not (isinstance(ids, list) and isinstance(dates, list) and isinstance(bodies, list)):
        raise DataError(source, f"{where}: haystack_session_ids, haystack_dates and haystack_sessions must be lists")
    if not len(ids) == len(dates) == len(bodies):
        raise DataError(
            source,
            f"{where}: {len(ids)} haystack_session_ids, {len(dates)} haystack_dates and "
            f"{len(bodies)} haystack_sessions (they must match one to one)",
        )

    sessions: list[Session] = []
    flagged: set[str] = set()
    renamed: dict[str, int] = {}
    answer_ids = _id_list(item.get("answer_session_ids"), f"{where}: answer_session_ids", source)
    for session_id, date, body in zip(ids, dates, bodies):
        session_id = _text(session_id, f"{where}: haystack session id", source)
        timestamp = _date(date, f"{where}: session {session_id} date", source)
        if session_id in renamed:
            renamed[session_id] += 1
            new_id = f"{session_id}#{renamed[session_id]}"
            report.note("duplicate_session_renamed", f"{qid}: {session_id} -> {new_id}")
            session_id = new_id
        else:
            renamed[session_id] = 1
        if not isinstance(body, list):
            raise DataError(source, f"{where}: session {session_id} must be a list of turns, found {_kind(body)}")
        turns = []
        for n, raw in enumerate(body, start=1):
            turn_where = f"{where}: session {session_id} turn {n}"
            turn = _official_turn(raw, f"{session_id}:{n}", timestamp, turn_where, source)
            turns.append(turn)
            if raw.get("has_answer") is True:
                flagged.add(turn.id)
        sessions.append(Session(id=session_id, timestamp=timestamp, turns=tuple(turns)))

    asked = item.get("question_date")
    question = Question(
        id=qid,
        conversation_id=qid,
        text=_text(item["question"], f"{where}: question", source).strip(),
        answer=_answer(item["answer"], qid, where, source, report),
        category=_category(qid, item.get("question_type"), False, where, source),
        timestamp=None if asked is None else _date(asked, f"{where}: question_date", source),
    )
    return _finish(qid, sessions, question, answer_ids, flagged, report)


def _official_turn(raw: Any, turn_id: str, timestamp: datetime, where: str, source: str) -> Turn:
    if not isinstance(raw, dict):
        raise DataError(source, f"{where}: expected an object, found {_kind(raw)}")
    role = _text(raw.get("role"), f"{where}: role", source)
    content = raw.get("content")
    if not isinstance(content, str):
        raise DataError(source, f"{where}: content must be a string, found {_kind(content)}")
    return Turn(id=turn_id, speaker=role, text=content.strip(), timestamp=timestamp)


# ---------------------------------------------------------------- processed folder


def read_processed(path: str | Path) -> tuple[list[Conversation], LoadReport]:
    """Conversations from a processed folder (``questions.jsonl`` + ``sessions.jsonl``)."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    if not folder.exists():
        raise DataError(path, "no such file or directory")
    questions_path, sessions_path = folder / QUESTIONS_FILE, folder / SESSIONS_FILE
    for needed in (questions_path, sessions_path):
        if not needed.is_file():
            raise DataError(folder, f"a processed LongMemEval folder needs {needed.name}, which is missing")
    report = LoadReport(source=str(folder), format=FORMAT_PROCESSED)
    pool = _read_session_pool(sessions_path, report)
    conversations = []
    seen: set[str] = set()
    for number, item in enumerate(read_jsonl(questions_path), start=1):
        conversation = _processed_question(item, number, pool, str(questions_path), report)
        if conversation.id in seen:
            raise DataError(questions_path, f"line {number}: question id {conversation.id!r} appears twice")
        seen.add(conversation.id)
        conversations.append(conversation)
    report.conversations = len(conversations)
    return conversations, report


def _read_session_pool(path: Path, report: LoadReport) -> dict[str, tuple[Session, set[str]]]:
    """Session id -> (session, ids of its has_answer turns)."""
    pool: dict[str, tuple[Session, set[str]]] = {}
    turn_ids: dict[str, str] = {}
    source = str(path)
    for number, raw in enumerate(read_jsonl(path), start=1):
        where = f"line {number}"
        if not isinstance(raw, dict):
            raise DataError(source, f"{where}: expected an object, found {_kind(raw)}")
        session_id = _text(raw.get("id"), f"{where}: id", source)
        where = f"line {number} (session {session_id})"
        if session_id in pool:
            raise DataError(source, f"{where}: session id appears twice")
        timestamp = _date(raw.get("timestamp"), f"{where}: timestamp", source)
        raw_turns = raw.get("turns")
        if not isinstance(raw_turns, list):
            raise DataError(source, f"{where}: turns must be a list, found {_kind(raw_turns)}")
        turns, flagged = [], set()
        for n, turn in enumerate(raw_turns, start=1):
            if not isinstance(turn, dict):
                raise DataError(source, f"{where}: turn {n} must be an object, found {_kind(turn)}")
            turn_id = _text(turn.get("id"), f"{where}: turn {n} id", source) if "id" in turn else f"{session_id}:{n}"
            if turn_id in turn_ids:
                raise DataError(source, f"{where}: turn id {turn_id!r} is also used by {turn_ids[turn_id]}")
            turn_ids[turn_id] = f"session {session_id}"
            content = turn.get("content")
            if not isinstance(content, str):
                raise DataError(source, f"{where}: turn {n} content must be a string, found {_kind(content)}")
            turn_time = parse_longmemeval_date(turn.get("timestamp")) or timestamp
            turns.append(Turn(id=turn_id, speaker=_text(turn.get("role"), f"{where}: turn {n} role", source),
                              text=content.strip(), timestamp=turn_time))
            if _object(turn.get("metadata"), f"{where}: turn {n} metadata", source).get("has_answer") is True \
                    or turn.get("has_answer") is True:
                flagged.add(turn_id)
        _object(raw.get("metadata"), f"{where}: metadata", source)
        pool[session_id] = (Session(id=session_id, timestamp=timestamp, turns=tuple(turns)), flagged)
    return pool


def _processed_question(
    item: Any, number: int, pool: dict[str, tuple[Session, set[str]]], source: str, report: LoadReport
) -> Conversation:
    where = f"line {number}"
    if not isinstance(item, dict):
        raise DataError(source, f"{where}: expected an object, found {_kind(item)}")
    qid = _text(item.get("id"), f"{where}: id", source)
    where = f"line {number} (question {qid})"
    truth = item.get("ground_truth")
    if not isinstance(truth, dict):
        raise DataError(source, f"{where}: ground_truth must be an object, found {_kind(truth)}")
    asked_at = _date(truth.get("valid_as_of"), f"{where}: ground_truth.valid_as_of", source)
    category = item.get("category") or item.get("type")
    supporting = _id_list(truth.get("supporting_session_ids"), f"{where}: ground_truth.supporting_session_ids",
                          source)

    # Everything said before the question was asked, whatever it is about: no gold field chooses.
    chosen = [session for session, _ in pool.values() if session.timestamp <= asked_at]
    chosen_ids = {session.id for session in chosen}
    for session_id in supporting:
        if session_id in pool and session_id not in chosen_ids:
            report.note("evidence_after_question", f"{qid}: {session_id}")
    supporting = [s for s in supporting if s in chosen_ids or s not in pool]
    flagged = set().union(*(pool[s][1] for s in chosen_ids))
    abstention = _object(item.get("constraints"), f"{where}: constraints", source).get("abstention_expected") is True
    question = Question(
        id=qid,
        conversation_id=qid,
        text=_text(item.get("question"), f"{where}: question", source).strip(),
        answer=_answer(truth.get("answer"), qid, where, source, report),
        category=_category(qid, category, abstention, where, source),
        timestamp=asked_at,
    )
    return _finish(qid, chosen, question, supporting, flagged, report)


# ---------------------------------------------------------------- shared


def _finish(
    qid: str, sessions: list[Session], question: Question, answer_ids: list[str], flagged: set[str], report: LoadReport
) -> Conversation:
    """Drop empty sessions, sort by time, attach evidence, count what was built."""
    by_id = {session.id: session for session in sessions}
    evidence: list[str] = []
    for session_id in answer_ids:
        session = by_id.get(session_id)
        if session is None:
            report.note("evidence_dropped_unknown", f"{qid}: answer session {session_id} not in the haystack")
            continue
        hits = [turn.id for turn in session.turns if turn.id in flagged]
        if not hits and session.turns:
            report.note("evidence_whole_session", f"{qid}: {session_id}")
            hits = [turn.id for turn in session.turns]
        evidence.extend(hit for hit in hits if hit not in evidence)
    if not evidence:
        report.note("no_evidence", qid)

    kept = []
    for session in sessions:
        if not session.turns and session.id not in answer_ids:
            report.note("empty_session", f"{qid}: {session.id}")
            continue
        kept.append(session)
    kept.sort(key=lambda s: s.timestamp)
    report.sessions += len(kept)
    report.turns += sum(len(s.turns) for s in kept)
    report.questions[question.category] += 1
    question = Question(
        id=question.id,
        conversation_id=question.conversation_id,
        text=question.text,
        answer=question.answer,
        category=question.category,
        evidence=tuple(evidence),
        timestamp=question.timestamp,
    )
    return anonymise(Conversation(id=qid, speakers=SPEAKERS, sessions=tuple(kept), questions=(question,)))


def _category(qid: str, kind: Any, abstention: bool, where: str, source: str) -> str:
    if abstention or qid.endswith("_abs"):
        return ABSTENTION
    return _text(kind, f"{where}: question type", source).strip()


def _answer(raw: Any, qid: str, where: str, source: str, report: LoadReport) -> str:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        report.note("integer_answer", f"{qid} {raw!r}")
        return str(raw)
    return _text(raw, f"{where}: answer", source).strip()


def _date(raw: Any, what: str, source: str) -> datetime:
    parsed = parse_longmemeval_date(raw)
    if parsed is None:
        raise DataError(source, f"{what} {raw!r} is not a date like '2023/05/20 (Sat) 02:21'")
    return parsed


def _text(value: Any, what: str, source: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is None:
        raise DataError(source, f"{what} is missing")
    if not isinstance(value, str):
        raise DataError(source, f"{what} must be a string, found {_kind(value)}")
    if not value.strip():
        raise DataError(source, f"{what} is empty")
    return value


def _object(value: Any, what: str, source: str) -> dict[str, Any]:
    """An optional JSON object (None reads as empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DataError(source, f"{what} must be an object, found {_kind(value)}")
    return value


def _id_list(value: Any, what: str, source: str) -> list[str]:
    """An optional list of session ids, without repeats. A bare string is refused: read as one
    id it would silently score against a session the data may never have meant."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise DataError(source, f"{what} must be a list of session ids, found {_kind(value)}")
    return list(dict.fromkeys(_text(v, what, source) for v in value))


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
