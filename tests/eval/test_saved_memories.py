"""Saved memories: a run saves what it built, a later run answers from it, and a memory of
another pipeline, build configuration or session prefix is refused."""

from __future__ import annotations

import json

import pytest

from memlab.cli import main
from memlab.data import load_sample
from memlab.data.prefix import first_sessions
from memlab.eval.runner import RunOptions, run_benchmark
from memlab.eval.saved_memories import INDEX_FILE, SavedMemories, SavedMemoryError, build_config
from memlab.pipelines.fullcontext import FullContext
from memlab.pipelines.rag import RAG
from memlab.stages.answer import PromptedAnswerer
from memlab.stages.segment import TurnSegmenter
from tests.fakes import ReplayLM
from tests.memory.helpers import HashingEmbedder
from tests.pipelines import test_compassmem

RAG_NODE = {"_component_": "memlab.pipelines.rag.RAG", "segmenter": {"_component_": "TurnSegmenter"},
            "embedder": {"_component_": "HashingEmbedder"}, "top_k": 5}


def rag(top_k=5) -> RAG:
    return RAG(segmenter=TurnSegmenter(), embedder=HashingEmbedder(), top_k=top_k, retrieval="hybrid",
               answerer=PromptedAnswerer(lm=ReplayLM(lambda r: r.messages[0]["content"].split("\n")[-1][:40])))


def _rows(folder):
    return [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]


def test_a_run_answers_from_saved_memories_as_from_built_ones(tmp_path):
    conversations = load_sample()
    options = RunOptions(max_questions=5, progress=False)
    saved = SavedMemories.for_saving(tmp_path / "memories", build_config(RAG_NODE, rag()))
    built = run_benchmark(rag(), conversations, tmp_path / "built", options, save_to=saved)
    assert built["memory_save_errors"] == {}
    index = json.loads((tmp_path / "memories" / INDEX_FILE).read_text())
    assert set(index["memories"]) == {c.id for c in conversations}
    assert "top_k" not in index["build_config"]  # a query setting: not part of what was built
    config = build_config({**RAG_NODE, "top_k": 3}, rag(3))  # answering differently from the same memory
    loaded = SavedMemories.for_loading(tmp_path / "memories", config, conversations)
    run_benchmark(rag(), conversations, tmp_path / "loaded", options, load_from=loaded)
    for a, b in zip(_rows(tmp_path / "built"), _rows(tmp_path / "loaded")):
        assert (a["retrieved_units"], a["prediction"]) == (b["retrieved_units"], b["prediction"])


def test_memories_of_another_pipeline_configuration_or_prefix_are_refused(tmp_path):
    conversations = load_sample()
    config = build_config(RAG_NODE, rag())
    saved = SavedMemories.for_saving(tmp_path / "m", config)
    run_benchmark(rag(), conversations, tmp_path / "run", RunOptions(max_questions=2, progress=False), save_to=saved)
    with pytest.raises(SavedMemoryError, match="built by memlab.pipelines.rag.RAG, not by .*FullContext"):
        SavedMemories.for_loading(tmp_path / "m", {"_component_": "memlab.pipelines.fullcontext.FullContext"},
                                  conversations)
    other = {**config, "segmenter": {"_component_": "SessionUnits"}}
    with pytest.raises(SavedMemoryError, match=r"another configuration .*differs in segmenter"):
        SavedMemories.for_loading(tmp_path / "m", other, conversations)
    with pytest.raises(SavedMemoryError, match=r"differs in segmenter"):
        SavedMemories.for_saving(tmp_path / "m", other)  # nor mixed into one folder
    shorter = [first_sessions(c, 1) for c in conversations]
    with pytest.raises(SavedMemoryError, match="built from other sessions"):
        SavedMemories.for_loading(tmp_path / "m", config, shorter)
    with pytest.raises(SavedMemoryError, match="no memories.json"):
        SavedMemories.for_loading(tmp_path / "run", config, conversations)
    (tmp_path / "m" / INDEX_FILE).write_text('{"format": "memlab.SavedMemories", "format_version": 9, '
                                             '"build_config": {}, "memories": {}}')
    with pytest.raises(SavedMemoryError, match="format version 9"):
        SavedMemories.for_loading(tmp_path / "m", config, conversations)


def test_a_corrupted_saved_memory_fails_its_conversation_with_a_clear_error(tmp_path):
    conversations = load_sample()
    config = build_config(RAG_NODE, rag())
    saved = SavedMemories.for_saving(tmp_path / "m", config)
    run_benchmark(rag(), conversations, tmp_path / "run", RunOptions(max_questions=2, progress=False), save_to=saved)
    units = tmp_path / "m" / conversations[0].id / "units.jsonl"
    units.write_text(units.read_text()[:100])
    loaded = SavedMemories.for_loading(tmp_path / "m", config, conversations)
    metrics = run_benchmark(rag(), conversations, tmp_path / "again", RunOptions(max_questions=2, progress=False),
                            load_from=loaded)
    assert "corrupted or truncated" in metrics["build_errors"][conversations[0].id]


def test_full_context_and_compassmem_memories_round_trip(tmp_path):
    history = load_sample()[0].history()
    full = FullContext(answerer=PromptedAnswerer(lm=ReplayLM([])))
    units = full.build(history)
    full.save_memory(units, tmp_path / "full")
    assert full.load_memory(tmp_path / "full") == units
    embedder = HashingEmbedder()
    compass = test_compassmem.pipeline(test_compassmem.Script(same_event=True), embedder)
    memory = compass.build(test_compassmem.history())
    compass.save_memory(memory, tmp_path / "compass")
    loaded = compass.load_memory(tmp_path / "compass")
    assert loaded.graph.to_dict() == memory.graph.to_dict() and loaded.stats() == memory.stats()
    assert loaded.key_of == memory.key_of and loaded.topics.topic_of == memory.topics.topic_of
    assert loaded.index.graph is loaded.graph
    assert (loaded.topics.centroids == memory.topics.centroids).all()
    query = test_compassmem.Query("q", "What is the puppy called?")
    assert [r.unit.id for r in loaded.index.search_dense(query.text, 3)] == \
        [r.unit.id for r in memory.index.search_dense(query.text, 3)]


@pytest.mark.slow
def test_cli_saves_then_answers_from_saved_memories(tmp_path, caplog):
    config = "configs/pipelines/rag_turns.yaml"
    common = ["run", config, "--retrieval-only", "--max-questions", "3", "--no-progress"]
    assert main([*common, "--out", str(tmp_path / "a"), "--save-memory", str(tmp_path / "m")]) == 0
    assert main([*common, "--out", str(tmp_path / "b"), "--memory", str(tmp_path / "m"), "top_k=3"]) == 0
    assert [r["retrieved_units"] for r in _rows(tmp_path / "a")] == [r["retrieved_units"] for r in _rows(tmp_path / "b")]
    assert json.loads((tmp_path / "b" / "metrics.json").read_text())["memory_from"] == str(tmp_path / "m")
    assert main(["run", "configs/pipelines/rag.yaml", *common[2:], "--out", str(tmp_path / "c"),
                 "--memory", str(tmp_path / "m")]) == 2  # 512-token chunks, not turns
    assert main(["run", "configs/pipelines/fullcontext.yaml", "--retrieval-only", "--no-progress",
                 "--out", str(tmp_path / "d"), "--memory", str(tmp_path / "m")]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("differs in segmenter" in e for e in errors)
    assert any("not by memlab.pipelines.fullcontext.FullContext" in e for e in errors)


def _pipeline_classes():
    import importlib
    import pkgutil

    import memlab.pipelines
    from memlab.pipelines.base import Pipeline

    for info in pkgutil.iter_modules(memlab.pipelines.__path__):
        importlib.import_module(f"memlab.pipelines.{info.name}")
    found, todo = [], list(Pipeline.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted({c for c in found if c.__module__.startswith("memlab.")}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", _pipeline_classes(), ids=lambda c: c.__name__)
def test_every_pipeline_loads_saved_memories_and_names_real_query_settings(cls):
    import inspect

    from memlab.pipelines.base import Pipeline

    assert cls.load_memory is not Pipeline.load_memory
    arguments = set(inspect.signature(cls.__init__).parameters)
    assert set(cls.query_settings) <= arguments, set(cls.query_settings) - arguments
