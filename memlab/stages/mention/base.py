"""Mention family: a question -> its surface mentions (EMem-G 3.3, "mention detector").

Mentions are entities, noun phrases and salient concepts of the question, each embedded and
matched against the argument nodes. ``known_entities`` lists names already in memory (the
argument nodes), which rule-based detectors may match; prompted ones may ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage


@dataclass(frozen=True)
class MentionIn:
    question: str
    known_entities: tuple[str, ...] = ()


@dataclass(frozen=True)
class MentionOut:
    mentions: tuple[str, ...]
    error: str | None = None


class MentionDetector(Stage[MentionIn, MentionOut]):
    """Base class of the mention family (``In = MentionIn``, ``Out = MentionOut``)."""

    In = MentionIn
    Out = MentionOut


def dedupe(mentions: list[str], limit: int) -> tuple[str, ...]:
    """Mentions with spaces folded, case-insensitive duplicates and empties removed, at most ``limit``."""
    seen: dict[str, str] = {}
    for mention in mentions:
        clean = " ".join(mention.split()).strip(" ?.,;:!'\"")
        if clean and clean.lower() not in seen:
            seen[clean.lower()] = clean
    return tuple(seen.values())[:limit]
