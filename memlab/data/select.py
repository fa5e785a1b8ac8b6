"""Choosing the conversations a run or a recipe works on: by id (the one place that decides what
an unknown id is) and, optionally, cut to their first sessions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from os import PathLike

from memlab.data.dataset import load_dataset
from memlab.data.errors import DataError
from memlab.data.prefix import first_sessions
from memlab.data.sample import load_sample
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


def load_conversations(
    data: str | PathLike[str] | None = None, ids: Iterable[str] | None = None, sessions: int | None = None
) -> list[Conversation]:
    """The conversations of the data set at ``data`` (None: the embedded sample), only ``ids``
    when given (``select_conversations``), each cut to its first ``sessions`` sessions
    (``memlab.data.prefix.first_sessions``) when given."""
    conversations = load_dataset(data) if data else load_sample()
    conversations = select_conversations(conversations, ids, source=data or "embedded sample")
    return conversations if sessions is None else [first_sessions(c, sessions) for c in conversations]
