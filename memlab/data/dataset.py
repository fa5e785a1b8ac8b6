"""``load_dataset``: any supported benchmark file or folder, its format told by its content."""

from __future__ import annotations

import logging
from pathlib import Path

from memlab.data.errors import DataError
from memlab.data.jsonfile import read_json
from memlab.data.locomo import looks_like_locomo, parse_locomo
from memlab.data.longmemeval import looks_like_longmemeval, parse_official, read_processed
from memlab.data.report import LoadReport
from memlab.types import Conversation

log = logging.getLogger(__name__)


def read_dataset(path: str | Path) -> tuple[list[Conversation], LoadReport]:
    """Conversations and load report of a LoCoMo JSON file, an official LongMemEval JSON file
    or a processed LongMemEval folder (or its ``questions.jsonl``)."""
    path = Path(path)
    if path.is_dir() or path.suffix == ".jsonl":
        return read_processed(path)
    data = read_json(path)
    if looks_like_locomo(data):
        return parse_locomo(data, source=str(path))
    if looks_like_longmemeval(data):
        return parse_official(data, source=str(path))
    raise DataError(
        path,
        "is neither LoCoMo (a list of {sample_id, conversation, qa}) nor LongMemEval "
        "(a list of {question_id, haystack_sessions, ...}, or a folder with questions.jsonl "
        f"and sessions.jsonl); its top level is {_describe(data)}",
    )


def load_dataset(path: str | Path) -> list[Conversation]:
    """Like ``read_dataset`` without the report, which is logged as one line."""
    conversations, report = read_dataset(path)
    log.info(report.summary())
    return conversations


def _describe(data: object) -> str:
    if isinstance(data, list):
        if not data:
            return "an empty list"
        first = data[0]
        keys = f" with keys {sorted(first)[:8]}" if isinstance(first, dict) else ""
        return f"a list of {type(first).__name__}{keys}"
    if isinstance(data, dict):
        return f"an object with keys {sorted(data)[:8]}"
    return type(data).__name__
