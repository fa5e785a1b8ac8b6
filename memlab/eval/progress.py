"""What an unfinished run has reached and what it cost so far, read from its staging folder.

A run writes ``predictions.jsonl.partial`` (its answered questions), ``builds.jsonl.partial``
(one line per finished build) and ``building.json.partial`` (the build running now, what it has
cost so far) while it runs (``memlab.eval.runner``); they stay in the hidden
staging folder of a run that was stopped. ``read_progress`` condenses them into a small record
that can be committed beside finished runs (``memlab sweep`` writes ``unfinished/<row>.json``), so a
row that could not finish still shows its measured cost and the part it reached.

Seconds are cold model time, as in ``metrics.json``: a call replayed from the response cache counts
at the seconds it took when it was made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memlab.eval.conversation import cached_call_seconds

#: The fields of an answered question that the record keeps.
ROW_FIELDS = ("question_id", "conversation_id", "category", "judge", "f1_amem", "f1_locomo", "abstained",
              "cold_latency_s", "error")


def read_progress(staging: Path) -> dict[str, Any]:
    """``{"rows": [...], "builds": [...], "building": ...}`` of the run staged in ``staging``: each
    answered question (``ROW_FIELDS``, plus its LLM calls and tokens), each finished build (its
    conversation, cold seconds, LLM calls and tokens, and the structure's degenerate flags), and the
    build that was running when the record was made, if any (the same so far, with its failed calls
    by stage and the turns it had reached where the pipeline says; None otherwise). A
    line cut short by a killed process is skipped; any other unreadable line raises ``ValueError``
    naming the file."""
    rows = [_row(line) for line in _lines(staging / "predictions.jsonl.partial")]
    builds = [_build(line) for line in _lines(staging / "builds.jsonl.partial")]
    return {"rows": rows, "builds": builds, "building": _building(staging / "building.json.partial", builds)}


def _building(path: Path, builds: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))  # written atomically: whole or absent
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a JSON object")
    running = _build(record)
    # A build that ended between the two reads is in ``builds`` already.
    return None if any(b["conversation_id"] == running["conversation_id"] for b in builds) else running


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    # Every line a run finished ends in a newline; the piece after the last one was cut short.
    complete = path.read_text(encoding="utf-8").split("\n")[:-1]
    parsed = []
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}, line {number}: not JSON ({e})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {number}: not a JSON object")
        parsed.append(record)
    return parsed


def _row(row: dict[str, Any]) -> dict[str, Any]:
    usage = row.get("usage") or {}
    return {**{key: row.get(key) for key in ROW_FIELDS}, "llm_calls": usage.get("llm_calls"),
            "tokens": (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0)}


def _build(record: dict[str, Any]) -> dict[str, Any]:
    usage = record.get("build_usage") or {}
    structure = (record.get("memory_stats") or {}).get("structure") or {}
    return {"conversation_id": record.get("conversation_id"),
            "seconds": float(record.get("build_seconds") or 0.0) + cached_call_seconds(usage),
            "llm_calls": usage.get("llm_calls", 0), "prompt_tokens": usage.get("prompt_tokens", 0),
            "completion_tokens": usage.get("completion_tokens", 0),
            "degenerate": list(structure.get("degenerate") or []),
            "failures": dict(record.get("failures") or {}), "reached": record.get("reached")}
