"""Compress family: window arithmetic, rendering, parsing and validation (ReplayLM)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from memlab.stages.compress import ChunkCompressor, CompressIn, PromptedCompressor, parse_timestamp, sliding_windows
from memlab.stages.temporal import RuleTemporalNormalizer
from memlab.types import Session, Turn
from tests.fakes import ReplayLM

WHEN = datetime(2023, 3, 10, 18, 30)


def _window() -> CompressIn:
    turns = (
        Turn("D1:1", "Priya", "Hi Tomas! How are you?", WHEN),
        Turn("D1:2", "Tomas", "Great! I ran the city marathon yesterday.", WHEN),
        Turn("D1:3", "Priya", "Wow, congrats! I adopted a cat named Mochi.", WHEN),
    )
    return CompressIn("c1", Session("session_1", WHEN, turns), turns, "session_1/w0", ("Priya", "Tomas"))


def _unit(content, entities=(), source_turns=("D1:2",), timestamp="2023-03-09", salience="high", topic="Sport"):
    return {"content": content, "entities": list(entities), "topic": topic, "timestamp": timestamp,
            "salience": salience, "source_turns": list(source_turns)}


def _reply(*units) -> str:
    return json.dumps({"memory_units": list(units)})


@pytest.mark.parametrize("window,stride", [(8, 6), (20, 5), (20, 15), (5, 5), (3, 1)])
def test_sliding_windows_cover_every_turn(window, stride):
    for n in range(0, 40):
        _check_windows(n, window, stride)


def _check_windows(n, window, stride):
    bounds = sliding_windows(n, window, stride)
    covered = set()
    for start, end in bounds:
        assert 0 <= start < end <= n
        covered.update(range(start, end))
    assert covered == set(range(n))
    assert [s for s, _ in bounds] == list(range(0, stride * len(bounds), stride))  # a start every stride turns
    assert all(end - start == window for start, end in bounds[:-1])  # only the last may be shorter
    assert len(bounds) <= 1 or bounds[-2][1] < n  # no window is redundant


def test_sliding_windows_examples_and_errors():
    assert sliding_windows(16, 8, 6) == [(0, 8), (6, 14), (12, 16)]
    assert sliding_windows(20, 20, 5) == [(0, 20)]
    assert sliding_windows(30, 20, 5) == [(0, 20), (5, 25), (10, 30)]
    assert sliding_windows(3, 8, 6) == [(0, 3)] and sliding_windows(0, 8, 6) == []
    with pytest.raises(ValueError, match="leave turns out"):
        sliding_windows(10, 4, 5)
    with pytest.raises(ValueError, match="positive"):
        sliding_windows(10, 0, 1)


def test_render_annotates_dates_lists_ids_and_bounds_the_schema():
    stage = PromptedCompressor(lm=ReplayLM([]), normalizer=RuleTemporalNormalizer(), max_units=4, max_entities=3)
    request = stage.render(stage.resolve_dates([_window()])[0])
    prompt = request.messages[-1]["content"]
    assert "You are a memory encoder in a long-term memory system." in prompt  # published A.1
    assert "Window Start Time: 2023-03-10T18:30:00" in prompt
    assert "Participants: Priya, Tomas" in prompt
    assert "[D1:2] Tomas: Great! I ran the city marathon yesterday (9 March 2023)." in prompt
    assert '"source_turns"' in prompt
    units = request.json_schema["properties"]["memory_units"]
    assert units["maxItems"] == 4
    assert units["items"]["properties"]["entities"]["maxItems"] == 3
    assert units["items"]["properties"]["source_turns"]["items"]["enum"] == ["D1:1", "D1:2", "D1:3"]


def test_parse_valid_units_keep_metadata_and_provenance():
    lm = ReplayLM([_reply(
        _unit("Tomas ran the city marathon on 2023-03-09.", ["Tomas", "city marathon"]),
        _unit("Priya adopted a cat named Mochi.", ["Priya", "Mochi"], ["D1:3"], "2023-03-10T18:30:00", "medium", "Pets"),
    )])
    out = PromptedCompressor(lm=lm).run_one(_window())
    assert [u.text for u in out.units] == ["Tomas ran the city marathon on 2023-03-09.", "Priya adopted a cat named Mochi."]
    first, second = out.units
    assert first.source_ids == ("D1:2",) and second.source_ids == ("D1:3",)
    assert first.timestamp == datetime(2023, 3, 9) and second.timestamp == WHEN
    assert first.attributes == {"session": "session_1", "entities": ["Tomas", "city marathon"], "topic": "Sport", "salience": "high"}
    assert first.id == "c1/session_1/w0/u0" and first.kind == "unit"


def test_resolved_dates_the_model_was_shown_count_as_grounded():
    # The model sees "yesterday (9 March 2023)"; a unit naming that date is grounded in the window.
    lm = ReplayLM([_reply(_unit("Tomas ran the city marathon on 9 March 2023.", ["Tomas", "9 March 2023"]))])
    out = PromptedCompressor(lm=lm, normalizer=RuleTemporalNormalizer()).run_one(_window())
    assert [u.text for u in out.units] == ["Tomas ran the city marathon on 9 March 2023."]
    assert out.units[0].attributes["entities"] == ["Tomas", "9 March 2023"]


def test_parse_fenced_json():
    lm = ReplayLM(["Here you go:\n```json\n" + _reply(_unit("Tomas ran a marathon.", ["Tomas"])) + "\n```"])
    out = PromptedCompressor(lm=lm).run_one(_window())
    assert [u.text for u in out.units] == ["Tomas ran a marathon."]


def test_empty_list_gates_the_window_out_without_failure():
    stage = PromptedCompressor(lm=ReplayLM([_reply()]))
    out = stage.run_one(_window())
    assert out.units == () and out.error is None and stage.failures == []


def test_invalid_output_is_retried_then_falls_back_and_is_counted():
    lm = ReplayLM(["not json", '{"units": 3}'])
    stage = PromptedCompressor(lm=lm)
    out = stage.run_one(_window())
    assert out.units == () and out.error
    assert len(stage.failures) == 1 and len(lm.requests) == 2


def test_units_all_rejected_by_validation_are_retried_then_fall_back():
    copied = _reply(_unit("Alice agreed to meet Bob at the Starbucks.", ["Alice", "Bob"]), _unit("  "))
    lm = ReplayLM([copied, copied])
    stage = PromptedCompressor(lm=lm)
    out = stage.run_one(_window())
    assert out.units == () and "failed validation" in out.error
    assert len(stage.failures) == 1 and len(lm.requests) == 2


def test_a_retry_after_all_units_were_rejected_can_succeed():
    lm = ReplayLM([_reply(_unit("Alice met Bob.", ["Alice"])), _reply(_unit("Tomas ran a marathon.", ["Tomas"]))])
    stage = PromptedCompressor(lm=lm)
    out = stage.run_one(_window())
    assert [u.text for u in out.units] == ["Tomas ran a marathon."] and out.error is None and stage.failures == []


def test_the_retry_is_a_fresh_call_on_the_prompt_without_the_worked_example():
    copied = _reply(_unit("Alice agreed to meet Bob at the Starbucks.", ["Alice", "Bob"]))
    lm = ReplayLM([copied, _reply(_unit("Tomas ran a marathon.", ["Tomas"]))])
    PromptedCompressor(lm=lm).run_one(_window())
    first, retry = (request.messages for request in lm.requests)
    assert "Starbucks" in first[0]["content"]
    assert len(retry) == 1 and "Starbucks" not in retry[0]["content"]  # not a follow-up: a new prompt
    assert "[D1:2] Tomas: Great! I ran the city marathon" in retry[0]["content"]  # the same window
    assert lm.requests[1].json_schema == lm.requests[0].json_schema
    follow_up = ReplayLM([copied, copied])
    PromptedCompressor(lm=follow_up, retry_prompt=None).run_one(_window())
    assert len(follow_up.requests[1].messages) == 3  # the request, the reply, the complaint


def test_default_budget_leaves_room_for_a_full_list_of_units():
    assert PromptedCompressor(lm=ReplayLM([])).render(_window()).max_tokens >= 1024


def test_provenance_falls_back_to_the_window_ids():
    lm = ReplayLM([_reply(
        _unit("Tomas ran a marathon.", ["Tomas"], source_turns=["D9:9", "nonsense"]),
        _unit("Priya adopted Mochi.", ["Priya"], source_turns=[]),
        _unit("Priya has a cat.", ["Priya"], source_turns=["[D1:3]", "D7:1"]),
    )])
    out = PromptedCompressor(lm=lm).run_one(_window())
    assert [u.source_ids for u in out.units] == [("D1:1", "D1:2", "D1:3"), ("D1:1", "D1:2", "D1:3"), ("D1:3",)]


def test_units_naming_people_absent_from_the_window_are_dropped():
    lm = ReplayLM([_reply(
        # the prompt's example, copied: Alice and Bob are not in the window
        _unit("Alice agreed to meet Bob at the Starbucks.", ["Alice", "Bob", "Starbucks"]),
        # a participant of the conversation who does not speak or appear in this window
        _unit("Maria ran a marathon.", ["Maria"]),
        # an entity not in the window but not in the content either: only the entity goes
        _unit("Tomas ran a marathon.", ["Tomas", "Boston"]),
    )])
    window = _window()
    window = CompressIn(window.conversation_id, window.session, window.turns, window.window_id, ("Priya", "Tomas", "Maria"))
    out = PromptedCompressor(lm=lm).run_one(window)
    assert [u.text for u in out.units] == ["Tomas ran a marathon."]
    assert out.units[0].attributes["entities"] == ["Tomas"]


def test_bad_timestamps_and_salience_fall_back_to_window_values():
    lm = ReplayLM([_reply(
        _unit("Tomas ran a marathon.", ["Tomas"], timestamp="yesterday", salience="URGENT"),
        _unit("Priya adopted Mochi.", ["Priya"], timestamp="1890-01-01"),
        _unit("Tomas ran a marathon.", ["Tomas"]),  # duplicate text in one window: dropped
    )])
    out = PromptedCompressor(lm=lm).run_one(_window())
    assert [u.timestamp for u in out.units] == [WHEN, WHEN]
    assert out.units[0].attributes["salience"] == "medium"


def test_parse_timestamp():
    assert parse_timestamp("2025-11-20T14 :00:00") == datetime(2025, 11, 20, 14)
    assert parse_timestamp("2023-05-07") == datetime(2023, 5, 7)
    assert parse_timestamp("2023-05-07T10:00:00Z") == datetime(2023, 5, 7, 10)
    assert parse_timestamp("last week") is None and parse_timestamp(None) is None


def test_chunk_compressor_stores_the_window_raw():
    out = ChunkCompressor().run_one(_window())
    (unit,) = out.units
    assert unit.source_ids == ("D1:1", "D1:2", "D1:3") and unit.kind == "chunk"
    assert unit.text.startswith("[10 March 2023]\nPriya: Hi Tomas!") and "yesterday." in unit.text
