"""Text cleaning at memlab's boundaries: what comes in from data files and model replies.

A lone UTF-16 surrogate ("\\ud83d", from a truncated emoji in JSON) is a valid Python string
that later crashes tokenizers and UTF-8 encoders far from where it came in; a byte-order mark
or a NUL is invisible and breaks matching. ``clean_text`` removes them once, where text enters.
"""

from __future__ import annotations

import re

#: Lone surrogates, the byte-order mark and NUL: never meaningful in a turn or a reply.
_UNUSABLE = re.compile("[\ud800-\udfff\ufeff\x00]")


def clean_text(text: str) -> str:
    """``text`` without lone surrogates, byte-order marks and NULs (everything else kept)."""
    return _UNUSABLE.sub("", text)
