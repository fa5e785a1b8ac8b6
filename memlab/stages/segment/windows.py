"""What the LLM segmenters share: a session cut into windows of annotated turn lines, and the
check for a decoding loop in a reply's list of extracted items.

A small model given too long a window loses the end of it, and given a list to fill it may
loop; both extractors of a session's units (EMem's EDUs, CompassMem's events) guard the same
way, so the guards are written once here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from memlab.memory.index import tokenize
from memlab.stages.segment.base import SegmentIn
from memlab.stages.temporal import TemporalIn, TemporalNormalizer
from memlab.types import Session, Turn


@dataclass(frozen=True)
class TurnWindow:
    """One LLM call's input: a slice of a session's turns (already date-annotated). ``index`` names
    it within the session (its position; ``3a`` / ``3b`` for the halves of window 3)."""

    conversation_id: str
    session: Session
    turns: tuple[Turn, ...]
    lines: tuple[str, ...]
    index: int | str

    def halves(self) -> tuple["TurnWindow", "TurnWindow"]:
        """The window cut in two at its middle turn (``<index>a``, ``<index>b``)."""
        middle = len(self.turns) // 2
        return (TurnWindow(self.conversation_id, self.session, self.turns[:middle], self.lines[:middle], f"{self.index}a"),
                TurnWindow(self.conversation_id, self.session, self.turns[middle:], self.lines[middle:], f"{self.index}b"))


def annotated_lines(
    session: Session, turns: tuple[Turn, ...], normalizer: TemporalNormalizer | None
) -> tuple[str, ...]:
    """``[id] Speaker: text`` per turn, relative time expressions resolved against the session
    date by ``normalizer`` (when there is one)."""
    texts = [turn.render() for turn in turns]
    reference = session.timestamp
    if reference is not None and normalizer is not None:
        texts = normalizer.rewrite([TemporalIn(text, turn.timestamp or reference) for text, turn in zip(texts, turns)])
    return tuple(f"[{turn.id}] {text}" for turn, text in zip(turns, texts))


def turn_windows(item: SegmentIn, normalizer: TemporalNormalizer | None, max_turns: int | None,
                 max_chars: int, max_chars_per_turn: int) -> list[TurnWindow]:
    """Consecutive turns, at most ``max_turns`` (None: no limit) and ``max_chars`` characters
    each; a turn longer than ``max_chars_per_turn`` is clipped."""
    turns = item.session.turns
    lines = [_clip(line, max_chars_per_turn) for line in annotated_lines(item.session, turns, normalizer)]
    limit = max_turns or max(1, len(turns))
    groups: list[list[int]] = []
    size = 0
    for i, line in enumerate(lines):
        if groups and len(groups[-1]) < limit and size + len(line) <= max_chars:
            groups[-1].append(i)
            size += len(line)
        else:
            groups.append([i])
            size = len(line)
    return [
        TurnWindow(item.conversation_id, item.session, tuple(turns[i] for i in group), tuple(lines[i] for i in group), n)
        for n, group in enumerate(groups)
    ]


_NON_WORD = re.compile(r"[^\w\s]+")


def normalised(text: str) -> str:
    """The de-duplication key of an extracted item: lower case, no punctuation, single spaces."""
    return " ".join(_NON_WORD.sub(" ", text.casefold()).split())


def repetition_loop(texts: list[str], truncated: bool, repeats: int = 3, item: str = "item") -> str | None:
    """Why ``texts`` (one reply's extracted items, each called ``item`` in the message) look
    like a decoding loop; None when they do not."""
    counts = Counter(normalised(t) for t in texts if normalised(t))
    if counts:
        text, times = counts.most_common(1)[0]
        if times >= repeats:
            return f"the same {item} is repeated {times} times ({text[:60]!r})"
        if truncated and times >= 2:
            return f"the output was cut off while repeating {item}s"
    for text in texts:
        words = normalised(text).split()
        for n in (2, 3, 4):
            grams = Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
            if grams and max(grams.values()) > repeats:
                phrase = " ".join(grams.most_common(1)[0][0])
                return f"an {item} repeats the phrase {phrase!r} over and over"
    return None


def _clip(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


#: What small models write around a turn id ("[D1:3]", "/D3:11", "(D2:4),"): stripped.
_ID_WRAPPING = " \t[](){}<>/\\\"'`.,;:*"


def clean_turn_id(value: object) -> str:
    """A turn id as a model wrote it, without the brackets and punctuation around it."""
    return str(value).strip(_ID_WRAPPING)


def validate_sources(claimed: Iterable[str], text: str, turns: tuple[Turn, ...], max_fallback: int = 2) -> tuple[str, ...]:
    """The claimed source turn ids that exist in ``turns`` (``cited_sources``); when none is
    left, the turns ``guessed_sources`` finds for ``text`` instead."""
    return cited_sources(claimed, turns) or guessed_sources(text, turns, max_fallback)


def cited_sources(claimed: Iterable[str], turns: tuple[Turn, ...]) -> tuple[str, ...]:
    """The claimed source turn ids that exist in ``turns`` (in turn order). A claimed id may be
    written "[D1:3]", "/D1:3" or "D1:3" (``clean_turn_id``); ids of other sessions or made-up ids
    are dropped."""
    known = {t.id: i for i, t in enumerate(turns)}
    cleaned = {clean_turn_id(c) for c in claimed}
    return tuple(sorted((c for c in cleaned if c in known), key=known.__getitem__))


def guessed_sources(text: str, turns: tuple[Turn, ...], max_fallback: int = 2) -> tuple[str, ...]:
    """The ``max_fallback`` turns sharing the most (stemmed, non-stopword) words with ``text``,
    in turn order: a provenance guessed, not cited; empty only when no turn shares a word."""
    known = {t.id: i for i, t in enumerate(turns)}
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
