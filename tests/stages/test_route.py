from __future__ import annotations

import json
from datetime import date, datetime

import pytest

from memlab.stages.route import PromptedRouter, RouteIn, RuleRouter
from memlab.stages.temporal import RuleTemporalNormalizer
from tests.fakes import ReplayLM


@pytest.mark.parametrize(
    "question, intent, qtype",
    [
        ("Why did Melanie start painting?", "WHY", "single-hop"),
        ("What motivated Caroline to pursue counseling?", "WHY", "single-hop"),
        ("When did Caroline go to the LGBTQ support group?", "WHEN", "temporal"),
        ("How long has Melanie been married?", "WHEN", "temporal"),
        ("What activities does Melanie partake in?", "ENTITY", "single-hop"),
        ("Would Caroline likely pursue writing as a career?", "ENTITY", "open-domain"),
        ("What do Melanie and Caroline both like?", "ENTITY", "multi-hop"),
    ],
)
def test_rule_router_labels(question, intent, qtype):
    out = RuleRouter().run_one(RouteIn(question))
    assert (out.intent, out.question_type) == (intent, qtype)


def test_rule_router_time_window_and_keywords():
    router = RuleRouter(normalizer=RuleTemporalNormalizer())
    out = router.run_one(RouteIn("What did Caroline do last Friday in Boston?", datetime(2023, 6, 1)))
    assert out.time_window == (date(2023, 5, 26), date(2023, 5, 26))
    assert "Caroline" in out.keywords and "Boston" in out.keywords and "did" not in out.keywords
    assert RuleRouter().run_one(RouteIn("What did Caroline do last Friday?")).time_window is None


def test_rule_router_label_set_is_configurable():
    router = RuleRouter(intent_rules={"HOW": [r"^how\b"]}, default_intent="OTHER", type_rules={}, default_type=None)
    assert router.run_one(RouteIn("How did she do it?")).intent == "HOW"
    out = router.run_one(RouteIn("Why?"))
    assert (out.intent, out.question_type) == ("OTHER", None)
    with pytest.raises(ValueError, match="bad pattern"):
        RuleRouter(intent_rules={"X": ["("]})


def test_prompted_router_renders_parses_and_constrains():
    lm = ReplayLM([json.dumps({"intent": "WHY", "question_type": "multi-hop"})])
    router = PromptedRouter(lm, normalizer=RuleTemporalNormalizer())
    out = router.run_one(RouteIn("Why did they both move in May 2023?", datetime(2023, 6, 1)))
    assert (out.intent, out.question_type) == ("WHY", "multi-hop")
    assert out.time_window == (date(2023, 5, 1), date(2023, 5, 31))
    request = lm.requests[0]
    assert "Why did they both move" in request.messages[-1]["content"]
    assert request.json_schema["properties"]["intent"]["enum"] == ["WHY", "WHEN", "ENTITY"]


def test_prompted_router_retries_then_falls_back():
    lm = ReplayLM(['{"intent": "HOW"}', "no idea"])
    router = PromptedRouter(lm, default_intent="WHEN")
    out = router.run_one(RouteIn("Where did she go?"))
    assert out.intent == "WHEN" and out.error and len(router.failures) == 1
    assert len(lm.requests) == 2


def test_without_a_normalizer_a_router_resolves_no_time_window():
    out = RuleRouter().run_one(RouteIn("What did Caroline do last Friday in Boston?", datetime(2023, 6, 1)))
    assert out.time_window is None and "Boston" in out.keywords


def test_tfidf_router_terms_features_and_round_trip(tmp_path):
    import torch

    from memlab.stage import Stage
    from memlab.stages.route import TfidfRouter
    from memlab.stages.route.linear import fit_vocabulary, terms
    from memlab.stages.temporal import RuleTemporalNormalizer

    assert terms("When did Mel go?") == ["when", "did", "mel", "go", "when did", "did mel", "mel go"]
    questions = ["When did Mel go camping?", "What would Caroline likely pursue?", "Why did Mel paint?"]
    vocabulary, idf = fit_vocabulary(questions)
    router = TfidfRouter(vocabulary, normalizer=RuleTemporalNormalizer())
    router.idf.copy_(torch.tensor(idf))
    features = router.features(questions + ["nothing known here"])
    assert torch.allclose(features[:3].norm(dim=-1), torch.ones(3)) and features[3].abs().sum() == 0
    with torch.no_grad():  # a hand-set head: "when" votes temporal, "likely" open-domain
        router.heads["question_type"].weight.zero_()
        router.heads["question_type"].weight[1, vocabulary.index("when")] = 5.0
        router.heads["question_type"].weight[2, vocabulary.index("likely")] = 5.0
    assert [p["question_type"] for p in router.predict(questions[:2])] == ["temporal", "open-domain"]
    out = router([RouteIn("When did Mel go camping last week?", reference=date(2023, 5, 8))])[0]
    assert out.question_type == "temporal" and out.time_window == (date(2023, 5, 1), date(2023, 5, 7))
    router.save(tmp_path / "router")
    loaded = Stage.load(tmp_path / "router")
    assert loaded.predict(questions) == router.predict(questions) and loaded.vocabulary == vocabulary
