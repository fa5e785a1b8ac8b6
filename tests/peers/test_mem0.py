"""mem0 (the mem0ai package) as a memlab pipeline (memlab.peers.mem0).

Control flow with a replaying LM; one end-to-end run with a real small model; telemetry off and
nothing off the machine, checked."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

# Not importorskip: importing mem0 before memlab turns its telemetry off is what the pipeline refuses.
if importlib.util.find_spec("mem0") is None:
    pytest.skip("the mem0 pipeline needs pip install -e '.[peers]'", allow_module_level=True)

from fakes import ReplayLM  # noqa: E402

from memlab.data import load_sample  # noqa: E402
from memlab.embed import SentenceTransformerEmbedder  # noqa: E402
from memlab.lm.errors import LMUnavailableError  # noqa: E402
from memlab.lm.types import ChatRequest  # noqa: E402
from memlab.peers.mem0 import Mem0, PeerError, import_mem0  # noqa: E402
from memlab.pipelines.base import RECALL_DEPTH  # noqa: E402
from memlab.stages.answer import PromptedAnswerer  # noqa: E402
from memlab.types import Query  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TURNS_PER_ADD = 8


def _new_messages(request: ChatRequest) -> list[str]:
    prompt = request.messages[-1]["content"]
    block = prompt.split("## New Messages\n", 1)[1].split("\n\n## ", 1)[0]
    return [line.removeprefix("user: ") for line in block.strip().splitlines()]


def _facts(request: ChatRequest) -> str:
    """mem0's extraction reply: one memory per add, the first new message's words."""
    if "## New Messages" not in request.messages[-1]["content"]:
        return "an answer"
    first = _new_messages(request)[0]
    return json.dumps({"memory": [{"id": "0", "text": f"Noted: {first}"}]})


@pytest.fixture(scope="module")
def embedder():
    return SentenceTransformerEmbedder()


@pytest.fixture(scope="module")
def conversation():
    return load_sample()[0]


def _pipeline(lm, embedder, tmp_path, **settings) -> Mem0:
    return Mem0(lm=lm, embedder=embedder, answerer=PromptedAnswerer(prompt="compassmem/answer", lm=lm),
                turns_per_add=TURNS_PER_ADD, home=str(tmp_path / "home"), workdir=str(tmp_path), **settings)


def _adds(conversation) -> list[tuple]:
    return [(session, session.turns[i:i + TURNS_PER_ADD]) for session in conversation.sessions
            for i in range(0, len(session.turns), TURNS_PER_ADD)]


def test_mem0_stores_its_memories_with_their_turns_and_the_session_dates(embedder, conversation, tmp_path, no_network):
    lm = ReplayLM(_facts)
    pipeline = _pipeline(lm, embedder, tmp_path)
    memory = pipeline.build(conversation.history())
    adds = _adds(conversation)
    units = {unit.text: unit for unit in memory.memories()}
    stats = memory.stats()
    assert stats["adds"] == stats["facts_extracted"] == len(units) == len(adds)
    assert stats["facts_dropped"] == stats["adds_storing_nothing"] == 0
    for session, turns in adds:
        unit = units[f"Noted: {turns[0].render()}"]
        assert unit.source_ids == tuple(t.id for t in turns)
        assert unit.timestamp.date() == session.timestamp.date()
        assert unit.attributes["session"] == session.id
    extraction = [r for r in lm.requests if "## New Messages" in r.messages[-1]["content"]]
    assert len(extraction) == len(adds)
    first = extraction[0].messages[-1]["content"]
    assert "## Current Date\n2026-12-05" in first  # mem0's clock reads the configured day
    day = f"{conversation.sessions[0].timestamp.day} March 2023"
    assert re.search(rf"## Custom Instructions\nThese messages were sent on {day}", first)
    assert extraction[0].json_schema == {"type": "object"}  # mem0's json_object, as a grammar
    assert memory.structure()["degenerate"] == []
    folder = memory.folder
    pipeline.release(memory)
    assert not folder.exists()
    assert memory.stats()["memories"] == len(adds)  # still reported after release
    assert no_network == []


def test_a_build_says_how_far_it_got_while_it_runs(embedder, conversation, tmp_path):
    """``build_reached`` is what the run's progress shows of a build of hours (``memlab.eval.conversation``)."""
    seen = []

    def respond(request):
        if "## New Messages" in request.messages[-1]["content"]:
            seen.append(pipeline.build_reached())
        return _facts(request)

    pipeline = _pipeline(ReplayLM(respond), embedder, tmp_path)
    assert pipeline.build_reached() is None
    memory = pipeline.build(conversation.history())
    sizes = [len(turns) for _, turns in _adds(conversation)]
    total = sum(sizes)
    assert seen == [{"turns": sum(sizes[:i]), "of": total} for i in range(len(sizes))]
    assert pipeline.build_reached() is None  # no build running
    pipeline.release(memory)


def test_without_the_date_mem0_dates_every_memory_on_its_own_clock(embedder, conversation, tmp_path):
    lm = ReplayLM(_facts)
    pipeline = _pipeline(lm, embedder, tmp_path, session_date="none", today="2026-01-31")
    memory = pipeline.build(conversation.history())
    try:
        assert {unit.timestamp for unit in memory.memories()} == {datetime(2026, 1, 31, 12)}
        assert all("Custom Instructions" not in r.messages[-1]["content"] for r in lm.requests)
    finally:
        pipeline.release(memory)


def test_answers_read_the_dated_memories_mem0_finds(embedder, conversation, tmp_path, no_network):
    lm = ReplayLM(_facts)
    pipeline = _pipeline(lm, embedder, tmp_path, top_k=3)
    memory = pipeline.build(conversation.history())
    try:
        answer = pipeline.answer(memory, Query(id="q", text="What did Tomas bake?"))
        assert answer.text == "an answer"
        assert len(answer.retrieved) == min(RECALL_DEPTH, len(memory.memories()))
        lines = answer.context.splitlines()
        assert len(lines) == answer.shown <= 3
        assert all(re.match(r"\[\d+ \w+ 2023\] Noted: ", line) for line in lines)
        assert lines[0].endswith(answer.retrieved[0].unit.text)
        assert "What did Tomas bake?" in lm.requests[-1].messages[-1]["content"]
    finally:
        pipeline.release(memory)
    assert no_network == []


def test_a_reply_mem0_cannot_parse_is_a_failure_with_the_reply(embedder, conversation, tmp_path):
    twice = json.dumps({"memory": [{"id": "0", "text": "Same fact."}, {"id": "1", "text": "Same fact."}]})
    replies = iter(["this is not JSON at all", twice, *[None] * 50])

    def respond(request):
        reply = next(replies)
        return reply if reply is not None else _facts(request)

    pipeline = _pipeline(ReplayLM(respond), embedder, tmp_path)
    memory = pipeline.build(conversation.history())
    pipeline.release(memory)
    failures = pipeline.llm_usage().failures
    assert len(failures) == 1
    assert failures[0].stage == "mem0.add" and "parsing" in failures[0].error
    assert failures[0].completion == "this is not JSON at all"
    stats = memory.stats()
    assert stats["adds_storing_nothing"] == 1
    # none from the unparsed reply, two from the next, one from each other add; mem0 kept one "Same fact."
    assert (stats["facts_extracted"], stats["facts_dropped"]) == (stats["adds"], 1)


class _Down(ReplayLM):
    def _generate(self, requests):
        raise LMUnavailableError("the model server at http://127.0.0.1:9 is down")


def test_a_dead_model_ends_the_build_with_its_own_error(embedder, conversation, tmp_path):
    pipeline = _pipeline(_Down([]), embedder, tmp_path)
    with pytest.raises(LMUnavailableError, match="is down"):
        pipeline.build(conversation.history())
    assert not list(tmp_path.glob("memlab-mem0-*"))  # its store was removed


class _CachedReplay(ReplayLM):
    def __init__(self, script, cache):
        super().__init__(script)
        self._cache_path = cache


def test_a_second_build_replays_from_the_cache(embedder, conversation, tmp_path):
    cache = str(tmp_path / "responses.sqlite")
    first = _CachedReplay(_facts, cache)
    pipeline = _pipeline(first, embedder, tmp_path)
    built = pipeline.build(conversation.history())
    pipeline.release(built)
    second = _CachedReplay(lambda request: pytest.fail("a model call on replay"), cache)
    replayed = _pipeline(second, embedder, tmp_path)
    memory = replayed.build(conversation.history())
    replayed.release(memory)
    assert second.usage.snapshot()["uncached_calls"] == 0
    assert second.usage.snapshot()["llm_calls"] == first.usage.snapshot()["llm_calls"] > 0
    assert sorted(u.text for u in memory.memories()) == sorted(u.text for u in built.memories())


def test_telemetry_is_off_and_mem0_keeps_to_memlabs_folder(tmp_path):
    import_mem0(tmp_path / "home")
    import mem0.memory.telemetry as telemetry

    assert telemetry.MEM0_TELEMETRY is False
    assert telemetry.client_telemetry.posthog is None


def test_mem0_imported_with_telemetry_on_is_refused(tmp_path):
    script = ("import mem0\nfrom pathlib import Path\nfrom memlab.peers.mem0 import import_mem0\n"
              "import_mem0(Path(r'%s'))\n") % (tmp_path / "home")
    env = {**os.environ, "MEM0_TELEMETRY": "True", "MEM0_DIR": str(tmp_path / "elsewhere")}
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert ran.returncode != 0
    assert PeerError.__name__ in ran.stderr and "MEM0_TELEMETRY=False" in ran.stderr


@pytest.mark.slow
def test_end_to_end_with_a_real_small_model(llama_cpp_works, tmp_path, monkeypatch, no_network):
    """``memlab run configs/peers/mem0.yaml`` on the embedded sample with SmolLM2-135M (mem0's 7.9k-token
    extraction prompt runs past its trained window of 8k, which llama.cpp allows: this checks the parts,
    not the answers), in this process so that the network guard sees every connection."""
    from memlab.cli import main

    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "responses.sqlite"))
    out = tmp_path / "run"
    status = main(["run", str(REPO / "configs/peers/mem0.yaml"), "lm.model=smollm2-135m-instruct-q4_1",
                   "lm.n_ctx=12288", "turns_per_add=16", "extraction_max_tokens=96", f"home={tmp_path / 'home'}",
                   f"workdir={tmp_path}", "--max-questions", "2", "--out", str(out), "--no-progress"])
    assert status == 0
    metrics = json.loads((out / "metrics.json").read_text())
    memory = next(iter(metrics["memory"].values()))
    assert memory["adds"] == 5  # one add per 16-turn session
    assert memory["gateway_refused"] == 0
    assert "structure" in memory
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 2 and all(isinstance(p["prediction"], str) for p in predictions)
    assert not list(tmp_path.glob("memlab-mem0-*"))
    assert no_network == []
