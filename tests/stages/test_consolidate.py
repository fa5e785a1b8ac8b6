from __future__ import annotations

import json
from datetime import datetime

import pytest
import torch

from memlab.stages.consolidate import ConsolidateIn, EventRef, PromptedCausalConsolidator, PromptedCausalVerdicts
from memlab.stages.encoder import TextEncoder
from memlab.stages.relate.neural import PairRelationClassifier
from tests.fakes import ReplayLM

NEW = EventRef("e3", "Tomas: I sprained my ankle, so I skipped the race.", datetime(2023, 5, 3))
OLD = (
    EventRef("e1", "Tomas: I signed up for the city race.", datetime(2023, 4, 1)),
    EventRef("e2", "Tomas: I fell off my bike yesterday.", datetime(2023, 5, 2)),
    EventRef("e4", "Priya: I'm sorry you missed it.", datetime(2023, 5, 4)),
)
ITEM = ConsolidateIn(NEW, OLD)


def links(*triples) -> str:
    return json.dumps({"links": [{"cause": c, "effect": e, "score": s} for c, e, s in triples]})


def test_render_numbers_new_event_first_then_nearest_in_time():
    lm = ReplayLM([links()])
    PromptedCausalConsolidator(lm, max_neighbours=2).run_one(ITEM)
    content = lm.requests[0].messages[-1]["content"]
    assert "[0] (3 May 2023) Tomas: I sprained" in content
    assert "[1] (2 May 2023)" in content and "[2] (4 May 2023)" in content and "signed up" not in content
    assert lm.requests[0].json_schema["properties"]["links"]["items"]["properties"]["cause"]["maximum"] == 2


def test_parse_keeps_valid_links_above_threshold():
    # numbering: 0=e3, 1=e2 (1 day), 2=e4 (1 day), 3=e1
    reply = links((1, 0, 0.9), (0, 2, 0.8), (3, 0, 0.3), (1, 2, 0.9), (2, 0, 0.9), (0, 0, 1.0))
    out = PromptedCausalConsolidator(ReplayLM([reply]), threshold=0.5, max_links=6).run_one(ITEM)
    found = {(l.cause, l.effect) for l in out.links}
    # e1->e3 is below delta, e2->e4 does not involve the new event, e4->e3 runs backwards in time
    assert found == {("e2", "e3"), ("e3", "e4")}


def test_unusable_reply_is_a_counted_failure():
    stage = PromptedCausalConsolidator(ReplayLM(["none", '{"links": [{"cause": 9, "effect": 0, "score": 1}]}']))
    out = stage.run_one(ITEM)
    assert out.links == () and out.error and len(stage.failures) == 1


def verdicts(*entries) -> str:
    return json.dumps({str(i): {"link": link, "score": score} for i, (link, score) in enumerate(entries, 1)})


def test_verdicts_schema_asks_one_entry_per_neighbour():
    lm = ReplayLM([verdicts(("none", 0.1), ("none", 0.1))])
    PromptedCausalVerdicts(lm, max_neighbours=2).run_one(ITEM)
    request = lm.requests[0]
    assert request.json_schema["required"] == ["1", "2"]
    assert request.json_schema["properties"]["1"]["properties"]["link"]["enum"] == ["cause", "effect", "none"]
    assert "events [1] to [2]" in request.messages[-1]["content"]


def test_verdicts_become_directed_links_through_the_same_checks():
    # numbering: 0=e3, 1=e2 (1 day), 2=e4 (1 day), 3=e1
    reply = verdicts(("cause", 0.9), ("cause", 0.9), ("cause", 0.3))
    out = PromptedCausalVerdicts(ReplayLM([reply]), threshold=0.5).run_one(ITEM)
    # e4 follows e3, so it cannot be its cause; e1 is below delta
    assert [(l.cause, l.effect, l.score) for l in out.links] == [("e2", "e3", 0.9)]

    reply = verdicts(("cause", 0.6), ("effect", 0.8), ("cause", 0.7))
    out = PromptedCausalVerdicts(ReplayLM([reply]), max_links=2).run_one(ITEM)
    assert [(l.cause, l.effect) for l in out.links] == [("e3", "e4"), ("e1", "e3")]


def test_verdicts_missing_an_entry_is_a_counted_failure():
    stage = PromptedCausalVerdicts(ReplayLM([verdicts(("cause", 0.9)), verdicts(("cause", 0.9))]))
    out = stage.run_one(ITEM)
    assert out.links == () and out.error and len(stage.failures) == 1


def test_hops_order_keeps_the_given_neighbour_order():
    # the memory gives nearest hop first: e1 (a month earlier) before e2 and e4
    lm = ReplayLM([verdicts(("none", 0.0), ("none", 0.0))])
    PromptedCausalVerdicts(lm, max_neighbours=2, order="hops").run_one(ConsolidateIn(NEW, (OLD[0], OLD[1], OLD[2])))
    content = lm.requests[0].messages[-1]["content"]
    assert "[1] (1 April 2023) Tomas: I signed up" in content and "[2] (2 May 2023)" in content
    with pytest.raises(ValueError, match="order"):
        PromptedCausalConsolidator(ReplayLM([]), order="random")


# -- the trained stand-in: ClassifierCausalConsolidator ----------------------------------------
def causal_classifier(causal_bias: float) -> PairRelationClassifier:
    """A relation classifier whose head ignores the text: every pair is ``causal`` with the
    probability the bias gives (against ``none`` at 0), every other label far less likely."""
    classifier = PairRelationClassifier(TextEncoder(max_length=16, frozen=True), batch_size=8)
    classifier.warm_up()
    with torch.no_grad():
        classifier.head.weight.zero_()
        classifier.head.bias.fill_(-20.0)
        classifier.head.bias[classifier.labels.index("causal")] = causal_bias
        classifier.head.bias[classifier.labels.index("none")] = 0.0
    return classifier


def test_the_classifier_consolidator_links_earlier_neighbours_as_causes_above_its_threshold():
    from memlab.stages.consolidate import ClassifierCausalConsolidator

    day = lambda d: datetime(2023, 5, d)  # noqa: E731
    new = EventRef("e9", "Ann missed her interview.", day(9))
    neighbours = tuple(EventRef(f"e{i}", f"Ann's car broke down ({i}).", day(i)) for i in range(1, 6))
    later = EventRef("e10", "A later event.", day(10))  # not before the new event: never its cause
    likely = ClassifierCausalConsolidator(causal_classifier(2.0), max_links=2)  # p(causal) ~ 0.88
    out = likely.run_one(ConsolidateIn(new, (later, *neighbours)))
    assert [(link.cause, link.effect) for link in out.links] == [("e1", "e9"), ("e2", "e9")]
    assert all(link.score == pytest.approx(0.8808, abs=1e-3) for link in out.links) and out.error is None
    unlikely = ClassifierCausalConsolidator(causal_classifier(-2.0))  # p(causal) ~ 0.12
    assert unlikely.run_one(ConsolidateIn(new, neighbours)).links == ()
    narrow = ClassifierCausalConsolidator(causal_classifier(2.0), causal_labels=["motivation"])
    assert narrow.run_one(ConsolidateIn(new, neighbours)).links == ()  # only causal is likely
    assert ClassifierCausalConsolidator(causal_classifier(2.0)).run_one(ConsolidateIn(new, ())).links == ()
    with pytest.raises(ValueError, match="causal_labels"):
        ClassifierCausalConsolidator(causal_classifier(0.0), causal_labels=["because"])
    with pytest.raises(TypeError, match="PairRelationClassifier"):
        ClassifierCausalConsolidator(object())
