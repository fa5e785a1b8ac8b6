"""Temporal family: a text and the time it was said -> its time expressions, resolved.

Memory papers store facts with absolute dates: SimpleMem (2.1) and EMem (3.2) rewrite
"yesterday" into the date it stands for, MAGMA (3.2) and CompassMem anchor events in time.
A normalizer finds the relative (and explicit) time expressions of one text and resolves
each against ``reference``, the session or utterance timestamp.

Conventions every implementation follows
-----------------------------------------
* A resolved expression is an inclusive date range ``start..end`` (a day has
  ``start == end``) plus its ``granularity``: ``day``, ``week`` (Monday to Sunday),
  ``weekend`` (Saturday and Sunday), ``month``, ``season`` (meteorological, northern
  hemisphere: spring = March-May, summer = June-August, autumn = September-November,
  winter = December-February), ``year``, or ``range`` (anything else).
* ``resolved`` is the human-readable absolute form used to rewrite text: "7 May 2023",
  "the week of 1 May 2023", "the weekend of 6 May 2023", "April 2023", "summer 2022",
  "winter 2022-2023", "2022", "1 May 2023 to 10 May 2023" (see ``describe``).
* ``span`` is the exact text, ``text[start_char:end_char]``; mentions do not overlap and
  are ordered by position.
* An item without a reference gets no mentions and an ``error`` saying why.

``annotate`` rewrites a text with the resolved values beside (or instead of) their spans;
extraction stages call it on a turn before or after their LLM call.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Literal

from memlab.dates import MONTH_NAMES, format_day
from memlab.stage import Stage

Granularity = Literal["day", "week", "weekend", "month", "season", "year", "range"]
GRANULARITIES: tuple[str, ...] = ("day", "week", "weekend", "month", "season", "year", "range")

#: First month of each meteorological season.
SEASON_START_MONTH: dict[str, int] = {"spring": 3, "summer": 6, "autumn": 9, "winter": 12}


@dataclass(frozen=True)
class TemporalIn:
    text: str
    #: When the text was said (session or utterance timestamp); a ``date`` is accepted too.
    reference: datetime | date | None

    @property
    def reference_date(self) -> date | None:
        if isinstance(self.reference, datetime):
            return self.reference.date()
        return self.reference


@dataclass(frozen=True)
class TimeMention:
    """One time expression: the original span and its resolved value side by side."""

    span: str
    start_char: int
    end_char: int
    start: date
    end: date
    granularity: Granularity
    resolved: str

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"time mention {self.span!r}: end {self.end} is before start {self.start}")
        if self.end_char - self.start_char != len(self.span):
            raise ValueError(f"time mention {self.span!r}: offsets {self.start_char}..{self.end_char} "
                             f"do not match the span length {len(self.span)}")


@dataclass(frozen=True)
class TemporalOut:
    mentions: tuple[TimeMention, ...]
    error: str | None = None


class TemporalNormalizer(Stage[TemporalIn, TemporalOut]):
    """Base class of the temporal family (``In = TemporalIn``, ``Out = TemporalOut``).

    The conventions are in this module's docstring. ``rewrite`` runs the stage and
    annotates each text in one call.
    """

    In = TemporalIn
    Out = TemporalOut

    def rewrite(self, batch: list[TemporalIn], style: str = "inline") -> list[str]:
        """Each text with its time expressions resolved (see ``annotate`` for the styles)."""
        return [annotate(item.text, out.mentions, style) for item, out in zip(batch, self(batch))]


# -- rendering -------------------------------------------------------------------------
def month_end(year: int, month: int) -> date:
    return date(year, month, calendar.monthrange(year, month)[1])


def season_range(season: str, year: int) -> tuple[date, date]:
    """The season that starts in ``year`` (winter 2022 runs from December 2022 to February 2023)."""
    first = SEASON_START_MONTH[season]
    last_month = (first + 1) % 12 + 1
    last_year = year + 1 if last_month < first else year
    return date(year, first, 1), month_end(last_year, last_month)


def infer_granularity(start: date, end: date) -> Granularity:
    """The granularity a date range has (``range`` when it is none of the named ones)."""
    if start == end:
        return "day"
    if start.weekday() == 0 and end == start + timedelta(days=6):
        return "week"
    if start.weekday() == 5 and end == start + timedelta(days=1):
        return "weekend"
    if start.day == 1 and end == month_end(start.year, start.month):
        return "month"
    if (start.month, start.day, end.month, end.day) == (1, 1, 12, 31) and start.year == end.year:
        return "year"
    for season, first in SEASON_START_MONTH.items():
        if start.day == 1 and start.month == first and (start, end) == season_range(season, start.year):
            return "season"
    return "range"


def describe(start: date, end: date, granularity: str | None = None) -> str:
    """The readable absolute form of a range (its granularity is inferred when not given)."""
    granularity = granularity or infer_granularity(start, end)
    if granularity == "day":
        return format_day(start)
    if granularity == "week":
        return f"the week of {format_day(start)}"
    if granularity == "weekend":
        return f"the weekend of {format_day(start)}"
    if granularity == "month":
        return f"{MONTH_NAMES[start.month - 1]} {start.year}"
    if granularity == "year":
        return str(start.year)
    if granularity == "season":
        season = next(s for s, m in SEASON_START_MONTH.items() if m == start.month)
        return f"{season} {start.year}" if start.year == end.year else f"{season} {start.year}-{end.year}"
    return f"{format_day(start)} to {format_day(end)}"


ANNOTATION_STYLES = ("inline", "replace")


def _date_words(text: str) -> list[str]:
    """The words of a date, order and spelling aside: "08 May 2023", "May 8th, 2023" -> 8, 2023, may."""
    words = re.findall(r"[a-z]+|\d+", text.lower())
    words = [str(int(w)) if w.isdigit() else w for w in words]
    # "8th" splits into 8 and th; "the 8th of May" reads as "8 May".
    return sorted(w for w in words if w not in ("st", "nd", "rd", "th", "the", "of"))


def annotate(text: str, mentions: tuple[TimeMention, ...] | list[TimeMention], style: str = "inline") -> str:
    """Rewrite ``text`` with each mention's resolved value.

    * ``inline``: the value in parentheses after the span, "I went yesterday (7 May 2023)";
      a span that already states its value ("in 2022", "on 08 May 2023") is left alone.
    * ``replace``: the value instead of the span, "I went 7 May 2023".

    The mentions must come from this text (their spans are checked).
    """
    if style not in ANNOTATION_STYLES:
        raise ValueError(f"unknown annotation style {style!r}; choose one of {ANNOTATION_STYLES}")
    pieces: list[str] = []
    cursor = len(text)
    for mention in sorted(mentions, key=lambda m: m.start_char, reverse=True):
        if text[mention.start_char:mention.end_char] != mention.span:
            raise ValueError(f"mention {mention.span!r} is not at {mention.start_char}..{mention.end_char} "
                             f"of the text (mentions from another text?)")
        if mention.end_char > cursor:
            raise ValueError(f"mention {mention.span!r} overlaps the next mention")
        if style == "inline":
            same = _date_words(mention.span) == _date_words(mention.resolved)  # an explicit date
            new = mention.span if same else f"{mention.span} ({mention.resolved})"
        else:
            new = mention.resolved
        pieces.append(text[mention.end_char:cursor])
        pieces.append(new)
        cursor = mention.start_char
    pieces.append(text[:cursor])
    return "".join(reversed(pieces))
