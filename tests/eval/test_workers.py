"""Runs in worker processes (``memlab run --workers N``, ``memlab.eval.workers``): the same run
folder as the sequential run, the workers' caches merged, and a killed run resumed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from memlab.eval.runner import RunOptions, run_config
from memlab.eval.workers import work_folder_of
from memlab.lm.cache import ResponseCache

REPO = Path(__file__).resolve().parents[2]
DEV = REPO.parent / "shared" / "data" / "locomo" / "locomo10_dev.json"
needs_dev = pytest.mark.skipif(not DEV.is_file(), reason="needs ../shared/data/locomo/locomo10_dev.json")
#: What may differ between a sequential and a parallel run of the same questions.
VOLATILE_ROW = ("usage", "latency_s", "cold_latency_s")
VOLATILE_METRICS = ("timing", "usage", "workers", "ray", "cache_merge")


SMALL_LM = {"_component_": "memlab.lm.llamacpp.LlamaCppLM", "model": "smollm2-135m-instruct-q4_1", "n_ctx": 2048,
            "n_threads": 1}


def small_config(tmp_path: Path, base: str = "fullcontext") -> Path:
    """``configs/pipelines/<base>.yaml`` answered by SmolLM2-135M through the cache ``tmp_path/cache.sqlite``
    (override ``answerer.lm.cache`` for another)."""
    tree = yaml.safe_load((REPO / "configs" / "pipelines" / f"{base}.yaml").read_text())
    tree["answerer"]["lm"] = {**SMALL_LM, "cache": str(tmp_path / "cache.sqlite")}
    tree["answerer"]["max_tokens"] = 12
    if base == "fullcontext":
        tree["max_context_tokens"] = 300
    path = tmp_path / f"{base}-small.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def rows_of(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in VOLATILE_ROW} for row in rows]


def metrics_of(folder: Path) -> dict:
    metrics = json.loads((folder / "metrics.json").read_text())
    return {k: v for k, v in metrics.items() if k not in VOLATILE_METRICS}


def cached(path: Path) -> dict[str, float]:
    """{key: created_at} of a response cache file."""
    if not path.exists():
        return {}
    cache = ResponseCache.open(path)
    found = {row["key"]: row["created_at"] for row in cache.rows()}
    cache.close()
    return found


@pytest.mark.slow
@needs_dev
def test_two_workers_answer_as_the_sequential_run_and_merge_their_caches(tmp_path, llama_cpp_works):
    """RAG over turns with a real embedder and SmolLM2, on the embedded sample and on two dev
    conversations (their first sessions): each run computes every answer (its own cold cache)."""
    config = small_config(tmp_path, "rag_turns")
    options = RunOptions(max_questions=3, progress=False)
    for name, data, conversations in (("sample", None, None), ("dev", str(DEV), ["conv-26", "conv-30"])):
        # the dev conversations' first 4 sessions: embedding the whole of them 4 times would dominate the test
        kwargs = dict(data=data, conversations=conversations, sessions=4 if data else None, options=options)
        parallel, metrics = run_config(config, out=tmp_path / f"{name}-parallel", workers=2, **kwargs)
        assert metrics["cache_merge"] == {"added": metrics["n_questions"], "already_present": 0, "conflicting": 0}
        assert len(cached(tmp_path / "cache.sqlite")) == metrics["n_questions"]
        assert not work_folder_of(parallel).exists()  # removed once the run ended
        sequential, _ = run_config(config, [f"answerer.lm.cache={tmp_path / name}-sequential.sqlite"],
                                   out=tmp_path / f"{name}-sequential", **kwargs)
        assert len(cached(tmp_path / f"{name}-sequential.sqlite")) == metrics["n_questions"]
        assert rows_of(parallel) == rows_of(sequential)
        assert {**metrics_of(parallel), "overrides": None} == {**metrics_of(sequential), "overrides": None}
        (tmp_path / "cache.sqlite").unlink()
    assert [row["conversation_id"] for row in rows_of(parallel)] == ["conv-26"] * 3 + ["conv-30"] * 3


@pytest.mark.slow
@needs_dev
def test_a_killed_parallel_run_resumes_without_asking_anything_twice(tmp_path, llama_cpp_works):
    config = small_config(tmp_path)
    out = tmp_path / "run"
    ids = ["conv-26", "conv-30", "conv-41"]
    command = [sys.executable, "-m", "memlab.cli", "run", str(config), "--data", str(DEV), "--conversations",
               ",".join(ids), "--max-questions", "4", "--workers", "2", "--out", str(out), "--no-progress"]
    first = subprocess.Popen(command, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    work = work_folder_of(out)
    deadline = time.monotonic() + 300
    while not list(work.glob("*.result.json")) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)  # the run and its workers, mid-run
    first.wait()
    finished = list(work.glob("*.result.json"))
    assert finished and len(finished) < 3, "the kill should land after one conversation and before the last"
    before = cached(tmp_path / "cache.sqlite")  # what finished conversations asked, merged
    for aside in (work / "caches").glob("*.sqlite"):  # what unfinished ones asked before the kill
        before.update(cached(aside))
    assert 4 <= len(before) < 12
    second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    after = cached(tmp_path / "cache.sqlite")
    assert len(after) == 12 and all(after[key] == created for key, created in before.items())  # none asked again
    assert not work.exists()
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert sum(row["usage"]["uncached_calls"] for row in rows) == 12 - (len(before) - 4 * len(finished))
    sequential, _ = run_config(config, out=tmp_path / "sequential", data=str(DEV), conversations=ids,
                               options=RunOptions(max_questions=4, progress=False))
    assert rows_of(out) == rows_of(sequential) and metrics_of(out) == metrics_of(sequential)


def test_workers_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="--workers"):
        run_config(REPO / "configs" / "pipelines" / "fullcontext.yaml", out=tmp_path / "run", workers=0,
                   options=RunOptions(progress=False))


@pytest.mark.slow
@needs_dev
def test_a_local_ray_instance_runs_the_same_tasks(tmp_path, llama_cpp_works):
    pytest.importorskip("ray", reason="the ray extra: pip install 'memlab[ray]'")
    config = small_config(tmp_path)
    kwargs = dict(data=str(DEV), conversations=["conv-26", "conv-30"], options=RunOptions(max_questions=2, progress=False))
    on_ray, metrics = run_config(config, out=tmp_path / "ray", workers=2, ray="local", **kwargs)
    assert metrics["ray"] == "local" and metrics["cache_merge"]["added"] == 4
    sequential, _ = run_config(config, [f"answerer.lm.cache={tmp_path}/sequential.sqlite"], out=tmp_path / "sequential",
                               **kwargs)
    assert rows_of(on_ray) == rows_of(sequential)
    assert {**metrics_of(on_ray), "overrides": None} == {**metrics_of(sequential), "overrides": None}


def test_ray_without_its_extra_is_one_clear_error(monkeypatch):
    from memlab.eval.ray_executor import RayExecutor, RayUnavailableError

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    with pytest.raises(RayUnavailableError, match=r"memlab\[ray\]"):
        RayExecutor("local", 2)


def test_another_runs_work_folder_gives_its_cached_replies_back_before_it_goes(tmp_path):
    from memlab.eval.workers import WorkFolder
    from memlab.lm.types import ChatRequest, Completion

    shared = tmp_path / "cache.sqlite"
    work = WorkFolder(tmp_path / ".run.work", "first run", [str(shared)])
    aside = ResponseCache.open(work.aside_caches("conv-1")[str(shared)])
    aside.put("m", ChatRequest.of("asked before the kill"), Completion(text="kept", prompt_tokens=1,
                                                                        completion_tokens=1, latency_s=0.1))
    aside.close()
    WorkFolder(tmp_path / ".run.work", "first run", [str(shared)])  # the same run: its work stays
    assert Path(work.aside_caches("conv-1")[str(shared)]).exists() and len(cached(shared)) == 0
    WorkFolder(tmp_path / ".run.work", "another run", [str(shared)])
    assert [row["text"] for row in ResponseCache.open(shared).rows()] == ["kept"]
    assert not Path(work.aside_caches("conv-1")[str(shared)]).exists()
