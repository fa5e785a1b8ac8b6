"""CorrectWrongJudge control flow with a replaying fake LM, and its published prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.eval.judge import LABEL_SCHEMA, CorrectWrongJudge, Judge, JudgeIn, JudgeOut, parse_label
from memlab.lm.errors import ParseError
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import Stage
from tests.fakes import ReplayLM

SEED_PAPER = Path(__file__).resolve().parents[2] / ".." / "shared" / "seeds" / "003_f88e39f104b2d0db.txt"

ITEM = JudgeIn(
    question="What did Melanie buy in Hawaii?",
    gold="A shell necklace",
    prediction="She bought a necklace made of shells.",
)


def judge_one(replies: list[str], **kwargs) -> tuple[JudgeOut, CorrectWrongJudge, ReplayLM]:
    lm = ReplayLM(replies)
    judge = CorrectWrongJudge(lm, **kwargs)
    return judge.run_one(ITEM), judge, lm


def test_correct_json_verdict():
    out, judge, lm = judge_one(['{"explanation": "Same necklace.", "label": "CORRECT"}'])
    assert out == JudgeOut(correct=True, score=1.0, explanation="Same necklace.", error=None)
    assert len(lm.requests) == 1 and not judge.failures


def test_wrong_json_verdict():
    out, _, _ = judge_one(['{"explanation": "Different object.", "label": "WRONG"}'])
    assert (out.correct, out.score, out.explanation) == (False, 0.0, "Different object.")


def test_fenced_json_verdict():
    out, _, _ = judge_one(['Here is my grade:\n```json\n{"label": "WRONG"}\n```'])
    assert (out.correct, out.score, out.error) == (False, 0.0, None)


def test_free_text_uses_the_last_label():
    reply = "The answer is not CORRECT: it names the wrong year.\nWRONG"
    out, judge, _ = judge_one([reply])
    assert out.correct is False and out.score == 0.0
    assert out.explanation == reply and not judge.failures


def test_lowercase_json_label_is_read_and_think_blocks_are_ignored():
    assert parse_label('{"label": " correct "}') == ("CORRECT", "")
    assert parse_label("<think>maybe CORRECT</think>\nThe dates differ. WRONG")[0] == "WRONG"
    with pytest.raises(ParseError, match="PARTIAL"):
        parse_label('{"label": "PARTIAL", "explanation": "half CORRECT"}')
    with pytest.raises(ParseError, match="no"):
        parse_label("The generated answer is correct.")  # lower case prose is not a label


def test_unparseable_reply_is_retried_once_then_counted_as_failure():
    out, judge, lm = judge_one(["I am not sure.", "Still thinking about it."])
    assert out.correct is None and out.score is None and out.error
    assert len(judge.failures) == 1
    assert judge.failures[0].completion == "Still thinking about it."
    assert len(lm.requests) == 2 and lm.remaining == 0
    retry = lm.requests[1].messages
    # the retry carries the first reply and a corrective message after the original prompt
    assert retry[:1] == lm.requests[0].messages
    assert retry[1] == {"role": "assistant", "content": "I am not sure."}
    assert retry[2]["role"] == "user" and "could not be parsed" in retry[2]["content"]


def test_retry_that_succeeds_is_not_a_failure():
    out, judge, lm = judge_one(["Hmm.", '{"label": "CORRECT"}'])
    assert out.correct is True and not judge.failures and len(lm.requests) == 2


def _by_seed(verdicts: dict[int, str]):
    return lambda request: json.dumps({"explanation": f"run {request.seed}", "label": verdicts[request.seed]})


def test_three_runs_majority_with_distinct_seeds():
    lm = ReplayLM(_by_seed({10: "CORRECT", 11: "WRONG", 12: "CORRECT"}))
    judge = CorrectWrongJudge(lm, runs=3, temperature=0.7, seed=10)
    out = judge.run_one(ITEM)
    # 2 of 3 CORRECT -> correct, score 2/3; the explanation comes from a majority run
    assert out.correct is True and out.score == pytest.approx(2 / 3)
    assert out.explanation in ("run 10", "run 12")
    assert sorted(r.seed for r in lm.requests) == [10, 11, 12]
    assert {r.temperature for r in lm.requests} == {0.7}
    assert len({r.cache_key_payload() for r in lm.requests}) == 3  # distinct requests


def test_two_runs_tie_is_wrong():
    lm = ReplayLM(_by_seed({0: "CORRECT", 1: "WRONG"}))
    out = CorrectWrongJudge(lm, runs=2, temperature=1.0).run_one(ITEM)
    assert out.correct is False and out.score == 0.5 and out.explanation == "run 1"


def test_unusable_run_is_left_out_of_the_majority():
    def reply(request: ChatRequest) -> str:
        if request.seed == 1:
            return "no idea"  # unusable, also on the retry
        return '{"label": "WRONG"}'

    lm = ReplayLM(reply)
    judge = CorrectWrongJudge(lm, runs=3, temperature=0.5)
    out = judge.run_one(ITEM)
    assert out.correct is False and out.score == 0.0 and out.error is None
    assert len(judge.failures) == 1 and len(lm.requests) == 4  # 3 runs + 1 retry


def test_batch_keeps_order_and_renders_each_item():
    items = [ITEM, JudgeIn(question="When did Caroline move?", gold="2019", prediction="In 2021")]
    lm = ReplayLM(lambda r: '{"label": "WRONG"}' if "In 2021" in r.messages[0]["content"] else '{"label": "CORRECT"}')
    outs = CorrectWrongJudge(lm)(items)
    assert [o.correct for o in outs] == [True, False]


def test_rendered_prompt_contains_the_item_and_asks_for_the_schema():
    judge = CorrectWrongJudge(ReplayLM([]), max_tokens=128)
    request = judge.render(ITEM)
    (message,) = request.messages
    text = message["content"]
    assert message["role"] == "user"
    assert f"Question: {ITEM.question}" in text
    assert f"Gold answer: {ITEM.gold}" in text
    assert f"Generated answer: {ITEM.prediction}" in text
    assert "{" not in text  # every placeholder filled; the published prompt has no other braces
    assert request.json_schema == LABEL_SCHEMA and request.max_tokens == 128 and request.seed == 0


def test_judge_info_and_family():
    judge = CorrectWrongJudge(ReplayLM([], name="judge-model"), runs=3, temperature=0.3)
    assert isinstance(judge, Judge) and judge.In is JudgeIn and judge.Out is JudgeOut
    assert judge.judge_info() == {
        "judge_model": "judge-model",
        "prompt_id": "simplemem/judge_correct_wrong",
        "prompt_source": "SimpleMem paper, appendix A.4, Listing 4 (LLM-as-a-Judge Evaluation Prompt)",
        "runs": 3,
        "temperature": 0.3,
    }


def test_bad_runs_is_refused():
    with pytest.raises(ValueError, match="runs"):
        CorrectWrongJudge(ReplayLM([]), runs=0)


def test_save_and_load_round_trip(tmp_path):
    judge = CorrectWrongJudge(ReplayLM([]), runs=3, temperature=0.5, seed=7)
    loaded = Stage.load(judge.save(tmp_path / "judge"), lm=ReplayLM([]))
    assert isinstance(loaded, CorrectWrongJudge)
    assert (loaded.runs, loaded.temperature, loaded.seed) == (3, 0.5, 7)


def test_prompt_file_header_and_placeholders():
    template = load_prompt("simplemem/judge_correct_wrong")
    assert template.status == "published"
    assert template.placeholders == {"question", "gold_answer", "generated_answer"}
    assert template.body.startswith("Your task is to label an answer to a question as 'CORRECT' or 'WRONG'.")
    assert template.body.endswith('Just return the label CORRECT or WRONG in a json format with the key as "label".')


def test_prompt_is_verbatim_from_the_paper():
    if not SEED_PAPER.is_file():
        pytest.skip("../shared seeds not available")
    paper = SEED_PAPER.read_text("utf-8")
    listing = paper[paper.index("Listing 4. LLM-as-a-Judge Evaluation Prompt") :]
    listing = listing[listing.index("```txt") + len("```txt") : listing.index("```", listing.index("```txt") + 6)]
    paper_lines = [line.strip() for line in listing.strip().splitlines()]
    body_lines = [line.strip() for line in load_prompt("simplemem/judge_correct_wrong").body.splitlines()]
    assert body_lines == paper_lines
