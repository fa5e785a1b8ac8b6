"""One output rule for every command that writes (issue 82): before any work, an output that is,
contains or lies inside something the command reads, or that is empty or cannot be written, is
refused in one line with exit 2, and every input is byte for byte what it was. The real ``memlab``
command runs in a subprocess; every command of the parser is held to ``memlab.cli.WRITES``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memlab.cli import WRITES, _parser
from tests.test_inputs_intact import checksums, memlab, one_error_line

REPO = Path(__file__).resolve().parents[1]


def _locomo() -> list[dict]:
    turns = [{"speaker": "A", "dia_id": "D1:1", "text": "I adopted a cat named Rex."}]
    return [{"sample_id": "conv-x", "conversation": {"speaker_a": "A", "speaker_b": "B",
                                                     "session_1_date_time": "1:56 pm on 8 May, 2023",
                                                     "session_1": turns},
             "qa": [{"question": "What is the cat's name?", "answer": "Rex", "evidence": ["D1:1"], "category": 4}]}]


@pytest.fixture
def world(tmp_path) -> Path:
    """A data file, a pipeline config, a training config and a sweep, each in its own folder."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "locomo.json").write_text(json.dumps(_locomo()))
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "rag.yaml").write_text(f"_base_: {REPO / 'configs/pipelines/rag_turns.yaml'}\n")
    train = (REPO / "configs/train/router_tfidf.yaml").read_text()
    (tmp_path / "cfg" / "router.yaml").write_text(train.replace("../shared/data/locomo/locomo10_dev.json",
                                                                str(tmp_path / "data" / "locomo.json")))
    (tmp_path / "ckpt").mkdir()  # a checkpoint a config loads
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "s.yaml").write_text(json.dumps({
        "questions": {"data": "../data/locomo.json"}, "judge": None,
        "rows": {"rag": {"config": "../cfg/rag.yaml"}}}))
    return tmp_path


#: command -> cases: (arguments, with {t} the world's folder, and what the one error line says).
CASES: dict[str, list[tuple[list[str], str]]] = {
    "run": [
        (["run", "{t}/cfg/rag.yaml", "--data", "{t}/data/locomo.json", "--retrieval-only", "--out", "{t}/data"],
         "--out {t}/data contains --data {t}/data/locomo.json"),
        (["run", "{t}/cfg/rag.yaml", "--data", "{t}/data/locomo.json", "--retrieval-only", "--out", "{t}/runs/r",
          "--save-memory", "{t}/data"], "--save-memory {t}/data contains --data {t}/data/locomo.json"),
    ],
    "train": [
        (["train", "fit_tfidf_router", "--config", "{t}/cfg/router.yaml", "output_dir={t}/cfg"],
         "output_dir {t}/cfg contains the config {t}/cfg/router.yaml"),
        (["train", "fit_tfidf_router", "--config", "{t}/cfg/router.yaml", "stage.normalizer.path={t}/ckpt",
          "output_dir={t}/ckpt/sub"], "output_dir {t}/ckpt/sub lies inside stage.normalizer.path {t}/ckpt"),
        (["train", "fit_tfidf_router", "--config", "{t}/cfg/router.yaml", "output_dir={t}/data/locomo.json"],
         "output_dir {t}/data/locomo.json is data.path {t}/data/locomo.json"),
        (["train", "fit_tfidf_router", "--config", "{t}/cfg/router.yaml", "output_dir="],
         "output_dir must be a path to write to, got nothing"),
        (["train", "fit_tfidf_router", "--config", "{t}/cfg/router.yaml", "output_dir=null"],
         "output_dir must be a path to write to, got nothing"),
    ],
    "compare-stages": [
        (["compare-stages", str(REPO / "configs/compare/routers_loco.yaml"), "--data", "{t}/data/locomo.json",
          "--out", "{t}/data/locomo.json"], "--out {t}/data/locomo.json is --data {t}/data/locomo.json"),
    ],
    "headline": [
        (["headline", "--manifest", "{t}/cfg/rag.yaml", "--benchmarks", "{t}/cfg/rag.yaml"],
         "--benchmarks {t}/cfg/rag.yaml is the manifest --manifest {t}/cfg/rag.yaml"),
    ],
    "sweep": [
        (["sweep", "{t}/sweeps/s.yaml", "--out", "{t}/sweeps"], "--out {t}/sweeps contains the sweep file"),
    ],
    "compare": [
        (["compare", "{t}/cfg/rag.yaml", "--out", "{t}/cfg"], "--out {t}/cfg contains the config {t}/cfg/rag.yaml"),
        (["compare", "{t}/cfg/rag.yaml", "--data", "{t}/data/locomo.json", "--out", "{t}/data"],
         "--out {t}/data contains --data {t}/data/locomo.json"),
    ],
    "report": [
        (["report", "{t}/data", "--out", "{t}/data/report"], "no metrics.json"),  # read first: not a run
    ],
    "check-judge": [
        (["check-judge", "{t}/cfg/rag.yaml", "--audit", "{t}/data", "--out", "{t}/cfg/rag.yaml"],
         "--out {t}/cfg/rag.yaml is the judge config {t}/cfg/rag.yaml"),
    ],
    "rescore": [
        (["rescore", "{t}/cfg", "--judge", "{t}/cfg/rag.yaml"], "RUN_DIR {t}/cfg contains the judge config"),
    ],
    "export-memory": [
        (["export-memory", "{t}/data", "--format", "jsonl", "--out", "{t}"], "contains the saved memory {t}/data"),
    ],
    "cache": [
        (["cache", "export", "--cache", "{t}/data/c.sqlite", "{t}/data"], "the export folder {t}/data contains"),
        (["cache", "import", "--cache", "", "{t}/data"], "argument --cache: must be a path, got ''"),
    ],
}


def test_every_command_that_writes_is_held_to_the_rule():
    commands = set(next(a for a in _parser()._actions if a.dest == "command").choices)
    assert commands == set(WRITES), "a new command must say in memlab.cli.WRITES what it writes"
    assert {c for c, writes in WRITES.items() if writes} == set(CASES), "each command that writes needs a case here"


@pytest.mark.parametrize("arguments, expected", [case for cases in CASES.values() for case in cases],
                         ids=[f"{command}-{i}" for command, cases in CASES.items() for i in range(len(cases))])
def test_an_output_over_an_input_is_refused_before_any_work(world, arguments, expected):
    before = checksums(world)
    line = one_error_line(memlab(*[a.replace("{t}", str(world)) for a in arguments], cwd=world))
    assert expected.replace("{t}", str(world)) in line
    assert checksums(world) == before


def test_an_output_that_cannot_be_written_is_refused_before_any_work(world):
    locked = world / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who may write anywhere")
        line = one_error_line(memlab("run", str(world / "cfg/rag.yaml"), "--retrieval-only", "--out",
                                     str(locked / "run"), cwd=world))
        assert f"{locked} is not writable" in line
    finally:
        os.chmod(locked, 0o700)
