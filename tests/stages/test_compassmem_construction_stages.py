"""CompassMem's prompted construction stages (appendix F.1) on hand-written replies, including
the malformed ones the default 1.5B model writes."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from memlab.lm.errors import ParseError
from memlab.stages.event_view import EventView
from memlab.stages.fuse import FuseIn, PromptedEventFuser
from memlab.stages.relate import PromptedRelationExtractor, RelateIn, normalise_label
from memlab.stages.segment import PromptedEventSegmenter, SegmentIn
from memlab.types import Session, Turn
from tests.fakes import ReplayLM

DAY = datetime(2023, 5, 7)
TURNS = tuple(Turn(f"D1:{i}", speaker, text) for i, (speaker, text) in enumerate([
    ("Ann", "I adopted a puppy named Rex yesterday."), ("Bob", "Congrats! What breed is Rex?"),
    ("Ann", "Rex is a beagle and chews my shoes."), ("Bob", "I am off to Lisbon next week."),
    ("Ann", "Lisbon sounds lovely, enjoy the trip.")], start=1))
SESSION = Session("session_1", DAY, TURNS)


def segment(*replies: str, **settings):
    stage = PromptedEventSegmenter(lm=ReplayLM(list(replies)), **settings)
    return stage, stage([SegmentIn("c1", SESSION)])[0]


def events(*rows) -> str:
    return json.dumps({"events": [{"turns": t, "summary": s, "people": p} for t, s, p in rows]})


def test_events_keep_their_turns_people_and_the_session_date():
    stage, out = segment(events((["D1:1", "D1:2", "D1:3"], "Ann adopted a beagle puppy named Rex.", ["Ann", "Bob"]),
                                (["[D1:4]", "/D1:5"], "Bob is going to Lisbon next week.", ["bob", "Zed"])))
    assert out.error is None and [u.source_ids for u in out.units] == [("D1:1", "D1:2", "D1:3"), ("D1:4", "D1:5")]
    assert out.units[1].attributes["participants"] == ["Bob"]  # case fixed, "Zed" is not in the dialog
    assert all(u.kind == "event" and u.timestamp == DAY and not u.attributes["extractive"] for u in out.units)
    request = stage.lm.requests[0]
    assert "7 May 2023" in request.messages[0]["content"] and request.json_schema["properties"]["events"]["maxItems"] == 2


def test_turns_no_event_claims_become_extractive_events():
    _, out = segment(events((["D1:1", "D1:2"], "Ann adopted a puppy named Rex.", ["Ann"])))
    assert [u.source_ids for u in out.units] == [("D1:1", "D1:2"), ("D1:3", "D1:4", "D1:5")]
    assert out.units[1].attributes["extractive"] and out.units[1].text.startswith("Ann: Rex is a beagle")
    assert [u.attributes["provenance"] for u in out.units] == ["stated", "filled"]


def test_with_attach_unclaimed_turns_join_the_event_before_them_or_else_after():
    # D1:1 (before the first event) joins it; D1:4-5 (after the second) join the second
    _, out = segment(events((["D1:2"], "Bob asked what breed Rex is.", ["Bob"]),
                            (["D1:3"], "Rex is a beagle who chews shoes.", ["Ann"])), uncovered="attach")
    assert [u.source_ids for u in out.units] == [("D1:1", "D1:2"), ("D1:3", "D1:4", "D1:5")]
    assert [u.attributes.get("attached_turns") for u in out.units] == [["D1:1"], ["D1:4", "D1:5"]]
    assert [u.attributes["provenance"] for u in out.units] == ["stated", "stated"]
    assert not any(u.attributes["extractive"] for u in out.units)
    # a window with no event (a failed call) still becomes extractive spans: nothing to attach to
    _, failed = segment("not json", "still not json", uncovered="attach")
    assert all(u.attributes["provenance"] == "filled" for u in failed.units)
    assert [t for u in failed.units for t in u.source_ids] == [t.id for t in TURNS]


def test_a_failed_window_is_split_in_two_and_asked_again():
    # the window fails twice (call and retry); its halves (D1:1-2, D1:3-5) are asked once more
    stage, out = segment("not json", "still not json",
                         events((["D1:1"], "Ann adopted a puppy named Rex.", ["Ann"])),
                         events((["D1:4"], "Bob is going to Lisbon next week.", ["Bob"])),
                         split_failed=True, uncovered="attach")
    assert [u.source_ids for u in out.units] == [("D1:1", "D1:2"), ("D1:3", "D1:4", "D1:5")]
    assert [u.id.split("/")[2] for u in out.units] == ["w0a", "w0b"]
    assert all(u.attributes["provenance"] == "stated" for u in out.units) and out.error is not None
    assert [len(r.messages[0]["content"].split("[D1:")) - 1 for r in stage.lm.requests[2:]] == [2, 3]
    # without split_failed the same failure leaves filled spans
    _, plain = segment("not json", "still not json", uncovered="attach")
    assert all(u.attributes["provenance"] == "filled" for u in plain.units)


def test_the_schema_requires_every_event_to_cite_a_turn_of_the_window():
    stage, _ = segment(events((["D1:1"], "Ann adopted a puppy named Rex.", ["Ann"])))
    schema = stage.lm.requests[0].json_schema["properties"]["events"]["items"]["properties"]["turns"]
    assert schema["minItems"] == 1 and schema["items"]["enum"] == [t.id for t in TURNS]
    prompt = stage.lm.requests[0].messages[0]["content"]
    # the published 6-10 per session, as a rate for a 5-turn window: 2 to 2 (half its turns)
    assert "Extract 2-2 comprehensive events" in prompt and "6-10" not in prompt


def test_an_event_citing_no_valid_turn_is_retried_then_guessed_and_counted():
    uncited = events(([], "Bob is going to Lisbon next week.", ["Bob"]),
                     (["D1:9"], "Ann adopted a puppy named Rex.", ["Ann"]))
    stage, out = segment(uncited, uncited)
    assert len(stage.lm.requests) == 2 and "cite none of the dialog's utterance ids" in out.error
    assert len(stage.failures) == 1
    guessed = {u.text: u for u in out.units if u.attributes["provenance"] == "guessed"}
    assert set(guessed) == {"Bob is going to Lisbon next week.", "Ann adopted a puppy named Rex."}
    assert all(0 < len(u.source_ids) <= 2 for u in guessed.values())  # at most two turns, sharing words
    assert {u.attributes["provenance"] for u in out.units} <= {"guessed", "filled"}


def test_a_retry_that_cites_its_turns_is_kept_as_stated():
    stage, out = segment(events(([], "Bob is going to Lisbon next week.", ["Bob"])),
                         events((["D1:4"], "Bob is going to Lisbon next week.", ["Bob"])))
    assert out.error is None and not stage.failures
    assert [(u.source_ids, u.attributes["provenance"]) for u in out.units if not u.attributes["extractive"]] == [
        (("D1:4",), "stated")]


def test_the_issue_23_schema_lets_an_event_cite_nothing_and_guesses_without_a_retry():
    stage, out = segment(events(([], "Bob is going to Lisbon next week.", ["Bob"])), cite_turns=False,
                         prompt="compassmem/event_extract_published")
    assert len(stage.lm.requests) == 1 and out.error is None
    assert "minItems" not in stage.lm.requests[0].json_schema["properties"]["events"]["items"]["properties"]["turns"]
    assert "Extract 6-10 comprehensive events" in stage.lm.requests[0].messages[0]["content"]
    assert "guessed" in {u.attributes["provenance"] for u in out.units}


def test_a_looping_reply_is_retried_and_its_distinct_events_salvaged():
    loop = events(*[(["D1:1"], "Ann adopted a puppy named Rex.", ["Ann"])] * 3)
    stage, out = segment(loop, loop, max_events=5)
    assert "repeated 3 times" in out.error and len(stage.failures) == 1
    assert out.units[0].text == "Ann adopted a puppy named Rex." and len(out.units) == 3  # + D1:2-4, D1:5 extractive


def test_an_empty_or_ungrounded_reply_falls_back_to_extractive_events():
    stage, out = segment('{"events": []}', events((["D1:9"], "Quantum chromodynamics lecture", [])))
    assert out.error and len(stage.failures) == 1
    covered = [t for u in out.units for t in u.source_ids]
    assert covered == [t.id for t in TURNS] and all(u.attributes["extractive"] for u in out.units)


def test_long_sessions_are_cut_into_windows():
    stage = PromptedEventSegmenter(lm=ReplayLM(lambda r: '{"events": []}'), max_turns_per_call=2)
    assert [len(w.turns) for w in stage.windows(SegmentIn("c1", SESSION))] == [2, 2, 1]


VIEWS = (EventView("N0", "Ann adopted Rex", ("D1:1",), ("Ann",), DAY),
         EventView("N1", "Rex chews shoes", ("D1:3",), ("Ann",), DAY),
         EventView("N2", "Bob goes to Lisbon", ("D1:4",), ("Bob",), DAY))


def relate(reply: str):
    stage = PromptedRelationExtractor(lm=ReplayLM([reply, reply]))
    return stage, stage([RelateIn(VIEWS, TURNS, DAY)])[0]


def test_relations_name_events_by_index_with_normalised_labels_and_known_cited_turns():
    reply = json.dumps({"relations": [
        {"source": "E1", "target": "E2", "type": "Cause-Effect", "evidence": ["[D1:1]", "D1:3", "D9:9"]},
        {"source": "2", "target": "[E1]", "type": "elaboration", "evidence": []},  # same pair again: dropped
        {"source": "E3", "target": "E3", "type": "causal", "evidence": []},  # a self-loop: dropped
        {"source": "E1", "target": "E7", "type": "causal", "evidence": []},  # no such event
        {"source": "E3", "target": "E1", "type": "happened before", "evidence": ["/D1:4"]}]})
    stage, out = relate(reply)
    assert [(r.source, r.target, r.label, r.cited_turns) for r in out.relations] == [
        (0, 1, "causal", ("D1:1", "D1:3")), (2, 0, "temporal_before", ("D1:4",))]
    prompt = stage.lm.requests[0].messages[0]["content"]
    assert "E1 [D1:1] (Ann) Ann adopted Rex" in prompt and "[D1:4] Bob: I am off to Lisbon" in prompt


def test_a_reply_naming_no_known_event_is_a_counted_failure():
    stage, out = relate(json.dumps({"relations": [{"source": "A", "target": "B", "type": "x", "evidence": []}]}))
    assert out.relations == () and out.error and len(stage.failures) == 1


def test_one_event_sessions_make_no_call():
    stage = PromptedRelationExtractor(lm=ReplayLM([]))
    assert stage([RelateIn(VIEWS[:1], TURNS, DAY)])[0].relations == ()


@pytest.mark.parametrize("predicate, label", [("causes", "causal"), ("Follow-up", "follow_up"), ("then", "temporal_after"),
                                              ("sub-event", "part_of"), ("similar", "parallel"), ("friendship", "related")])
def test_predicates_are_normalised_onto_the_label_set(predicate, label):
    assert normalise_label(predicate) == label


def fuse(reply: str):
    stage = PromptedEventFuser(lm=ReplayLM([reply, reply]))
    return stage, stage([FuseIn(VIEWS[1], VIEWS[0], 0.93)])[0]


def test_fusion_decisions():
    _, same = fuse('{"same_event": true, "has_overlap": true, "relation_type": "causal", "reasoning": "one event"}')
    assert same.decision == "merge" and same.relation is None
    _, link = fuse('{"same_event": false, "has_overlap": true, "relation_type": "leads to", "reasoning": "r"}')
    assert link.decision == "link" and link.relation == "causal"
    _, bare = fuse('{"same_event": false, "has_overlap": true, "relation_type": null, "reasoning": "r"}')
    assert bare.decision == "link" and bare.relation == "related"
    stage, bad = fuse('{"same_event": "maybe"}')
    assert bad.decision == "new" and bad.error and len(stage.failures) == 1
    prompt = stage.lm.requests[0].messages[0]["content"]
    assert "EVENT A (earlier session): N0 [7 May 2023] (Ann) Ann adopted Rex" in prompt


def test_parse_errors_are_parse_errors():
    with pytest.raises(ParseError):
        PromptedRelationExtractor(lm=ReplayLM([])).parse("no json here", RelateIn(VIEWS, TURNS, DAY))
