"""Zero-shot chain-of-thought answerer (EMem 3.3): reasoning first, then 'Answer: ...'."""

from __future__ import annotations

from datetime import datetime

from memlab.stages.answer import AnswerIn
from memlab.stages.answer.cot import CoTAnswerer
from tests.fakes import ReplayLM


def test_render_puts_context_question_and_date():
    lm = ReplayLM(["Answer: x"])
    CoTAnswerer(lm=lm).run_one(AnswerIn("When did Ann move?", "[1 May 2023] (Ann) Ann moved.", datetime(2023, 6, 2)))
    prompt = lm.requests[0].messages[-1]["content"]
    assert "(The question is asked on 2 June 2023.)\n[1 May 2023] (Ann) Ann moved." in prompt
    assert "Question: When did Ann move?" in prompt and "First reason in at most three short sentences" in prompt


def test_parse_takes_the_last_answer_line_and_keeps_the_reasoning():
    lm = ReplayLM(["The memory says answer: maybe May.\nSo it was May.\n**Final Answer:** 1 May 2023\nextra"])
    out = CoTAnswerer(lm=lm).run_one(AnswerIn("q", "c"))
    assert out.text == "1 May 2023"
    assert out.reasoning == "The memory says answer: maybe May.\nSo it was May."


def test_missing_answer_line_is_retried_then_fails_softly():
    stage = CoTAnswerer(lm=ReplayLM(["I think it is May.", "Still thinking."]))
    out = stage.run_one(AnswerIn("q", "c"))
    assert out.text == "" and "Answer:" in out.error and len(stage.failures) == 1
    recovered = CoTAnswerer(lm=ReplayLM(["no marker", "Answer: May"])).run_one(AnswerIn("q", "c"))
    assert recovered.text == "May" and recovered.error is None


def test_parse_accepts_the_final_answer_is_phrasing():
    stage = CoTAnswerer(lm=ReplayLM([]))
    out = stage.parse("Memory 2 says he finished in 1 hour 52 minutes.\nThe final answer is: Answer: 1 hour 52 minutes",
                      AnswerIn("q", "c"))
    assert out.text == "1 hour 52 minutes" and out.reasoning.startswith("Memory 2")


def test_parse_accepts_an_echoed_final_line_label():
    stage = CoTAnswerer(lm=ReplayLM([]))
    out = stage.parse("First reason: the ad ran on 29 January 2023.\nFinal line: Answer: 29 January 2023", AnswerIn("q", "c"))
    assert out.text == "29 January 2023" and out.reasoning == "First reason: the ad ran on 29 January 2023."


def test_cut_off_reasoning_is_followed_by_a_request_for_the_answer_line_only():
    lm = ReplayLM(["Memory 3 says Ann moved in May, and memory 5 says", "Answer: May 2023"])
    out = CoTAnswerer(lm=lm).run_one(AnswerIn("When did Ann move?", "c"))
    retry = lm.requests[1].messages
    assert out.text == "May 2023"
    assert retry[-2] == {"role": "assistant", "content": "Memory 3 says Ann moved in May, and memory 5 says"}
    assert "Do not go on reasoning" in retry[-1]["content"] and "Answer: " in retry[-1]["content"]
