"""Helpers shared by the prompted stages that pull names and facts out of text (Mnemis 2.1):
one-line strings, bounded lists without repeats, and whether a name is grounded in a text."""

from __future__ import annotations

import re
from typing import Any, Iterable


def one_line(value: Any) -> str:
    """``value`` as a string on one line, runs of white space folded."""
    return " ".join(str(value).split())


def distinct(values: Iterable[Any], limit: int | None = None) -> tuple[str, ...]:
    """Non-empty one-line strings, first spelling of each (case-folded) kept, at most ``limit``."""
    seen: dict[str, str] = {}
    for value in values:
        text = one_line(value)
        if text and text.casefold() not in seen:
            seen[text.casefold()] = text
            if limit is not None and len(seen) >= limit:
                break
    return tuple(seen.values())


def named_in(name: str, text: str) -> bool:
    """Whether ``text`` names ``name``: one of its words of three letters or more appears as a
    whole word (case-folded). Small models invent names; a name the text never uses is dropped."""
    words = [w for w in re.findall(r"\w+", name.casefold()) if len(w) > 2] or re.findall(r"\w+", name.casefold())
    folded = text.casefold()
    return bool(words) and any(re.search(rf"\b{re.escape(w)}\b", folded) for w in words)


def find_name(name: str, names: Iterable[str]) -> str | None:
    """The spelling in ``names`` of ``name`` (case and white space folded), or None."""
    key = one_line(name).casefold()
    return next((n for n in names if one_line(n).casefold() == key), None)
