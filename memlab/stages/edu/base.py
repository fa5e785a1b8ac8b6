"""EDU family: one session -> its elementary discourse units (EMem, section 3.2).

An EDU extractor is a segmenter (``SegmentIn -> SegmentOut``), so it fits any segment slot
and a ``TurnSegmenter`` can stand in for it. What the family adds is the unit convention:

* ``kind="edu"``: a short, self-contained event statement (who did what, where, when),
  ``text(e)``; ``kind="chunk"``: a structured chunk of a long assistant turn (appendix A),
  whose ``text`` is the chunk's 2-3 sentence summary (what is indexed) and whose
  ``attributes["content"]`` is the full chunk (what the answerer is shown).
* ``source_ids`` = ``src(e)``: ids of the session's turns that support the unit, always a
  non-empty subset of the session's turn ids (``validate_sources``).
* ``timestamp`` = ``tau(e)``: the session date; ``attributes`` holds ``session`` (the
  session id) and ``speakers`` (the speakers of the source turns).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from memlab.memory.index import tokenize
from memlab.stages.segment.base import Segmenter
from memlab.types import Turn


class EDUExtractor(Segmenter):
    """Base class of EDU extractors (``In = SegmentIn``, ``Out = SegmentOut``); see the module."""


_ID_PREFIX = re.compile(r"^\s*\[?|\]?\s*$")


def validate_sources(claimed: Iterable[str], text: str, turns: tuple[Turn, ...], max_fallback: int = 2) -> tuple[str, ...]:
    """The claimed source turn ids that exist in ``turns`` (in turn order).

    A claimed id may be written "[D1:3]" or "D1:3"; ids of other sessions or made-up ids are
    dropped. When none is left, the ``max_fallback`` turns sharing the most (stemmed,
    non-stopword) words with ``text`` are the provenance instead; empty only when no turn
    shares a word.
    """
    known = {t.id: i for i, t in enumerate(turns)}
    cleaned = {_ID_PREFIX.sub("", str(c)) for c in claimed}
    valid = sorted((c for c in cleaned if c in known), key=known.__getitem__)
    if valid:
        return tuple(valid)
    words = set(tokenize(text))
    overlaps = [(len(words & set(tokenize(t.render()))), -i, t.id) for i, t in enumerate(turns)]
    best = sorted((o for o in overlaps if o[0] > 0), reverse=True)[:max_fallback]
    return tuple(sorted((tid for _, _, tid in best), key=known.__getitem__))


def grounded(text: str, turns: tuple[Turn, ...]) -> bool:
    """Whether ``text`` shares at least one content word with the turns (not hallucinated whole)."""
    source_words = set()
    for turn in turns:
        source_words.update(tokenize(turn.render()))
    return bool(set(tokenize(text)) & source_words)
