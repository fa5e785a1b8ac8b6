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

from memlab.stages.segment.base import Segmenter

# The source checks every extractor of a session's units shares (re-exported for EDU code).
from memlab.stages.segment.windows import grounded, validate_sources  # noqa: F401


class EDUExtractor(Segmenter):
    """Base class of EDU extractors (``In = SegmentIn``, ``Out = SegmentOut``); see the module."""
