"""AgreementJudge: two judges that must both accept, built from the shipped config."""

from __future__ import annotations

import pytest

from memlab.config import load_config
from memlab.eval.judge import AgreementJudge, AnyOfJudge, CorrectWrongJudge, JudgeIn, MagmaGraderJudge
from tests.fakes import ReplayLM

ITEMS = [JudgeIn("Q1", "Rex", "Rex"), JudgeIn("Q2", "Rex", "A pet"), JudgeIn("Q3", "Rex", "Max"),
         JudgeIn("Q4", "Rex", "a dog")]


def labels(request):  # accepts everything but "Max"; no verdict for "a dog", retry included
    prompt = " ".join(message["content"] for message in request.messages)
    if "Generated answer: a dog" in prompt:
        return "no idea"
    return '{"label": "WRONG"}' if "Generated answer: Max" in prompt else '{"label": "CORRECT"}'


def scores(request):  # a stricter grader: 0.4 for the vague "A pet", 1.0 otherwise
    prompt = request.messages[-1]["content"]
    return '{"score": 0.4}' if "Candidate: A pet" in prompt else '{"score": 1.0}'


def test_an_answer_counts_only_when_both_judges_accept_and_a_rejection_decides():
    first, second = CorrectWrongJudge(ReplayLM(labels)), MagmaGraderJudge(ReplayLM(scores))
    judge = AgreementJudge(first, second)
    outs = judge(ITEMS)
    assert [out.correct for out in outs] == [True, False, False, None]
    assert [judge.metric(out) for out in outs] == [1.0, 0.0, 0.0, None]
    assert outs[3].error
    assert judge.llm_usage().failures == (first.failures[0],)
    assert judge.lms() == [first.lm, second.lm]
    info = judge.judge_info()
    assert [j["prompt_id"] for j in info["agreement_of"]] == ["simplemem/judge_correct_wrong", "magma/judge_semantic"]


def test_the_shipped_agreement_config_pairs_the_two_shipped_judges():
    node = load_config("configs/judges/agreement.yaml")
    assert node["first"]["_component_"].endswith("CorrectWrongJudge")
    assert node["second"]["_component_"].endswith("MagmaGraderJudge")
    with pytest.raises(TypeError, match="second must be a judge"):
        AgreementJudge(CorrectWrongJudge(ReplayLM([])), object())


def test_either_judge_may_accept_and_the_second_is_asked_only_what_the_first_left():
    first_lm, second_lm = ReplayLM(labels), ReplayLM(scores)
    judge = AnyOfJudge(CorrectWrongJudge(first_lm), MagmaGraderJudge(second_lm, pass_mark=0.5))
    outs = judge(ITEMS)
    # "Max": rejected by the first, accepted by the grader (1.0); "a dog": no verdict, then accepted.
    assert [out.correct for out in outs] == [True, True, True, True]
    assert [judge.metric(out) for out in outs] == [1.0, 1.0, 1.0, 1.0]
    asked = [request.messages[-1]["content"] for request in second_lm.requests]
    assert len(asked) == 2 and any("Candidate: Max" in a for a in asked) and any("Candidate: a dog" in a for a in asked)
    assert judge.judge_info()["rule"] == "accepted when either judge accepts"


def test_a_pair_asks_its_second_judge_nothing_the_first_settled():
    second_lm = ReplayLM([])  # any request would fail: no reply is scripted
    judge = AgreementJudge(CorrectWrongJudge(ReplayLM(lambda r: '{"label": "WRONG"}')), MagmaGraderJudge(second_lm))
    assert [out.correct for out in judge(ITEMS)] == [False] * 4 and second_lm.requests == []
    strict = AnyOfJudge(CorrectWrongJudge(ReplayLM(lambda r: '{"label": "WRONG"}')),
                        CorrectWrongJudge(ReplayLM(lambda r: '{"label": "WRONG"}')))
    assert [(out.correct, out.score) for out in strict(ITEMS[:1])] == [(False, 0.0)]
