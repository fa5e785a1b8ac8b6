"""Synthesize family: clustering, merging with the union of provenance, parsing (ReplayLM)."""

from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import pytest

from memlab.stages.synthesize import PromptedSynthesizer, SynthesizeIn, complete_link_clusters, merged_unit, union_ids
from memlab.types import MemoryUnit
from tests.fakes import ReplayLM
from tests.memory.helpers import HashingEmbedder

WHEN = datetime(2023, 3, 10, 18, 30)


def _unit(uid, text, sources, entities=(), salience="medium", when=WHEN):
    return MemoryUnit(uid, text, tuple(sources), when, "unit",
                      attributes={"session": "s1", "entities": list(entities), "topic": "t", "salience": salience})


def _session(*units) -> SynthesizeIn:
    return SynthesizeIn("c1", "s1", WHEN, tuple(units))


COFFEE = (
    _unit("u1", "Ann wants coffee every morning", ["D1:1"], ["Ann"]),
    _unit("u2", "Ann prefers oat milk in her coffee", ["D1:2", "D1:3"], ["Ann", "oat milk"], "high"),
    _unit("u3", "Ann likes her coffee hot", ["D1:3", "D1:5"], when=datetime(2023, 3, 9)),
)
OTHER = _unit("u4", "Bob repaired a bicycle wheel", ["D1:7"], ["Bob"])


def _stage(lm, threshold=0.3):
    return PromptedSynthesizer(lm=lm, embedder=HashingEmbedder(), threshold=threshold)


def _angles(*degrees) -> np.ndarray:
    rad = np.radians(degrees)
    return np.stack([np.cos(rad), np.sin(rad)], axis=1).astype(np.float32)


def test_clusters_in_order_with_a_size_cap():
    v = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.95, 0.05]], dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    assert complete_link_clusters(v, 0.9, max_cluster=5) == [[0, 1, 3], [2]]
    assert complete_link_clusters(v, 0.9, max_cluster=2) == [[0, 1], [2], [3]]
    assert complete_link_clusters(np.zeros((0, 2), dtype=np.float32), 0.9, 2) == []


def test_complete_link_does_not_chain_unrelated_units():
    # 0 deg ~ 30 deg ~ 60 deg (cos 30 = 0.87) but 0 deg vs 60 deg is 0.5: single link would merge all three.
    assert complete_link_clusters(_angles(0, 30, 60), 0.8, max_cluster=5) == [[0, 1], [2]]
    # A unit that fits two clusters joins the one whose weakest link to it is strongest.
    assert complete_link_clusters(_angles(0, 90, 50), 0.6, max_cluster=5) == [[0], [1, 2]]
    assert complete_link_clusters(_angles(0, 90, 45), 0.6, max_cluster=5) == [[0, 2], [1]]  # tie: earliest


def test_related_fragments_are_merged_with_the_union_of_provenance_and_an_abstract():
    lm = ReplayLM([json.dumps({"consolidated": "Ann prefers hot coffee with oat milk every morning.",
                               "abstract": "Ann is a daily coffee drinker."})])
    out = _stage(lm).run_one(_session(*COFFEE, OTHER))
    assert len(lm.requests) == 1
    prompt = lm.requests[0].messages[-1]["content"]
    assert "- Ann wants coffee every morning" in prompt and "Bob" not in prompt
    merged, other = out.units
    assert merged.text == "Ann prefers hot coffee with oat milk every morning."
    assert merged.source_ids == ("D1:1", "D1:2", "D1:3", "D1:5")
    assert merged.attributes["merged_from"] == ["u1", "u2", "u3"]
    assert merged.attributes["entities"] == ["Ann", "oat milk"]
    assert merged.attributes["salience"] == "high" and merged.timestamp == datetime(2023, 3, 9)
    assert other is OTHER
    (abstract,) = out.abstracts
    assert abstract.kind == "abstract" and abstract.text == "Ann is a daily coffee drinker."
    assert abstract.source_ids == merged.source_ids and abstract.attributes["summarises"] == [merged.id]


def test_fenced_reply_and_empty_abstract():
    lm = ReplayLM(['```json\n{"consolidated": "Ann drinks hot oat-milk coffee.", "abstract": ""}\n```'])
    out = _stage(lm).run_one(_session(*COFFEE))
    assert [u.text for u in out.units] == ["Ann drinks hot oat-milk coffee."] and out.abstracts == ()


def test_identical_fragments_merge_without_a_call():
    lm = ReplayLM([])
    twins = (_unit("a", "Ann wants coffee", ["D1:1"]), _unit("b", "ann wants COFFEE", ["D1:2"]))
    out = _stage(lm).run_one(_session(*twins))
    (unit,) = out.units
    assert unit.source_ids == ("D1:1", "D1:2") and lm.requests == []


def test_failed_merge_keeps_the_fragments_and_counts_the_failure():
    lm = ReplayLM(["nonsense", '{"consolidated": ""}'])
    stage = _stage(lm)
    out = stage.run_one(_session(*COFFEE))
    assert out.units == COFFEE and out.abstracts == ()
    assert len(stage.failures) == 1


def test_unrelated_units_pass_through_untouched():
    lm = ReplayLM([])
    out = _stage(lm, threshold=0.99).run_one(_session(*COFFEE, OTHER))
    assert out.units == (*COFFEE, OTHER) and lm.requests == []


def test_merged_unit_helpers():
    assert union_ids(COFFEE) == ("D1:1", "D1:2", "D1:3", "D1:5")
    unit = merged_unit("x", "t", COFFEE, kind="abstract")
    assert unit.kind == "abstract" and unit.attributes["session"] == "s1"


def test_rejects_bad_settings():
    with pytest.raises(ValueError, match="threshold"):
        PromptedSynthesizer(lm=ReplayLM([]), embedder=HashingEmbedder(), threshold=0)
