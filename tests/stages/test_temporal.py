"""Temporal normalizers: the rule table, span offsets, annotation, the prompted parser.

Expected dates below were worked out by hand from the calendar; ``test_reference_weekdays``
pins the weekdays they assume (8 May 2023 is a Monday), so a wrong assumption fails there.
"""

from __future__ import annotations

import calendar
import json
import re
from datetime import date, datetime
from pathlib import Path

import pytest

from memlab.config import instantiate
from memlab.stage import Stage
from memlab.stages.temporal import (
    PromptedTemporalNormalizer,
    RuleTemporalNormalizer,
    TemporalIn,
    TemporalNormalizer,
    TimeMention,
    annotate,
    describe,
    infer_granularity,
)
from tests.fakes import ReplayLM

D = date
MON = D(2023, 5, 8)  # Monday 8 May 2023
SAT = D(2023, 5, 13)
SUN = D(2023, 5, 14)
JAN = D(2023, 1, 15)  # a Sunday in January: month and season arithmetic across years
NEW_YEAR = D(2023, 1, 1)
LEAP = D(2024, 2, 28)
DEC = D(2023, 12, 15)


def test_reference_weekdays():
    names = {d: calendar.day_name[d.weekday()] for d in (MON, SAT, SUN, JAN, NEW_YEAR)}
    assert names == {MON: "Monday", SAT: "Saturday", SUN: "Sunday", JAN: "Sunday", NEW_YEAR: "Sunday"}


# (text, reference, span, start, end, granularity)
CASES = [
    # days
    ("I went hiking yesterday.", MON, "yesterday", D(2023, 5, 7), D(2023, 5, 7), "day"),
    ("Today was long.", MON, "Today", MON, MON, "day"),
    ("See you tonight!", MON, "tonight", MON, MON, "day"),
    ("The game is tomorrow.", MON, "tomorrow", D(2023, 5, 9), D(2023, 5, 9), "day"),
    ("We met the day before yesterday.", MON, "the day before yesterday", D(2023, 5, 6), D(2023, 5, 6), "day"),
    ("It starts the day after tomorrow.", MON, "the day after tomorrow", D(2023, 5, 10), D(2023, 5, 10), "day"),
    ("Last night was fun.", MON, "Last night", D(2023, 5, 7), D(2023, 5, 7), "day"),
    ("I baked this morning.", MON, "this morning", MON, MON, "day"),
    ("I called yesterday.", NEW_YEAR, "yesterday", D(2022, 12, 31), D(2022, 12, 31), "day"),
    ("Due tomorrow.", LEAP, "tomorrow", D(2024, 2, 29), D(2024, 2, 29), "day"),
    # N units ago
    ("I adopted her 3 days ago.", MON, "3 days ago", D(2023, 5, 5), D(2023, 5, 5), "day"),
    ("I moved two weeks ago.", MON, "two weeks ago", D(2023, 4, 24), D(2023, 4, 30), "week"),
    ("A couple of weeks ago we hiked.", MON, "A couple of weeks ago", D(2023, 4, 24), D(2023, 4, 30), "week"),
    ("It rained a couple days ago.", MON, "a couple days ago", D(2023, 5, 6), D(2023, 5, 6), "day"),
    ("I saw it a few days ago.", MON, "a few days ago", D(2023, 5, 5), D(2023, 5, 5), "day"),
    ("That was a week ago.", MON, "a week ago", D(2023, 5, 1), D(2023, 5, 7), "week"),
    ("I quit five months ago.", MON, "five months ago", D(2022, 12, 1), D(2022, 12, 31), "month"),
    ("We met 2 years ago.", MON, "2 years ago", D(2021, 1, 1), D(2021, 12, 31), "year"),
    ("We camped two weekends ago.", MON, "two weekends ago", D(2023, 4, 29), D(2023, 4, 30), "weekend"),
    ("I learnt it a few years back.", MON, "a few years back", D(2020, 1, 1), D(2020, 12, 31), "year"),
    # last / this / next unit
    ("I was sick last week.", MON, "last week", D(2023, 5, 1), D(2023, 5, 7), "week"),
    ("Busy last week.", NEW_YEAR, "last week", D(2022, 12, 19), D(2022, 12, 25), "week"),
    ("I'm free this week.", MON, "this week", MON, SUN, "week"),
    ("The trip is next week.", MON, "next week", D(2023, 5, 15), D(2023, 5, 21), "week"),
    ("We went camping last weekend.", MON, "last weekend", D(2023, 5, 6), D(2023, 5, 7), "weekend"),
    ("We went camping last weekend.", SUN, "last weekend", D(2023, 5, 6), D(2023, 5, 7), "weekend"),
    ("Any plans this weekend?", MON, "this weekend", SAT, SUN, "weekend"),
    ("Next weekend I'm away.", MON, "Next weekend", D(2023, 5, 20), D(2023, 5, 21), "weekend"),
    ("It was this past weekend.", MON, "this past weekend", D(2023, 5, 6), D(2023, 5, 7), "weekend"),
    ("Join us this coming weekend.", MON, "this coming weekend", SAT, SUN, "weekend"),
    ("Join us this coming weekend.", SAT, "this coming weekend", D(2023, 5, 20), D(2023, 5, 21), "weekend"),
    ("I started last month.", MON, "last month", D(2023, 4, 1), D(2023, 4, 30), "month"),
    ("I started last month.", JAN, "last month", D(2022, 12, 1), D(2022, 12, 31), "month"),
    ("It opens next month.", DEC, "next month", D(2024, 1, 1), D(2024, 1, 31), "month"),
    ("Rent is due this month.", MON, "this month", D(2023, 5, 1), D(2023, 5, 31), "month"),
    ("I graduated last year.", MON, "last year", D(2022, 1, 1), D(2022, 12, 31), "year"),
    ("Maybe next year.", MON, "next year", D(2024, 1, 1), D(2024, 12, 31), "year"),
    # "the ... before", relative to the reference
    ("I had called her the week before.", MON, "the week before", D(2023, 5, 1), D(2023, 5, 7), "week"),
    ("We talked the weekend before.", MON, "the weekend before", D(2023, 5, 6), D(2023, 5, 7), "weekend"),
    ("It had snowed the month before.", MON, "the month before", D(2023, 4, 1), D(2023, 4, 30), "month"),
    # weekdays
    ("I ran a race last Friday.", MON, "last Friday", D(2023, 5, 5), D(2023, 5, 5), "day"),
    ("Last Monday was rough.", MON, "Last Monday", D(2023, 5, 1), D(2023, 5, 1), "day"),
    ("Last Sunday was rough.", SUN, "Last Sunday", D(2023, 5, 7), D(2023, 5, 7), "day"),
    ("The party is this Friday.", MON, "this Friday", D(2023, 5, 12), D(2023, 5, 12), "day"),
    ("The party is next Friday.", MON, "next Friday", D(2023, 5, 19), D(2023, 5, 19), "day"),
    ("The party is this coming Friday.", MON, "this coming Friday", D(2023, 5, 12), D(2023, 5, 12), "day"),
    ("We met on Friday for lunch.", MON, "Friday", D(2023, 5, 5), D(2023, 5, 5), "day"),
    ("On Monday I painted.", MON, "Monday", MON, MON, "day"),
    ("I will call her on Wednesday.", MON, "Wednesday", D(2023, 5, 10), D(2023, 5, 10), "day"),
    ("Friday night was wild.", MON, "Friday", D(2023, 5, 5), D(2023, 5, 5), "day"),
    # months
    ("I ran a marathon last March.", MON, "last March", D(2023, 3, 1), D(2023, 3, 31), "month"),
    ("I visited last June.", MON, "last June", D(2022, 6, 1), D(2022, 6, 30), "month"),
    ("We married last May.", MON, "last May", D(2022, 5, 1), D(2022, 5, 31), "month"),
    ("It opens next March.", MON, "next March", D(2024, 3, 1), D(2024, 3, 31), "month"),
    ("We fly out this June.", MON, "this June", D(2023, 6, 1), D(2023, 6, 30), "month"),
    ("I went to Paris in March.", MON, "March", D(2023, 3, 1), D(2023, 3, 31), "month"),
    ("I went to Paris in June.", MON, "June", D(2022, 6, 1), D(2022, 6, 30), "month"),
    ("I'll go to Paris in March.", MON, "March", D(2024, 3, 1), D(2024, 3, 31), "month"),
    ("The concert is in June.", MON, "June", D(2023, 6, 1), D(2023, 6, 30), "month"),
    ("I’ll see Rome in March.", MON, "March", D(2024, 3, 1), D(2024, 3, 31), "month"),  # curly apostrophe
    ("It bloomed mid-April.", MON, "April", D(2023, 4, 1), D(2023, 4, 30), "month"),
    # explicit dates
    ("My birthday is 7 May 2023.", MON, "7 May 2023", D(2023, 5, 7), D(2023, 5, 7), "day"),
    ("It was May 7, 2023.", MON, "May 7, 2023", D(2023, 5, 7), D(2023, 5, 7), "day"),
    ("Fireworks on the 4th of July.", MON, "4th of July", D(2023, 7, 4), D(2023, 7, 4), "day"),
    ("We visited on June 5th.", MON, "June 5th", D(2022, 6, 5), D(2022, 6, 5), "day"),
    ("I moved in May 2022.", MON, "May 2022", D(2022, 5, 1), D(2022, 5, 31), "month"),
    ("I started back in 2019.", MON, "2019", D(2019, 1, 1), D(2019, 12, 31), "year"),
    # seasons
    ("We toured the summer of 2022.", MON, "summer of 2022", D(2022, 6, 1), D(2022, 8, 31), "season"),
    ("Last summer we swam.", MON, "Last summer", D(2022, 6, 1), D(2022, 8, 31), "season"),
    ("I ski this winter.", JAN, "this winter", D(2022, 12, 1), D(2023, 2, 28), "season"),
    ("I ski next winter.", MON, "next winter", D(2023, 12, 1), D(2024, 2, 29), "season"),
    ("It snowed last winter.", MON, "last winter", D(2022, 12, 1), D(2023, 2, 28), "season"),
    ("We hiked last fall.", MON, "last fall", D(2022, 9, 1), D(2022, 11, 30), "season"),
]


@pytest.mark.parametrize(("text", "ref", "span", "start", "end", "granularity"), CASES,
                         ids=[f"{c[0]}@{c[1]}" for c in CASES])
def test_rule_resolution(text, ref, span, start, end, granularity):
    out = RuleTemporalNormalizer().run_one(TemporalIn(text, datetime.combine(ref, datetime.min.time())))
    assert out.error is None
    assert len(out.mentions) == 1, out.mentions
    mention = out.mentions[0]
    assert (mention.span, mention.start, mention.end, mention.granularity) == (span, start, end, granularity)
    assert text[mention.start_char:mention.end_char] == span
    assert mention.resolved == describe(start, end, granularity)


@pytest.mark.parametrize("text", [
    "I may go to the party.",
    "This may help you.",
    "We will march on.",
    "Sunday school was fun.",
    "I swim every Friday.",
    "On Fridays I swim.",
    "I have 2000 followers.",
    "I've been busy recently.",
    "I saw him the other day.",
    "That was an hour ago.",
    "I've been tired in the last week.",
    "I called the week before the wedding.",
    "I called the day before Mel's party.",
    "I called the day before Mel’s party.",
    "Cyberpunk 2077 is a great game.",
    "Mayday! The marching band played.",
    "I read 12 books and walked 5 miles.",
    "It happened on 30 February.",
    "See you Feb 3.",
])
def test_no_false_positives(text):
    assert RuleTemporalNormalizer().run_one(TemporalIn(text, MON)).mentions == ()


def test_several_mentions_have_their_offsets_in_order():
    text = "Yesterday I ran, last Friday I swam, and in March I went to Rome on 7 May 2023."
    mentions = RuleTemporalNormalizer().run_one(TemporalIn(text, MON)).mentions
    assert [m.span for m in mentions] == ["Yesterday", "last Friday", "March", "7 May 2023"]
    assert [m.start_char for m in mentions] == [text.index(m.span) for m in mentions]
    for m in mentions:
        assert text[m.start_char:m.end_char] == m.span


def test_overlapping_matches_keep_the_longest():
    text = "the day before yesterday, last Friday, 7 May 2023, this coming Sunday"
    mentions = RuleTemporalNormalizer().run_one(TemporalIn(text, MON)).mentions
    assert [m.span for m in mentions] == ["the day before yesterday", "last Friday", "7 May 2023", "this coming Sunday"]


def test_case_insensitive():
    mentions = RuleTemporalNormalizer().run_one(TemporalIn("LAST WEEK and Two Days Ago", MON)).mentions
    assert [(m.start, m.end) for m in mentions] == [(D(2023, 5, 1), D(2023, 5, 7)), (D(2023, 5, 6), D(2023, 5, 6))]


def test_tense_reading_can_be_turned_off():
    text = "I went to Paris in June."
    on = RuleTemporalNormalizer().run_one(TemporalIn(text, MON)).mentions[0]
    off = RuleTemporalNormalizer(use_tense=False).run_one(TemporalIn(text, MON)).mentions[0]
    assert (on.start, off.start) == (D(2022, 6, 1), D(2023, 6, 1))


def test_missing_reference_is_an_error_not_a_guess():
    out = RuleTemporalNormalizer().run_one(TemporalIn("I went yesterday.", None))
    assert out.mentions == () and "no reference" in out.error


def test_batch_forward_and_rewrite():
    stage = RuleTemporalNormalizer()
    batch = [TemporalIn("I went yesterday.", MON), TemporalIn("Nothing here.", MON),
             TemporalIn("Back in 2019, and last week.", datetime(2023, 5, 8, 13, 56))]
    assert isinstance(stage, TemporalNormalizer) and stage.In is TemporalIn
    assert [len(o.mentions) for o in stage(batch)] == [1, 0, 2]
    assert stage.rewrite(batch) == [
        "I went yesterday (7 May 2023).",
        "Nothing here.",
        "Back in 2019, and last week (the week of 1 May 2023).",
    ]


# -- annotate ----------------------------------------------------------------------------
def _mentions(text, ref=MON):
    return RuleTemporalNormalizer().run_one(TemporalIn(text, ref)).mentions


def test_annotate_inline_and_replace():
    text = "I went yesterday and I'll go next month."
    mentions = _mentions(text)
    assert annotate(text, mentions) == "I went yesterday (7 May 2023) and I'll go next month (June 2023)."
    assert annotate(text, mentions, style="replace") == "I went 7 May 2023 and I'll go June 2023."
    assert annotate(text, ()) == text


def test_annotate_leaves_explicit_dates_alone_inline():
    text = "Married on 7 May 2023 and moved in 2019."
    assert annotate(text, _mentions(text)) == text
    # The same date in another spelling (a zero-padded session header, month first, ordinal)
    # is not repeated beside itself.
    for text in ["[08 May 2023] Melanie: hi", "We met on May 8th, 2023.", "On the 8th of May 2023."]:
        mentions = _mentions(text)
        assert [m.resolved for m in mentions] == ["8 May 2023"], text
        assert annotate(text, mentions) == text


def test_annotate_rejects_bad_input():
    text = "I went yesterday."
    mentions = _mentions(text)
    with pytest.raises(ValueError, match="annotation style"):
        annotate(text, mentions, style="footnote")
    with pytest.raises(ValueError, match="another text"):
        annotate("Something else entirely.", mentions)


def test_time_mention_checks_itself():
    with pytest.raises(ValueError, match="before start"):
        TimeMention("x", 0, 1, D(2023, 5, 2), D(2023, 5, 1), "range", "?")
    with pytest.raises(ValueError, match="span length"):
        TimeMention("xyz", 0, 1, D(2023, 5, 1), D(2023, 5, 1), "day", "1 May 2023")


@pytest.mark.parametrize(("start", "end", "granularity", "text"), [
    (D(2023, 5, 7), D(2023, 5, 7), "day", "7 May 2023"),
    (D(2023, 5, 1), D(2023, 5, 7), "week", "the week of 1 May 2023"),
    (D(2023, 5, 6), D(2023, 5, 7), "weekend", "the weekend of 6 May 2023"),
    (D(2024, 2, 1), D(2024, 2, 29), "month", "February 2024"),
    (D(2022, 1, 1), D(2022, 12, 31), "year", "2022"),
    (D(2022, 6, 1), D(2022, 8, 31), "season", "summer 2022"),
    (D(2022, 12, 1), D(2023, 2, 28), "season", "winter 2022-2023"),
    (D(2023, 5, 1), D(2023, 5, 10), "range", "1 May 2023 to 10 May 2023"),
    (D(2023, 5, 2), D(2023, 5, 8), "range", "2 May 2023 to 8 May 2023"),  # 7 days, not Monday-Sunday
])
def test_describe_and_infer_granularity(start, end, granularity, text):
    assert infer_granularity(start, end) == granularity
    assert describe(start, end) == text


def test_rule_stage_builds_from_config_and_round_trips(tmp_path):
    stage = instantiate({"_component_": "memlab.stages.temporal.RuleTemporalNormalizer", "use_tense": False})
    loaded = Stage.load(stage.save(tmp_path / "temporal"))
    assert isinstance(loaded, RuleTemporalNormalizer) and loaded.use_tense is False


# -- prompted ----------------------------------------------------------------------------
def _reply(*items):
    return json.dumps({"mentions": [
        {"span": s, "resolved_date_start": a, "resolved_date_end": b} for s, a, b in items
    ]})


def test_prompted_render_states_the_reference_and_asks_for_schema():
    stage = PromptedTemporalNormalizer(lm=ReplayLM([]), max_items=5)
    request = stage.render(TemporalIn("We hiked last weekend.", datetime(2023, 5, 8, 13, 56)))
    prompt = request.messages[-1]["content"]
    assert "Monday, 8 May 2023" in prompt and "We hiked last weekend." in prompt and "at most 5" in prompt
    array = request.json_schema["properties"]["mentions"]
    assert array["maxItems"] == 5
    assert set(array["items"]["required"]) == {"span", "resolved_date_start", "resolved_date_end"}


def test_prompted_parse_verifies_spans_and_dates():
    text = "Yesterday I ran, and on Friday, and again on Friday night, I swam."
    lm = ReplayLM([_reply(
        ("yesterday", "2023-05-07", "2023-05-07"),      # case differs: the text's casing is kept
        ("Friday", "2023-05-05", "2023-05-05"),
        ("Friday", "2023-05-05", "2023-05-05"),         # second occurrence, found further on
        ("last Tuesday", "2023-05-02", "2023-05-02"),   # not in the text: dropped
        ("day", "2023-05-08", "2023-05-08"),            # only inside "Yesterday": dropped
        ("ran", "2023-02-30", "2023-02-30"),            # no such date: dropped
        ("swam", "2023-05-09", "2023-05-01"),           # end before start: dropped
    )])
    stage = PromptedTemporalNormalizer(lm=lm)
    out = stage.run_one(TemporalIn(text, MON))
    assert out.error is None
    assert [(m.span, m.start_char) for m in out.mentions] == [
        ("Yesterday", 0), ("Friday", text.index("Friday")), ("Friday", text.rindex("Friday"))]
    assert out.mentions[0].resolved == "7 May 2023" and out.mentions[0].granularity == "day"
    assert stage.dropped == 4


def test_prompted_infers_granularity_from_the_dates():
    lm = ReplayLM(["```json\n" + _reply(("last week", "2023-05-01", "2023-05-07")) + "\n```"])
    mention = PromptedTemporalNormalizer(lm=lm).run_one(TemporalIn("Busy last week.", MON)).mentions[0]
    assert (mention.granularity, mention.resolved) == ("week", "the week of 1 May 2023")


def test_prompted_retries_then_falls_back():
    lm = ReplayLM(["no idea", _reply(("tomorrow", "2023-05-09", "2023-05-09")), "still no JSON", "nope"])
    stage = PromptedTemporalNormalizer(lm=lm)
    first = stage.run_one(TemporalIn("See you tomorrow.", MON))
    assert [m.span for m in first.mentions] == ["tomorrow"] and first.error is None
    second = stage.run_one(TemporalIn("See you tomorrow.", MON))
    assert second.mentions == () and second.error
    assert len(stage.failures) == 1 and lm.remaining == 0


def test_prompted_rejects_more_items_than_allowed():
    too_many = _reply(*[("today", "2023-05-08", "2023-05-08")] * 3)
    lm = ReplayLM([too_many, too_many])
    out = PromptedTemporalNormalizer(lm=lm, max_items=2).run_one(TemporalIn("today", MON))
    assert out.mentions == () and "schema" in out.error


def test_prompted_skips_items_without_reference():
    lm = ReplayLM([_reply(("today", "2023-05-08", "2023-05-08"))])
    outs = PromptedTemporalNormalizer(lm=lm)([TemporalIn("today", None), TemporalIn("today", MON)])
    assert outs[0].mentions == () and "no reference" in outs[0].error
    assert [m.span for m in outs[1].mentions] == ["today"]
    assert len(lm.requests) == 1


# -- real data ---------------------------------------------------------------------------
LOCOMO = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo" / "locomo10_dev.json"


def test_locomo_turns_annotate_cleanly():
    """Every LoCoMo dev turn: mentions sit where they say, and annotation only inserts text."""
    if not LOCOMO.is_file():
        pytest.skip(f"{LOCOMO} not present")
    items = []
    for record in json.loads(LOCOMO.read_text()):
        conversation = record["conversation"]
        for key, turns in conversation.items():
            if re.fullmatch(r"session_\d+", key) and turns:
                when = datetime.strptime(conversation[f"{key}_date_time"], "%I:%M %p on %d %B, %Y")
                items.extend(TemporalIn(turn["text"], when) for turn in turns)
    stage = RuleTemporalNormalizer()
    outs = stage(items)
    total = 0
    for item, out in zip(items, outs):
        for m in out.mentions:
            assert item.text[m.start_char:m.end_char] == m.span
            # A relative expression (no year in it) lies within about 15 months of when it was said.
            if not re.search(r"\d{4}|years?", m.span):
                assert abs((m.start - item.reference_date).days) <= 460, (m, item.reference)
        annotated = annotate(item.text, out.mentions)
        assert re.sub(r" \([^()]*\d{4}[^()]*\)", "", annotated) == item.text
        total += len(out.mentions)
    assert total > 200  # LoCoMo speakers say "last week", "yesterday" ... hundreds of times


def test_turn_units_can_carry_their_resolved_dates():
    from memlab.stages.segment import SegmentIn, TurnSegmenter
    from memlab.stages.temporal.rules import RuleTemporalNormalizer
    from memlab.types import Session, Turn

    session = Session("s1", datetime(2023, 5, 8, 13, 56), (Turn("D1:1", "Caroline", "I went to a support group yesterday."),))
    plain, dated = (TurnSegmenter(normalizer=n)([SegmentIn("c", session)])[0].units[0]
                    for n in (None, RuleTemporalNormalizer()))
    assert plain.text == "[8 May 2023] Caroline: I went to a support group yesterday."
    assert dated.text == "[8 May 2023] Caroline: I went to a support group yesterday (7 May 2023)."
    assert dated.source_ids == plain.source_ids == ("D1:1",)
