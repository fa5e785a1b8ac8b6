import json
from dataclasses import replace

import pytest

from memlab.data import load_sample
from memlab.eval.runner import RunOptions, run_benchmark
from memlab.lm.errors import LMUnavailableError
from memlab.pipelines.fullcontext import FullContext
from memlab.stages.answer import PromptedAnswerer
from tests.fakes import ReplayLM


def _pipeline(script):
    return FullContext(answerer=PromptedAnswerer(lm=ReplayLM(script)), max_context_tokens=400)


def test_run_writes_predictions_and_metrics_without_gold_reaching_the_pipeline(tmp_path):
    conversations = load_sample()
    seen = []

    def respond(request):
        seen.append(request.messages[0]["content"])
        return "an answer"

    pipeline = _pipeline(respond)
    metrics = run_benchmark(pipeline, conversations, tmp_path, RunOptions(max_questions=4, progress=False))
    rows = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 4 == metrics["n_questions"]
    assert not (tmp_path / "predictions.jsonl.partial").exists()
    row = rows[0]
    for key in ("conversation_id", "question_id", "category", "question", "gold", "prediction", "evidence",
                "retrieved", "context_tokens", "usage", "latency_s", "f1_locomo", "f1_amem", "bleu1",
                "recall@10", "recall@tok1000"):
        assert key in row
    assert row["prediction"] == "an answer" and row["usage"]["llm_calls"] == 1
    assert [step["step"] for step in row["trace"]] == ["truncate", "answer"]
    # the gold answer never appears in what the model was asked
    golds = [q.answer for q in conversations[0].questions[:4]]
    assert not any(g in prompt.split("CONTEXT:")[0] + prompt.split("QUESTION:")[-1] for g in golds for prompt in seen)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert set(saved["overall"]) >= {"f1_locomo", "f1_amem", "bleu1", "judge", "recall@1", "recall@5", "recall@10",
                                     "recall@20", "recall@tok500", "recall@tok1000", "recall@tok2000", "context_tokens"}
    assert saved["usage"]["query"]["llm_calls"] == 4 and saved["usage"]["build"]["llm_calls"] == 0
    assert saved["timing"]["query_seconds_p50"] is not None
    assert set(saved["memory"]) == {conversations[0].id}


def test_answered_rows_reach_the_partial_file_before_the_conversation_ends(tmp_path):
    on_disk = []

    def respond(request):  # each call sees what is in the file: the batches answered before it
        partial = tmp_path / "predictions.jsonl.partial"
        on_disk.append(len(partial.read_text().splitlines()) if partial.exists() else None)
        return "an answer"

    run_benchmark(_pipeline(respond), load_sample()[:1], tmp_path, RunOptions(max_questions=3, progress=False))
    assert on_disk == [0, 1, 2]
    rows = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 3 == len({row["question_id"] for row in rows})  # each row once


def test_retrieval_only_makes_no_answering_call(tmp_path):
    lm = ReplayLM([])  # any call would raise: the script is empty
    pipeline = FullContext(answerer=PromptedAnswerer(lm=lm))
    metrics = run_benchmark(pipeline, load_sample(), tmp_path, RunOptions(retrieval_only=True, progress=False))
    assert lm.requests == []
    assert metrics["overall"]["f1_amem"] is None and metrics["overall"]["recall@20"] is not None
    assert "adversarial" in metrics["by_category"]


def test_a_failing_question_is_recorded_and_the_run_goes_on(tmp_path):
    def respond(request):
        if "Tomas" in request.messages[0]["content"].split("QUESTION:")[-1]:
            raise RuntimeError("boom")
        return "fine"

    metrics = run_benchmark(_pipeline(respond), load_sample(), tmp_path, RunOptions(max_questions=6, progress=False))
    rows = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    errors = [r for r in rows if r["error"]]
    assert errors and all("boom" in r["error"] for r in errors)
    assert metrics["failed_questions"] == len(errors) < 6


def test_an_unavailable_model_stops_the_run_cleanly(tmp_path):
    calls = []

    def respond(request):
        calls.append(1)
        if len(calls) > 2:
            raise LMUnavailableError("server at http://127.0.0.1:9 is down")
        return "ok"

    metrics = run_benchmark(_pipeline(respond), load_sample(), tmp_path, RunOptions(max_questions=5, progress=False))
    assert "is down" in metrics["stopped"]
    assert len((tmp_path / "predictions.jsonl").read_text().splitlines()) == 2
    assert json.loads((tmp_path / "metrics.json").read_text())["n_questions"] == 2


def test_adversarial_questions_are_judged_against_abstaining_and_kept_out_of_overall(tmp_path):
    from memlab.eval.abstention import ABSTENTION_GOLD
    from memlab.eval.judge import CorrectWrongJudge

    # CORRECT only where the gold shown is the abstention (never the planted adversarial answer)
    judge_lm = ReplayLM(lambda r: '{"label": "CORRECT"}' if ABSTENTION_GOLD in r.messages[-1]["content"]
                        else '{"label": "WRONG"}')
    metrics = run_benchmark(_pipeline(lambda r: "Not mentioned in the conversation."), load_sample(), tmp_path,
                            RunOptions(progress=False), judge=CorrectWrongJudge(lm=judge_lm))
    adversarial = metrics["by_category"]["adversarial"]
    assert len(judge_lm.requests) == metrics["n_questions"]  # every question judged
    assert sum(ABSTENTION_GOLD in r.messages[-1]["content"] for r in judge_lm.requests) == adversarial["n"]
    assert adversarial["judge"] == 1.0 and metrics["overall"]["judge"] == 0.0  # overall: categories 1-4
    # the detector: right on adversarial questions, a false abstention on every other
    assert adversarial["abstained"] == 1.0 == metrics["overall"]["abstained"]
    assert adversarial["f1_locomo"] == 1.0  # "not mentioned" is one of the official script's two phrases
    assert metrics["judge_info"]["prompt_id"] == "simplemem/judge_correct_wrong"


def test_overall_on_non_locomo_data_covers_every_question():
    from memlab.eval.report import format_table, summarise

    def row(category, recall):
        return {"category": category, "usage": {}, "latency_s": 0.1, "recall@10": recall}

    rows = [row("temporal", 1.0), row("knowledge_update", 0.0), row("information_extraction", 0.5)]
    metrics = summarise(rows, retrieval_only=True, build_seconds=0.0, build_usage={})
    assert metrics["overall"]["n"] == 3 and metrics["overall"]["recall@10"] == 0.5
    assert metrics["overall_over"] == "all questions" and "overall (1-4)" not in format_table(metrics)
    locomo = summarise([row("temporal", 1.0), row("adversarial", 0.0)], True, 0.0, {})
    assert locomo["overall"]["n"] == 1 and locomo["overall_over"] == "LoCoMo categories 1-4"


class _SlowCachedLM(ReplayLM):
    """Reports 2 s of model time per call and keeps a response cache."""

    def __init__(self, cache: str) -> None:
        super().__init__(lambda request: "an answer")
        self._cache_path = cache

    def _generate(self, requests):
        return [replace(c, latency_s=2.0) for c in super()._generate(requests)]


def test_timing_is_the_cold_cache_cost_when_a_run_resumes_through_the_cache(tmp_path):
    cache = str(tmp_path / "cache.sqlite")
    options = RunOptions(max_questions=3, progress=False)
    cold = run_benchmark(FullContext(answerer=PromptedAnswerer(lm=_SlowCachedLM(cache))), load_sample(),
                         tmp_path / "cold", options)
    warm = run_benchmark(FullContext(answerer=PromptedAnswerer(lm=_SlowCachedLM(cache))), load_sample(),
                         tmp_path / "warm", options)
    assert warm["usage"]["query"]["llm_seconds"] == cold["usage"]["query"]["llm_seconds"] == 6.0
    # Every answer came from the cache: the wall time is small, the reported cost is not.
    assert warm["timing"]["query_wall_seconds_p50"] < 2.0 <= warm["timing"]["query_seconds_p50"]
    assert cold["timing"]["query_seconds_p50"] == pytest.approx(cold["timing"]["query_wall_seconds_p50"])
    # Per-stage usage: the answerer made every call.
    assert warm["usage"]["stages"] == {"answerer": {"llm_calls": 3, "prompt_tokens": warm["usage"]["query"]["prompt_tokens"],
                                                    "completion_tokens": warm["usage"]["query"]["completion_tokens"],
                                                    "llm_seconds": 6.0}}


class _BatchRecordingAnswerer(PromptedAnswerer):
    """Records the size of every batch it is given."""

    def __init__(self, lm) -> None:
        super().__init__(lm=lm)
        self.batches: list[int] = []

    def forward(self, batch):
        self.batches.append(len(batch))
        return super().forward(batch)


def _rag(answerer):
    from memlab.pipelines.rag import RAG
    from memlab.stages.segment import TurnSegmenter
    from tests.memory.helpers import HashingEmbedder

    return RAG(segmenter=TurnSegmenter(), embedder=HashingEmbedder(), answerer=answerer, retrieval="hybrid", top_k=3)


def test_batched_run_gives_the_answers_of_single_questions_and_the_stages_see_the_batch(tmp_path):
    def respond(request):
        return "answer to " + request.messages[0]["content"].split("QUESTION:")[-1].strip()[:40]

    single = _BatchRecordingAnswerer(ReplayLM(respond))
    batched = _BatchRecordingAnswerer(ReplayLM(respond))
    options = RunOptions(max_questions=5, progress=False)
    run_benchmark(_rag(single), load_sample(), tmp_path / "one", options)
    metrics = run_benchmark(_rag(batched), load_sample(), tmp_path / "three", replace(options, batch_size=3))
    rows = {name: [json.loads(line) for line in (tmp_path / name / "predictions.jsonl").read_text().splitlines()]
            for name in ("one", "three")}
    assert [r["prediction"] for r in rows["one"]] == [r["prediction"] for r in rows["three"]]
    assert [r["retrieved_units"] for r in rows["one"]] == [r["retrieved_units"] for r in rows["three"]]
    assert single.batches == [1] * 5 and batched.batches == [3, 2]
    assert metrics["n_questions"] == 5 and metrics["usage"]["query"]["llm_calls"] == 5
    assert sum(r["usage"]["llm_calls"] for r in rows["three"]) == pytest.approx(5)


def test_a_batch_that_fails_is_answered_question_by_question(tmp_path):
    def respond(request):
        if "Tomas" in request.messages[0]["content"].split("QUESTION:")[-1]:
            raise RuntimeError("boom")
        return "fine"

    conversations = load_sample()
    questions = conversations[0].questions[:6]
    assert any("Tomas" in q.text for q in questions) and any("Tomas" not in q.text for q in questions)
    run_benchmark(_rag(PromptedAnswerer(lm=ReplayLM(respond))), conversations, tmp_path,
                  RunOptions(max_questions=6, progress=False, batch_size=6))
    rows = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    for question, row in zip(questions, rows):
        assert (row["error"] is not None) == ("Tomas" in question.text)
        assert row["prediction"] == (None if "Tomas" in question.text else "fine")


def test_batch_size_must_be_positive():
    with pytest.raises(ValueError, match="batch_size"):
        RunOptions(batch_size=0)


class _SlowBuild(FullContext):
    """A build that calls its answerer's LM while it waits on ``gate``: a build of hours, in small."""

    def __init__(self, gate, **kwargs):
        super().__init__(**kwargs)
        self.gate = gate

    def build(self, history):
        self.answerer.lm.complete("a build's call")
        self.gate.wait(5)
        return super().build(history)


def test_a_long_build_shows_its_cost_while_it_runs(tmp_path, monkeypatch):
    """``building.json.partial`` holds the running build's cost so far (rewritten by a watcher every
    BUILDING_EVERY_S) and goes when the build ends; ``on_progress`` is told each time."""
    import threading

    from memlab.eval import conversation

    monkeypatch.setattr(conversation, "BUILDING_EVERY_S", 0.02)
    gate = threading.Event()
    seen = []

    def on_progress(out):
        building = out / "building.json.partial"
        if building.exists():
            seen.append(json.loads(building.read_text()))
            gate.set()  # the build may end once its progress was shown

    pipeline = _SlowBuild(gate, answerer=PromptedAnswerer(lm=ReplayLM(lambda request: "an answer")), max_context_tokens=400)
    run_benchmark(pipeline, load_sample()[:1], tmp_path, RunOptions(max_questions=1, progress=False),
                  on_progress=on_progress)
    assert seen and seen[0]["conversation_id"] == load_sample()[0].id
    assert seen[0]["build_usage"]["llm_calls"] == 1 and seen[0]["memory_stats"] is None
    assert seen[0]["failures"] == {} and seen[0]["reached"] is None  # a pipeline that does not say how far
    assert not (tmp_path / "building.json.partial").exists()
