"""graphiti (graphiti-core with Kuzu) as a memlab pipeline (memlab.peers.graphiti).

Control flow with a replaying LM that answers graphiti's JSON schemas; one end-to-end run with a real
small model; telemetry off and nothing off the machine, checked."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

if importlib.util.find_spec("graphiti_core") is None or importlib.util.find_spec("kuzu") is None:
    pytest.skip("the graphiti pipeline needs pip install -e '.[peers]'", allow_module_level=True)

from fakes import ReplayLM  # noqa: E402

from memlab.data import load_sample  # noqa: E402
from memlab.embed import SentenceTransformerEmbedder  # noqa: E402
from memlab.lm.errors import LMUnavailableError, RequestError  # noqa: E402
from memlab.lm.types import ChatRequest  # noqa: E402
from memlab.peers.graphiti import Graphiti  # noqa: E402
from memlab.stages.answer import PromptedAnswerer  # noqa: E402
from memlab.types import History, Query  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TURNS_PER_ADD = 8


def _minimal(schema: dict, defs: dict):
    """The smallest instance of a JSON schema: graphiti's reply when the test has nothing to say."""
    if "$ref" in schema:
        return _minimal(defs[schema["$ref"].split("/")[-1]], defs)
    if "anyOf" in schema:
        return _minimal(schema["anyOf"][0], defs)
    kind = schema.get("type")
    if kind == "object":
        return {k: _minimal(v, defs) for k, v in schema.get("properties", {}).items() if k in schema.get("required", [])}
    return {"array": [], "string": "", "integer": 0, "number": 0, "boolean": False}.get(kind)


def _graph_replies(request: ChatRequest) -> str:
    """The speakers of each episode as entities, and one fact per episode: what its first speaker said."""
    schema = request.json_schema
    if schema is None:
        return "an answer"
    prompt = request.messages[-1]["content"]
    current = prompt.split("<CURRENT_MESSAGE>")[-1].split("</CURRENT_MESSAGE>")[0].strip().splitlines() \
        if "<CURRENT_MESSAGE>" in prompt else []
    speakers = list(dict.fromkeys(line.split(":")[0] for line in current if ":" in line))
    if schema.get("title") == "ExtractedEntities":
        return json.dumps({"extracted_entities": [{"name": name, "entity_type_id": 0} for name in speakers]})
    if schema.get("title") == "ExtractedEdges" and speakers:
        said = current[0].split(":", 1)[1].strip()[:80]
        return json.dumps({"edges": [{"source_entity_name": speakers[0], "target_entity_name": speakers[-1],
                                      "relation_type": "SAID_TO", "fact": f"{speakers[0]} said: {said}"}]})
    return json.dumps(_minimal(schema, schema.get("$defs", {})))


@pytest.fixture(scope="module")
def embedder():
    return SentenceTransformerEmbedder()


@pytest.fixture(scope="module")
def history():
    whole = load_sample()[0].history()
    return History(whole.id, whole.speakers, whole.sessions[:2])


def _pipeline(lm, embedder, tmp_path, **settings) -> Graphiti:
    return Graphiti(lm=lm, embedder=embedder, answerer=PromptedAnswerer(prompt="compassmem/answer", lm=lm),
                    turns_per_add=TURNS_PER_ADD, home=str(tmp_path / "home"), workdir=str(tmp_path), **settings)


def test_graphiti_builds_its_graph_with_each_facts_turns_and_date(embedder, history, tmp_path, no_network):
    lm = ReplayLM(_graph_replies)
    pipeline = _pipeline(lm, embedder, tmp_path)
    memory = pipeline.build(history)
    episodes = [(s, s.turns[i:i + TURNS_PER_ADD]) for s in history.sessions for i in range(0, len(s.turns), TURNS_PER_ADD)]
    stats = memory.stats()
    assert (stats["episodes"], stats["failed_episodes"]) == (len(episodes), 0)
    assert stats["entities"] == len(history.speakers) and stats["facts"] == len(episodes)
    facts = {unit.text: unit for unit in memory.memories()}
    for session, turns in episodes:
        unit = facts[f"{turns[0].speaker} said: {turns[0].render().split(':', 1)[1].strip()[:80]}"]
        assert unit.source_ids == tuple(t.id for t in turns)
        assert unit.timestamp == session.timestamp  # the episode's reference time
    assert memory.structure()["degenerate"] == []
    answer = pipeline.answer(memory, Query(id="q", text="What did Tomas say?"))
    assert answer.text == "an answer" and answer.retrieved
    assert all(line.startswith("[") for line in answer.context.splitlines())
    folder = memory.folder
    pipeline.release(memory)
    assert not folder.exists() and memory.stats()["facts"] == len(episodes)
    assert pipeline.llm_usage().failures == ()
    assert no_network == []


def test_without_the_date_episodes_are_dated_today(embedder, history, tmp_path):
    pipeline = _pipeline(ReplayLM(_graph_replies), embedder, tmp_path, session_date="none", today="2026-01-31")
    memory = pipeline.build(history)
    try:
        assert {u.timestamp for u in memory.memories()} == {datetime(2026, 1, 31, 12)}
    finally:
        pipeline.release(memory)


class _RefusingFirst(ReplayLM):
    """Refuses the first request (a prompt over the window, say), then answers like ``_graph_replies``."""

    def _generate(self, requests):
        if not self.requests:
            self.requests.append(requests[0])
            raise RequestError("the prompt does not fit the context window")
        return super()._generate(requests)


def test_an_episode_graphiti_could_not_add_is_a_failure(embedder, history, tmp_path):
    pipeline = _pipeline(_RefusingFirst(_graph_replies), embedder, tmp_path)
    memory = pipeline.build(history)
    pipeline.release(memory)
    assert memory.stats()["failed_episodes"] == 1
    failures = [f for f in pipeline.llm_usage().failures if f.stage == "graphiti.add"]
    assert failures and all("context window" in f.error for f in failures)


def test_each_error_graphiti_logs_is_a_failure_and_a_failed_add_counts_once(embedder, history, tmp_path):
    """One reply graphiti could not parse, served to each of its retries: one failure per attempt
    it logged, the failed episode not counted again; an add that fails logging nothing is one."""
    import logging

    pipeline = _pipeline(ReplayLM(_graph_replies), embedder, tmp_path)
    memory = pipeline.build(History(history.id, history.speakers, history.sessions[:1]))
    try:
        def logged_then_failed():
            for attempt in range(3):
                logging.getLogger("graphiti_core.llm_client").error("Unterminated string, attempt %d", attempt)
            raise ValueError("gave up")

        assert pipeline.through_peer(memory, logged_then_failed) is None
        assert [f.error for f in pipeline.llm_usage().failures][-3:] == [f"Unterminated string, attempt {i}" for i in range(3)]
        before = len(pipeline.llm_usage().failures)
        assert pipeline.through_peer(memory, lambda: (_ for _ in ()).throw(ValueError("silent"))) is None
        assert [f.error for f in pipeline.llm_usage().failures[before:]] == ["ValueError: silent"]
        assert memory.failed_adds == 2
    finally:
        pipeline.release(memory)


def test_an_interrupted_run_leaves_no_graphiti_task_to_resume_later(tmp_path):
    """Ctrl-C in an episode: its other tasks are cancelled, not carried on by the next run (closing)."""
    import asyncio

    from memlab.peers.graphiti import GraphitiMemory

    loop = asyncio.new_event_loop()
    memory = GraphitiMemory(graph=None, loop=loop, group_id="", gateway=None, folder=tmp_path)
    calls = []

    async def another_call():
        await asyncio.sleep(0.05)
        calls.append("the model called after the interrupt")

    async def episode():
        asyncio.ensure_future(another_call())
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            memory.run(episode())
        memory.run(asyncio.sleep(0.1))  # what closing the store does next
        assert calls == []
        assert memory.run(asyncio.sleep(0, result="still usable")) == "still usable"
    finally:
        loop.close()


class _Down(ReplayLM):
    def _generate(self, requests):
        raise LMUnavailableError("the model server at http://127.0.0.1:9 is down")


def test_a_dead_model_ends_the_build_with_its_own_error(embedder, history, tmp_path):
    with pytest.raises(LMUnavailableError, match="is down"):
        _pipeline(_Down([]), embedder, tmp_path).build(history)
    assert not list(tmp_path.glob("memlab-graphiti-*"))


class _CachedReplay(ReplayLM):
    def __init__(self, script, cache):
        super().__init__(script)
        self._cache_path = cache


def test_a_second_build_replays_from_the_cache(embedder, history, tmp_path):
    cache = str(tmp_path / "responses.sqlite")
    first = _CachedReplay(_graph_replies, cache)
    pipeline = _pipeline(first, embedder, tmp_path)
    pipeline.release(built := pipeline.build(history))
    second = _CachedReplay(lambda request: pytest.fail("a model call on replay"), cache)
    replayed = _pipeline(second, embedder, tmp_path)
    replayed.release(memory := replayed.build(history))
    assert second.usage.snapshot()["uncached_calls"] == 0
    assert second.usage.snapshot()["llm_calls"] == first.usage.snapshot()["llm_calls"] > 0
    assert sorted(u.text for u in memory.memories()) == sorted(u.text for u in built.memories())


def test_telemetry_is_off_outside_pytest_too(tmp_path):
    # graphiti turns its telemetry off by itself under pytest, so the check runs in a plain interpreter.
    script = ("from memlab.peers.graphiti import import_graphiti\nimport_graphiti()\n"
              "from graphiti_core.telemetry import telemetry\nprint(telemetry.is_telemetry_enabled())\n")
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "true"}
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip() == "False"


@pytest.mark.slow
def test_end_to_end_with_a_real_small_model(llama_cpp_works, tmp_path, monkeypatch, no_network):
    """``memlab run configs/peers/graphiti.yaml`` on two sessions of the embedded sample with SmolLM2-135M
    (this checks the parts, not the answers), in this process so that the network guard sees everything."""
    from memlab.cli import main

    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "responses.sqlite"))
    out = tmp_path / "run"
    status = main(["run", str(REPO / "configs/peers/graphiti.yaml"), "lm.model=smollm2-135m-instruct-q4_1",
                   "lm.n_ctx=8192", "turns_per_add=16", "max_tokens=128", f"home={tmp_path / 'home'}",
                   f"workdir={tmp_path}", "--sessions", "2", "--max-questions", "1", "--out", str(out), "--no-progress"])
    assert status == 0
    metrics = json.loads((out / "metrics.json").read_text())
    memory = next(iter(metrics["memory"].values()))
    assert memory["episodes"] == 2  # one episode per 16-turn session
    assert memory["gateway_refused"] == 0 and "structure" in memory
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 1
    assert not list(tmp_path.glob("memlab-graphiti-*"))
    assert no_network == []
