"""Questions sent N at a time to a served model (``--batch-size N`` with ``OpenAICompatLM``'s
``max_concurrency``) give the answers of a sequential run, with exact cache and usage accounting."""

from __future__ import annotations

import json

from memlab.data import load_sample
from memlab.eval.runner import RunOptions, run_benchmark
from memlab.lm.cache import ResponseCache
from memlab.lm.openai_compat import OpenAICompatLM
from memlab.pipelines.rag import RAG
from memlab.stages.answer import PromptedAnswerer
from memlab.stages.segment import TurnSegmenter
from tests.conftest import SERVER_MODEL
from tests.memory.helpers import HashingEmbedder


def _run(server: str, cache, folder, batch_size: int, concurrency: int) -> tuple[list[dict], dict]:
    lm = OpenAICompatLM(SERVER_MODEL, base_url=server, max_concurrency=concurrency, cache=str(cache))
    pipeline = RAG(segmenter=TurnSegmenter(), embedder=HashingEmbedder(), retrieval="hybrid", top_k=3,
                   answerer=PromptedAnswerer(lm=lm, max_tokens=16))
    metrics = run_benchmark(pipeline, load_sample(), folder, RunOptions(max_questions=6, batch_size=batch_size,
                                                                        progress=False))
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    return rows, metrics


def test_concurrent_questions_answer_as_sequential_ones(llama_server, tmp_path):
    sequential, seq_metrics = _run(llama_server, tmp_path / "a.sqlite", tmp_path / "seq", 1, 1)
    concurrent, con_metrics = _run(llama_server, tmp_path / "b.sqlite", tmp_path / "con", 4, 4)
    assert [r["prediction"] for r in concurrent] == [r["prediction"] for r in sequential]
    assert len({r["prediction"] for r in concurrent}) > 1
    n = len(sequential)
    for metrics in (seq_metrics, con_metrics):
        assert metrics["usage"]["query"]["llm_calls"] == n and metrics["failed_questions"] == 0
    assert con_metrics["usage"]["query"]["prompt_tokens"] == seq_metrics["usage"]["query"]["prompt_tokens"]
    assert len(ResponseCache.open(tmp_path / "b.sqlite")) == n  # every reply cached once
    again, again_metrics = _run(llama_server, tmp_path / "b.sqlite", tmp_path / "again", 4, 4)
    assert [r["prediction"] for r in again] == [r["prediction"] for r in concurrent]
    assert sum(r["usage"]["uncached_calls"] for r in again) == 0
