"""states_gold: a prediction that states the gold word for word is accepted, and only then."""

from __future__ import annotations

import pytest

from memlab.eval.states_gold import states_gold


@pytest.mark.parametrize("prediction, gold", [
    ("Work.", "work"),                                   # casing and a full stop
    ("adoPTION agency", "Adoption agencies"),             # inflection
    ("Got new beds", "Got new beds for them"),            # the gold's function words are not needed
    ("3 times", "three times"),                           # a number word as digits
    ("Twice", "2"),
    ("His positivity and determination helped.", "His positivity and determination"),
    ("August 2023", "August"),                            # a year dates the answer
    ("1. fair\n2. networking events\n3. dance competition", "fair, networking events, dance competition"),
    ("It cost 2,000 dollars", "2000 dollars"),
    ("No, she never went back.", "never went back"),      # negated where the gold is
])
def test_a_prediction_stating_every_content_word_of_the_gold_is_accepted(prediction, gold):
    assert states_gold(prediction, gold)


@pytest.mark.parametrize("prediction, gold", [
    ("Soda", "soda, candy"),                              # half of a list
    ("not work", "work"),                                 # a negation the gold lacks
    ("Likely yes, since she likes it", "Likely no"),      # the gold's negation is missing
    ("Three times, once at the park and twice at home", "Twice."),  # a number the gold lacks
    ("about half an hour", "about an hour"),
    ("Giving kids a loving home", "creating a family for kids who need one"),  # a paraphrase: for a judge
    ("Anything", "the"),                                  # a gold of function words alone is never stated
    ("3", "three times"),                                 # the unit is missing: for a judge
    ("", "Rex"),
])
def test_a_prediction_that_does_not_state_the_gold_is_left_undecided(prediction, gold):
    assert not states_gold(prediction, gold)
