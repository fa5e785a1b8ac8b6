"""Ctrl-C and SIGTERM end a command in one line with exit 130 / 143, keep nothing half-written,
and a staging folder left by a process that could not clean up is removed by the next write
(issue 82). The real ``memlab`` command runs in a subprocess, stopped while it runs."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memlab.fileio import atomic_folder, remove_abandoned_staging

REPO = Path(__file__).resolve().parents[1]
# The real command, held inside its run (its staging folder made) until a signal stops it.
HELD_RUN = textwrap.dedent("""
    import sys, time
    import memlab.eval.runner as runner

    def held(pipeline, conversations, staging, options, **kwargs):
        (staging.parent / "started").write_text(staging.name)
        time.sleep(120)

    runner.run_benchmark = held
    from memlab.cli import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize("signum, status, name, started_with", [
    (signal.SIGINT, 130, "Ctrl-C", signal.SIG_DFL), (signal.SIGTERM, 143, "SIGTERM", signal.SIG_DFL),
    # a shell's background job (``nohup memlab sweep ... &``) starts with SIGINT ignored: ``kill -INT`` stops it all the same
    (signal.SIGINT, 130, "Ctrl-C", signal.SIG_IGN)])
def test_a_signal_ends_a_run_in_one_line_and_leaves_no_staging_folder(tmp_path, signum, status, name, started_with):
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", HELD_RUN, "run", str(REPO / "configs/pipelines/rag_turns.yaml"),
               "--retrieval-only", "--max-questions", "1", "--no-progress", "--out", str(tmp_path / "run")]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, started_with))
    deadline = time.monotonic() + 240
    while not (tmp_path / "started").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (tmp_path / "started").exists(), process.communicate()[1] if process.poll() is not None else "not started"
    assert (tmp_path / (tmp_path / "started").read_text()).is_dir()  # its staging folder, while it runs
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == status
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if "ERROR" in line or "interrupted" in line]
    assert len(errors) == 1 and f"interrupted ({name})" in errors[0] and "same command resumes" in errors[0], stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["started"]  # no run folder, no staging folder


def test_a_staging_folder_whose_process_is_gone_is_removed_by_the_next_write(tmp_path, caplog):
    target = tmp_path / "run"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f".run.tmp-{int(gone.stdout)}-abc123"     # kill -9: its process no longer exists
    alive = tmp_path / f".run.tmp-{os.getpid()}-def456"         # another writer, still running
    older = tmp_path / ".run.tmp-k0qtjiig"                       # made before names carried a pid
    other = tmp_path / f".runs.tmp-{int(gone.stdout)}-abc123"   # another target's
    for folder in (dead, alive, older, other):
        folder.mkdir()
        (folder / "predictions.jsonl.partial").write_text("{}\n")
    with caplog.at_level(logging.INFO, logger="memlab.fileio"):
        with atomic_folder(target) as staging:
            (staging / "metrics.json").write_text("{}")
    assert not dead.exists() and alive.exists() and older.exists() and other.exists()
    assert (target / "metrics.json").is_file()
    assert f"removed {dead}" in caplog.text and f"{older}: a staging folder of an interrupted write" in caplog.text
    assert remove_abandoned_staging(target) == []  # nothing left that it may remove
