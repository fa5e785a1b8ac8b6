"""LoCoMo's session annotations (event_summary, observation, session_summary) as gold-side
``Conversation.annotations``: loaded from the real dev file and from small hand-made files,
remapped by ``anonymise``, and out of reach of every pipeline."""

from __future__ import annotations

import ast
import copy
import json
import re
from dataclasses import fields
from datetime import datetime
from pathlib import Path

import pytest

from memlab.data import DataError, load_locomo, read_locomo
from memlab.data.anonymise import anonymise
from memlab.data.sample import read_sample
from memlab.types import (
    Conversation,
    History,
    Observation,
    Question,
    Session,
    SessionAnnotation,
    SessionEvent,
    Turn,
)

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / ".." / "shared"
LOCOMO_DEV = SHARED / "data" / "locomo" / "locomo10_dev.json"

# Counted from the raw JSON: conversation -> (annotated sessions, observations, events). Every
# session of the dev file is annotated; conv-41's events_session_19 has one empty event ("").
EXPECTED = {
    "conv-26": (19, 184, 25),
    "conv-30": (19, 169, 29),
    "conv-41": (32, 324, 94),
    "conv-42": (29, 266, 78),
    "conv-43": (29, 267, 76),
    "conv-44": (28, 277, 67),
    "conv-47": (31, 268, 93),
}


@pytest.fixture(scope="module")
def dev():
    if not LOCOMO_DEV.is_file():
        pytest.skip("../shared/data/locomo/locomo10_dev.json is not available")
    conversations, report = read_locomo(LOCOMO_DEV)
    return {c.id: c for c in conversations}, report


@pytest.fixture(scope="module")
def raw_dev():
    if not LOCOMO_DEV.is_file():
        pytest.skip("../shared/data/locomo/locomo10_dev.json is not available")
    return {s["sample_id"]: s for s in json.loads(LOCOMO_DEV.read_text())}


# ---------------------------------------------------------------- real dev file


def test_every_annotated_session_is_loaded(dev, raw_dev):
    conversations, _ = dev
    assert list(conversations) == list(EXPECTED)
    for cid, conversation in conversations.items():
        raw = raw_dev[cid]
        annotated = {
            f"session_{m.group(0)}"
            for block in ("event_summary", "observation", "session_summary")
            for key in raw.get(block, {})
            if (m := re.search(r"\d+", key))
        }
        session_ids = [s.id for s in conversation.sessions]
        assert [a.session_id for a in conversation.annotations] == [s for s in session_ids if s in annotated], cid
        assert len(conversation.annotations) == EXPECTED[cid][0] == len(conversation.sessions), cid


def test_observation_and_event_counts(dev):
    conversations, report = dev
    for cid, (_, n_observations, n_events) in EXPECTED.items():
        annotations = conversations[cid].annotations
        observations = sum(len(a.observations) for a in annotations)
        events = sum(len(a.events) for a in annotations)
        assert observations == n_observations > 0, cid
        assert events == n_events > 0, cid
        assert all(a.summary and a.summary == a.summary.strip() for a in annotations), cid
    assert report.quirks["annotation_empty_text"] == 1  # conv-41 events_session_19: Maria's ""
    assert report.quirks["annotation_text_stripped"] == 2  # conv-41 session_19/28 summaries


def test_events_are_dated_on_their_session_day(dev):
    conversations, report = dev
    for conversation in conversations.values():
        sessions = {s.id: s for s in conversation.sessions}
        for annotation in conversation.annotations:
            assert annotation.date is not None
            assert annotation.date.date() == sessions[annotation.session_id].timestamp.date()
    for quirk in ("annotation_date_unparsed", "annotation_date_mismatch", "annotation_without_date"):
        assert report.quirks[quirk] == 0, quirk


def test_every_observation_source_is_a_turn_of_its_session(dev):
    conversations, report = dev
    for conversation in conversations.values():
        turns_of = {s.id: {t.id for t in s.turns} for s in conversation.sessions}
        all_turns = set().union(*turns_of.values())
        for annotation in conversation.annotations:
            for observation in annotation.observations:
                assert observation.source_ids, (conversation.id, observation)
                assert set(observation.source_ids) <= all_turns
                assert set(observation.source_ids) <= turns_of[annotation.session_id]
    # The irregular source ids of the dev file, each handled and counted:
    assert report.quirks["observation_source_list"] == 8  # [ "D15:3", "D15:5" ] and the like: all kept
    assert report.quirks["observation_source_repaired"] == 1  # conv-44 "D26:14, D26:34, D26:42" split
    for quirk in (
        "observation_source_dropped_malformed",
        "observation_source_dropped_unknown",
        "observation_source_other_session",
        "observation_without_source",
        "annotation_without_session",
        "annotation_unknown_key",
        "annotation_unknown_speaker",
    ):
        assert report.quirks[quirk] == 0, quirk


def test_repaired_and_listed_sources(dev):
    conversations, _ = dev
    conv44 = {a.session_id: a for a in conversations["conv-44"].annotations}
    andrew = [o for o in conv44["session_26"].observations if o.speaker == "Andrew"]
    assert andrew[3].source_ids == ("D26:14", "D26:34", "D26:42")  # was "D26:14, D26:34, D26:42"
    conv30 = {a.session_id: a for a in conversations["conv-30"].annotations}
    jon = [o for o in conv30["session_15"].observations if o.speaker == "Jon"]
    assert jon[1].source_ids == ("D15:3", "D15:5")  # was the list ["D15:3", "D15:5"]


def test_conv26_first_observation_and_event(dev):
    conversations, _ = dev
    first = conversations["conv-26"].annotations[0]
    assert first.session_id == "session_1"
    assert first.date == datetime(2023, 5, 8)
    observation = first.observations[0]
    assert observation.speaker == "Caroline"
    assert "support group" in observation.text
    assert observation.source_ids == ("D1:3",)
    assert first.events[0] == SessionEvent("Caroline", "Caroline attends an LGBTQ support group for the first time.")
    assert first.summary.startswith("Caroline and Melanie")


def test_history_carries_no_annotations(dev):
    conversations, _ = dev
    conversation = conversations["conv-26"]
    assert conversation.annotations
    history = conversation.history()
    assert isinstance(history, History)
    assert "annotations" not in {f.name for f in fields(History)}
    assert not hasattr(history, "annotations")
    assert history.sessions == conversation.sessions
    assert not any(hasattr(q.as_query(), "annotations") for q in conversation.questions)


def test_pipelines_and_stages_never_name_annotations():
    """Static guard: no pipeline or stage code reads ``.annotations`` or imports the annotation
    types (``from __future__ import annotations`` is no use of them)."""
    gold_types = {"SessionAnnotation", "SessionEvent", "Observation"}
    offenders = []
    for folder in ("pipelines", "stages"):
        for path in sorted((ROOT / "memlab" / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Attribute) and node.attr == "annotations":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: .annotations")
                elif isinstance(node, ast.ImportFrom) and node.module == "memlab.types":
                    named = gold_types & {alias.name for alias in node.names}
                    if named:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {sorted(named)}")
                elif isinstance(node, ast.Constant) and node.value in ("event_summary", "session_summary"):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert offenders == []


# ---------------------------------------------------------------- hand-made files


def make_sample(**annotations):
    conversation = {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bo!"},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Hi Ann, I got a puppy yesterday."},
        ],
        "session_2_date_time": "10:00 am on 20 May, 2023",
        "session_2": [
            {"speaker": "Ann", "dia_id": "D2:1", "text": "How is the puppy?"},
            {"speaker": "Bo", "dia_id": "D2:2", "text": "Great, she is called Rex."},
        ],
    }
    qa = [{"question": "What is Bo's dog called?", "answer": "Rex", "evidence": ["D2:2"], "category": 4}]
    return {"sample_id": "conv-x", "conversation": conversation, "qa": qa, **annotations}


GOOD = {
    "event_summary": {
        "events_session_1": {"Ann": [], "Bo": ["Bo adopts a puppy."], "date": "8 May, 2023"},
        "events_session_2": {"Ann": [], "Bo": ["Bo names the puppy Rex."], "date": "20 May, 2023"},
    },
    "observation": {
        "session_1_observation": {"Bo": [["Bo got a puppy.", "D1:2"]]},
        "session_2_observation": {"Bo": [["Bo's puppy is called Rex.", "D2:2"]]},
    },
    "session_summary": {"session_1_summary": "Bo tells Ann about his puppy.", "session_2_summary": "The puppy is Rex."},
}


def write(tmp_path, data, name="locomo.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_hand_made_annotations_load(tmp_path):
    (conversation,), report = read_locomo(write(tmp_path, [make_sample(**GOOD)]))
    assert conversation.annotations == (
        SessionAnnotation(
            session_id="session_1",
            date=datetime(2023, 5, 8),
            events=(SessionEvent("Bo", "Bo adopts a puppy."),),
            observations=(Observation("Bo", "Bo got a puppy.", ("D1:2",)),),
            summary="Bo tells Ann about his puppy.",
        ),
        SessionAnnotation(
            session_id="session_2",
            date=datetime(2023, 5, 20),
            events=(SessionEvent("Bo", "Bo names the puppy Rex."),),
            observations=(Observation("Bo", "Bo's puppy is called Rex.", ("D2:2",)),),
            summary="The puppy is Rex.",
        ),
    )
    assert not [q for q in report.quirks if q.startswith(("annotation", "observation"))]


def test_missing_annotations_are_empty_not_errors(tmp_path):
    (conversation,), report = read_locomo(write(tmp_path, [make_sample()]))
    assert conversation.annotations == ()
    only_summary = make_sample(session_summary={"session_2_summary": "The puppy is Rex."})
    (conversation,), _ = read_locomo(write(tmp_path, [only_summary]))
    assert conversation.annotations == (SessionAnnotation(session_id="session_2", summary="The puppy is Rex."),)
    assert Conversation(id="c", speakers=(), sessions=()).annotations == ()


def test_embedded_sample_has_no_annotations():
    conversations, report = read_sample()
    assert all(c.annotations == () for c in conversations)


def test_irregular_annotations_are_repaired_skipped_and_counted(tmp_path):
    data = make_sample(**copy.deepcopy(GOOD))
    data["event_summary"]["events_session_1"]["date"] = "sometime in May"
    data["event_summary"]["events_session_2"]["date"] = "21 May, 2023"
    data["event_summary"]["events_session_2"]["Bo"].append("  ")
    data["event_summary"]["events_session_2"]["Cy"] = ["Cy visits."]
    data["event_summary"]["events_session_7"] = {"Bo": ["Never happened."], "date": "1 June, 2023"}
    data["event_summary"]["summary_of_all"] = {}
    data["observation"]["session_1_observation"]["Ann"] = [
        ["Ann greets Bo.", "D:1:1"],
        ["Ann is friendly.", "D1:1; D1:1"],
        ["Bo has news.", ["D1:2", "D2:2"]],
        ["Nothing cites this.", "D9:9"],
        ["Nor this.", "turn one"],
    ]
    data["session_summary"]["session_1_summary"] = " Bo tells Ann about his puppy. "
    (conversation,), report = read_locomo(write(tmp_path, [data]))
    first, second = conversation.annotations
    assert [a.session_id for a in conversation.annotations] == ["session_1", "session_2"]
    assert first.date is None and second.date == datetime(2023, 5, 21)
    assert second.events == (
        SessionEvent("Bo", "Bo names the puppy Rex."),
        SessionEvent("Cy", "Cy visits."),
    )
    assert [o.source_ids for o in first.observations] == [
        ("D1:2",), ("D1:1",), ("D1:1",), ("D1:2", "D2:2"), (), (),
    ]
    assert first.summary == "Bo tells Ann about his puppy."
    assert report.quirks["annotation_date_unparsed"] == 1
    assert report.quirks["annotation_date_mismatch"] == 1
    assert report.quirks["annotation_empty_text"] == 1
    assert report.quirks["annotation_unknown_speaker"] == 1
    assert report.quirks["annotation_without_session"] == 1
    assert report.quirks["annotation_unknown_key"] == 1
    assert report.quirks["annotation_text_stripped"] == 2  # the blank event and the summary
    assert report.quirks["observation_source_repaired"] == 2  # "D:1:1", "D1:1; D1:1"
    assert report.quirks["observation_source_duplicate"] == 1
    assert report.quirks["observation_source_list"] == 1
    assert report.quirks["observation_source_other_session"] == 1  # D2:2 under session_1
    assert report.quirks["observation_source_dropped_unknown"] == 1  # D9:9
    assert report.quirks["observation_source_dropped_malformed"] == 1  # "turn one"
    assert report.quirks["observation_without_source"] == 2
    # The evidence rules are unchanged by sharing the dia-id splitter.
    assert report.quirks["evidence_repaired"] == 0 and conversation.questions[0].evidence == ("D2:2",)


def test_annotations_of_a_skipped_empty_session_follow_the_renumbering(tmp_path):
    data = make_sample(**copy.deepcopy(GOOD))
    body = data["conversation"]
    # session_1 is empty (skipped), so session_2 becomes session_1 and D2:2 becomes D1:2.
    body["session_1"] = []
    data["qa"] = []
    (conversation,), report = read_locomo(write(tmp_path, [data]))
    assert [s.id for s in conversation.sessions] == ["session_1"]
    (annotation,) = conversation.annotations
    assert annotation.session_id == "session_1"
    assert annotation.summary == "The puppy is Rex."
    assert annotation.observations == (Observation("Bo", "Bo's puppy is called Rex.", ("D1:2",)),)
    assert report.quirks["empty_session"] == 1
    assert report.quirks["annotation_without_session"] == 3  # the three session_1 entries


def test_anonymise_remaps_annotations_like_evidence():
    sessions = (
        Session("answer_abc", datetime(2023, 1, 1), (Turn("answer_abc_turn_1", "user", "I got a cat."),)),
        Session("s-2", datetime(2023, 1, 2), (Turn("s-2:a", "user", "Hi"), Turn("s-2:b", "user", "Her name is Tom."))),
    )
    conversation = Conversation(
        id="lme-1",
        speakers=("user", "assistant"),
        sessions=sessions,
        questions=(Question("lme-1", "lme-1", "Cat's name?", "Tom", "single", evidence=("s-2:b",)),),
        annotations=(
            SessionAnnotation(
                "s-2",
                observations=(Observation("user", "The cat is Tom.", ("s-2:b", "answer_abc_turn_1")),),
                summary="Cat.",
            ),
        ),
    )
    renamed = anonymise(conversation)
    assert renamed.questions[0].evidence == ("D2:2",)
    (annotation,) = renamed.annotations
    assert annotation.session_id == "session_2"
    assert annotation.observations[0].source_ids == ("D2:2", "D1:1")
    assert annotation.summary == "Cat."
    assert "answer_abc" not in repr(renamed.annotations)


def test_anonymise_refuses_an_annotation_of_no_session():
    session = Session("s", None, (Turn("t", "user", "Hi"),))
    orphan = Conversation(id="c", speakers=("user",), sessions=(session,), annotations=(SessionAnnotation("x"),))
    with pytest.raises(ValueError, match="annotation of 'x'"):
        anonymise(orphan)
    cites_nothing = Conversation(
        id="c",
        speakers=("user",),
        sessions=(session,),
        annotations=(SessionAnnotation("s", observations=(Observation("user", "?", ("nope",)),)),),
    )
    with pytest.raises(ValueError, match="cites 'nope'"):
        anonymise(cites_nothing)


def _with(block, key, value, speaker=None):
    data = make_sample(**copy.deepcopy(GOOD))
    if speaker is None:
        data[block][key] = value
    else:
        data[block][key][speaker] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (make_sample(observation=[["Bo got a puppy.", "D1:2"]]),
         "conversation 1 (conv-x): 'observation' must be an object, found list"),
        (make_sample(event_summary="none"), "'event_summary' must be an object, found str"),
        (_with("observation", "session_1_observation", ["Bo got a puppy.", "D1:2"]),
         "observation 'session_1_observation': expected an object, found list"),
        (_with("observation", "session_1_observation", "Bo got a puppy.", speaker="Bo"),
         "observation 'session_1_observation': 'Bo' must be a list of observations, found str"),
        (_with("observation", "session_1_observation", ["Bo got a puppy."], speaker="Bo"),
         "observation 'session_1_observation': 'Bo' observation 1: expected a [text, dia id] pair, found str"),
        (_with("observation", "session_1_observation", [["Bo got a puppy."]], speaker="Bo"),
         "'Bo' observation 1: expected a [text, dia id] pair, found list"),
        (_with("observation", "session_1_observation", [["Bo got a puppy.", "D1:2", "D1:1"]], speaker="Bo"),
         "'Bo' observation 1: expected a [text, dia id] pair"),
        (_with("observation", "session_1_observation", [[7, "D1:2"]], speaker="Bo"),
         "'Bo' observation 1: expected a [text, dia id] pair"),
        (_with("observation", "session_1_observation", [["Bo got a puppy.", 12]], speaker="Bo"),
         "'Bo' observation 1: the source must be a dia id or a list of dia ids, found 12"),
        (_with("observation", "session_1_observation", [["Bo got a puppy.", ["D1:2", None]]], speaker="Bo"),
         "the source must be a dia id or a list of dia ids"),
        (_with("event_summary", "events_session_1", ["Bo adopts a puppy."]),
         "event_summary 'events_session_1': expected an object, found list"),
        (_with("event_summary", "events_session_1", "Bo adopts a puppy.", speaker="Bo"),
         "event_summary 'events_session_1': 'Bo' must be a list of events, found str"),
        (_with("event_summary", "events_session_1", [["Bo adopts a puppy."]], speaker="Bo"),
         "event_summary 'events_session_1': 'Bo' event 1 must be a string, found list"),
        (_with("event_summary", "events_session_1", 20230508, speaker="date"),
         "event_summary 'events_session_1': 'date' must be a string, found int"),
        (_with("session_summary", "session_2_summary", ["The puppy is Rex."]),
         "session_summary 'session_2_summary' must be a string, found list"),
    ],
)
def test_malformed_annotation_is_one_clear_error(tmp_path, data, message):
    path = write(tmp_path, [data], name="bad_annotations.json")
    with pytest.raises(DataError) as excinfo:
        load_locomo(path)
    assert str(excinfo.value).startswith(str(path) + ": conversation 1 (conv-x): ")
    assert message in str(excinfo.value)
