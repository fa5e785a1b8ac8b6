"""No command destroys its own input (issue 44): the real ``memlab`` command, run in a
subprocess, on a real response cache, a real saved memory and a real run folder. Each misuse
ends with exit 2 (bad input) or 1 (a failed build) and one line on stderr, never a traceback,
and every input is byte for byte what it was before (checksums of every file)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.checkpoint import TRAINING_FILE, seal_checkpoint
from memlab.cli import main
from memlab.fileio import MANIFEST_FILE
from memlab.lm.cache import ResponseCache
from memlab.lm.types import ChatRequest, Completion

REPO = Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs/pipelines/rag_turns.yaml")


def checksums(*paths: Path) -> dict[str, str]:
    """sha256 of every file under ``paths`` (a file or a folder)."""
    files = [p for path in paths for p in ([path] if path.is_file() else sorted(path.rglob("*"))) if p.is_file()]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def memlab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(REPO)}  # this tree's memlab
    return subprocess.run([sys.executable, "-m", "memlab.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def one_error_line(done: subprocess.CompletedProcess, code: int = 2) -> str:
    """The one line that says what went wrong (progress: INFO lines and loading bars, aside)."""
    lines = [line for line in done.stderr.splitlines()
             if line.strip() and not line.startswith("INFO ") and "Loading weights" not in line]
    assert done.returncode == code and "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A retrieval-only run of ``rag_turns`` on the embedded sample (``run/``) with its memory
    saved (``memories/``): real MiniLM embeddings, a real faiss index."""
    root = tmp_path_factory.mktemp("saved")
    code = main(["run", CONFIG, "--retrieval-only", "--no-progress", "--out", str(root / "run"),
                 "--save-memory", str(root / "memories")])
    assert code == 0 and (root / "memories" / "memories.json").is_file()
    return root


@pytest.fixture
def cache(tmp_path) -> Path:
    path = tmp_path / "responses.sqlite"
    store = ResponseCache(path)
    for prompt in ("Who is Rex?", "Where does Ann live?", "Summarise session 1"):
        store.put("model-a", ChatRequest.of(prompt, max_tokens=8), Completion("a reply", 5, 2, 0.25, "gguf", "stop"))
    store.close()
    return path


def test_a_cache_is_never_exported_over_itself_nor_imported_into_itself(cache, tmp_path):
    before = checksums(cache)
    for args, expected in [
        (["cache", "export", "--cache", str(cache), str(cache)], "is the response cache"),
        (["cache", "export", "--cache", str(cache), f"{cache}-wal"], "is the cache's write-ahead log"),
        (["cache", "export", "--cache", "responses.sqlite", "./sub/../responses.sqlite"], "is the response cache"),
        (["cache", "import", "--cache", str(cache), str(cache)], "is the export"),
    ]:
        assert expected in one_error_line(memlab(*args, cwd=tmp_path))
    assert checksums(cache) == before
    (tmp_path / "link.sqlite").symlink_to(cache)  # a link to the cache is the cache
    assert "is the response cache" in one_error_line(
        memlab("cache", "export", "--cache", str(cache), str(tmp_path / "link.sqlite"), cwd=tmp_path))
    assert checksums(cache) == before


def _export_with(tmp_path: Path, cache: Path, edit) -> Path:
    """An export of ``cache`` with its first entry changed by ``edit(row)`` (and a header edit
    when ``edit`` takes the header: row None), the trailer's digest made to match again."""
    assert main(["cache", "export", "--cache", str(cache), str(tmp_path / "export")]) == 0
    [path] = (tmp_path / "export").glob("*.jsonl.gz")
    with gzip.open(path, "rb") as f:
        lines = [json.loads(line) for line in f.read().splitlines()]
    header, rows, trailer = lines[0], lines[1:-1], lines[-1]
    edit(header, rows[0])
    body = [json.dumps(line).encode() + b"\n" for line in [header, *rows]]
    trailer["sha256"] = hashlib.sha256(b"".join(body)).hexdigest()
    with gzip.open(path, "wb") as f:
        f.write(b"".join(body) + json.dumps(trailer).encode() + b"\n")
    return path


@pytest.mark.parametrize("edit, expected", [
    (lambda header, row: row.update(latency_s=-3), "'latency_s' is -3, not a finite number >= 0"),
    (lambda header, row: row.update(latency_s=1e308), "is not a measured latency"),
    (lambda header, row: row.update(latency_s=float("nan")), "'latency_s' is nan"),
    (lambda header, row: header.update(version=True), "format version True"),
    (lambda header, row: header.update(schema_version=True), "layout version True"),
], ids=["negative", "huge", "nan", "version-true", "schema-true"])
def test_an_import_with_impossible_latencies_or_versions_is_refused_whole(edit, expected, cache, tmp_path):
    export = _export_with(tmp_path, cache, edit)
    target = tmp_path / "other.sqlite"
    ResponseCache(target).close()
    before = checksums(target)
    assert expected in one_error_line(memlab("cache", "import", "--cache", str(target), str(export), cwd=tmp_path))
    assert checksums(target) == before


def test_an_export_is_never_written_into_the_memory_it_exports(saved, tmp_path):
    memories = saved / "memories"
    before = checksums(memories)
    for out in (memories / "sample-1" / "units.jsonl", memories / "sample-1", memories / "sample-1" / "new.jsonl"):
        line = one_error_line(memlab("export-memory", str(memories / "sample-1"), "--format", "jsonl",
                                     "--out", str(out), cwd=tmp_path))
        assert "which this command reads" in line
    for out in (memories, memories / "sample-1" / "exports"):
        line = one_error_line(memlab("export-memory", str(memories), "--format", "jsonl", "--out", str(out),
                                     cwd=tmp_path))
        assert "lies inside the folder of saved memories" in line or "is the folder of saved memories" in line
    assert checksums(memories) == before
    done = memlab("export-memory", str(memories), "--format", "jsonl", "--out", str(tmp_path / "exports"), cwd=tmp_path)
    assert done.returncode == 0 and (tmp_path / "exports" / "sample-1.jsonl").is_file()


def test_a_report_or_a_run_is_never_written_into_what_it_reads(saved, tmp_path):
    before = checksums(saved)
    assert "lies inside the run run" in one_error_line(
        memlab("report", str(saved / "run"), "--out", str(saved / "run" / "report"), cwd=tmp_path))
    line = one_error_line(memlab("run", CONFIG, "--retrieval-only", "--no-progress", "--memory",
                                 str(saved / "memories"), "--out", str(saved / "memories" / "run"), cwd=tmp_path))
    assert "--out" in line and "lies inside --memory" in line
    line = one_error_line(memlab("run", CONFIG, "--retrieval-only", "--no-progress", "--out", str(tmp_path / "r"),
                                 "--save-memory", str(tmp_path / "r" / "memories"), cwd=tmp_path))
    assert "--out" in line and "contains --save-memory" in line
    assert "--out: must be a path, got ''" in one_error_line(memlab("run", CONFIG, "--out", "", cwd=tmp_path))
    assert checksums(saved) == before and not (tmp_path / "r").exists()


def _copy(saved: Path, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(saved / "memories", folder)
    return folder


@pytest.mark.parametrize("entry", [5, "../..", "/etc", "memories.json", None],
                         ids=["number", "dotdot", "absolute", "index", "missing"])
def test_an_index_naming_anything_but_a_sub_folder_is_refused(entry, saved, tmp_path):
    memories = _copy(saved, tmp_path, "memories")
    index = json.loads((memories / "memories.json").read_text())
    index["memories"]["sample-1"]["folder"] = entry
    (memories / "memories.json").write_text(json.dumps(index))
    for args in (["run", CONFIG, "--retrieval-only", "--no-progress", "--memory", str(memories),
                  "--out", str(tmp_path / "run")],
                 ["export-memory", str(memories), "--format", "jsonl", "--out", str(tmp_path / "exports")]):
        assert "must give a 'folder' that names a sub-folder" in one_error_line(memlab(*args, cwd=tmp_path))
    assert not (tmp_path / "run").exists()


def test_a_corrupted_saved_memory_fails_its_conversation_in_one_line(saved, tmp_path):
    memories = _copy(saved, tmp_path, "memories")
    units = memories / "sample-1" / "units.jsonl"
    units.write_text(units.read_text()[:-40])
    done = memlab("run", CONFIG, "--retrieval-only", "--no-progress", "--memory", str(memories),
                  "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert any("building memory for sample-1 failed: MemoryStoreError" in line for line in lines), done.stderr
    assert sum("MemoryStoreError" in line for line in lines) == 1


@pytest.mark.parametrize("content, expected", [
    (b"\xff\xfe\x00binary\x80\x81", "predictions.jsonl: unreadable (UnicodeDecodeError"),
    (b'{"question_id": "sample-1/q0", "gold": "x"}\n', "has no 'prediction'"),
    (b'{"question_id": 7, "prediction": "x"}\n', "a row without a 'question_id' string"),
], ids=["binary", "no-prediction", "numeric-id"])
def test_a_report_of_broken_predictions_is_one_line(content, expected, saved, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(saved / "run", run)
    (run / "predictions.jsonl").write_bytes(content)
    assert expected in one_error_line(memlab("report", str(run), "--out", str(tmp_path / "report"), cwd=tmp_path))


@pytest.mark.parametrize("slot, path, expected", [
    ("reranker.reranker.path", "checkpoints/router-minilm", "must be a Reranker component (QueryRouter is not one)"),
    ("reranker.reranker.colour", "red", "load_stage takes ['path'] and components to pass on, not other settings"),
], ids=["router-as-reranker", "unknown-key"])
def test_a_wrong_checkpoint_or_a_stray_setting_in_a_slot_is_refused_before_building(slot, path, expected, tmp_path):
    done = memlab("run", str(REPO / "configs/pipelines/rag_turns_reranked.yaml"), f"{slot}={path}",
                  "--retrieval-only", "--no-progress", "--out", str(tmp_path / "run"), cwd=REPO)
    assert expected in one_error_line(done) and not (tmp_path / "run").exists()


@pytest.mark.parametrize("config, slot, checkpoint, expected", [
    ("configs/ablations/magma_trained_policy.yaml", "traverser.path", "router-minilm", "must be a Traverser component"),
    ("configs/ablations/mnemis_trained_selector.yaml", "global_selector.path", "router-minilm",
     "must be a GlobalSelector component"),
    ("configs/pipelines/rag_turns.yaml", "answerer.path", "reranker-minilm-turns", "must be an Answerer component"),
], ids=["traverser", "global-selector", "answerer"])
def test_a_checkpoint_of_another_stage_type_is_refused_in_every_slot(config, slot, checkpoint, expected, caplog,
                                                                    tmp_path):
    extra = [] if config.startswith("configs/ablations") else ["answerer._component_=memlab.stage.load_stage"]
    code = main(["run", str(REPO / config), *extra, f"{slot}={REPO / 'checkpoints' / checkpoint}", "--retrieval-only",
                 "--no-progress", "--out", str(tmp_path / "run")])
    assert code == 2 and expected in caplog.text and not (tmp_path / "run").exists()


def test_a_checkpoint_remembers_its_split_when_its_record_is_deleted_and_sealed_again(tmp_path):
    checkpoint = tmp_path / "reranker"
    shutil.copytree(REPO / "checkpoints/reranker-minilm-turns", checkpoint)
    (checkpoint / TRAINING_FILE).unlink()
    seal_checkpoint(checkpoint)
    assert "conv-41" in json.loads((checkpoint / MANIFEST_FILE).read_text())["trained_on"]
    data = REPO.parent / "shared/data/locomo/locomo10_dev.json"
    if not data.is_file():
        pytest.skip("needs ../shared/data/locomo")
    done = memlab("run", str(REPO / "configs/pipelines/rag_turns_reranked.yaml"), f"reranker.reranker.path={checkpoint}",
                  "--data", str(data), "--conversations", "conv-41", "--retrieval-only", "--no-progress",
                  "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert "would be scored on conversations they learnt from" in one_error_line(done)


def test_trained_weights_without_any_record_need_the_explicit_flag(tmp_path):
    """A checkpoint whose record is gone from its files and its manifest (one sealed before the
    manifest kept the split) is refused: nothing shows it is not scored on its training data."""
    checkpoint = tmp_path / "reranker"
    shutil.copytree(REPO / "checkpoints/reranker-minilm-turns", checkpoint)
    (checkpoint / TRAINING_FILE).unlink()
    manifest = json.loads((checkpoint / MANIFEST_FILE).read_text())
    manifest["trained_on"] = []
    (checkpoint / MANIFEST_FILE).write_text(json.dumps(manifest))
    seal_checkpoint(checkpoint)
    args = ["run", str(REPO / "configs/pipelines/rag_turns_reranked.yaml"), f"reranker.reranker.path={checkpoint}",
            "--retrieval-only", "--no-progress"]
    line = one_error_line(memlab(*args, "--out", str(tmp_path / "run"), cwd=tmp_path))
    assert "trained weights without a record of the conversations they learnt from" in line
    done = memlab(*args, "--out", str(tmp_path / "run"), "--allow-training-overlap", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
