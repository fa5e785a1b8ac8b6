"""The abstention detector: the ways an answer says the conversation does not hold it, and the
answers that only sound negative."""

from __future__ import annotations

import pytest

from memlab.eval.abstention import abstains


@pytest.mark.parametrize("answer", [
    "Not mentioned in the conversation.", "No information available", "Information not found",
    "The conversation doesn't say.", "It is not specified.", "Caroline did not mention her salary.",
    "This cannot be determined from the conversation.", "I don't know", "Unknown", "N/A", "None.",
    "There is not enough information to answer.", "It was not discussed.", "It was never mentioned.",
    "Melanie hasn\u2019t mentioned a brother.", "I do not have enough information in my memory.",
    "I don't have any information about her brother.",
])
def test_abstentions_are_recognised(answer):
    assert abstains(answer)


@pytest.mark.parametrize("answer", [
    "Chemistry", "She did not go to the concert.", "No, she prefers tea.", "Melanie is unhappy with her job.",
    "Not yet, but next month.", "", "2023", "None of her friends came, so she went alone to the park",
    "They do not have enough information about the agency yet, so they are researching it.",
])
def test_answers_are_not_abstentions(answer):
    assert not abstains(answer)
