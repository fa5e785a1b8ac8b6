"""Mention detection (EMem-G 3.3): the prompted detector and the named-entity ablation."""

from __future__ import annotations

from memlab.stages.mention import EntityMentionDetector, MentionIn, PromptedMentionDetector
from tests.fakes import ReplayLM


def test_prompted_detector_parses_fenced_json_and_dedupes():
    lm = ReplayLM(['```json\n{"mentions": ["Caroline", " support group ", "caroline", ""]}\n```'])
    stage = PromptedMentionDetector(lm=lm, max_mentions=4)
    out = stage.run_one(MentionIn("When did Caroline go to the support group?"))
    assert out.mentions == ("Caroline", "support group") and out.error is None
    request = lm.requests[0]
    assert "Question: When did Caroline go to the support group?" in request.messages[-1]["content"]
    assert request.json_schema["properties"]["mentions"]["maxItems"] == 4


def test_prompted_detector_falls_back_to_no_mentions():
    stage = PromptedMentionDetector(lm=ReplayLM(["Caroline", "Caroline again"]))
    out = stage.run_one(MentionIn("When did Caroline go?"))
    assert out.mentions == () and out.error and len(stage.failures) == 1


def test_entity_detector_finds_capitalised_spans_and_known_names():
    stage = EntityMentionDetector()
    out = stage.run_one(MentionIn("What did Melanie's kids make at the Bank of America pottery class?",
                                  known_entities=("pottery class", "kids", "Paris")))
    assert out.mentions == ("Melanie", "kids", "Bank of America", "pottery class")


def test_entity_detector_skips_question_words_and_short_names():
    stage = EntityMentionDetector(min_known_length=3)
    out = stage.run_one(MentionIn("When did Chris visit Paris?", known_entities=("is", "visit")))
    assert out.mentions == ("Chris", "visit", "Paris")
    assert stage.run_one(MentionIn("what is it?")).mentions == ()
