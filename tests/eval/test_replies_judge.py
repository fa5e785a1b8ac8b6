"""Issue 22, section 2, in the judges: a reply that does not state the verdict unambiguously is a
failure (retried, then ``correct=None`` and counted), never a verdict, and never an exception."""

from __future__ import annotations

import json

import pytest

from memlab.eval.judge import (
    LABEL_SCHEMA,
    SCORE_SCHEMA,
    CorrectWrongJudge,
    JudgeIn,
    MagmaGraderJudge,
    parse_label,
    parse_score,
)
from memlab.lm.errors import ParseError
from tests.fakes import ReplayLM

ITEM = JudgeIn("What is the dog called?", "Rex", "Rex")


def _judge(cls, reply: str):
    lm = ReplayLM([reply, reply])
    judge = cls(lm)
    return judge.run_one(ITEM), judge, lm


@pytest.mark.parametrize("reply", [
    json.dumps(LABEL_SCHEMA),  # the echoed schema: its enum's last word was read as WRONG
    json.dumps(LABEL_SCHEMA, indent=2),
    '{"label": "CORRECT", "label": "WRONG"}',  # was read as the last one
    '{"explanation": "x", "label": "WRONG", "label": "CORRECT"}',
    "CORRECT or WRONG",
    "[" * 5000 + "]" * 5000,  # raised RecursionError out of the judge: the whole run aborted
    '{"label": "CORRECT", "n": ' + "1" * 5000 + "}" + " WRONG",
    "<think>It is CORRECT",
])
def test_an_ambiguous_or_unreadable_verdict_is_a_counted_failure(reply):
    out, judge, lm = _judge(CorrectWrongJudge, reply)
    assert out.correct is None and out.score is None and out.error
    assert len(judge.failures) == 1 and len(lm.requests) == 2 and judge.metric(out) is None


@pytest.mark.parametrize("reply", [
    "score: -0.5",  # was read as 0.5
    '{"score": -0.5}',
    "-0.5",
    "Score: 1e400",  # was read as 1
    '{"score": 1e400}',
    '{"score": NaN}',
    '{"score": 0.9, "score": 0.1}',  # was read as the last one
    '{"score": 0.8, "score": "high", "reasoning": "score: 0.8"}',
    json.dumps(SCORE_SCHEMA),
    "score: 0.2\nscore: 0.9 or score: 0.3",
    '{"score": ' + "9" * 5000 + "}",
])
def test_an_out_of_range_ambiguous_or_unreadable_score_is_a_counted_failure(reply):
    out, judge, lm = _judge(MagmaGraderJudge, reply)
    assert out.score is None and out.correct is None and out.error
    assert len(judge.failures) == 1 and len(lm.requests) == 2 and judge.metric(out) is None


def test_a_reply_that_weighs_both_labels_and_concludes_with_one_is_read():
    assert parse_label("The answer is not CORRECT: it names the wrong year.\nWRONG")[0] == "WRONG"
    assert parse_label("It could look WRONG at first, but it is the same dog.\n**CORRECT**")[0] == "CORRECT"
    assert parse_label("Same dog. Label: CORRECT<|im_end|>")[0] == "CORRECT"
    with pytest.raises(ParseError, match="does not conclude"):
        parse_label("CORRECT?\nWRONG? CORRECT?")


def test_scores_in_prose_that_agree_or_conclude_are_read():
    assert parse_score("score: 0.4 ... so the score: 0.40")[0] == 0.4
    assert parse_score("A score: 0.9 would need the date.\nScore: 0.5")[0] == 0.5
    assert parse_score("Score: 0.4.")[0] == 0.4


def test_a_refused_judge_request_is_an_unjudged_question_not_an_aborted_run():
    from memlab.lm.base import LM
    from memlab.lm.errors import RequestError

    class Refusing(LM):
        name = "refusing"

        def __init__(self):
            super().__init__(cache=None)

        def _generate(self, requests):
            raise RequestError("HTTP 400: prompt too long")

    judge = CorrectWrongJudge(Refusing())
    out = judge.run_one(ITEM)
    assert out.correct is None and "HTTP 400" in out.error and len(judge.failures) == 1
