from __future__ import annotations

import json
from datetime import datetime

from memlab.prompts import load_prompt
from memlab.stages.event import EventIn, PromptedEventExtractor
from memlab.stages.temporal import RuleTemporalNormalizer
from tests.fakes import ReplayLM

ITEM = EventIn(
    speaker="Priya",
    text="I ran the Boston marathon last Sunday with Tomas!",
    prev_summary="Tomas asked Priya about her training.",
    reference=datetime(2023, 5, 10, 18, 0),
    participants=("Priya", "Tomas"),
)


def reply(**overrides) -> str:
    data = {
        "entities": ["Priya", "Boston", "Tomas", "Gandalf"],
        "topic": "marathon",
        "relationships": ["Priya runs with Tomas"],
        "semantic_facts": ["Priya ran the Boston marathon last Sunday"],
        "dates_mentioned": ["last Sunday"],
        "summary": "Priya says she ran the Boston marathon last Sunday with Tomas.",
    }
    data.update(overrides)
    return json.dumps(data)


def test_prompt_is_the_published_one():
    prompt = load_prompt("magma/event_extract")
    assert prompt.status == "published" and "C.1" in prompt.source
    assert prompt.placeholders == {"speaker", "text", "prev_summary"}


def test_render_fills_the_prompt_and_bounds_the_lists():
    lm = ReplayLM([reply(), reply(entities=["Priya", "Boston"])])
    out = PromptedEventExtractor(lm, max_items=3).run_one(ITEM)
    assert len(lm.requests) == 2 and out.entities == ("Priya", "Boston")  # 4 entities broke the schema
    request = lm.requests[0]
    content = request.messages[-1]["content"]
    assert "- Speaker: Priya" in content and "Boston marathon" in content and "Tomas asked Priya" in content
    assert request.json_schema["properties"]["entities"]["maxItems"] == 3


def test_parse_resolves_dates_and_drops_ungrounded_entities():
    out = PromptedEventExtractor(ReplayLM([reply()]), normalizer=RuleTemporalNormalizer()).run_one(ITEM)
    assert out.entities == ("Priya", "Boston", "Tomas")  # Gandalf is not in the utterance
    assert out.dates_mentioned == ("7 May 2023",)
    assert "last Sunday (7 May 2023)" in out.summary
    assert out.topic == "marathon" and out.error is None
    assert out.attributes()["semantic_facts"] == ["Priya ran the Boston marathon last Sunday (7 May 2023)"]


def test_bad_reply_is_retried_then_a_counted_failure():
    extractor = PromptedEventExtractor(ReplayLM(["not json", reply(summary="")]))
    out = extractor.run_one(ITEM)
    assert out.error and out.entities == () and len(extractor.failures) == 1
