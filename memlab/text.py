"""Text cleaning at memlab's boundaries: what comes in from data files and model replies.

A lone UTF-16 surrogate ("\\ud83d", from a truncated emoji in JSON) is a valid Python string
that later crashes tokenizers and UTF-8 encoders far from where it came in; a byte-order mark
or a NUL is invisible and breaks matching. ``clean_text`` removes them once, where text enters.
"""

from __future__ import annotations

import re
from typing import Any

#: Lone surrogates, the byte-order mark and NUL: never meaningful in a turn or a reply.
_UNUSABLE = re.compile("[\ud800-\udfff\ufeff\x00]")


def clean_text(text: str) -> str:
    """``text`` without lone surrogates, byte-order marks and NULs (everything else kept)."""
    return _UNUSABLE.sub("", text)


class TooDeep(ValueError):
    """A parsed JSON value nested deeper than the reader allows."""


def clean_strings(value: Any, max_depth: int | None = None, _depth: int = 0) -> Any:
    """Parsed JSON ``value`` with every string in it, keys included, cleaned by ``clean_text``
    (a ``\\ud83d`` escape decodes to a lone surrogate); ``TooDeep`` past ``max_depth`` levels."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, (dict, list)):
        if max_depth is not None and _depth >= max_depth:
            raise TooDeep(f"nested deeper than {max_depth} levels")
        if isinstance(value, list):
            return [clean_strings(v, max_depth, _depth + 1) for v in value]
        return {clean_text(k): clean_strings(v, max_depth, _depth + 1) for k, v in value.items()}
    return value
