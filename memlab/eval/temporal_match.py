"""Temporal accuracy that knows the calendar: a gold date phrase resolved to the days it denotes,
and a predicted date accepted when its days lie inside them.

LoCoMo writes many temporal golds relative to a date ("the week before 9 June 2023", "The Friday
before 22 October 2023"), while a system that resolves dates answers with the day ("2 June 2023");
both F1s and a string-minded judge give that half credit or none. Here the gold is resolved with
the rule temporal normaliser's calendar (``memlab.stages.temporal.rules``: weeks run Monday to
Sunday), its anchor date taken as the reference:

* an explicit day, month or year ("7 May 2023", "May, 2023", "2022"): that day, month or year;
* "<unit> before D": the unit before D, as the normaliser resolves it said on D: "the week
  before" is the Monday-Sunday week before D's week, "the weekend before" that week's weekend,
  "the <weekday> before" the latest such day before D, "N weeks / weekends / days before" N
  back ("two weekends before D" is the weekend of the week two weeks before D's);
* "the week of D": D's week; "around D" / "about D" / "on D": D;
* "between <Month> d1 and d2, Y": those days.

A date counts only with its year written (a gold "August" is not resolved), and a gold's
parenthesis is a gloss, left out.

Anything else (a duration, "a few days before D", a season phrase, no date) is not resolved, and
the question is not scored (``None``). A prediction is resolved the same way, or, where it is not
a phrase of those forms, it must hold exactly one explicit date (several dates are not an
answer); it is right when all of its days lie inside the gold's: the day inside the week is
right, the month around the day is not, a year alone never is unless the gold is that year, and a
wrong weekday is wrong.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from memlab.stages.temporal.rules import MONTHS, WEEKDAYS, find_mentions, number, unit_before, week_of

Days = tuple[date, date]

#: Any day will do as the reference of an explicit date: explicit dates pass through the normaliser.
_ANY_DAY = date(2000, 1, 1)
_NUMBER = r"\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|a|an|a couple of"
_BEFORE = re.compile(rf"^(?:the\s+)?(?:(?P<n>{_NUMBER})\s+)?(?P<unit>day|week|weekend|month|year|"
                     + "|".join(WEEKDAYS) + r")s?\s+before\s+(?P<anchor>.+)$", re.IGNORECASE)
_WEEK_OF = re.compile(r"^(?:the\s+)?week\s+of\s+(?P<anchor>.+)$", re.IGNORECASE)
_AROUND = re.compile(r"^(?:around|about|approximately|on)\s+(?P<anchor>.+)$", re.IGNORECASE)
_BETWEEN = re.compile(r"^(?:approximately\s+)?between\s+(?P<m>" + "|".join(MONTHS) +
                      r")\s+(?P<d1>\d{1,2})(?:st|nd|rd|th)?\s+and\s+(?P<d2>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<y>\d{4})$",
                      re.IGNORECASE)


# What may stand beside a date in a phrase that is only that date ("in May 2023", "on 7 May, 2023").
_FILLER = re.compile(r"[\s,.]*(?:(?:in|on|the|of)\b[\s,.]*)*", re.IGNORECASE)
_YEAR_ALONE = re.compile(r"^(?:in\s+)?((?:19|20)\d\d)$", re.IGNORECASE)
_WRITTEN_YEAR = re.compile(r"\b(?:19|20)\d\d\b")


def _mention(text: str):
    """The one explicit date mention ``text`` holds (a day, a month or a year, its year written:
    a day without one would be read in the reference's year, which here is no year), or None."""
    mentions = [m for m in find_mentions(text, _ANY_DAY, use_tense=False)
                if m.granularity in ("day", "month", "year") and _WRITTEN_YEAR.search(m.span)]
    return mentions[0] if len(mentions) == 1 else None


def _explicit(text: str) -> Days | None:
    """The one explicit date ``text`` is, or holds alone (``_mention``)."""
    if match := _YEAR_ALONE.match(text.strip()):
        year = int(match.group(1))
        return date(year, 1, 1), date(year, 12, 31)
    mention = _mention(text)
    return None if mention is None else (mention.start, mention.end)


def _day(text: str) -> date | None:
    days = _explicit(text)
    return days[0] if days is not None and days[0] == days[1] else None


def resolve(text: object) -> Days | None:
    """The days a date phrase denotes (module docstring); None where it is not one of its forms."""
    # A gold's parenthesis glosses it ("The Saturday before 25 May 2023 (approximately May 20, 2023)").
    text = " ".join(re.sub(r"\([^)]*\)", " ", str(text)).strip().rstrip(".").split())
    if match := _BETWEEN.match(text):
        month, year = MONTHS[match.group("m").lower()], int(match.group("y"))
        first, last = sorted((int(match.group("d1")), int(match.group("d2"))))
        try:
            return date(year, month, first), date(year, month, last)
        except ValueError:
            return None
    if match := _BEFORE.match(text):
        anchor = _day(match.group("anchor"))
        if anchor is None:
            return None
        unit, n = match.group("unit").lower(), number(match.group("n")) if match.group("n") else 1
        if unit in WEEKDAYS:
            back = (anchor.weekday() - WEEKDAYS[unit] - 1) % 7 + 1  # strictly before the anchor
            day = anchor - timedelta(days=back + 7 * (n - 1))
            return day, day
        start, end, _ = unit_before(unit, anchor, n)
        return start, end
    if match := _WEEK_OF.match(text):
        anchor = _day(match.group("anchor"))
        return None if anchor is None else week_of(anchor)[:2]
    if match := _AROUND.match(text):
        return _explicit(match.group("anchor"))
    return _explicit(text) if _only_a_date(text) else None


def _only_a_date(text: str) -> bool:
    """Whether ``text`` is a date and nothing more: a gold like "Since 2016" is a duration, and
    "first weekend of August 2023" or "early August 2023" is not the whole month."""
    if _YEAR_ALONE.match(text.strip()):
        return True
    mention = _mention(text)
    return mention is not None and _FILLER.fullmatch(text.replace(mention.span, " ", 1)) is not None


def temporal_correct(prediction: object, gold: object) -> float | None:
    """1.0 when the days ``prediction`` names lie inside those of ``gold``, 0.0 when they do not or
    it names no single date, None when ``gold`` is not a date phrase this module resolves."""
    wanted = resolve(gold)
    if wanted is None:
        return None
    text = " ".join(str(prediction).strip().strip("[]").rstrip(".").split())
    named = resolve(text) or _explicit(text)
    if named is None:
        return 0.0
    return float(wanted[0] <= named[0] and named[1] <= wanted[1])
