"""EDU extraction (EMem 3.2) and event-argument extraction: render/parse with a scripted LM."""

from __future__ import annotations

import json
from datetime import datetime

from memlab.stages.arguments import ArgumentIn, PromptedArgumentExtractor, normalize_argument
from memlab.stages.edu import PromptedEDUExtractor, validate_sources
from memlab.stages.segment import SegmentIn
from memlab.types import Session, Turn
from tests.fakes import ReplayLM

TURNS = (
    Turn("D1:1", "Caroline", "I went to the LGBTQ support group yesterday."),
    Turn("D1:2", "Melanie", "That's great! I signed up for a pottery class."),
    Turn("D1:3", "Caroline", "The stories there were so inspiring."),
)
SESSION = Session("session_1", datetime(2023, 5, 8, 13, 56), TURNS)


def extractor(script, **kwargs) -> PromptedEDUExtractor:
    from memlab.stages.temporal import RuleTemporalNormalizer

    return PromptedEDUExtractor(lm=ReplayLM(script), **{"normalizer": RuleTemporalNormalizer(), **kwargs})


def test_render_resolves_dates_in_code_and_bounds_the_output():
    stage = extractor([], max_edus=5)
    request = stage.render(stage.windows(SegmentIn("c", SESSION))[0])
    prompt = request.messages[-1]["content"]
    session_part = prompt.split("Now the session to process.")[1]
    assert "Session date: 8 May 2023" in session_part
    assert "[D1:1] Caroline: I went to the LGBTQ support group yesterday (7 May 2023)." in session_part
    # three turns: the call asks for fewer EDUs than turns (2), below max_edus
    assert request.json_schema["properties"]["edus"]["maxItems"] == 2 and "at most 2 EDUs" in prompt
    long_session = Session("s", SESSION.timestamp, tuple(Turn(f"D1:{i}", "Ann", f"fact {i}") for i in range(12)))
    request = stage.render(stage.windows(SegmentIn("c", long_session))[0])
    assert request.json_schema["properties"]["edus"]["maxItems"] == 5 and "at most 5 EDUs" in request.messages[-1]["content"]


def test_default_windows_are_short():
    session = Session("s", SESSION.timestamp, tuple(Turn(f"D1:{i}", "Ann", f"fact {i}") for i in range(30)))
    stage = extractor([])
    assert [len(w.turns) for w in stage.windows(SegmentIn("c", session))] == [12, 12, 6]
    assert all(stage.edus_per_call(w) < len(w.turns) for w in stage.windows(SegmentIn("c", session)))


def _edu(text, source="D1:1"):
    return {"text": text, "source_turns": [source]}


def test_duplicate_edus_are_dropped_within_a_window_and_across_windows():
    session = Session("s", SESSION.timestamp, TURNS + tuple(Turn(f"D1:{i}", t.speaker, t.text) for i, t in
                                                            zip((4, 5, 6), TURNS)))
    reply1 = json.dumps({"edus": [_edu("Caroline went to the LGBTQ support group."),
                                  _edu("caroline went to the  LGBTQ support-group!", "D1:2"),
                                  _edu("Melanie signed up for a pottery class.", "D1:2")]})
    reply2 = json.dumps({"edus": [_edu("Caroline went to the LGBTQ support group.", "D1:4"),
                                  _edu("Caroline found the stories inspiring.", "D1:6")]})
    out = extractor([reply1, reply2], max_turns_per_call=3).run_one(SegmentIn("c", session))
    assert [u.text for u in out.units] == ["Caroline went to the LGBTQ support group.",
                                           "Melanie signed up for a pottery class.",
                                           "Caroline found the stories inspiring."]
    assert out.error is None


def test_repetition_loops_are_retried_then_keep_the_distinct_edus():
    looped = json.dumps({"edus": [_edu("Melanie signed up for a pottery class.", "D1:2")]
                         + [_edu("Caroline went to the support group.")] * 3})
    stage = extractor([looped, looped], max_edus=5)
    out = stage.run_one(SegmentIn("c", SESSION))
    assert [u.text for u in out.units] == ["Melanie signed up for a pottery class.", "Caroline went to the support group."]
    assert "repeated 3 times" in out.error and len(stage.failures) == 1
    # an EDU that loops on a phrase is not salvaged; with nothing else, the window has no EDUs
    phrase = json.dumps({"edus": [_edu("Caroline went to the group and the group and the group and the group.")]})
    stage = extractor([phrase, phrase])
    out = stage.run_one(SegmentIn("c", SESSION))
    assert out.units == () and "over and over" in out.error and len(stage.failures) == 1
    cut_off = json.dumps({"edus": [_edu("Melanie signed up for pottery.")] * 3})[:-12]  # 2 complete + 1 cut
    good = json.dumps({"edus": [_edu("Melanie signed up for a pottery class.", "D1:2")]})
    stage = extractor([phrase, good, cut_off, good])
    for _ in range(2):
        out = stage.run_one(SegmentIn("c", SESSION))
        assert [u.text for u in out.units] == ["Melanie signed up for a pottery class."] and out.error is None
    assert len(stage.lm.requests) == 4 and "over and over" in stage.lm.requests[1].messages[-1]["content"]
    assert "cut off" in stage.lm.requests[3].messages[-1]["content"]


def test_long_sessions_are_split_into_windows_of_turns():
    stage = extractor(lambda r: json.dumps({"edus": []}), max_turns_per_call=2)
    windows = stage.windows(SegmentIn("c", SESSION))
    assert [[t.id for t in w.turns] for w in windows] == [["D1:1", "D1:2"], ["D1:3"]]
    stage([SegmentIn("c", SESSION)])
    assert len(stage.lm.requests) == 2
    assert len(extractor([], max_turns_per_call=None).windows(SegmentIn("c", SESSION))) == 1


def test_parse_valid_and_fenced_output_with_provenance_validation():
    reply = "Here you go:\n```json\n" + json.dumps({"edus": [
        {"text": "Caroline attended an LGBTQ support group on 7 May 2023.", "source_turns": ["[D1:1]", "D1:3"]},
        {"text": "Melanie signed up for a pottery class.", "source_turns": ["D7:2"]},  # wrong id -> word fallback
        {"text": "Quantum zebras orbit Jupiter.", "source_turns": ["D1:1"]},  # shares no word: dropped
    ]}) + "\n```"
    out = extractor([reply]).run_one(SegmentIn("conv", SESSION))
    assert out.error is None
    assert [u.source_ids for u in out.units] == [("D1:1", "D1:3"), ("D1:2",)]
    first = out.units[0]
    assert first.kind == "edu" and first.timestamp == SESSION.timestamp
    assert first.attributes["session"] == "session_1" and first.attributes["speakers"] == ["Caroline"]
    assert first.speaker == "Caroline" and first.id.startswith("conv/session_1/")
    assert len({u.id for u in out.units}) == 2


def test_invalid_output_is_retried_then_falls_back_to_no_units():
    stage = extractor(["no json here", '{"edus": [{"text": 3}]}'])
    out = stage.run_one(SegmentIn("c", SESSION))
    assert out.units == () and out.error
    assert len(stage.failures) == 1 and len(stage.lm.requests) == 2


def test_retry_recovers():
    good = json.dumps({"edus": [{"text": "Melanie signed up for a pottery class.", "source_turns": ["D1:2"]}]})
    stage = extractor(["oops", good])
    out = stage.run_one(SegmentIn("c", SESSION))
    assert [u.source_ids for u in out.units] == [("D1:2",)] and not stage.failures


def test_validate_sources():
    assert validate_sources(["D1:3", "D1:1", "D1:1"], "x", TURNS) == ("D1:1", "D1:3")
    assert validate_sources(["nope"], "pottery class", TURNS) == ("D1:2",)
    assert validate_sources([], "Caroline support group stories", TURNS, max_fallback=1) == ("D1:1",)
    assert validate_sources(["nope"], "zebra", TURNS) == ()


def test_argument_extraction_batches_edus_and_matches_by_id():
    edus = ("Caroline attended an LGBTQ support group on 7 May 2023.", "Melanie signed up for a pottery class.")
    reply = json.dumps({"events": [
        {"id": 2, "event_type": "sign up", "arguments": [{"role": "agent", "argument": "Melanie"},
                                                          {"role": "theme", "argument": "pottery class"}]},
        {"id": 1, "event_type": "attend", "arguments": [
            {"role": "agent", "argument": "Caroline"},
            {"role": "x", "argument": "a very long argument that is really a whole sentence of text"}]},
    ]})
    stage = PromptedArgumentExtractor(lm=ReplayLM([reply]), max_argument_words=8)
    out = stage.run_one(ArgumentIn(edus))
    request = stage.lm.requests[0]
    assert "1. Caroline attended" in request.messages[-1]["content"]
    assert request.json_schema["properties"]["events"]["maxItems"] == 2
    assert out.frames[0].event_type == "attend" and out.frames[0].arguments == (("agent", "Caroline"),)
    assert out.frames[1].arguments == (("agent", "Melanie"), ("theme", "pottery class"))


def test_arguments_not_in_their_edu_are_dropped_unless_asked_to_keep_them():
    edus = ("Caroline went to the Pride parade.", "Melanie painted a sunrise at the lake.")
    reply = json.dumps({"events": [
        {"id": 1, "event_type": "attend", "arguments": [
            {"role": "agent", "argument": "caroline"}, {"role": "location", "argument": "Tokyo"},
            {"role": "time", "argument": "March 2024"}, {"role": "event", "argument": "Pride  Parade"}]},
        {"id": 2, "event_type": "paint", "arguments": [
            {"role": "agent", "argument": "Melanie"}, {"role": "theme", "argument": "Pride parade"}]},
    ]})
    grounded = PromptedArgumentExtractor(lm=ReplayLM([reply])).run_one(ArgumentIn(edus))
    assert grounded.frames[0].arguments == (("agent", "caroline"), ("event", "Pride Parade"))
    assert grounded.frames[1].arguments == (("agent", "Melanie"),)
    kept = PromptedArgumentExtractor(lm=ReplayLM([reply]), grounded_only=False).run_one(ArgumentIn(edus))
    assert [len(f.arguments) for f in kept.frames] == [4, 2]


def test_argument_extraction_fallback_gives_empty_frames():
    stage = PromptedArgumentExtractor(lm=ReplayLM(["nothing", "still nothing"]))
    out = stage.run_one(ArgumentIn(("a", "b", "c")))
    assert len(out.frames) == 3 and all(f.arguments == () for f in out.frames) and out.error
    assert len(stage.failures) == 1


def test_normalize_argument():
    assert normalize_argument("  The  Pottery Class. ") == "the pottery class"


# -- structured chunks (appendix A) ------------------------------------------------------------
from memlab.stages.edu import StructuredChunkEDUExtractor, split_blocks  # noqa: E402

LONG_ANSWER = (
    "Here are some ideas for your trip to Kyoto:\n\n"
    "1. Visit Fushimi Inari shrine early in the morning to avoid crowds.\n\n"
    "2. Try kaiseki dinner at a ryokan in Gion.\n\n"
    "3. Rent a bicycle to ride along the Kamo river.\n\n"
    "For budget, expect about 15,000 yen per day."
)


def test_split_blocks():
    assert len(split_blocks(LONG_ANSWER)) == 5
    assert split_blocks("- a\n- b\n  more about b\n- c") == ["- a", "- b\nmore about b", "- c"]
    merged = split_blocks("\n\n".join(f"p{i}" for i in range(10)), max_blocks=4)
    assert len(merged) == 4 and "".join(merged).replace("\n", "") == "".join(f"p{i}" for i in range(10))


def test_structured_chunks_for_long_turns_and_generic_edus_for_the_rest():
    session = Session("s1", datetime(2023, 6, 1), (
        Turn("t1", "user", "I am planning a trip to Kyoto next month, any ideas?"),
        Turn("t2", "assistant", LONG_ANSWER),
        Turn("t3", "user", "Thanks, I love cycling."),
        Turn("t4", "user", "Any tips for a rainy day?"),
    ))

    def script(request):
        prompt = request.messages[-1]["content"]
        if "structured chunks" in prompt:
            assert "User message: user: I am planning a trip to Kyoto" in prompt and "[2] 1. Visit Fushimi" in prompt
            return json.dumps({"edus": ["The assistant suggested visiting Fushimi Inari shrine early in the morning."],
                               "chunks": [{"first_block": 2, "last_block": 4,
                                           "summary": "Answers the user's request for Kyoto trip ideas with sights, food and cycling."},
                                          {"first_block": 9, "last_block": 12, "summary": "out of range"}]})
        assert LONG_ANSWER not in prompt  # the long turn is not sent to the generic extractor
        return json.dumps({"edus": [{"text": "The user is planning a trip to Kyoto in July 2023.", "source_turns": ["t1"]},
                                    {"text": "The user loves cycling.", "source_turns": ["t3"]}]})

    lm = ReplayLM(script)
    stage = StructuredChunkEDUExtractor(lm=lm, edu_extractor=PromptedEDUExtractor(lm=lm), long_turn_chars=200)
    out = stage.run_one(SegmentIn("c", session))
    by_kind = {}
    for unit in out.units:
        by_kind.setdefault(unit.kind, []).append(unit)
    assert [u.source_ids for u in by_kind["edu"]] == [("t1",), ("t3",), ("t2",)]
    (chunk,) = by_kind["chunk"]
    assert chunk.text.startswith("Answers the user's request") and chunk.source_ids == ("t2",)
    assert chunk.attributes["content"].startswith("1. Visit Fushimi") and chunk.attributes["content"].endswith("Kamo river.")
    assert len(lm.requests) == 2 and out.error is None


def test_chunk_answerer_context_shows_the_full_chunk():
    from memlab.pipelines.emem.pipeline import render_edu
    from memlab.types import MemoryUnit

    unit = MemoryUnit("u", "summary text", ("t2",), datetime(2023, 6, 1), kind="chunk",
                      attributes={"content": "full chunk", "speakers": ["assistant"]})
    assert render_edu(unit) == "[1 June 2023] (assistant) full chunk"
    assert render_edu(unit, full=False) == "[1 June 2023] (assistant) summary text"


def test_windows_are_bounded_by_characters_too():
    stage = extractor([], max_turns_per_call=None, max_chars_per_call=120, max_chars_per_turn=100)
    windows = stage.windows(SegmentIn("c", SESSION))
    # annotated lines are 74, 62 and 53 characters: 74 + 62 > 120, 62 + 53 <= 120
    assert [[t.id for t in w.turns] for w in windows] == [["D1:1"], ["D1:2", "D1:3"]]
    assert all(len(line) <= 100 for w in windows for line in w.lines)
