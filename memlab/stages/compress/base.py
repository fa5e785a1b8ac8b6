"""Compress family: one window of dialogue turns -> the memory units worth keeping from it.

SimpleMem's semantic structured compression (section 2.1): a session is cut into
overlapping sliding windows of turns (``sliding_windows``); each window is turned into zero
or more self-contained memory units. An empty output is the *gate*: a window of pure
chit-chat is dropped without any threshold.

Contract every implementation honours
--------------------------------------
* ``CompressIn`` is one window: the session it belongs to, its turns (a contiguous slice of
  the session) and a ``window_id`` unique within the conversation, which prefixes unit ids.
* Every output unit keeps provenance: ``source_ids`` is a non-empty subset of the window's
  turn ids, in the window's order.
* Symbolic metadata (paper eq. 3, Table 7 "Stored Metadata") lives in
  ``MemoryUnit.attributes``: ``entities`` (list of str), ``topic`` (str), ``salience``
  ("high" | "medium" | "low"), ``session`` (the session id); ``MemoryUnit.timestamp`` is
  the unit's absolute time (used by ``MetadataFilter``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memlab.stage import Stage
from memlab.types import MemoryUnit, Session, Turn

SALIENCE_LEVELS: tuple[str, ...] = ("high", "medium", "low")


@dataclass(frozen=True)
class CompressIn:
    conversation_id: str
    session: Session
    #: The window: a contiguous slice of ``session.turns``.
    turns: tuple[Turn, ...]
    #: Unique within the conversation (e.g. "session_1/w0"); unit ids start with it.
    window_id: str
    #: Participants of the conversation (the prompt's ``speakers_list``).
    speakers: tuple[str, ...] = ()

    @property
    def turn_ids(self) -> tuple[str, ...]:
        return tuple(turn.id for turn in self.turns)


@dataclass(frozen=True)
class CompressOut:
    units: tuple[MemoryUnit, ...]
    error: str | None = None


class Compressor(Stage[CompressIn, CompressOut]):
    """Base class of the compress family (``In = CompressIn``, ``Out = CompressOut``)."""

    In = CompressIn
    Out = CompressOut


def sliding_windows(n_turns: int, window: int, stride: int) -> list[tuple[int, int]]:
    """``[start, end)`` bounds of overlapping windows over ``n_turns`` turns.

    Windows start every ``stride`` turns until one reaches the last turn (that last one may
    be shorter than ``window``), so every turn is in at least one window and consecutive
    windows share ``window - stride`` turns. ``stride > window`` would skip turns: refused.
    """
    if window < 1 or stride < 1:
        raise ValueError(f"window and stride must be positive, got window={window}, stride={stride}")
    if stride > window:
        raise ValueError(f"stride {stride} > window {window} would leave turns out of every window")
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < n_turns:
        bounds.append((start, min(start + window, n_turns)))
        if start + window >= n_turns:
            break
        start += stride
    return bounds


def parse_timestamp(value: object) -> "datetime | None":
    """An ISO 8601 date or date-time from model output ("2023-05-07", "2023-05-07T14:00:00",
    "2023-05-07T14 :00:00"), naive (a timezone is dropped); None when it is not one."""
    if not isinstance(value, str):
        return None
    text = value.strip().replace(" ", "").rstrip("Z")
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed.replace(tzinfo=None)
