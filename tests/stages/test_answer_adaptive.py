from __future__ import annotations

from datetime import datetime

from memlab.prompts import load_prompt
from memlab.stages.answer import AnswerIn
from memlab.stages.answer import AnswerIn as AdaptiveAnswerIn
from memlab.stages.answer.adaptive import DYNAMIC_INSTRUCTIONS, AdaptiveAnswerer
from tests.fakes import ReplayLM


def test_prompt_is_published_with_its_placeholders():
    prompt = load_prompt("magma/answer")
    assert prompt.status == "published" and "C.2" in prompt.source
    assert prompt.placeholders == {"context", "question", "category_specific_constraints", "dynamic_instruction"}


def test_instruction_follows_the_router_type_and_constraints_are_filled():
    lm = ReplayLM(["Answer: 7 May 2023", "Paris"])
    answerer = AdaptiveAnswerer(lm)
    item = AdaptiveAnswerIn("When did she run?", "<t: 7 May 2023> ran <ref: e1>", datetime(2023, 6, 1),
                            question_type="temporal", constraints="the question concerns May 2023")
    assert answerer.run_one(item).text == "7 May 2023"
    prompt = lm.requests[0].messages[-1]["content"]
    assert DYNAMIC_INSTRUCTIONS["temporal"] in prompt
    assert "Constraints: the question concerns May 2023; the question is asked on 1 June 2023" in prompt
    # a plain AnswerIn (another pipeline's input) gets the default type's instruction
    assert answerer.run_one(AnswerIn("Where?", "ctx")).text == "Paris"
    assert DYNAMIC_INSTRUCTIONS["single-hop"] in lm.requests[1].messages[-1]["content"]
    assert "Constraints: none" in lm.requests[1].messages[-1]["content"]
