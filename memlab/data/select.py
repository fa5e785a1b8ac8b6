"""Keeping some conversations of a data set by id: the one place that decides what an unknown id is."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from os import PathLike

from memlab.data.errors import DataError
from memlab.types import Conversation


def select_conversations(
    conversations: Sequence[Conversation],
    ids: Iterable[str] | None,
    source: str | PathLike[str] = "the data",
) -> list[Conversation]:
    """The conversations whose id is in ``ids``, in the data's order (all of them when ``ids`` is
    empty or None). An id the data does not hold is a ``DataError`` naming it and the ids there
    are: a typo must never shrink an evaluation silently. ``source`` (the file) starts the message."""
    wanted = set(ids or ())
    if not wanted:
        return list(conversations)
    known = [c.id for c in conversations]
    unknown = wanted - set(known)
    if unknown:
        raise DataError(source, f"conversations {sorted(unknown)} are not in it (available: {known})")
    return [c for c in conversations if c.id in wanted]
