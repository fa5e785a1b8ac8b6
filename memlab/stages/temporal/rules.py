"""Rule-based temporal normalizer: a table of regular expressions -> resolver functions.

No LLM: a 1.5B model cannot do date arithmetic reliably, code can. Every rule is matched
case-insensitively over the whole text; when matches overlap the longest span wins (then
the earliest, then the first rule in the table). Weeks run Monday to Sunday.

Resolution rules (``ref`` = the reference date)
-----------------------------------------------
* today / tonight / this morning|afternoon|evening = ref; yesterday / last night = ref - 1;
  the day before yesterday = ref - 2; tomorrow = ref + 1; the day after tomorrow = ref + 2.
* N days|weeks|weekends|months|years ago (or "back"): N in digits, one..twelve, "a"/"an"
  (1), "a couple (of)" (2), "a few" (3). Days give that day, weeks the Monday-Sunday week
  containing ref - 7N (weekends its weekend), months that calendar month, years that year.
* last / this / next week|weekend|month|year: the previous / current / following calendar
  unit ("last weekend" is the weekend of last week). "this past" = last, "this coming" =
  next, except that "this coming weekend" is the first weekend not yet begun. "the last week" ("in the last week" = the past seven days) is not resolved.
* the day|week|weekend|month|year before: the one before the reference (= yesterday,
  last week ...), unless an anchor follows ("the week before the wedding"): the anchor is
  an event this stage cannot date, so nothing is resolved.
* last / this past <weekday>: the latest such day strictly before ref; this coming
  <weekday>: the first strictly after; this <weekday>: that day of ref's week; next
  <weekday>: that day of the following week (so "next Friday" said on a Monday is not
  "this Friday", four days later, but eleven days later). A bare weekday ("on
  Friday") is the latest such day on or before ref, or the first on or after ref when its
  sentence speaks of the future (see Tense). "every Friday", "Fridays" and
  "Sunday school" are not dates.
* last <Month>: the latest such month before ref's month; next <Month>: the first after it;
  this <Month>: that month of ref's year. A month after a preposition ("in March", "since
  June", "mid-April") or a day without a year ("May 7", "7th of May") is in ref's year,
  except that a past sentence moves a date after ref one year back and a future sentence
  moves a date before ref one year on.
* Explicit dates pass through with their value: "7 May 2023", "May 7, 2023", "May 2023",
  "summer of 2022", "in 2022" (a bare year only after a preposition, so "2000 followers"
  is not a date).
* "May" and "March" are months only when capitalised ("this may help", "in march order").
* last / this / next <season>: the latest season that ended before ref / the one containing
  ref (or, outside it, the one starting in ref's year) / the first starting after ref.
* Month names are written out in full ("Feb 3" is not read); a season is meteorological.
* Tense: a sentence is future when it has a future cue (will, 'll, going to, gonna, plan
  to, hope to, can't wait, looking forward, upcoming) and no past cue, past when it has a
  past cue (was, were, did, had, went, visited ... a short list of verbs, since "-ed"
  also ends adjectives such as "excited") and no future cue, otherwise neither.
  ``use_tense=False`` turns this off.
* Vague expressions ("recently", "the other day", "over the weekend") are not resolved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Callable

from memlab.dates import MONTH_NAMES, WEEKDAY_NAMES
from memlab.stages.temporal.base import (
    SEASON_START_MONTH,
    TemporalIn,
    TemporalNormalizer,
    TemporalOut,
    TimeMention,
    describe,
    month_end,
    season_range,
)

MONTHS = {name.lower(): i + 1 for i, name in enumerate(MONTH_NAMES)}
WEEKDAYS = {name.lower(): i for i, name in enumerate(WEEKDAY_NAMES)}
SEASONS = {**{s: s for s in SEASON_START_MONTH}, "fall": "autumn"}
NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "a couple of": 2, "a couple": 2, "couple of": 2, "a few": 3,
}
AMBIGUOUS_MONTHS = ("may", "march")  # also a modal verb and a verb

_M = "(?P<m>" + "|".join(MONTHS) + ")"
_WD = "(?P<wd>" + "|".join(WEEKDAYS) + ")"
_SEASON = "(?P<s>" + "|".join(SEASONS) + ")"
_NUM = "(?P<n>\\d{1,3}|" + "|".join(sorted(NUMBERS, key=len, reverse=True)).replace(" ", "\\s+") + ")"
_YEAR = "(?P<y>(?:19|20)\\d\\d)"
_PREPOSITION = r"(?:(?:in|during|since|until|till|by|of|early|late|mid|around|before|after|through|from)\s+|mid-)"
# Words after "the week before" that anchor it to an event instead of to the reference.
_ANCHOR = r"(?!\s+(?:(?:the|a|an|my|your|his|her|its|our|their|this|that|last|next|christmas|easter|" \
          r"thanksgiving|halloween|" + "|".join(MONTHS) + r")\b|\w+['’]s\b|\d))"

# Apostrophes may be straight or curly (LoCoMo has both).
_FUTURE = re.compile(r"\b(?:will|won['’]t|shall|gonna|going\s+to|plan(?:ning)?\s+to|hop(?:e|ing)\s+to|"
                     r"can['’]t\s+wait|looking\s+forward|upcoming)\b|['’]ll\b", re.IGNORECASE)
_PAST = re.compile(r"\b(?:was|were|did|didn['’]t|had|went|got|took|came|saw|met|made|left|bought|gave|found|"
                   r"spent|started|finished|visited|moved|tried|joined|attended|celebrated|happened)\b",
                   re.IGNORECASE)
_SENTENCE_BREAK = re.compile(r"[.!?\n]")

Span = tuple[date, date, str]  # start, end, granularity


@dataclass
class Context:
    """What a resolver may look at besides its match."""

    text: str
    ref: date
    use_tense: bool

    def tense(self, match: re.Match) -> str | None:
        """"past", "future" or None (no cue, or both) from the words of the match's sentence."""
        if not self.use_tense:
            return None
        breaks = [b.start() for b in _SENTENCE_BREAK.finditer(self.text)]
        left = max([b + 1 for b in breaks if b < match.start()], default=0)
        right = min([b for b in breaks if b >= match.end()], default=len(self.text))
        sentence = self.text[left:right]
        future, past = bool(_FUTURE.search(sentence)), bool(_PAST.search(sentence))
        return "future" if future and not past else "past" if past and not future else None


# -- calendar arithmetic -----------------------------------------------------------------
def week_of(day: date) -> Span:
    monday = day - timedelta(days=day.weekday())
    return monday, monday + timedelta(days=6), "week"


def weekend_of(day: date) -> Span:
    saturday = day - timedelta(days=day.weekday()) + timedelta(days=5)
    return saturday, saturday + timedelta(days=1), "weekend"


def month_of(year: int, month: int) -> Span:
    return date(year, month, 1), month_end(year, month), "month"


def shift_month(day: date, months: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 + months
    return index // 12, index % 12 + 1


def year_of(year: int) -> Span:
    return date(year, 1, 1), date(year, 12, 31), "year"


def by_tense(span: Span, ref: date, tense: str | None, shift: Callable[[int], Span]) -> Span:
    """Move a date given without a year to the year the sentence's tense implies."""
    if tense == "past" and span[0] > ref:
        return shift(-1)
    if tense == "future" and span[1] < ref:
        return shift(+1)
    return span


def month_number(name: str) -> int | None:
    """The month a name stands for; None for a lower-case "may" or "march" (a verb there)."""
    if name.lower() in AMBIGUOUS_MONTHS and not name[0].isupper():
        return None
    return MONTHS[name.lower()]


def number(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else NUMBERS[word]


def relation(word: str) -> str:
    """"last", "this" or "next" for the modifiers the rules accept."""
    word = " ".join(word.lower().split())
    return {"this past": "last", "this coming": "next"}.get(word, word)


# -- resolvers -------------------------------------------------------------------------
DAY_OFFSETS = {"the day before yesterday": -2, "yesterday": -1, "last night": -1, "today": 0, "tonight": 0,
               "this morning": 0, "this afternoon": 0, "this evening": 0, "tomorrow": 1,
               "the day after tomorrow": 2}


def resolve_day_word(m: re.Match, ctx: Context) -> Span:
    day = ctx.ref + timedelta(days=DAY_OFFSETS[" ".join(m.group(0).lower().split())])
    return day, day, "day"


def unit_before(unit: str, ref: date, n: int) -> Span:
    """The unit (day, week, weekend, month, year) ``n`` steps before (negative: after) ref's."""
    if unit == "day":
        day = ref - timedelta(days=n)
        return day, day, "day"
    if unit == "week":
        return week_of(ref - timedelta(weeks=n))
    if unit == "weekend":
        return weekend_of(ref - timedelta(weeks=n))
    if unit == "month":
        return month_of(*shift_month(ref, -n))
    return year_of(ref.year - n)


def resolve_ago(m: re.Match, ctx: Context) -> Span:
    return unit_before(m.group("unit").lower(), ctx.ref, number(m.group("n")))


def resolve_relative_unit(m: re.Match, ctx: Context) -> Span:
    unit = m.group("unit").lower()
    if unit == "weekend" and " ".join(m.group("rel").lower().split()) == "this coming":
        # The first weekend not yet begun, which is this week's one on a weekday.
        return weekend_of(ctx.ref + timedelta(days=2 if ctx.ref.weekday() >= 5 else 0))
    steps = {"last": 1, "this": 0, "next": -1}[relation(m.group("rel"))]
    return unit_before(unit, ctx.ref, steps)


def resolve_unit_before(m: re.Match, ctx: Context) -> Span:
    return unit_before(m.group("unit").lower(), ctx.ref, 1)


def resolve_relative_weekday(m: re.Match, ctx: Context) -> Span:
    target, ref = WEEKDAYS[m.group("wd").lower()], ctx.ref
    words = " ".join(m.group("rel").lower().split())
    if words in ("last", "this past"):
        day = ref - timedelta(days=(ref.weekday() - target - 1) % 7 + 1)
    elif words == "this coming":
        day = ref + timedelta(days=(target - ref.weekday() - 1) % 7 + 1)
    else:  # that day of this week, or of next week
        day = ref + timedelta(days=target - ref.weekday() + (7 if words == "next" else 0))
    return day, day, "day"


def resolve_weekday(m: re.Match, ctx: Context) -> Span:
    target, ref = WEEKDAYS[m.group("wd").lower()], ctx.ref
    if ctx.tense(m) == "future":
        day = ref + timedelta(days=(target - ref.weekday()) % 7)
    else:
        day = ref - timedelta(days=(ref.weekday() - target) % 7)
    return day, day, "day"


def resolve_relative_month(m: re.Match, ctx: Context) -> Span | None:
    month, ref = month_number(m.group("m")), ctx.ref
    if month is None:
        return None
    rel = relation(m.group("rel"))
    if rel == "last":
        return month_of(ref.year if month < ref.month else ref.year - 1, month)
    if rel == "next":
        return month_of(ref.year if month > ref.month else ref.year + 1, month)
    return month_of(ref.year, month)


def resolve_month(m: re.Match, ctx: Context) -> Span | None:
    month, ref = month_number(m.group("m")), ctx.ref
    if month is None:
        return None
    return by_tense(month_of(ref.year, month), ref, ctx.tense(m), lambda k: month_of(ref.year + k, month))


def resolve_explicit_day(m: re.Match, ctx: Context) -> Span | None:
    month, day = month_number(m.group("m")), int(m.group("d"))
    if month is None:
        return None
    if m.group("y"):
        exact = date(int(m.group("y")), month, day)
        return exact, exact, "day"
    ref = ctx.ref

    def in_year(k: int) -> Span:
        shifted = date(ref.year + k, month, day)
        return shifted, shifted, "day"

    return by_tense(in_year(0), ref, ctx.tense(m), in_year)


def resolve_month_year(m: re.Match, ctx: Context) -> Span | None:
    month = month_number(m.group("m"))
    return None if month is None else month_of(int(m.group("y")), month)


def resolve_year(m: re.Match, ctx: Context) -> Span:
    return year_of(int(m.group("y")))


def resolve_relative_season(m: re.Match, ctx: Context) -> Span:
    season, ref = SEASONS[m.group("s").lower()], ctx.ref
    rel = relation(m.group("rel"))
    # The seasons starting around ref's year, in order; pick by their relation to ref.
    candidates = [season_range(season, year) for year in range(ref.year - 2, ref.year + 2)]
    if rel == "last":
        start, end = [c for c in candidates if c[1] < ref][-1]
    elif rel == "next":
        start, end = [c for c in candidates if c[0] > ref][0]
    else:
        containing = [c for c in candidates if c[0] <= ref <= c[1]]
        start, end = containing[0] if containing else season_range(season, ref.year)
    return start, end, "season"


def resolve_season_year(m: re.Match, ctx: Context) -> Span:
    start, end = season_range(SEASONS[m.group("s").lower()], int(m.group("y")))
    return start, end, "season"


@dataclass(frozen=True)
class Rule:
    """A pattern and the function resolving its matches (None: the match is not a date).

    A pattern with a ``span`` group reports only that group as the mention ("in March" ->
    "March"); otherwise the whole match.
    """

    name: str
    pattern: re.Pattern
    resolve: Callable[[re.Match, Context], Span | None]


def _rule(name: str, pattern: str, resolve: Callable[[re.Match, Context], Span | None]) -> Rule:
    return Rule(name, re.compile(pattern, re.IGNORECASE), resolve)


_REL = r"(?P<rel>last|this\s+past|this\s+coming|this|next)"
RULES: tuple[Rule, ...] = (
    _rule("day word", r"\b(?:" + "|".join(w.replace(" ", r"\s+") for w in DAY_OFFSETS) + r")\b", resolve_day_word),
    _rule("ago", r"\b" + _NUM + r"\s+(?P<unit>day|week|weekend|month|year)s?\s+(?:ago|back)\b", resolve_ago),
    _rule("relative unit", r"(?<!\bthe\s)\b" + _REL + r"\s+(?P<unit>week|weekend|month|year)\b",
          resolve_relative_unit),
    _rule("unit before", r"\bthe\s+(?P<unit>day|week|weekend|month|year)\s+before\b" + _ANCHOR,
          resolve_unit_before),
    _rule("relative weekday", r"\b" + _REL + r"\s+" + _WD + r"\b", resolve_relative_weekday),
    _rule("weekday", r"(?<!\bevery\s)(?<!\beach\s)\b" + _WD + r"\b(?!\s+(?:school|best)\b)", resolve_weekday),
    _rule("relative month", r"\b" + _REL + r"\s+" + _M + r"\b", resolve_relative_month),
    _rule("month", r"\b" + _PREPOSITION + r"(?P<span>" + _M + r")\b", resolve_month),
    _rule("day month", r"\b(?P<d>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _M + r"(?:,?\s+" + _YEAR + r")?\b",
          resolve_explicit_day),
    _rule("month day", r"\b" + _M + r"\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?(?!\d)(?:,?\s+" + _YEAR + r")?\b",
          resolve_explicit_day),
    _rule("month year", r"\b" + _M + r",?\s+" + _YEAR + r"\b", resolve_month_year),
    _rule("year", r"\b" + _PREPOSITION + r"(?P<span>" + _YEAR + r")\b", resolve_year),
    _rule("relative season", r"(?<!\bthe\s)\b" + _REL + r"\s+" + _SEASON + r"\b", resolve_relative_season),
    _rule("season year", r"\b" + _SEASON + r"(?:\s+of)?\s+" + _YEAR + r"\b", resolve_season_year),
)


def find_mentions(text: str, ref: date, rules: tuple[Rule, ...] = RULES, use_tense: bool = True) -> list[TimeMention]:
    """Every time expression of ``text`` resolved against ``ref``, longest match first."""
    ctx = Context(text=text, ref=ref, use_tense=use_tense)
    candidates: list[TimeMention] = []
    for rule in rules:
        group = "span" if "span" in rule.pattern.groupindex else 0
        for match in rule.pattern.finditer(text):
            try:
                resolved = rule.resolve(match, ctx)
            except ValueError:  # an impossible date: "31 February", a year out of range
                resolved = None
            if resolved is None:
                continue
            start, end, granularity = resolved
            first, last = match.span(group)
            candidates.append(TimeMention(span=text[first:last], start_char=first, end_char=last, start=start,
                                          end=end, granularity=granularity,
                                          resolved=describe(start, end, granularity)))
    chosen: list[TimeMention] = []
    for mention in sorted(candidates, key=lambda c: (c.start_char - c.end_char, c.start_char)):
        if all(mention.end_char <= o.start_char or mention.start_char >= o.end_char for o in chosen):
            chosen.append(mention)
    return sorted(chosen, key=lambda c: c.start_char)


class RuleTemporalNormalizer(TemporalNormalizer):
    """Deterministic regex normalizer (the rules are in this module's docstring).

    ``use_tense=False`` turns off the past/future reading of a sentence, so bare weekdays are
    always the latest on or before the reference and bare months are in the reference year.
    """

    def __init__(self, use_tense: bool = True) -> None:
        super().__init__()
        self.use_tense = use_tense

    def normalize(self, item: TemporalIn) -> TemporalOut:
        ref = item.reference_date
        if ref is None:
            return TemporalOut(mentions=(), error="no reference time: relative expressions cannot be resolved")
        return TemporalOut(mentions=tuple(find_mentions(item.text, ref, use_tense=self.use_tense)))

    def forward(self, batch: list[TemporalIn]) -> list[TemporalOut]:
        return [self.normalize(item) for item in batch]
