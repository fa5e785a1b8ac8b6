"""Plan family: rendering the published prompt, parsing plans, depth from complexity (ReplayLM)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from memlab.stages.plan import FixedPlanner, PlanIn, PromptedPlanner
from tests.fakes import ReplayLM


def _plan(**fields) -> str:
    plan = {"complexity": "HIGH", "retrieval_rationale": "many events", "lexical_keys": ["Tomas", "marathon"],
            "temporalConstraints": {"start": "2023-03-01T00:00:00", "end": "2023-03-31T23:59:59"},
            "semantic_query": "Tomas ran marathons."}
    plan.update(fields)
    return json.dumps(plan)


def test_render_uses_the_published_prompt_and_states_the_question_date():
    stage = PromptedPlanner(lm=ReplayLM([]), max_keys=4)
    request = stage.render(PlanIn("What did Tomas run?", datetime(2023, 6, 1)))
    prompt = request.messages[-1]["content"]
    assert prompt.startswith("Analyze the following user query and generate a retrieval plan.")
    assert "USER QUERY: What did Tomas run? (asked on 2023-06-01T00:00:00)" in prompt
    schema = request.json_schema["properties"]
    assert schema["complexity"]["enum"] == ["LOW", "HIGH"] and schema["lexical_keys"]["maxItems"] == 4


def test_high_complexity_plans_the_maximum_depth():
    out = PromptedPlanner(lm=ReplayLM([_plan()])).run_one(PlanIn("What races did Tomas run in March?"))
    assert out.depth == 20 and out.complexity == "HIGH"
    assert out.lexical_keys == ("Tomas", "marathon") and out.semantic_query == "Tomas ran marathons."
    assert (out.start, out.end) == (datetime(2023, 3, 1), datetime(2023, 3, 31, 23, 59, 59))


def test_low_complexity_fenced_snake_case_key_and_date_only_end():
    text = "```json\n" + _plan(complexity="low", temporalConstraints=None,
                                 temporal_constraints={"start": "2023-03-01", "end": "2023-03-05"}) + "\n```"
    out = PromptedPlanner(lm=ReplayLM([text]), min_depth=3).run_one(PlanIn("q"))
    assert out.depth == 3 and out.complexity == "LOW"
    assert out.end == datetime(2023, 3, 5, 23, 59, 59)


def test_unusable_fields_get_safe_values():
    text = _plan(lexical_keys=["", "Tomas", "Tomas", " x "], semantic_query="  ",
                 temporalConstraints={"start": "2023-05-01", "end": "2023-04-01"})
    out = PromptedPlanner(lm=ReplayLM([text])).run_one(PlanIn("Where does Tomas live?"))
    assert out.lexical_keys == ("Tomas", "x")
    assert out.semantic_query == "Where does Tomas live?"
    assert out.start is None and out.end is None
    out = PromptedPlanner(lm=ReplayLM([_plan(temporalConstraints={"start": "", "end": "n/a"})])).run_one(PlanIn("q"))
    assert out.start is None and out.end is None


def test_invalid_plan_falls_back_to_the_query_at_maximum_depth():
    lm = ReplayLM(['{"complexity": "MEDIUM"}', "no idea"])
    stage = PromptedPlanner(lm=lm, max_depth=15)
    out = stage.run_one(PlanIn("Where does Tomas live?"))
    assert out.depth == 15 and out.semantic_query == "Where does Tomas live?" and out.error
    assert len(stage.failures) == 1 and len(lm.requests) == 2


def test_fixed_planner_and_settings():
    out = FixedPlanner(depth=7).run_one(PlanIn("q"))
    assert out.depth == 7 and out.semantic_query == "q" and out.lexical_keys == () and out.start is None
    with pytest.raises(ValueError):
        FixedPlanner(depth=0)
    with pytest.raises(ValueError, match="min_depth"):
        PromptedPlanner(lm=ReplayLM([]), min_depth=5, max_depth=3)


def test_temporal_constraints_are_nullable_and_null_means_no_range():
    request = PromptedPlanner(lm=ReplayLM([])).render(PlanIn("Where does Tomas live?"))
    options = request.json_schema["properties"]["temporalConstraints"]["anyOf"]
    assert {"type": "null"} in options and any(o.get("type") == "object" for o in options)
    out = PromptedPlanner(lm=ReplayLM([_plan(temporalConstraints=None)])).run_one(PlanIn("Where does Tomas live?"))
    assert out.start is None and out.end is None and out.error is None


@pytest.mark.parametrize("copied", [
    {"lexical_keys": ["Starbucks", "Tomas"]},
    {"lexical_keys": ["bob"]},
    {"temporalConstraints": {"start": "2025-11-01T00:00:00", "end": "2025-11-30T23:59:59"}},
    {"semantic_query": "The user is asking about the scheduled meeting with Bob, including location and time."},
])
def test_a_plan_copying_the_prompt_example_is_retried_then_falls_back(copied):
    lm = ReplayLM([_plan(**copied), _plan(**copied)])
    stage = PromptedPlanner(lm=lm, max_depth=20)
    out = stage.run_one(PlanIn("What races did Tomas run in March?", datetime(2023, 6, 1)))
    assert len(lm.requests) == 2 and "example" in out.error
    assert out.semantic_query == "What races did Tomas run in March?" and out.start is None
    assert len(stage.failures) == 1


def test_a_copy_is_retried_and_the_corrected_plan_is_used():
    lm = ReplayLM([_plan(lexical_keys=["Starbucks"]), _plan()])
    out = PromptedPlanner(lm=lm).run_one(PlanIn("What races did Tomas run in March?"))
    assert out.error is None and out.lexical_keys == ("Tomas", "marathon") and len(lm.requests) == 2


def test_the_retry_is_a_fresh_call_on_the_prompt_without_the_worked_example():
    lm = ReplayLM([_plan(lexical_keys=["Starbucks"]), _plan()])
    PromptedPlanner(lm=lm).run_one(PlanIn("What races did Tomas run in March?"))
    first, retry = lm.requests
    assert "Starbucks" in first.messages[0]["content"]
    assert len(retry.messages) == 1 and "Starbucks" not in retry.messages[0]["content"]
    assert "What races did Tomas run in March?" in retry.messages[0]["content"]
    assert retry.json_schema == first.json_schema
    follow_up = ReplayLM([_plan(lexical_keys=["Starbucks"]), _plan()])
    PromptedPlanner(lm=follow_up, retry_prompt=None).run_one(PlanIn("What races did Tomas run in March?"))
    assert len(follow_up.requests[1].messages) == 3


def test_example_names_or_year_that_the_query_itself_uses_are_not_copies():
    stage = PromptedPlanner(lm=ReplayLM([
        _plan(lexical_keys=["Bob", "Starbucks"]),
        _plan(temporalConstraints={"start": "2025-11-01", "end": "2025-11-30"}),
    ]))
    out = stage.run_one(PlanIn("When did Bob go to Starbucks?"))
    assert out.error is None and out.lexical_keys == ("Bob", "Starbucks")
    out = stage.run_one(PlanIn("What did Tomas do last month?", datetime(2025, 12, 3)))
    assert out.error is None and out.start == datetime(2025, 11, 1)
