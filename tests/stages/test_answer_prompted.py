"""The prompted answerer: the published response prompt by default, memlab's short-answer prompt behind the slot."""

from __future__ import annotations

from datetime import datetime

from memlab.stages.answer import AnswerIn, PromptedAnswerer
from tests.fakes import ReplayLM


def test_the_default_prompt_is_compassmems_published_one():
    answerer = PromptedAnswerer(lm=ReplayLM([]))
    assert answerer.prompt.id == "compassmem/answer" and answerer.prompt.status == "published"


def test_memlabs_short_answer_prompt_is_written_and_gets_context_question_and_date():
    lm = ReplayLM(["No, she prefers the city"])
    answerer = PromptedAnswerer(lm=lm, prompt="memlab/answer_short")
    assert answerer.prompt.status == "written" and "issue 43" in answerer.prompt.source
    out = answerer.run_one(AnswerIn("Would Ann move to a farm?", "[1 May 2023] Ann: I love the city.",
                                    datetime(2023, 6, 2)))
    prompt = lm.requests[0].messages[-1]["content"]
    assert "CONVERSATION EXCERPTS:\n(The question is asked on 2 June 2023.)\n[1 May 2023] Ann: I love the city." in prompt
    assert "QUESTION: Would Ann move to a farm?" in prompt and "yes/no question" in prompt
    assert out.text == "No, she prefers the city"
