"""Recall-oriented relevance filter (EMem 3.3 / 3.4)."""

from __future__ import annotations

from memlab.stages.filter import FilterIn, PromptedRelevanceFilter
from tests.fakes import ReplayLM

CANDIDATES = ("Caroline attended a support group.", "Melanie likes pottery.", "Caroline adopted a dog.")


def test_keeps_only_listed_candidates():
    lm = ReplayLM(['{"relevant": [3, 1, 1, 0, 7, -2]}'])
    out = PromptedRelevanceFilter(lm=lm).run_one(FilterIn("What did Caroline do?", CANDIDATES))
    assert out.keep == (0, 2) and out.error is None
    prompt = lm.requests[0].messages[-1]["content"]
    assert "1. Caroline attended a support group." in prompt and "3. Caroline adopted a dog." in prompt
    assert lm.requests[0].json_schema["properties"]["relevant"]["maxItems"] == 3


def test_fenced_reply_and_empty_selection():
    lm = ReplayLM(['```json\n{"relevant": []}\n```'])
    assert PromptedRelevanceFilter(lm=lm).run_one(FilterIn("q", CANDIDATES)).keep == ()


def test_unusable_reply_keeps_everything():
    stage = PromptedRelevanceFilter(lm=ReplayLM(["all of them", "1, 2"]))
    out = stage.run_one(FilterIn("q", CANDIDATES))
    assert out.keep == (0, 1, 2) and out.error and len(stage.failures) == 1


def test_no_candidates_costs_no_call_and_long_candidates_are_clipped():
    lm = ReplayLM(['{"relevant": [1]}'])
    stage = PromptedRelevanceFilter(lm=lm, prompt="emem/filter_arguments", max_chars_per_candidate=20)
    outs = stage([FilterIn("q", ()), FilterIn("q", ("x" * 100,))])
    assert outs[0].keep == () and outs[1].keep == (0,)
    assert len(lm.requests) == 1 and "x" * 17 + "..." in lm.requests[0].messages[-1]["content"]
    assert "numbered list of terms" in lm.requests[0].messages[-1]["content"]
