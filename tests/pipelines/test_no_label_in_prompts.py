"""No prompt of any pipeline carries a LongMemEval label: evidence sessions are named
``answer_…`` and abstention questions end in ``_abs`` in the source, and ids built from them
used to reach build and answer prompts (MAGMA's ``<ref: …>``, the compressor's turn list)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from memlab.config import build_pipeline
from memlab.data import load_longmemeval
from memlab.lm.base import LM
from tests.fakes import ReplayLM

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "assets" / "longmemeval_tiny.json"
PIPELINES = sorted((REPO / "configs" / "pipelines").glob("*.yaml"))
LABELS = re.compile(r"answer_|_abs|tiny_")  # the fixture's source ids: answer_commute, tiny_hamster_abs ...


def plausible(request) -> str:
    """A reply that lets every stage go on: an instance of the requested schema whose strings
    copy ids and words from the prompt, so whatever a stage echoes back reaches later prompts."""
    prompt = "\n".join(m["content"] for m in request.messages)
    ids = re.findall(r"D\d+:\d+", prompt) or ["D1:1"]
    words = re.findall(r"[A-Za-z]{4,}", prompt)[-6:] or ["nothing"]

    def instance(schema, name=""):
        kind = schema.get("type")
        if "enum" in schema:
            return schema["enum"][0]
        if kind == "object" or "properties" in schema:
            props = schema.get("properties", {})
            return {key: instance(sub, key) for key, sub in props.items()}
        if kind == "array":
            return [instance(schema.get("items", {"type": "string"}), name) for _ in range(2)]
        if kind in ("integer", "number"):
            return 1
        if kind == "boolean":
            return True
        return ids[0] if "id" in name or "source" in name or "turn" in name else " ".join(words)

    if request.json_schema:
        return json.dumps(instance(request.json_schema))
    return " ".join(words)


def with_lm(pipeline, lm: LM):
    for module in pipeline.modules():
        for key, value in list(vars(module).items()):
            if isinstance(value, LM):
                setattr(module, key, lm)
    return pipeline


def prompts_of(config: Path, conversations) -> list[str]:
    lm = ReplayLM(plausible)
    pipeline = with_lm(build_pipeline(config)[0], lm)
    for conversation in conversations:
        memory = pipeline.build(conversation.history())
        try:
            pipeline.answer_many(memory, [q.as_query() for q in conversation.questions])
        finally:
            pipeline.release(memory)
    return ["\n".join(m["content"] for m in r.messages) for r in lm.requests]


@pytest.fixture(scope="module")
def tiny():
    return load_longmemeval(TINY)


@pytest.mark.parametrize("config", PIPELINES, ids=lambda p: p.stem)
def test_no_prompt_names_an_evidence_session_or_an_abstention(config, tiny, monkeypatch):
    from memlab.embed import EmbedderError

    monkeypatch.chdir(REPO)  # checkpoint paths in configs are relative to the repository root
    try:
        prompts = prompts_of(config, tiny)
    except EmbedderError as e:  # an optional packaged embedder (rag_turns_gemma) that is not installed
        if "memlab models install" not in str(e):
            raise
        pytest.skip(str(e))
    assert prompts, f"{config.stem} sent no prompt"
    leaks = [LABELS.search(p).group(0) for p in prompts if LABELS.search(p)]
    assert not leaks, f"{config.stem}: {len(leaks)} prompts carry source ids ({sorted(set(leaks))})"


def test_the_check_sees_source_ids_when_they_are_there(tiny):
    """The control: with the source's ids put back, the compressor's turn list shows them."""
    conversation = tiny[0]
    sessions = tuple(replace(s, turns=tuple(replace(t, id=f"answer_commute:{t.id}") for t in s.turns))
                     for s in conversation.sessions)
    prompts = prompts_of(REPO / "configs/pipelines/simplemem.yaml", [replace(conversation, sessions=sessions)])
    assert any("answer_commute" in p for p in prompts)
