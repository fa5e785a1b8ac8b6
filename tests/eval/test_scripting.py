"""The checks every build-and-measure script of ``eval/`` makes before building (``memlab.eval.scripting``)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from memlab.eval.scripting import ScriptError, add_build_arguments, pipeline_and_conversations

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs/pipelines/compassmem_trained_construction.yaml")
SAMPLE = str(REPO / "memlab/data/samples/sample_locomo.json")
DEV = REPO.parent / "shared/data/locomo/locomo10_dev.json"


def parse(*argv: str, sessions: bool = True) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_build_arguments(parser, sessions=sessions)
    return parser.parse_args(list(argv))


def test_the_pipeline_and_conversations_come_back_in_eval_mode():
    pipeline, conversations = pipeline_and_conversations(parse(CONFIG, "search.top_k=3", "--data", SAMPLE, "--conversations",
                                                               "sample-1", "--sessions", "2"))
    assert not pipeline.training and pipeline.search_settings.top_k == 3
    assert [c.id for c in conversations] == ["sample-1"] and len(conversations[0].sessions) == 2
    assert not hasattr(parse(CONFIG, "--data", SAMPLE, "--conversations", "x", sessions=False), "sessions")


def test_unknown_conversations_and_training_overlap_are_refused():
    with pytest.raises(ScriptError, match="nope"):
        pipeline_and_conversations(parse(CONFIG, "--data", SAMPLE, "--conversations", "nope"))
    if not DEV.exists():
        pytest.skip("the dev conversations (../shared) are not beside the checkout")
    # the run's own refusal (issue 81: one function everywhere), naming each stage and what it learnt from
    with pytest.raises(ScriptError, match=r"trained stages would be scored on conversations they learnt from "
                                          r"\(.*event-segmenter-observations: conv-41; .*relation-classifier: conv-41\)"):
        pipeline_and_conversations(parse(CONFIG, "--data", str(DEV), "--conversations", "conv-41"))
    _, found = pipeline_and_conversations(parse(CONFIG, "--data", str(DEV), "--conversations", "conv-41",
                                                "--allow-training-overlap", "--sessions", "1"))
    assert [c.id for c in found] == ["conv-41"]


def test_trained_weights_without_a_record_are_refused_as_a_run_refuses_them(tmp_path):
    """The scripts once skipped weights with no training record; they now apply the run's refusal."""
    import json
    import shutil

    from memlab.checkpoint import TRAINING_FILE, seal_checkpoint
    from memlab.fileio import MANIFEST_FILE

    checkpoint = tmp_path / "reranker"
    shutil.copytree(REPO / "checkpoints/reranker-minilm-turns", checkpoint)
    (checkpoint / TRAINING_FILE).unlink()
    manifest = json.loads((checkpoint / MANIFEST_FILE).read_text())
    (checkpoint / MANIFEST_FILE).write_text(json.dumps({**manifest, "trained_on": []}))
    seal_checkpoint(checkpoint)
    config = str(REPO / "configs/pipelines/rag_turns_reranked.yaml")
    with pytest.raises(ScriptError, match="trained weights without a record of the conversations they learnt from"):
        pipeline_and_conversations(parse(config, f"reranker.reranker.path={checkpoint}", "--data", SAMPLE,
                                         "--conversations", "sample-1"))
    pipeline_and_conversations(parse(config, f"reranker.reranker.path={checkpoint}", "--data", SAMPLE,
                                     "--conversations", "sample-1", "--allow-training-overlap"))
