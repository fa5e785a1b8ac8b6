"""AgreementJudge: two judges that must both accept, built from the shipped config."""

from __future__ import annotations

import pytest

from memlab.config import load_config
from memlab.eval.judge import AgreementJudge, CorrectWrongJudge, JudgeIn, MagmaGraderJudge
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
    assert len(judge.failures) == 1 and judge.failures[0] is first.failures[0]
    assert judge.lms() == [first.lm, second.lm]
    info = judge.judge_info()
    assert [j["prompt_id"] for j in info["agreement_of"]] == ["simplemem/judge_correct_wrong", "magma/judge_semantic"]


def test_the_shipped_agreement_config_pairs_the_two_shipped_judges():
    node = load_config("configs/judges/agreement.yaml")
    assert node["first"]["_component_"].endswith("CorrectWrongJudge")
    assert node["second"]["_component_"].endswith("MagmaGraderJudge")
    with pytest.raises(TypeError, match="second must be a judge"):
        AgreementJudge(CorrectWrongJudge(ReplayLM([])), object())
