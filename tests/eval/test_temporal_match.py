"""Date-aware temporal scoring (memlab.eval.temporal_match): hand-written golds and predictions,
the calendar checked by hand, and its agreement with the labelled positive control."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from memlab.eval.labels import agreement, load_labels
from memlab.eval.temporal_match import resolve, temporal_correct

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("gold, prediction", [
    # the three the judge rejected: 24 May 2023 was a Wednesday, 27 July a Thursday, 15 August a Tuesday
    ("weekend before May 24, 2023", "20 May 2023"),
    ("Friday before 27 July 2023", "21 July 2023"),
    ("Saturday before August 15, 2023", "12 August 2023"),
    ("The week before 9 June 2023", "2 June 2023"),  # Friday 9 June: the week of Monday 29 May
    ("The week before 9 June 2023", "the week before 9 June 2023"),  # a phrase that resolves to it
    ("two weekends before 17 July 2023", "9 July 2023"),
    ("The week of 23 August 2023", "27 August 2023"),
    ("around April 2, 2023", "2 April 2023"),
    ("between October 19 and 24, 2023", "October 21, 2023"),
    ("The Saturday before 25 May 2023 (approximately May 20, 2023)", "20 May 2023"),
    ("20 June, 2023", "On 20 June 2023, he went"),
    ("June 2023", "12 June 2023"),  # a day inside the month
    ("June 2023", "June, 2023"),
    ("2022", "in 2022"),
    ("7 May 2023", "[7 May 2023]"),
])
def test_dates_inside_the_gold_are_right(gold, prediction):
    assert temporal_correct(prediction, gold) == 1.0


@pytest.mark.parametrize("gold, prediction", [
    ("weekend before May 24, 2023", "2023"),  # a year alone is not an answer
    ("The Friday before 22 October 2023", "19 October 2023"),  # a Thursday: a wrong weekday is wrong
    ("Friday before 27 July 2023", "27 July 2023"),  # the anchor itself
    ("The week before 9 June 2023", "9 June 2023"),
    ("The week before 9 June 2023", "June 2023"),  # the month around the week
    ("7 May 2023", "8 May 2023"),  # a day off
    ("7 May 2023", "7 May 2023 or 8 May 2023"),  # two dates are not an answer
    ("January, 2023", "2022"),
    ("June 2023", "I do not have enough information in my memory."),
])
def test_other_days_and_no_date_are_wrong(gold, prediction):
    assert temporal_correct(prediction, gold) == 0.0


@pytest.mark.parametrize("gold", ["4 years", "Since 2016", "August", "few days before November 22, 2023",
                                  "The week of April 3rd to 9th", "Roast marshmallows",
                                  # a date qualified is not the whole month (the audit's "early August" is wrong)
                                  "first weekend of August 2023", "early August 2023", "mid-2023"])
def test_a_gold_that_is_not_a_resolvable_date_is_not_scored(gold):
    assert resolve(gold) is None and temporal_correct("2 June 2023", gold) is None


def test_resolved_intervals_by_hand():
    assert resolve("The week before 25 August 2023") == (date(2023, 8, 14), date(2023, 8, 20))
    assert resolve("the weekend before October 24, 2023") == (date(2023, 10, 21), date(2023, 10, 22))
    assert resolve("The Tuesday before 20 July 2023") == (date(2023, 7, 18), date(2023, 7, 18))
    assert resolve("The Sunday before 21 May 2023") == (date(2023, 5, 14), date(2023, 5, 14))  # strictly before
    assert resolve("January, 2023") == (date(2023, 1, 1), date(2023, 1, 31))


def test_it_agrees_with_the_labels_on_the_temporal_items_it_scores():
    tree = load_labels(REPO / "eval" / "judge_labels" / "positive_control_dev.json")
    items = [item for item in tree["items"] if item["category"] == "temporal"]
    scores = {item["id"]: temporal_correct(item["prediction"], item["audited_gold"] or item["gold"]) for item in items}
    scored = [item for item in items if scores[item["id"]] is not None]
    assert len(scored) >= 50
    result = agreement(items, {key: None if value is None else bool(value) for key, value in scores.items()},
                       resamples=100)
    assert result["kappa"]["value"] >= 0.9
