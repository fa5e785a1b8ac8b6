"""RulesFirstJudge: the calendar and the word-for-word check decide first, the LLM judge the rest."""

from __future__ import annotations

import pytest

from memlab.config import load_config
from memlab.eval.judge import CorrectWrongJudge, JudgeIn, RulesFirstJudge
from tests.fakes import ReplayLM


def rejects_all_but_rex(request):
    prompt = " ".join(message["content"] for message in request.messages)
    if "Generated answer: garbled" in prompt:
        return "no idea"
    return '{"label": "CORRECT"}' if "Generated answer: Rex the dog" in prompt else '{"label": "WRONG"}'


ITEMS = [
    JudgeIn("When?", "weekend before May 24, 2023", "20 May 2023"),      # calendar: inside, accepted
    JudgeIn("When?", "Friday before 27 July 2023", "20 July 2023"),      # calendar: a Thursday, rejected
    JudgeIn("When?", "7 May 2023", "2023"),                              # calendar: a year alone, rejected
    JudgeIn("What?", "soda, candy", "Soda and candy."),                  # states the gold
    JudgeIn("Pet?", "Rex", "Rex the dog"),                               # states it too: no call
    JudgeIn("Pet?", "a puppy named Rex", "Rex the dog"),                 # left to the judge, which accepts
    JudgeIn("Pet?", "Rex", "Max"),                                       # left to the judge, which rejects
    JudgeIn("Pet?", "Rex", "garbled"),                                   # the judge gives no verdict
]


def test_the_rules_decide_what_they_can_and_only_the_rest_reaches_the_llm_judge():
    lm = ReplayLM(rejects_all_but_rex)
    judge = RulesFirstJudge(CorrectWrongJudge(lm))
    outs = judge(ITEMS)
    assert [out.correct for out in outs] == [True, False, False, True, True, True, False, None]
    assert [judge.metric(out) for out in outs] == [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, None]
    assert outs[0].explanation.startswith("calendar") and outs[1].explanation.startswith("calendar")
    asked = [" ".join(m["content"] for m in request.messages) for request in lm.requests]
    assert len(asked) == 4 and all("When?" not in prompt and "Soda" not in prompt for prompt in asked)  # 3 + 1 retry
    assert judge.llm_usage().failure_counts() == {"CorrectWrongJudge": 1} and judge.lms() == [lm]
    info = judge.judge_info()
    assert len(info["rules_first"]) == 2 and info["then"]["prompt_id"] == "simplemem/judge_correct_wrong"


def test_the_shipped_config_wraps_the_correct_wrong_judge():
    node = load_config("configs/judges/rules_first.yaml")
    assert node["_component_"].endswith("RulesFirstJudge") and node["judge"]["_component_"].endswith("CorrectWrongJudge")
    with pytest.raises(TypeError, match="judge must be a judge"):
        RulesFirstJudge(object())
