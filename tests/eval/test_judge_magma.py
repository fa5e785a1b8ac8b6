"""MagmaGraderJudge (MAGMA appendix C.3) with a replaying fake LM: parsing, retries, runs,
its published prompt, and what the runner writes to metrics.json with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.config import instantiate, load_config, split_runner_keys
from memlab.data import load_sample
from memlab.eval.judge import SCORE_SCHEMA, Judge, JudgeIn, MagmaGraderJudge, parse_score
from memlab.eval.runner import RunOptions, run_benchmark
from memlab.lm.errors import ParseError
from memlab.prompts import load_prompt
from tests.eval.test_runner import _pipeline
from tests.fakes import ReplayLM

REPO = Path(__file__).resolve().parents[2]
MAGMA_PAPER = REPO / ".." / "shared" / "seeds" / "001_ff837c42d3687742.txt"
ITEM = JudgeIn(question="When did Melanie hike?", gold="19 October 2023", prediction="On 19 Oct 2023.")


def test_json_score_and_reasoning():
    judge = MagmaGraderJudge(ReplayLM(['{"score": 0.8, "reasoning": "Same day, format differs."}']))
    out = judge.run_one(ITEM)
    assert (out.score, out.correct, out.explanation) == (0.8, True, "Same day, format differs.")
    assert judge.metric(out) == 0.8 and not judge.failures


def test_parse_score_accepts_fences_prose_and_bare_numbers_and_checks_the_range():
    assert parse_score('```json\n{"score": 0, "reasoning": "contradicts"}\n```') == (0.0, "contradicts")
    assert parse_score("<think>score: 0.9?</think>It misses the date. Score: 0.4")[0] == 0.4
    assert parse_score(" 0.6 ")[0] == 0.6
    with pytest.raises(ParseError, match=r"\[0, 1\]"):
        parse_score('{"score": 8}')
    with pytest.raises(ParseError, match="no"):
        parse_score("The candidate is mostly right.")


def test_unparsable_reply_is_retried_once_then_counted():
    lm = ReplayLM(["looks fine", '{"score": 1.0}'])
    judge = MagmaGraderJudge(lm)
    assert judge.run_one(ITEM).score == 1.0 and len(lm.requests) == 2 and not judge.failures
    lm = ReplayLM(["looks fine", "still prose"])
    judge = MagmaGraderJudge(lm)
    out = judge.run_one(ITEM)
    assert out.score is None and out.correct is None and "score" in out.error
    assert judge.metric(out) is None and len(judge.failures) == 1


def test_runs_average_the_usable_scores_with_distinct_seeds():
    lm = ReplayLM(['{"score": 1.0}', '{"score": 0.4}', "no", "no"])
    judge = MagmaGraderJudge(lm, runs=3, temperature=0.7)
    out = judge.run_one(ITEM)
    assert out.score == pytest.approx(0.7) and out.correct is True
    assert [r.seed for r in lm.requests[:3]] == [0, 1, 2]


def test_prompt_is_the_published_c3_grader():
    template = load_prompt("magma/judge_semantic")
    assert template.status == "published" and "C.3" in template.source
    assert template.placeholders == {"question", "gold", "generated"}
    request = MagmaGraderJudge(ReplayLM([])).render(ITEM)
    text = request.messages[-1]["content"]
    assert f"Question: {ITEM.question} | Gold: {ITEM.gold} | Candidate: {ITEM.prediction}" in text
    assert request.json_schema == SCORE_SCHEMA
    if MAGMA_PAPER.is_file():
        paper = " ".join(MAGMA_PAPER.read_text().split())
        for line in template.body.splitlines():
            if line.strip():
                assert " ".join(line.split()) in paper, line


def test_runner_records_mean_scores_and_the_judge_identity(tmp_path):
    judge_lm = ReplayLM(lambda r: '{"score": 0.6, "reasoning": "partial"}', name="grader-model")
    judge = MagmaGraderJudge(lm=judge_lm)
    assert isinstance(judge, Judge)
    metrics = run_benchmark(_pipeline(lambda r: "x"), load_sample(), tmp_path,
                            RunOptions(max_questions=8, progress=False), judge=judge)
    assert metrics["overall"]["judge"] == pytest.approx(0.6)
    assert all(block["judge"] in (None, pytest.approx(0.6)) for block in metrics["by_category"].values())
    info = json.loads((tmp_path / "metrics.json").read_text())["judge_info"]
    assert info["prompt_id"] == "magma/judge_semantic" and info["judge_model"] == "grader-model"
    assert info["runs"] == 1 and info["scale"].startswith("continuous")


def test_magma_config_selects_the_grader_by_override():
    tree = load_config(REPO / "configs/pipelines/magma.yaml", [
        "eval.judge._component_=memlab.eval.judge.MagmaGraderJudge",
        "eval.judge.lm._component_=memlab.lm.llamacpp.LlamaCppLM",
        "eval.judge.lm.model=qwen2.5-coder-1.5b-instruct-q4_k_m",
        "eval.judge.runs=2",
    ])
    _, runner = split_runner_keys(tree)
    node = runner["eval"]["judge"]
    assert node["lm"]["model"] == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    node["lm"] = ReplayLM([])  # no model load in a unit test
    judge = instantiate(node)
    assert isinstance(judge, MagmaGraderJudge) and judge.runs == 2
