"""A sweep of ``memlab`` misuse: every bad invocation ends in one error line naming the problem
and exit status 2, never in a raw traceback. Most cases run in-process (an exception other than
SystemExit escaping ``main`` is the traceback a user would see); a few run the real command to
check what reaches the terminal."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs/pipelines/rag_turns.yaml")


@pytest.fixture
def paths(tmp_path):
    """A file, a binary file and a folder to hand the command where it expects something else."""
    (tmp_path / "file.txt").write_text("not a folder\n")
    (tmp_path / "binary.yaml").write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00")
    (tmp_path / "folder").mkdir()
    return tmp_path


#: (arguments, what the error line must say); ``{tmp}`` is the ``paths`` folder.
CASES = [
    # config values of the wrong type or range, refused at validation
    ([CONFIG, "candidates=abc"], "candidates='abc' must be an integer"),
    ([CONFIG, "rrf_k=-10"], "rrf_k=-10 must be >= 0"),
    ([CONFIG, "top_k=2.5"], "top_k=2.5 must be an integer"),
    ([CONFIG, "segmenter=5"], "segmenter=5 must be a Segmenter component"),
    ([CONFIG, "top_kk=3"], "has no argument 'top_kk'"),
    ([CONFIG, "top_k.x=3"], "top_k is not a mapping"),
    ([CONFIG, "eval.judge=3"], "eval.judge=3 must be null or a judge component"),
    ([CONFIG, "reranker._component_=os.system"], "only memlab.* classes"),
    ([CONFIG, "reranker._component_=memlab.stage.load_stage", "reranker.path={tmp}/folder"], "not a saved stage"),
    # run options
    ([CONFIG, "--max-questions", "-1"], "--max-questions: must be a positive integer, got '-1'"),
    ([CONFIG, "--ray", ""], "--ray: must be a Ray address (host:port, auto or local), got ''"),
    ([CONFIG, "--max-questions", "0"], "--max-questions: must be a positive integer, got '0'"),
    ([CONFIG, "--max-questions", "two"], "--max-questions: must be a positive integer, got 'two'"),
    ([CONFIG, "--sessions", "0"], "--sessions: must be a positive integer"),
    ([CONFIG, "--batch-size", "0"], "--batch-size: must be a positive integer"),
    ([CONFIG, "--categories", ","], "--categories: needs at least one comma-separated name"),
    ([CONFIG, "--conversations", ""], "--conversations: needs at least one comma-separated name"),
    ([CONFIG, "--categories", "multihop"], "categories ['multihop'] are not in the embedded sample"),
    ([CONFIG, "--categories", "multi-hop,multihop"], "categories ['multihop'] are not in"),
    ([CONFIG, "--conversations", "conv-x"], "conv-x"),
    ([CONFIG, "--bogus"], "unrecognized arguments: --bogus"),
    ([CONFIG, "not-an-override"], "override 'not-an-override' must look like dotted.key=value"),
    # the config path
    (["{tmp}/folder"], "is a directory, not a config file"),
    (["{tmp}/binary.yaml"], "not UTF-8 text"),
    (["{tmp}/missing.yaml"], "config file not found"),
    (["{tmp}/file.txt"], "a config must be a mapping"),
    # --out: a file, or a place no folder can be made (under a file: refused even to root)
    ([CONFIG, "--out", "{tmp}/file.txt"], "file.txt"),
    ([CONFIG, "--out", "{tmp}/file.txt/run"], "file.txt"),
    # --data
    ([CONFIG, "--data", "{tmp}/binary.yaml"], "binary.yaml"),
    ([CONFIG, "--data", "{tmp}/nope.json"], "nope.json"),
]

OTHER_COMMANDS = [
    (["models", "--x"], "unrecognized arguments: --x"),
    (["nope"], "invalid choice: 'nope'"),
    (["train", "finetune_reranker"], "the following arguments are required: --config"),
    (["train", "finetune_reranker", "--config", "{tmp}/folder"], "is a directory"),
    (["train", "finetune_reranker", "--config", "{tmp}/binary.yaml"], "not UTF-8 text"),
    (["evaluate-stage", "{tmp}/folder"], "not a saved stage"),
    (["evaluate-stage", "{tmp}/file.txt"], "not a saved stage"),
    (["evaluate-stage", str(REPO / "checkpoints/reranker-minilm-turns"), "depth=0"], "depth=0 must be >= 1"),
    (["evaluate-stage", str(REPO / "checkpoints/router-minilm"), "--sessions", "-2"], "--sessions: must be a positive"),
]


def _name(value):
    return " ".join(value).replace(f"{REPO}/", "") if isinstance(value, list) else None


def _fill(arguments: list[str], tmp: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp)) for a in arguments]


def _one_error_line(argv: list[str], capsys, caplog) -> str:
    caplog.clear()
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    assert code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    lines += [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("arguments, expected", CASES, ids=_name)
def test_run_misuse_is_one_error_line(arguments, expected, paths, capsys, caplog):
    argv = ["run", *_fill(arguments, paths), "--retrieval-only", "--no-progress"]
    if "--out" not in arguments:
        argv += ["--out", str(paths / "out")]
    assert expected in _one_error_line(argv, capsys, caplog)
    assert not (paths / "out").exists() and (paths / "file.txt").read_text() == "not a folder\n"


@pytest.mark.parametrize("arguments, expected", OTHER_COMMANDS, ids=_name)
def test_other_commands_misuse_is_one_error_line(arguments, expected, paths, capsys, caplog):
    assert expected in _one_error_line(_fill(arguments, paths), capsys, caplog)


def test_a_bug_still_shows_its_traceback(monkeypatch, tmp_path):
    """Only bad input is turned into one line: an exception that means a bug propagates."""
    import memlab.eval.runner

    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(memlab.eval.runner, "run_config", broken)
    with pytest.raises(KeyError):
        main(["run", CONFIG, "--out", str(tmp_path)])


@pytest.mark.parametrize("arguments, expected", [
    ([CONFIG, "--retrieval-only", "--max-questions", "-1"], "must be a positive integer"),
    ([CONFIG, "--retrieval-only", "candidates=abc", "rrf_k=-10"], "rrf_k=-10 must be >= 0"),
    (["{tmp}/binary.yaml", "--retrieval-only"], "not UTF-8 text"),
    ([CONFIG, "--retrieval-only", "--out", "{tmp}/file.txt/run"], "file.txt"),
    ([CONFIG, "--retrieval-only", "--categories", "multihop"], "multihop"),
], ids=["argparse", "config", "config-file", "out", "categories"])
def test_the_real_command_prints_one_line_and_no_traceback(arguments, expected, paths):
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(REPO)}  # this tree's memlab
    done = subprocess.run([sys.executable, "-m", "memlab.cli", "run", *_fill(arguments, paths), "--no-progress",
                           *(["--out", str(paths / "out")] if "--out" not in arguments else [])],
                          capture_output=True, text=True, cwd=paths, env=env, timeout=300)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], done.stderr
    assert not (paths / "out").exists()


def _locomo(**edits):
    sample = {"sample_id": "conv-x", "conversation": {
        "speaker_a": "A", "speaker_b": "B", "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "Hi"}]},
        "qa": [{"question": "What?", "answer": "Hi", "evidence": ["D1:1"], "category": 4}]}
    for path, value in edits.items():
        node, *keys = path.split("/")
        target = sample[node]
        for key in keys[:-1]:
            target = target[int(key) if isinstance(target, list) else key]
        target[int(keys[-1]) if isinstance(target, list) else keys[-1]] = value
    return sample


#: Corrupted data files: (file name, content, what the error line must say).
DATA_FILES = [
    ("empty.json", "", "is not valid JSON"),
    ("truncated.json", '[{"sample_id": "conv-x", "conversation": {', "is not valid JSON"),
    ("deep.json", "[" * 50_000 + "]" * 50_000, "cannot be parsed as JSON"),
    ("scalar.json", "42", "is neither LoCoMo"),
    ("latin1.json", b'[{"sample_id": "caf\xe9"}]', "cannot be read"),
    ("list_answer.json", [_locomo(**{"qa/0/answer": ["a", "b"]})], "'answer' must be a string or a number"),
    ("nan_answer.json", '[{"sample_id": "c", "conversation": {"speaker_a": "A", "speaker_b": "B", '
     '"session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": [{"speaker": "A", "dia_id": "D1:1", '
     '"text": "Hi"}]}, "qa": [{"question": "Q?", "answer": NaN, "category": 4}]}]', "must be a string or a number"),
    ("bad_date.json", [_locomo(**{"conversation/session_1_date_time": "yesterday"})], "is not a date"),
    ("number_text.json", [_locomo(**{"conversation/session_1/0/text": 5})], "'text' must be a string"),
    ("bad_category.json", [_locomo(**{"qa/0/category": 9})], "category 9 is not one of"),
    ("turns_not_list.json", [_locomo(**{"conversation/session_1": {"x": 1}})], "must be a list of turns"),
]


@pytest.mark.parametrize("name, content, expected", DATA_FILES, ids=[case[0] for case in DATA_FILES])
def test_a_corrupted_data_file_is_one_error_line(name, content, expected, paths, capsys, caplog):
    import json

    path = paths / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    argv = ["run", CONFIG, "--data", str(path), "--retrieval-only", "--no-progress", "--out", str(paths / "out")]
    line = _one_error_line(argv, capsys, caplog)
    assert expected in line and name in line
    assert not (paths / "out").exists()


def test_an_os_error_is_a_sentence_naming_the_path_not_an_errno(monkeypatch, tmp_path, caplog):
    """What the environment refuses (a permission, a full disk) is one line naming the path and the
    reason, without Python's ``[Errno 13]`` form (issue 82)."""
    import errno

    import memlab.cli as cli

    def refused(args):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "runs"))

    monkeypatch.setattr(cli, "cmd_report", refused)
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "report")]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [f"{tmp_path / 'runs'}: permission denied"]
