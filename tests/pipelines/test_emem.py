"""EMem / EMem-G control flow with a scripted LM, and one real-model run of each."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from memlab.config import build_pipeline
from memlab.lm.types import ChatRequest
from memlab.pipelines.base import RECALL_DEPTH
from memlab.pipelines.emem.pipeline import EMem, EMemG
from memlab.stages.answer import PromptedAnswerer
from memlab.stages.answer.cot import CoTAnswerer
from memlab.stages.arguments import PromptedArgumentExtractor
from memlab.stages.edu import PromptedEDUExtractor
from memlab.stages.filter import PromptedRelevanceFilter
from memlab.stages.mention import EntityMentionDetector, PromptedMentionDetector
from memlab.types import Conversation, Query, Session, Turn
from tests.fakes import ReplayLM
from tests.memory.helpers import HashingEmbedder

REPO = Path(__file__).resolve().parents[2]

FACTS = [
    ("Ann", "I adopted a puppy named Rex yesterday."),
    ("Bob", "Congrats! I started pottery classes in Boston."),
    ("Ann", "Rex loves the beach near my house."),
    ("Bob", "My pottery teacher is called Maria."),
    ("Ann", "I am training for the Boston marathon."),
    ("Bob", "I painted a sunset with my kids."),
]


SMALL_TALK = "Nice, see you soon!"


def conversation() -> Conversation:
    # Each session: three facts, small talk, three facts, small talk (8 turns), so a window of
    # 4 turns holds 3 facts and fits the extractor's "fewer EDUs than turns" bound.
    lines = FACTS[:3] + [("Bob", SMALL_TALK)] + FACTS[3:] + [("Ann", SMALL_TALK)]
    sessions = []
    for s in range(1, 5):
        turns = tuple(Turn(f"D{s}:{i + 1}", who, f"{text} (session {s})") for i, (who, text) in enumerate(lines))
        sessions.append(Session(f"session_{s}", datetime(2023, 5, s * 7), turns))
    return Conversation("c1", ("Ann", "Bob"), tuple(sessions))


def scripted(request: ChatRequest) -> str:
    """Answers each EMem prompt the way a cooperative model would."""
    prompt = request.messages[-1]["content"]
    if "elementary discourse units" in prompt:
        session = prompt.split("Now the session to process.")[1]
        lines = re.findall(r"^\[(D\d+:\d+)\] (\w+): (.*)$", session, flags=re.M)
        edus = [{"text": "Invented fact about Zyx.", "source_turns": ["D99:1"]}]  # ungrounded: dropped
        edus += [{"text": f"{who} said: {text}", "source_turns": [tid]} for tid, who, text in lines
                 if not text.startswith(SMALL_TALK)]  # small talk is skipped
        return json.dumps({"edus": edus})
    if "Each numbered sentence" in prompt:
        sentences = re.findall(r"^(\d+)\. (.*)$", prompt.split("Sentences:")[1], flags=re.M)
        events = []
        for number, text in sentences:
            words = [w.strip(".,!()") for w in text.split() if w[:1].isupper()]
            events.append({"id": int(number), "event_type": "say",
                           "arguments": [{"role": "r", "argument": w} for w in words[:3]]})
        return json.dumps({"events": events})
    if "List the mentions" in prompt:
        return '```json\n{"mentions": ["Rex", "puppy"]}\n```'
    if "numbered list of memories" in prompt:
        numbered = re.findall(r"^(\d+)\. (.*)$", prompt, flags=re.M)
        return json.dumps({"relevant": [int(n) for n, text in numbered if "Rex" in text or "puppy" in text] + [999]})
    if "numbered list of terms" in prompt:
        return json.dumps({"relevant": [1]})
    if "First reason in at most three" in prompt or "Reply with only a concise answer" in prompt:
        return "Memory 1 says Ann adopted Rex.\nAnswer: Rex"
    raise AssertionError(f"unexpected prompt: {prompt[:80]}")


def emem_g(lm, **overrides):
    parts = dict(
        extractor=PromptedEDUExtractor(lm=lm, max_turns_per_call=4),
        argument_extractor=PromptedArgumentExtractor(lm=lm),
        embedder=HashingEmbedder(),
        answerer=CoTAnswerer(lm=lm),
        edu_filter=PromptedRelevanceFilter(lm=lm),
        argument_filter=PromptedRelevanceFilter(lm=lm, prompt="emem/filter_arguments"),
        mention_detector=PromptedMentionDetector(lm=lm),
        linking_top_k=10,
        qa_top_k=3,
        synonym_threshold=0.99,
    )
    parts.update(overrides)
    return EMemG(**parts)


def test_emem_g_builds_the_event_graph_with_provenance():
    lm = ReplayLM(scripted)
    pipeline = emem_g(lm)
    memory = pipeline.build(conversation().history())
    assert len(memory.edus) == 24  # 6 facts x 4 sessions; the invented EDU is dropped every time
    for unit in memory.edus.units.values():
        session = unit.attributes["session"]
        assert unit.source_ids and all(sid.startswith(f"D{session[-1]}:") for sid in unit.source_ids)
        assert unit.timestamp is not None
    graph = memory.graph
    assert graph.num_nodes("session") == 4 and graph.num_nodes("edu") == 24
    assert graph.num_edges("session-edu") == 24
    assert graph.has_node("arg:rex") and graph.has_node("arg:boston")
    rex_edus = {n for n, _, _ in graph.neighbors("arg:rex", "edu-argument")}
    assert len(rex_edus) == 8  # "... puppy named Rex" and "Rex loves the beach", in each session
    # argument provenance is the union of its EDUs' provenance
    assert set(memory.arguments.get("arg:rex").source_ids) == {f"D{s}:{t}" for s in range(1, 5) for t in (1, 3)}
    stats = pipeline.memory_stats(memory)
    assert stats["edus"] == 24 and stats["arguments"] == len(graph.nodes("argument"))
    assert stats["edu-argument_edges"] == graph.num_edges("edu-argument") > 0
    assert stats["sessions_with_extraction_errors"] == 0
    # arguments were extracted in batches of 8 EDUs, not one call per EDU
    argument_calls = [r for r in lm.requests if "Each numbered sentence" in r.messages[-1]["content"]]
    assert len(argument_calls) == 3
    # sessions of 8 turns in windows of 4 turns: 2 calls per session, each asking for < 4 EDUs
    edu_calls = [r for r in lm.requests if "elementary discourse units" in r.messages[-1]["content"]]
    assert len(edu_calls) == 8 and edu_calls[0].json_schema["properties"]["edus"]["maxItems"] == 3


def test_emem_g_answers_from_ppr_ranked_edus_and_ranks_to_recall_depth():
    lm = ReplayLM(scripted)
    pipeline = emem_g(lm)
    memory = pipeline.build(conversation().history())
    answer = pipeline.answer(memory, Query("q1", "What is the name of the puppy Ann adopted?"))
    assert answer.text == "Rex" and answer.error is None
    context_lines = answer.context.splitlines()
    assert len(context_lines) == 3  # qa_top_k
    assert all(line.startswith("[") and "(Ann)" in line for line in context_lines)
    assert all("Rex" in line or "puppy" in line for line in context_lines)
    ids = [r.unit.id for r in answer.retrieved]
    assert len(ids) >= RECALL_DEPTH and len(set(ids)) == len(ids)
    steps = {s["step"]: s for s in answer.trace.steps}
    assert steps["mentions"]["mentions"] == ["Rex", "puppy"]
    assert len(steps["argument_filter"]["kept"]) == 1  # the scripted filter keeps term 1 only
    assert "Memory 1" in steps["answer"]["reasoning"]
    assert pipeline.llm_usage().failures == ()


def test_retrieve_never_calls_the_answerer():
    lm = ReplayLM(scripted)
    pipeline = emem_g(lm)
    memory = pipeline.build(conversation().history())
    before = len(lm.requests)
    ranking = pipeline.retrieve(memory, Query("q", "Where does Rex like to go?"))
    asked = [r.messages[-1]["content"] for r in lm.requests[before:]]
    assert len(ranking) >= RECALL_DEPTH
    assert not any("Answer:" in text and "First reason" in text for text in asked)
    assert any("List the mentions" in text for text in asked)


def test_ablations_by_slot():
    lm = ReplayLM(scripted)
    no_filter_no_mentions = emem_g(lm, edu_filter=None, mention_detector=None, argument_filter=None)
    memory = no_filter_no_mentions.build(conversation().history())
    before = len(lm.requests)
    answer = no_filter_no_mentions.answer(memory, Query("q", "What is the name of the puppy?"))
    asked = [r.messages[-1]["content"] for r in lm.requests[before:]]
    assert len(asked) == 1 and "First reason" in asked[0]  # only the answerer was called
    assert len(answer.context.splitlines()) == 3

    ner = emem_g(lm, mention_detector=EntityMentionDetector(), answerer=PromptedAnswerer(lm=lm, prompt="emem/answer"))
    answer = ner.answer(memory, Query("q", "Where does Rex play?"))
    steps = {s["step"]: s for s in answer.trace.steps}
    assert "Rex" in steps["mentions"]["mentions"]
    assert answer.text.endswith("Rex")


def test_emem_keeps_what_the_filter_keeps():
    lm = ReplayLM(scripted)
    pipeline = EMem(
        extractor=PromptedEDUExtractor(lm=lm, max_turns_per_call=None),
        embedder=HashingEmbedder(),
        answerer=CoTAnswerer(lm=lm),
        edu_filter=PromptedRelevanceFilter(lm=lm),
        linking_top_k=10,
    )
    memory = pipeline.build(conversation().history())
    assert len(memory.arguments) == 0 and memory.graph.num_nodes("argument") == 0
    answer = pipeline.answer(memory, Query("q", "What is the puppy called that Ann adopted?"))
    lines = answer.context.splitlines()
    assert 1 <= len(lines) <= 10 and all("Rex" in line or "puppy" in line for line in lines)
    assert [r.unit.text for r in answer.retrieved[: len(lines)]] == [l.split(") ", 1)[1] for l in lines]
    assert len(answer.retrieved) >= RECALL_DEPTH


def test_emem_is_not_called_degenerate_for_the_argument_graph_it_never_builds():
    lm = ReplayLM(scripted)
    shared = dict(extractor=PromptedEDUExtractor(lm=lm, max_turns_per_call=4), embedder=HashingEmbedder(),
                  answerer=CoTAnswerer(lm=lm), edu_filter=PromptedRelevanceFilter(lm=lm))
    memory = EMem(**shared).build(conversation().history())
    assert memory.structure()["degenerate"] == ["no EDU has an argument"]  # judged as EMem-G's graph
    assert EMem(**shared).memory_stats(memory)["structure"]["degenerate"] == []
    assert EMemG(**shared).memory_stats(memory)["structure"]["degenerate"] == ["no EDU has an argument"]
    empty = EMem(**{**shared, "extractor": PromptedEDUExtractor(lm=ReplayLM(lambda r: '{"edus": []}'))})
    assert empty.memory_stats(empty.build(conversation().history()))["structure"]["degenerate"] == ["no EDU extracted"]


def test_bad_completions_are_counted_and_the_run_goes_on():
    lm = ReplayLM(lambda request: "not json at all")
    pipeline = emem_g(lm)
    memory = pipeline.build(conversation().history())
    assert len(memory.edus) == 0 and memory.errors
    answer = pipeline.answer(memory, Query("q", "anything?"))
    assert answer.text == "" and answer.retrieved == []
    assert pipeline.llm_usage().failures


# -- real model ------------------------------------------------------------------------------
def _real_run(config: str, tmp_path, extra: tuple[str, ...] = ()) -> None:
    pytest.importorskip("llama_cpp")
    from memlab.data import load_sample
    from memlab.lm.errors import LMUnavailableError
    from memlab.lm.models import resolve_model

    try:
        resolve_model("smollm2-135m-instruct-q4_1")
    except LMUnavailableError as exc:
        pytest.skip(str(exc))
    # The shared LM node (YAML anchor) is overridden once for every stage; outputs are bounded
    # so the test stays short: a 135M model's outputs are not worth more tokens.
    overrides = ["answerer.lm.model=smollm2-135m-instruct-q4_1", "answerer.lm.n_ctx=2048",
                 f"answerer.lm.cache={tmp_path / 'cache.sqlite'}", "extractor.max_tokens=256",
                 "answerer.max_tokens=96", "edu_filter.max_tokens=64", *extra]
    pipeline, _, _ = build_pipeline(REPO / "configs" / "pipelines" / config, overrides)
    sample = load_sample()[0]
    sessions = tuple(replace(s, turns=s.turns[:8]) for s in sample.sessions[:2])
    small = Conversation(sample.id, sample.speakers, sessions, sample.questions[:2])
    memory = pipeline.build(small.history())
    turn_ids = {t.id for _, t in small.turns()}
    for unit in memory.edus.units.values():
        assert unit.source_ids and set(unit.source_ids) <= turn_ids
    for unit in memory.arguments.units.values():
        assert unit.source_ids and set(unit.source_ids) <= turn_ids
    for question in small.questions:
        answer = pipeline.answer(memory, question.as_query())
        assert isinstance(answer.text, str)
        assert len(answer.retrieved) >= min(len(memory.edus), RECALL_DEPTH)
        assert len({r.unit.id for r in answer.retrieved}) == len(answer.retrieved)
    lms = pipeline.lms()
    assert len(lms) == 1 and lms[0].usage.snapshot()["llm_calls"] > 0
    assert all(f.stage for f in pipeline.llm_usage().failures)


@pytest.mark.slow
def test_emem_with_a_real_small_model(tmp_path):
    _real_run("emem.yaml", tmp_path)


@pytest.mark.slow
def test_emem_g_with_a_real_small_model(tmp_path):
    _real_run("emem_g.yaml", tmp_path, ("argument_extractor.max_tokens=256", "mention_detector.max_tokens=48",
                                        "argument_filter.max_tokens=48"))


def test_synonym_edges_respect_threshold_and_cap():
    import numpy as np

    from memlab.pipelines.emem.memory import synonym_pairs

    # unit vectors at angles: cos(a_i, a_j) = cos(angle difference)
    angles = np.radians([0, 10, 22, 30, 90])
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    pairs = synonym_pairs(vectors, threshold=0.935, cap=100)
    # differences of 8, 10, 12 and 20 degrees pass (cos 20deg = 0.940); 22 degrees does not (0.927)
    assert {(i, j) for i, j, _ in pairs} == {(0, 1), (1, 2), (1, 3), (2, 3)}
    assert all(sim >= 0.935 for _, _, sim in pairs)
    capped = synonym_pairs(vectors, threshold=0.935, cap=1)
    degree = np.zeros(5, dtype=int)
    for i, j, _ in capped:
        degree[i] += 1
        degree[j] += 1
    assert degree.max() == 1 and len(capped) == 2  # most similar first: (2,3) at 8deg, then (0,1)
    assert {(i, j) for i, j, _ in capped} == {(0, 1), (2, 3)}
    assert synonym_pairs(vectors[:1], 0.5, 10) == []


def test_synonym_edges_end_up_in_the_graph():
    lm = ReplayLM(scripted)
    memory = emem_g(lm, synonym_threshold=0.5, synonym_cap=2).build(conversation().history())
    synonyms = memory.graph.edges("synonym")
    assert synonyms and all(d["similarity"] >= 0.5 for _, _, d in synonyms)
    counts: dict[str, int] = {}
    for u, v, _ in synonyms:
        counts[u] = counts.get(u, 0) + 1
        counts[v] = counts.get(v, 0) + 1
    assert max(counts.values()) <= 2
    assert memory.adjacency.shape == (memory.graph.num_nodes(),) * 2


def test_emem_g_declares_the_shared_arguments_once_and_configs_still_see_them():
    import inspect

    from memlab.config import ConfigError, validate
    from memlab.pipelines.emem.pipeline import EventMemoryPipeline

    shared = list(inspect.signature(EventMemoryPipeline).parameters)
    assert set(shared) <= set(inspect.signature(EMemG).parameters)
    node = {"_component_": "memlab.pipelines.emem.EMemG",
            "extractor": {"_component_": "memlab.stages.segment.TurnSegmenter"},
            "embedder": {"_component_": "memlab.embed.SentenceTransformerEmbedder"},
            "answerer": {"_component_": "memlab.stages.answer.PromptedAnswerer",
                         "lm": {"_component_": "memlab.lm.llamacpp.LlamaCppLM"}},
            "synonym_cap": 5, "damping": 0.3}
    validate(node)
    with pytest.raises(ConfigError, match="has no argument 'synonym_capp'"):
        validate({**node, "synonym_capp": 5})
    with pytest.raises(ConfigError, match="needs argument 'answerer'"):
        validate({k: v for k, v in node.items() if k != "answerer"})
