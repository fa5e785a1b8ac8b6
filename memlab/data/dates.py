"""Dataset date strings: the first of a dataset's ``strptime`` formats that matches."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any


def parse_date(text: Any, formats: Iterable[str]) -> datetime | None:
    """``text`` (whitespace runs collapsed) parsed by the first matching format; None when it
    is not a string or no format matches."""
    if not isinstance(text, str):
        return None
    text = " ".join(text.split())
    for fmt in formats:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None
