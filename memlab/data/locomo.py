"""LoCoMo: the JSON file of snap-research/LoCoMo (``locomo10.json``) as ``Conversation`` objects.

The file is a list of samples ``{sample_id, conversation, qa, ...}`` where ``conversation``
holds ``speaker_a``, ``speaker_b``, ``session_N_date_time`` ("1:56 pm on 8 May, 2023") and
``session_N`` (a list of turns ``{speaker, dia_id, text, blip_caption?, img_url?, query?}``),
and ``qa`` is a list of ``{question, answer | adversarial_answer, evidence, category}``.
A sample may also carry LoCoMo's session annotations: ``event_summary``
(``{"events_session_N": {<speaker>: [event, ...], "date": "8 May, 2023"}}``), ``observation``
(``{"session_N_observation": {<speaker>: [[fact, dia id | [dia id, ...]], ...]}}``) and
``session_summary`` (``{"session_N_summary": text}``). They are gold-side supervision for
training recipes (``Conversation.annotations``); no pipeline reads them. Other keys are ignored.

Mapping
-------
* ``Conversation(id=sample_id, speakers=(speaker_a, speaker_b))``, sessions in the order of N.
* ``Session(id="session_N", timestamp=<parsed date>)``; every turn carries the session time.
* ``Turn(id=dia_id, speaker, text, image_caption=blip_caption)``; the image URL is dropped
  (no pipeline can fetch it offline; the caption is what LoCoMo's baselines see).
* ``Question(id=f"{sample_id}:q{index}")`` with ``index`` the position in ``qa`` (stable even
  when a question is skipped), ``category=LOCOMO_CATEGORIES[code]`` and ``answer=str(...)``.
  Category 5 (adversarial) keeps its ``adversarial_answer`` as ``answer``.
* ``SessionAnnotation(session_id="session_N")`` for each kept session that has any of the three
  annotations, in session order: ``date`` from ``event_summary`` (parsed; midnight),
  ``events`` = ``SessionEvent(speaker, text)`` and ``observations`` =
  ``Observation(speaker, text, source_ids)`` in the file's order, ``summary`` the session summary
  ("" when none). A sample without annotations gets ``annotations=()``.

Quirks handled (counted in ``LoadReport.quirks`` under these names)
------------------------------------------------------------------
``date_without_session``        a ``session_N_date_time`` with no ``session_N`` (skipped)
``empty_session``               a ``session_N`` with no turns (skipped)
``text_stripped``               turn or question text with surrounding whitespace (stripped)
``unknown_speaker``             a turn whose speaker is neither speaker_a nor speaker_b (kept)
``integer_answer``              a number as answer (converted to its string)
``sessions_out_of_order``       a session dated before the one numbered before it (kept in
                                LoCoMo's order: the numbering is the conversation's order)
``adversarial_with_answer``     a category-5 item that also has ``answer`` (the adversarial
                                answer is kept, as for every category-5 item)
``missing_answer``              a question with no answer at all (skipped)
``evidence_repaired``           an evidence entry rewritten: "D:11:26" -> "D11:26", or
                                "D8:6; D9:17" split into "D8:6", "D9:17"
``evidence_dropped_malformed``  an evidence entry that is no dia id ("D") (dropped)
``evidence_dropped_unknown``    an evidence id naming no turn of the conversation (dropped)
``evidence_duplicate``          the same id twice in one question (kept once)
``no_evidence``                 a question left with no evidence (kept; recall skips it)

Session annotations (the same repair rules as evidence for source ids):

``annotation_unknown_key``      an ``event_summary`` / ``observation`` / ``session_summary`` key
                                that names no session ("events_session_x") (skipped)
``annotation_without_session``  an annotation of a session the conversation does not have, or
                                of an empty (skipped) session (skipped)
``annotation_unknown_speaker``  events or observations under a name that is neither speaker (kept)
``annotation_text_stripped``    an event, observation or summary with surrounding whitespace
                                (stripped)
``annotation_empty_text``       an event or observation that is an empty string (skipped)
``annotation_without_date``     an ``events_session_N`` entry with no ``date`` (date None)
``annotation_date_unparsed``    an events date that is no date like "8 May, 2023" (date None)
``annotation_date_mismatch``    an events date that is not the session's day (kept)
``observation_source_list``     an observation citing a list of dia ids (all kept)
``observation_source_repaired`` a source id rewritten like evidence ("D:11:26" -> "D11:26",
                                "D26:14, D26:34" split)
``observation_source_dropped_malformed``  a source id that is no dia id (dropped)
``observation_source_dropped_unknown``    a source id naming no turn of the conversation (dropped)
``observation_source_duplicate``          the same source id twice in one observation (kept once)
``observation_source_other_session``      a source turn of another session than the observed
                                          one (kept: it is a turn of the conversation)
``observation_without_source``  an observation left with no source id (kept)

Anything structural (missing file, not JSON, a session without a date, a turn without text,
an unknown category code, duplicate ids, a gold answer that is a list, a boolean, an object or
not a finite number; an annotation block that is not an object, a speaker's events or
observations that are not a list, an event that is not a string, an observation that is not a
``[text, dia id | [dia id, ...]]`` pair, a summary or events date that is not a string) is one
``DataError`` naming the file and the place.

Sessions and turns are then numbered by position (``memlab.data.anonymise``), which for
LoCoMo's files is the identity: its dia ids already are ``D<session>:<turn>``.
"""

from __future__ import annotations

import logging
import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from memlab.data.anonymise import anonymise
from memlab.data.dates import parse_date
from memlab.data.errors import DataError
from memlab.data.jsonfile import read_json
from memlab.data.report import LoadReport
from memlab.types import (
    LOCOMO_CATEGORIES,
    Conversation,
    Observation,
    Question,
    Session,
    SessionAnnotation,
    SessionEvent,
    Turn,
)

log = logging.getLogger(__name__)

FORMAT = "locomo"
#: LoCoMo writes "1:56 pm on 8 May, 2023"; the variants tolerate hand-written files.
DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %d %B %Y", "%I:%M %p on %d %b %Y")
ADVERSARIAL = 5
#: ``event_summary`` dates the events by day ("8 May, 2023").
EVENT_DATE_FORMATS = ("%d %B, %Y", "%d %b, %Y", "%d %B %Y", "%d %b %Y")

_SESSION_KEY = re.compile(r"session_(\d+)")
_DATE_KEY = re.compile(r"session_(\d+)_date_time")
# A dia id, tolerating a stray colon or spaces after the "D" ("D:11:26").
_EVIDENCE_ID = re.compile(r"D[\s:]*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_EVIDENCE_SEPARATORS = " \t\n;,"
# The three annotation blocks: (sample key, key of one session's entry in it).
_ANNOTATION_KEYS = {
    "event_summary": re.compile(r"events_session_(\d+)"),
    "observation": re.compile(r"session_(\d+)_observation"),
    "session_summary": re.compile(r"session_(\d+)_summary"),
}


def load_locomo(path: str | Path) -> list[Conversation]:
    """The conversations of a LoCoMo JSON file; logs a one-line summary of what was handled."""
    conversations, report = read_locomo(path)
    log.info(report.summary())
    return conversations


def read_locomo(path: str | Path) -> tuple[list[Conversation], LoadReport]:
    """The conversations of a LoCoMo JSON file and the report of what was read."""
    path = Path(path)
    return parse_locomo(read_json(path), source=str(path))


def looks_like_locomo(data: Any) -> bool:
    """Whether parsed JSON has LoCoMo's shape (used to detect the format)."""
    first = data[0] if isinstance(data, list) and data else data
    return isinstance(first, dict) and "conversation" in first and ("qa" in first or "sample_id" in first)


def parse_locomo(data: Any, source: str) -> tuple[list[Conversation], LoadReport]:
    """Conversations from already parsed LoCoMo JSON (a list of samples, or one sample)."""
    if isinstance(data, dict) and "conversation" in data:
        data = [data]
    if not isinstance(data, list):
        raise DataError(source, f"expected a list of LoCoMo conversations, found {_kind(data)}")
    report = LoadReport(source=source, format=FORMAT)
    conversations: list[Conversation] = []
    for number, sample in enumerate(data, start=1):
        conversation = anonymise(_parse_sample(sample, number, source, report))
        if any(c.id == conversation.id for c in conversations):
            raise DataError(source, f"conversation {number}: sample_id {conversation.id!r} appears twice")
        conversations.append(conversation)
    report.conversations = len(conversations)
    return conversations, report


def parse_locomo_date(text: str) -> datetime | None:
    """A LoCoMo session date ("1:56 pm on 8 May, 2023"), or None when it is not one."""
    return parse_date(text, DATE_FORMATS)


def _parse_sample(sample: Any, number: int, source: str, report: LoadReport) -> Conversation:
    where = f"conversation {number}"
    if not isinstance(sample, dict):
        raise DataError(source, f"{where}: expected an object, found {_kind(sample)}")
    sample_id = sample.get("sample_id", f"conv-{number}")
    if not isinstance(sample_id, (str, int)) or not str(sample_id).strip():
        raise DataError(source, f"{where}: sample_id must be a non-empty string")
    sample_id = str(sample_id).strip()
    where = f"conversation {number} ({sample_id})"
    body = sample.get("conversation")
    if not isinstance(body, dict):
        raise DataError(source, f"{where}: 'conversation' must be an object, found {_kind(body)}")
    speakers = tuple(_text_field(body, key, f"{where}: conversation", source) for key in ("speaker_a", "speaker_b"))

    sessions = _parse_sessions(body, sample_id, speakers, where, source, report)
    turn_ids: set[str] = set()
    for session in sessions:
        for turn in session.turns:
            if turn.id in turn_ids:
                raise DataError(source, f"{where}: dia_id {turn.id!r} appears twice")
            turn_ids.add(turn.id)

    qa = sample.get("qa", [])
    if not isinstance(qa, list):
        raise DataError(source, f"{where}: 'qa' must be a list, found {_kind(qa)}")
    questions = []
    for index, item in enumerate(qa):
        question = _parse_question(item, index, sample_id, turn_ids, where, source, report)
        if question is not None:
            questions.append(question)
            report.questions[question.category] += 1
    if not sessions and questions:  # nothing to remember: every answer would be scored against nothing
        raise DataError(source, f"{where}: has {len(questions)} questions but no session with a turn")
    annotations = _parse_annotations(sample, sessions, speakers, turn_ids, sample_id, where, source, report)
    return Conversation(
        id=sample_id,
        speakers=speakers,
        sessions=tuple(sessions),
        questions=tuple(questions),
        annotations=annotations,
    )


def _parse_sessions(
    body: dict[str, Any], sample_id: str, speakers: tuple[str, ...], where: str, source: str, report: LoadReport
) -> list[Session]:
    numbers = sorted(int(m.group(1)) for key in body if (m := _SESSION_KEY.fullmatch(key)))
    dated = {int(m.group(1)) for key in body if (m := _DATE_KEY.fullmatch(key))}
    for n in sorted(dated - set(numbers)):
        report.note("date_without_session", f"{sample_id}: session_{n}_date_time")
    sessions: list[Session] = []
    for n in numbers:
        key = f"session_{n}"
        raw_turns = body[key]
        if not isinstance(raw_turns, list):
            raise DataError(source, f"{where}: {key} must be a list of turns, found {_kind(raw_turns)}")
        raw_date = body.get(f"{key}_date_time")
        if not isinstance(raw_date, str) or not raw_date.strip():
            raise DataError(source, f"{where}: {key} has no date ({key}_date_time)")
        timestamp = parse_locomo_date(raw_date)
        if timestamp is None:
            raise DataError(
                source, f"{where}: {key}_date_time {raw_date!r} is not a date like '1:56 pm on 8 May, 2023'"
            )
        if not raw_turns:
            report.note("empty_session", f"{sample_id}: {key}")
            continue
        turns = tuple(
            _parse_turn(raw, timestamp, speakers, f"{where}: {key} turn {i + 1}", sample_id, source, report)
            for i, raw in enumerate(raw_turns)
        )
        if sessions and timestamp < sessions[-1].timestamp:
            report.note("sessions_out_of_order", f"{sample_id}: {key} ({raw_date}) is dated before {sessions[-1].id}")
        sessions.append(Session(id=key, timestamp=timestamp, turns=turns))
        report.sessions += 1
        report.turns += len(turns)
    return sessions


def _parse_turn(
    raw: Any,
    timestamp: datetime,
    speakers: tuple[str, ...],
    where: str,
    sample_id: str,
    source: str,
    report: LoadReport,
) -> Turn:
    if not isinstance(raw, dict):
        raise DataError(source, f"{where}: expected an object, found {_kind(raw)}")
    dia_id = _text_field(raw, "dia_id", where, source).strip()
    speaker = _text_field(raw, "speaker", where, source).strip()
    text = raw.get("text")
    if not isinstance(text, str):
        raise DataError(source, f"{where} ({dia_id}): 'text' must be a string, found {_kind(text)}")
    if text != text.strip():
        report.note("text_stripped", f"{sample_id}: {dia_id}")
        text = text.strip()
    if speaker not in speakers:
        report.note("unknown_speaker", f"{sample_id}: {dia_id} {speaker!r}")
    caption = raw.get("blip_caption")
    caption = caption.strip() if isinstance(caption, str) and caption.strip() else None
    if caption:
        report.images += 1
    return Turn(id=dia_id, speaker=speaker, text=text, timestamp=timestamp, image_caption=caption)


def _parse_question(
    item: Any, index: int, sample_id: str, turn_ids: set[str], where: str, source: str, report: LoadReport
) -> Question | None:
    qid = f"{sample_id}:q{index}"
    where = f"{where}: qa {index}"
    if not isinstance(item, dict):
        raise DataError(source, f"{where}: expected an object, found {_kind(item)}")
    text = _text_field(item, "question", where, source)
    if text != text.strip():
        report.note("text_stripped", qid)
        text = text.strip()
    code = item.get("category")
    if isinstance(code, str) and code.strip().isdigit():
        code = int(code)
    if isinstance(code, bool) or code not in LOCOMO_CATEGORIES:
        raise DataError(source, f"{where}: category {code!r} is not one of {sorted(LOCOMO_CATEGORIES)}")

    answer = _pick_answer(item, code, qid, report, f"{where}", source)
    if answer is None:
        report.note("missing_answer", qid)
        return None
    evidence = _repair_evidence(item.get("evidence"), turn_ids, qid, report)
    return Question(
        id=qid,
        conversation_id=sample_id,
        text=text,
        answer=answer,
        category=LOCOMO_CATEGORIES[code],
        evidence=evidence,
    )


def _pick_answer(item: dict[str, Any], code: int, qid: str, report: LoadReport, where: str, source: str) -> str | None:
    """The gold answer as a string; category 5 keeps its adversarial answer."""
    key = "answer"
    if code == ADVERSARIAL and item.get("adversarial_answer") is not None:
        if item.get("answer") is not None:
            report.note("adversarial_with_answer", f"{qid} answer {item['answer']!r} set aside")
        key = "adversarial_answer"
    raw = item.get(key)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(raw, str):
        return raw.strip()
    # A number is a fine answer ("2022"); anything else would be scored as its Python repr.
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw):
        report.note("integer_answer", f"{qid} {raw!r}")
        return str(raw)
    raise DataError(source, f"{where}: {key!r} must be a string or a number, found {_kind(raw)} {raw!r:.60}")


def _repair_evidence(raw: Any, turn_ids: set[str], qid: str, report: LoadReport) -> tuple[str, ...]:
    """Evidence dia ids, repaired where unambiguous and checked against the conversation."""
    if raw is None:
        raw = []
    elif isinstance(raw, str):
        raw = [raw]
    elif not isinstance(raw, list):
        raw = [raw]
    kept = _known_dia_ids(raw, turn_ids, qid, report, "evidence")
    if not kept:
        report.note("no_evidence", qid)
    return tuple(kept)


def _known_dia_ids(entries: list, turn_ids: set[str], label: str, report: LoadReport, quirk: str) -> list[str]:
    """The dia ids ``entries`` stand for (``_split_dia_ids``), each once and each a turn of the
    conversation; others are counted as ``<quirk>_dropped_unknown`` / ``<quirk>_duplicate``."""
    kept: list[str] = []
    for entry in entries:
        for dia_id in _split_dia_ids(entry, turn_ids, label, report, quirk):
            if dia_id not in turn_ids:
                report.note(f"{quirk}_dropped_unknown", f"{label} {dia_id} (no such turn)")
            elif dia_id in kept:
                report.note(f"{quirk}_duplicate", f"{label} {dia_id}")
            else:
                kept.append(dia_id)
    return kept


def _split_dia_ids(entry: Any, turn_ids: set[str], label: str, report: LoadReport, quirk: str) -> list[str]:
    """The dia ids one evidence (or observation source) entry stands for ([] when it is not
    one); repairs and drops are counted as ``<quirk>_repaired`` / ``<quirk>_dropped_malformed``."""
    if not isinstance(entry, str):
        report.note(f"{quirk}_dropped_malformed", f"{label} {entry!r} (not a string)")
        return []
    stripped = entry.strip()
    if stripped in turn_ids:
        if stripped != entry:
            report.note(f"{quirk}_repaired", f"{label} {entry!r} -> {stripped}")
        return [stripped]
    matches = list(_EVIDENCE_ID.finditer(stripped))
    leftover = _EVIDENCE_ID.sub("", stripped).strip(_EVIDENCE_SEPARATORS)
    if not matches or leftover:
        report.note(f"{quirk}_dropped_malformed", f"{label} {entry!r} (not a dia id)")
        return []
    ids = [f"D{int(m.group(1))}:{int(m.group(2))}" for m in matches]
    if ids != [entry]:
        report.note(f"{quirk}_repaired", f"{label} {entry!r} -> {', '.join(ids)}")
    return ids


# ---------------------------------------------------------------- session annotations


def _parse_annotations(
    sample: dict[str, Any],
    sessions: list[Session],
    speakers: tuple[str, ...],
    turn_ids: set[str],
    sample_id: str,
    where: str,
    source: str,
    report: LoadReport,
) -> tuple[SessionAnnotation, ...]:
    """The sample's session annotations, one per kept session that has any (see the module doc)."""
    by_session: dict[int, dict[str, tuple[str, Any]]] = {}
    for block, key_pattern in _ANNOTATION_KEYS.items():
        entries = sample.get(block)
        if entries is None:
            continue
        if not isinstance(entries, dict):
            raise DataError(source, f"{where}: {block!r} must be an object, found {_kind(entries)}")
        for key, entry in entries.items():
            match = key_pattern.fullmatch(key)
            if match is None:
                report.note("annotation_unknown_key", f"{sample_id}: {block} {key!r}")
                continue
            by_session.setdefault(int(match.group(1)), {})[block] = (key, entry)

    kept = {session.id: session for session in sessions}
    annotations: list[SessionAnnotation] = []
    for n in sorted(by_session):
        session = kept.get(f"session_{n}")
        if session is None:
            for block, (key, _) in by_session[n].items():
                report.note("annotation_without_session", f"{sample_id}: {block} {key!r}")
            continue
        blocks = by_session[n]
        date, events = None, ()
        if "event_summary" in blocks:
            key, entry = blocks["event_summary"]
            date, events = _parse_events(
                entry, session, speakers, f"{where}: event_summary {key!r}", f"{sample_id}: {key}", source, report
            )
        observations = ()
        if "observation" in blocks:
            key, entry = blocks["observation"]
            place, label = f"{where}: observation {key!r}", f"{sample_id}: {key}"
            observations = _parse_observations(entry, session, speakers, turn_ids, place, label, source, report)
        summary = ""
        if "session_summary" in blocks:
            key, entry = blocks["session_summary"]
            if not isinstance(entry, str):
                raise DataError(source, f"{where}: session_summary {key!r} must be a string, found {_kind(entry)}")
            summary = _annotation_text(entry, f"{sample_id}: {key}", report)
        annotations.append(
            SessionAnnotation(
                session_id=session.id, date=date, events=events, observations=observations, summary=summary
            )
        )
    return tuple(annotations)


def _parse_events(
    entry: Any,
    session: Session,
    speakers: tuple[str, ...],
    where: str,
    label: str,
    source: str,
    report: LoadReport,
) -> tuple[datetime | None, tuple[SessionEvent, ...]]:
    """``{<speaker>: [event, ...], "date": "8 May, 2023"}`` as (date, events)."""
    if not isinstance(entry, dict):
        raise DataError(source, f"{where}: expected an object, found {_kind(entry)}")
    date = None
    if "date" not in entry:
        report.note("annotation_without_date", label)
    else:
        raw_date = entry["date"]
        if not isinstance(raw_date, str):
            raise DataError(source, f"{where}: 'date' must be a string, found {_kind(raw_date)}")
        date = parse_date(raw_date, EVENT_DATE_FORMATS)
        if date is None:
            report.note("annotation_date_unparsed", f"{label} {raw_date!r}")
        elif session.timestamp is not None and date.date() != session.timestamp.date():
            report.note("annotation_date_mismatch", f"{label} {raw_date!r} vs {session.timestamp:%d %B %Y}")
    events: list[SessionEvent] = []
    for speaker, texts in entry.items():
        if speaker == "date":
            continue
        if not isinstance(texts, list):
            raise DataError(source, f"{where}: {speaker!r} must be a list of events, found {_kind(texts)}")
        if texts and speaker not in speakers:
            report.note("annotation_unknown_speaker", f"{label} {speaker!r}")
        for i, text in enumerate(texts, start=1):
            if not isinstance(text, str):
                raise DataError(source, f"{where}: {speaker!r} event {i} must be a string, found {_kind(text)}")
            text = _annotation_text(text, f"{label} {speaker} event {i}", report)
            if not text:
                report.note("annotation_empty_text", f"{label} {speaker} event {i}")
                continue
            events.append(SessionEvent(speaker=speaker, text=text))
    return date, tuple(events)


def _parse_observations(
    entry: Any,
    session: Session,
    speakers: tuple[str, ...],
    turn_ids: set[str],
    where: str,
    label: str,
    source: str,
    report: LoadReport,
) -> tuple[Observation, ...]:
    """``{<speaker>: [[fact, dia id | [dia id, ...]], ...]}`` as observations."""
    if not isinstance(entry, dict):
        raise DataError(source, f"{where}: expected an object, found {_kind(entry)}")
    session_turns = {turn.id for turn in session.turns}
    observations: list[Observation] = []
    for speaker, facts in entry.items():
        if not isinstance(facts, list):
            raise DataError(source, f"{where}: {speaker!r} must be a list of observations, found {_kind(facts)}")
        if facts and speaker not in speakers:
            report.note("annotation_unknown_speaker", f"{label} {speaker!r}")
        for i, fact in enumerate(facts, start=1):
            place = f"{where}: {speaker!r} observation {i}"
            here = f"{label} {speaker} observation {i}"
            if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
                raise DataError(source, f"{place}: expected a [text, dia id] pair, found {_kind(fact)} {fact!r:.60}")
            text, raw_source = fact
            if isinstance(raw_source, list):
                report.note("observation_source_list", f"{here} {raw_source!r}")
                entries = raw_source
            else:
                entries = [raw_source]
            if not all(isinstance(e, str) for e in entries):
                raise DataError(
                    source, f"{place}: the source must be a dia id or a list of dia ids, found {raw_source!r:.60}"
                )
            text = _annotation_text(text, here, report)
            if not text:
                report.note("annotation_empty_text", here)
                continue
            source_ids = _known_dia_ids(entries, turn_ids, here, report, "observation_source")
            for dia_id in source_ids:
                if dia_id not in session_turns:
                    report.note("observation_source_other_session", f"{here} {dia_id} (not in {session.id})")
            if not source_ids:
                report.note("observation_without_source", here)
            observations.append(Observation(speaker=speaker, text=text, source_ids=tuple(source_ids)))
    return tuple(observations)


def _annotation_text(text: str, label: str, report: LoadReport) -> str:
    if text != text.strip():
        report.note("annotation_text_stripped", label)
    return text.strip()


def _text_field(obj: dict[str, Any], key: str, where: str, source: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        if value is None:
            problem = "is missing"
        elif isinstance(value, str):
            problem = "is empty"
        else:
            problem = f"must be a string, found {_kind(value)}"
        raise DataError(source, f"{where}: {key!r} {problem}")
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
