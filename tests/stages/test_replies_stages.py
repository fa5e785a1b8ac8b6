"""Issue 22, section 2, in the stages: one bad reply costs only its own call (``PromptedStage``),
and every answerer reads its reply the same way (``clean_answer``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from memlab.eval.metrics import amem_f1
from memlab.lm.base import LM
from memlab.lm.errors import LMUnavailableError, ParseError, RequestError
from memlab.lm.types import ChatRequest, Completion
from memlab.stage import PromptedStage
from memlab.stages.answer import AnswerIn, PromptedAnswerer, clean_answer
from memlab.stages.answer.adaptive import AdaptiveAnswerer
from memlab.stages.answer.cot import CoTAnswerer
from memlab.stages.answer.simplemem import ReconstructiveAnswerer
from memlab.stages.consolidate.base import ConsolidateIn, EventRef
from memlab.stages.consolidate.prompted import PromptedCausalConsolidator
from tests.fakes import ReplayLM

ITEM = AnswerIn("What is Ann's dog called?", "Ann adopted a dog named Rex.")
ANSWERERS = [PromptedAnswerer, AdaptiveAnswerer, ReconstructiveAnswerer]


@pytest.mark.parametrize("answerer", ANSWERERS)
@pytest.mark.parametrize("reply", ["<think>The dog is called Rex.</think>\nRex", "Rex<|im_end|>", "\ufeffRex",
                                   "Answer: Rex</s>", "<|im_start|>assistant\nRex<|im_end|>\n<|im_start|>user\nThanks"])
def test_answerers_keep_only_the_answer(answerer, reply):
    stage = answerer(ReplayLM([reply]))
    out = stage.run_one(ITEM)
    assert out.text == "Rex" and amem_f1(out.text, "Rex") == 1.0 and not stage.failures


@pytest.mark.parametrize("answerer", ANSWERERS)
def test_an_unclosed_reasoning_block_is_a_counted_failure_not_an_answer(answerer):
    lm = ReplayLM(["<think>The dog is called Rex.", "<think>Let me think again"])
    stage = answerer(lm)
    out = stage.run_one(ITEM)
    assert out.text == "" and out.error and len(stage.failures) == 1 and lm.remaining == 0


def test_the_cot_answerer_reads_past_special_tokens():
    stage = CoTAnswerer(ReplayLM(["<think>hmm</think>Ann named him.\nAnswer: Rex<|im_end|>junk"]))
    out = stage.run_one(ITEM)
    assert (out.text, out.reasoning) == ("Rex", "Ann named him.")


def test_the_cot_marker_search_is_linear_in_blank_lines():
    import time

    start = time.thread_time()
    with pytest.raises(ParseError):
        CoTAnswerer(ReplayLM([])).parse("\n" * 200_000 + "no marker", ITEM)
    assert time.thread_time() - start < 1.0


def test_clean_answer():
    assert clean_answer("FINAL ANSWER: Answer: Rex") == "Rex"
    with pytest.raises(ParseError, match="empty answer"):
        clean_answer("<|im_end|>")


# -- PromptedStage: whatever a parser raises on a reply costs that reply only ---------------------
@dataclass(frozen=True)
class Out:
    value: str
    error: str | None = None


class Fragile(PromptedStage):
    """A stage whose parser has a bug: it indexes a reply it should have checked."""

    def render(self, item: str) -> ChatRequest:
        return self.request(item)

    def parse(self, text: str, item: str) -> Out:
        if text == "ok":
            return Out(item)
        return Out({"a": 1}[text])  # KeyError on anything else

    def fallback(self, item: str, error: str) -> Out:
        return Out("", error=error)


def test_an_exception_in_a_parser_is_retried_then_counted_and_the_batch_goes_on(caplog):
    lm = ReplayLM(lambda request: "ok" if request.messages[0]["content"] != "bad" else "odd reply")
    stage = Fragile(lm)
    with caplog.at_level(logging.WARNING, logger="memlab.stage"):
        out = stage(["x", "bad", "y"])
    assert [o.value for o in out] == ["x", "", "y"]
    assert "KeyError" in out[1].error and len(stage.failures) == 1 and len(lm.requests) == 4
    assert any("parse raised KeyError" in r.getMessage() for r in caplog.records)


class Refusing(LM):
    """Refuses (``RequestError``) any request whose prompt is ``refuse``; answers "ok" otherwise."""

    def __init__(self, error: type[Exception] = RequestError) -> None:
        super().__init__(cache=None)
        self.error, self.batches = error, []

    @property
    def name(self) -> str:
        return "refusing"

    @property
    def requests_at_once(self) -> int:
        return 8

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        self.batches.append([r.messages[0]["content"] for r in requests])
        if any(r.messages[0]["content"] == "refuse" for r in requests):
            raise self.error("HTTP 400: this one request was refused")
        return [Completion("ok", 1, 1, 0.0) for _ in requests]


def test_a_request_the_backend_refuses_costs_only_that_call():
    lm = Refusing()
    stage = Fragile(lm)
    out = stage(["x", "refuse", "y"])
    assert [o.value for o in out] == ["x", "", "y"] and "refused" in out[1].error
    assert len(stage.failures) == 1 and stage.failures[0].completion == ""
    # the batch, then each request alone; the refused one is not retried
    assert lm.batches == [["x", "refuse", "y"], ["x"], ["refuse"], ["y"]]
    assert stage.usage.snapshot()["llm_calls"] == 2


def test_an_unavailable_backend_still_stops_the_stage():
    with pytest.raises(LMUnavailableError):
        Fragile(Refusing(LMUnavailableError))(["refuse"])


def test_a_parser_gets_ints_where_its_schema_says_integer():
    # {"cause": 1.0} passed jsonschema's "integer" and then crashed indexing the events.
    item = ConsolidateIn(EventRef("e0", "Ann missed the interview."), (EventRef("e1", "Ann's car broke down."),))
    lm = ReplayLM(['{"links": [{"cause": 1.0, "effect": 0, "score": 0.9}]}'] * 2)
    stage = PromptedCausalConsolidator(lm)
    out = stage.run_one(item)
    assert out.links == () and out.error and "integer" in out.error and len(stage.failures) == 1
