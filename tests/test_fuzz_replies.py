"""Fuzz: malformed completions through every prompted stage family and both judges.

One bad reply must never cost more than its own call. A corpus of malformed completions
(``CORPUS``, built below: truncated JSON, deep nesting, huge numbers, a wrong type in each
field of each family's reply, echoed schemas, conflicting duplicate keys, reasoning blocks,
chat special tokens, surrogates, empty and blank replies, megabyte strings, binary junk ...)
is given to every prompted stage as its LM's reply, to the first call and to the retry. For
every reply: ``forward`` returns (no exception) within ``LIMIT_S``, the output is well typed
(what the family's ``Out`` declares, every string encodable as UTF-8), a reply that could not
be used is counted in ``failures`` exactly once, no parser needs the stage's safety net (no
"parse raised" log), and the replies that state nothing usable (``must_fail``) are failures.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import sys
import threading
import time
import types
import typing
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import pytest

from memlab.config import build_pipeline
from memlab.data import load_sample
from memlab.data.prefix import first_sessions
from memlab.embed import Embedder
from memlab.eval.judge import LABEL_SCHEMA, SCORE_SCHEMA, CorrectWrongJudge, JudgeIn, MagmaGraderJudge
from memlab.eval.runner import RunOptions, run_benchmark
from memlab.lm.base import LM
from memlab.lm.types import ChatRequest, Completion
from memlab.stages.answer import AnswerIn, PromptedAnswerer
from memlab.stages.answer.adaptive import AdaptiveAnswerer
from memlab.stages.answer.cot import CoTAnswerer
from memlab.stages.answer.simplemem import ReconstructiveAnswerer
from memlab.stages.arguments.base import ArgumentIn
from memlab.stages.arguments.prompted import PromptedArgumentExtractor, arguments_schema
from memlab.stages.categorize.base import CategorizeIn, NodeCard
from memlab.stages.categorize.prompted import PromptedCategorizer
from memlab.stages.compress.base import CompressIn
from memlab.stages.compress.prompted import PromptedCompressor
from memlab.stages.compress.prompted import request_schema as compress_schema
from memlab.stages.consolidate.base import ConsolidateIn, EventRef
from memlab.stages.consolidate.prompted import PromptedCausalConsolidator
from memlab.stages.consolidate.verdicts import PromptedCausalVerdicts
from memlab.stages.contradict.base import ContradictIn
from memlab.stages.contradict.prompted import PromptedContradictionDetector
from memlab.stages.describe.base import DescribeIn
from memlab.stages.describe.prompted import PromptedEntityDescriber
from memlab.stages.edu.chunked import StructuredChunkEDUExtractor, chunk_schema
from memlab.stages.edu.prompted import PromptedEDUExtractor, edu_schema
from memlab.stages.entity.base import EntityIn
from memlab.stages.entity.prompted import PromptedEntityExtractor
from memlab.stages.event.base import EventIn
from memlab.stages.event.prompted import PromptedEventExtractor, event_schema
from memlab.stages.event_view import EventView
from memlab.stages.fact.base import FactIn
from memlab.stages.fact.prompted import PromptedFactExtractor
from memlab.stages.filter.base import FilterIn
from memlab.stages.filter.prompted import PromptedRelevanceFilter, selection_schema
from memlab.stages.fuse.base import FuseIn
from memlab.stages.fuse.prompted import PromptedEventFuser
from memlab.stages.global_select.base import GlobalSelectIn, HierarchyNode
from memlab.stages.global_select.prompted import PromptedGlobalSelector
from memlab.stages.mention.base import MentionIn
from memlab.stages.mention.prompted import PromptedMentionDetector, mentions_schema
from memlab.stages.navigate.base import NavigateIn, Neighbour
from memlab.stages.navigate.prompted import PromptedNavigator
from memlab.stages.plan.base import PlanIn
from memlab.stages.plan.prompted import PromptedPlanner
from memlab.stages.plan.prompted import request_schema as plan_schema
from memlab.stages.refine.base import RefineIn
from memlab.stages.refine.prompted import PromptedQueryRefiner
from memlab.stages.relate.base import RelateIn
from memlab.stages.relate.prompted import PromptedRelationExtractor
from memlab.stages.rerank.base import RerankIn
from memlab.stages.rerank.prompted import PromptedReranker, ranking_schema
from memlab.stages.route.base import RouteIn
from memlab.stages.route.prompted import PromptedRouter
from memlab.stages.segment.base import SegmentIn
from memlab.stages.segment.prompted import PromptedEventSegmenter
from memlab.stages.select.base import Candidate, SelectIn
from memlab.stages.select.prompted import PromptedNodeSelector
from memlab.stages.subgoal.base import SubgoalIn
from memlab.stages.subgoal.prompted import PromptedSubgoalPlanner
from memlab.stages.synthesize.base import SynthesizeIn
from memlab.stages.synthesize.prompted import SCHEMA as SYNTH_SCHEMA
from memlab.stages.synthesize.prompted import PromptedSynthesizer
from memlab.stages.temporal import RuleTemporalNormalizer
from memlab.stages.temporal.base import TemporalIn
from memlab.stages.temporal.prompted import PromptedTemporalNormalizer
from memlab.stages.temporal.prompted import mentions_schema as temporal_schema
from memlab.types import MemoryUnit, Session, Turn
from tests.memory.helpers import HashingEmbedder

REPO = Path(__file__).resolve().parents[1]
#: The most one reply may cost a stage (first call and retry together), in CPU seconds of the
#: calling thread.
LIMIT_S = 2.0


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()`` and the CPU seconds this thread spent in it: another process taking the core
    (CI runs on two) does not count."""
    start = time.thread_time()
    out = call()
    return out, time.thread_time() - start


def over_limit(call: Callable[[], Any], took: float) -> float | None:
    """The cost of a reply that took ``took``, when it is over ``LIMIT_S`` once more: a parser
    that is slow on a reply is slow every time, a collector's pause is not."""
    if took <= LIMIT_S:
        return None
    again = timed(call)[1]
    return min(took, again) if again > LIMIT_S else None

WHEN = datetime(2023, 5, 8, 13, 56)
TURNS = (
    Turn("D1:1", "Ann", "Yesterday I adopted a puppy named Rex from the shelter."),
    Turn("D1:2", "Bob", "Congratulations! What breed is Rex?"),
    Turn("D1:3", "Ann", "Rex is a beagle, and he loves the beach."),
)
SESSION = Session("session_1", WHEN, TURNS)
LONG_TURN = Turn("D1:4", "Ann", "\n\n".join(f"Step {i}: feed the puppy at {i} o'clock and walk him by the beach." * 3
                                            for i in range(1, 9)))

# One well-formed reply per family, from which the wrong-type mutations are made.
GOOD: dict[str, Any] = {
    "compress": {"memory_units": [{"content": "Ann adopted a beagle named Rex.", "entities": ["Ann", "Rex"],
                                   "topic": "pets", "timestamp": "2023-05-07T00:00:00", "salience": "high",
                                   "source_turns": ["D1:1"]}]},
    "event": {"entities": ["Ann"], "topic": "pets", "relationships": ["Ann owns Rex"],
              "semantic_facts": ["Ann adopted Rex"], "dates_mentioned": ["yesterday"], "summary": "Ann adopted Rex."},
    "edu": {"edus": [{"text": "Ann adopted a puppy named Rex.", "source_turns": ["D1:1"]}]},
    "chunks": {"edus": ["Ann feeds the puppy"], "chunks": [{"first_block": 1, "last_block": 2, "summary": "Feeding."}]},
    "links": {"links": [{"cause": 1, "effect": 0, "score": 0.9}]},
    "verdicts": {"1": {"link": "cause", "score": 0.9}, "2": {"link": "none", "score": 0.1}},
    "filter": {"relevant": [1, 2]},
    "rerank": {"ranking": [2, 1]},
    "mentions": {"mentions": ["Ann", "Rex"]},
    "route": {"intent": "WHEN", "question_type": "temporal"},
    "plan": {"complexity": "LOW", "retrieval_rationale": "one fact", "lexical_keys": ["Rex"],
             "temporalConstraints": {"start": "2023-05-01", "end": "2023-05-09"}, "semantic_query": "Ann's puppy"},
    "synthesize": {"consolidated": "Ann adopted Rex, a beagle.", "abstract": "Ann's new dog."},
    "arguments": {"events": [{"id": 1, "event_type": "adopt", "arguments": [{"role": "agent", "argument": "Ann"}]}]},
    "temporal": {"mentions": [{"span": "Yesterday", "resolved_date_start": "2023-05-07",
                               "resolved_date_end": "2023-05-07"}]},
    "judge": {"explanation": "Same name.", "label": "CORRECT"},
    "grader": {"score": 0.8, "reasoning": "Close."},
    "segments": {"events": [{"turns": ["D1:1", "D1:2"], "summary": "Ann adopted Rex.", "people": ["Ann"]}]},
    "relations": {"relations": [{"source": "E1", "target": "E2", "type": "causal", "evidence": ["D1:1"]}]},
    "fusion": {"same_event": False, "has_overlap": True, "relation_type": "causal", "reasoning": "Rex again."},
    "entities": {"entities": ["Ann", "Rex"]},
    "descriptions": {"entities": [{"name": "Rex", "summary": "Ann's beagle.", "tags": ["pet", "dog"]}]},
    "facts": {"facts": [{"source": "Ann", "target": "Rex", "fact": "Ann adopted Rex yesterday."}]},
    "contradicted": {"closed": [{"existing": 2, "new": 1, "quote": "lives in Rome"}]},
    "categories": {"categories": [{"category": "Pets", "indexes": [0, 1]}]},
    "hierarchy": {"selected": [{"name": "Pets", "uuid": "C1", "get_all_children": True}]},
}
#: The line-format families' well-formed replies (CompassMem's search prompts, F.2).
GOOD_TEXT: dict[str, str] = {
    "subgoals": "Sub-goal 1: Find the name of Ann's puppy\nSub-goal 2: Find when Ann adopted it",
    "selected": "Reasoning: N1 names the puppy.\nSelected Nodes: [N1]",
    "refined": "Reasoning: the date is missing.\nNew Query: When did Ann adopt Rex?\nTarget Sub-goals: 1",
    "navigation": "REASONING: N2 may say more.\nACTION: EXPAND\nNEXT_NODES: [N2]\nSATISFIED_SUBGOALS: NONE",
    "answer": "Rex",
    "cot_answer": "Ann adopted a puppy named Rex.\nAnswer: Rex",
}
#: The request schemas, which a model may echo instead of following.
SCHEMAS = [compress_schema(("D1:1", "D1:2"), 6, 5, 3), event_schema(5), edu_schema(4), chunk_schema(4, 2),
           selection_schema(3), ranking_schema(3), mentions_schema(6), plan_schema(6), SYNTH_SCHEMA,
           arguments_schema(2, 6), temporal_schema(8), LABEL_SCHEMA, SCORE_SCHEMA]
WRONG_VALUES: list[Any] = [None, 7, -1, 2.5, True, "", "text", [], {}, [None], [{"x": 1}], [12, "a"], {"a": []}]


def _mutations() -> list[str]:
    """Each family's good reply with one field (top level, or of the first list item) replaced
    by each wrong value, plus the field left out."""
    out = []
    for good in GOOD.values():
        paths = [(key,) for key in good]
        for key, value in good.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                paths += [(key, 0, inner) for inner in value[0]]
            elif isinstance(value, dict):
                paths += [(key, inner) for inner in value]
        for path in paths:
            for wrong in [*WRONG_VALUES, dataclasses.MISSING]:
                doc = json.loads(json.dumps(good))
                parent = doc
                for step in path[:-1]:
                    parent = parent[step]
                if wrong is dataclasses.MISSING:
                    del parent[path[-1]]
                else:
                    parent[path[-1]] = wrong
                out.append(json.dumps(doc))
    return out


class FuzzLM(LM):
    """Replies ``reply`` to every request (first call and retry alike)."""

    def __init__(self) -> None:
        super().__init__(cache=None)
        self.reply = ""
        self.calls = 0

    @property
    def name(self) -> str:
        return "fuzz"

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        self.calls += len(requests)
        return [Completion(self.reply, 1, 1, 0.0, "fuzz") for _ in requests]


@dataclass(frozen=True)
class Reply:
    kind: str
    text: str


def build_corpus() -> list[Reply]:
    rng = random.Random(22)
    corpus: list[Reply] = []

    def add(kind: str, *texts: str) -> None:
        corpus.extend(Reply(kind, text) for text in texts)

    goods = [json.dumps(g) for g in GOOD.values()]
    add("empty", "")
    add("blank", " ", "\n", "\t\n  \r\n", "\u00a0", "\n" * 1000)
    add("truncated", *(g[:cut] for g in goods for cut in (1, 2, len(g) // 3, len(g) // 2, len(g) - 2, len(g) - 1)))
    for n in (33, 200, 5000, 100_000):
        add("deep", "[" * n, "[" * n + "]" * n, '{"a": ' * n + "1" + "}" * n, '{"memory_units": ' + "[" * n)
    add("huge_number", '{"score": 1' + "0" * 5000 + "}", '{"relevant": [' + "9" * 4400 + "]}",
        '{"links": [{"cause": 1' + "0" * 400 + ', "effect": 0, "score": 0.9}]}',
        '{"ranking": [1e999]}', '{"label": "CORRECT", "n": -' + "1" * 100_000 + "}")
    add("nonfinite", '{"score": NaN}', '{"score": Infinity}', '{"links": [{"cause": 1, "effect": 0, "score": NaN}]}',
        '{"score": -Infinity, "reasoning": "x"}', '{"score": 1e400}')
    add("wrong_type", *_mutations())
    schemas = SCHEMAS + [PromptedCausalConsolidator(FuzzLM()).schema(3), PromptedCausalVerdicts(FuzzLM()).schema(3),
                         PromptedRouter(FuzzLM()).schema]
    add("echoed_schema", *(json.dumps(s) for s in schemas), *(json.dumps(s, indent=2) for s in schemas))
    add("conflict", '{"label": "CORRECT", "label": "WRONG"}', '{"score": 0.9, "score": 0.1}',
        *(_conflicting(good) for good in GOOD.values()))
    add("think", *(f"<think>Let me see.</think>\n{g}" for g in goods[:4]), "</think>" * 20_000 + goods[0],
        "<think>a</think>" * 10_000 + goods[1], "<THINK>The dog is called Rex.</THINK>\nRex")
    add("unclosed_think", "<think>The dog is called Rex.", "<think>" * 20_000, "<think>\n" + goods[2])
    add("special_tokens", *(g + "<|im_end|>" for g in goods[:3]), "<|im_start|>assistant\n" + goods[3],
        goods[4] + "</s><s>", "Rex<|im_end|>", "Rex<|endoftext|>\nmore text", "Answer: Rex</s>")
    add("only_tokens", "<|im_end|>", "<|im_start|>assistant\n<|im_end|>", "</s>", "<|endoftext|><|endoftext|>")
    add("surrogate", "\ud83d", "Rex \ud83d\ude00\ud83d", goods[0].replace("Ann", "Ann\ud83d"), "\ufeffRex",
        "\ufeff" + goods[1], '{"mentions": ["Ann\\ud83d", "\\udc00Rex"]}', "Rex\x00", "\x00" * 50)
    add("huge", "x" * 1_000_000, '{"summary": "' + "x" * 1_000_000, '["' + '", "'.join(["a"] * 100_000) + '"]',
        '{"relevant": [' + ", ".join(["1"] * 100_000) + "]}", " " * 1_000_000, "Answer: " * 100_000,
        "CORRECT WRONG " * 50_000, "score: 0.5 " * 50_000, "{" * 500_000 + "}" * 500_000, '"' * 200_000,
        "```json\n" * 50_000, "\n" * 1_000_000 + "Answer: Rex")
    junk = [bytes(rng.randrange(256) for _ in range(rng.choice((16, 300, 4000)))) for _ in range(12)]
    add("junk", *(b.decode("latin-1") for b in junk), *(b.decode("utf-8", errors="replace") for b in junk))
    add("prose", "I don't know.", "The answer is not in the context.", "CORRECT or WRONG", "score: maybe",
        "Answer:", "ANSWER: ", "Final answer: ", "```json\n{\"a\": 1", "```\n```", "null", "true", "0", "-0.5", "[]",
        "{}", '""', "\u202eRex\u202c", "R\u0301ex", "🐶 Rex")
    return corpus


def _conflicting(good: dict[str, Any]) -> str:
    """``good`` with its first key given a second time, with another value."""
    key, value = next(iter(good.items()))
    other = "something else" if value != "something else" else "another"
    return "{" + json.dumps(key) + ": " + json.dumps(value) + ", " + json.dumps(key) + ": " + json.dumps(other) + \
        ", " + json.dumps(good)[1:]


CORPUS = build_corpus()

JSON_MUST_FAIL = {"empty", "blank", "unclosed_think", "deep", "huge_number", "nonfinite", "echoed_schema",
                  "conflict", "only_tokens", "junk"}
TEXT_MUST_FAIL = {"empty", "blank", "unclosed_think", "only_tokens"}
# A judge reads a label or score the reply states in words even when a number elsewhere in
# its JSON is unreadable ('{"label": "CORRECT", "n": -111...}'): a verdict the reply gives.
JUDGE_MUST_FAIL = JSON_MUST_FAIL - {"huge_number"}


def _answer_in() -> AnswerIn:
    return AnswerIn("What is Ann's puppy called?", "[D1:1] Ann adopted a puppy named Rex.", question_date=WHEN)


def _units() -> tuple[MemoryUnit, ...]:
    return (MemoryUnit("u1", "Ann adopted a puppy named Rex", ("D1:1",), WHEN, "unit"),
            MemoryUnit("u2", "Ann adopted Rex the puppy from a shelter", ("D1:2",), WHEN, "unit"))


@dataclass(frozen=True)
class Family:
    make: Callable[[LM], Any]
    item: Any
    must_fail: set[str]
    #: The family's well-formed reply: a key of ``GOOD`` (JSON) or of ``GOOD_TEXT`` (line formats).
    good: str


VIEWS = (EventView("N1", "Ann adopted a puppy named Rex", ("D1:1",), ("Ann",), WHEN),
         EventView("N2", "Rex is a beagle who loves the beach", ("D1:3",), ("Ann",), WHEN))


FAMILIES: dict[str, Family] = {
    "compressor": Family(lambda lm: PromptedCompressor(lm, normalizer=RuleTemporalNormalizer()),
                         CompressIn("c", SESSION, TURNS, "session_1/w0", ("Ann", "Bob")), JSON_MUST_FAIL, good="compress"),
    "event": Family(lambda lm: PromptedEventExtractor(lm, normalizer=RuleTemporalNormalizer()),
                    EventIn("Ann", TURNS[0].text, reference=WHEN, participants=("Ann", "Bob")), JSON_MUST_FAIL, good="event"),
    "edu": Family(lambda lm: PromptedEDUExtractor(lm, normalizer=RuleTemporalNormalizer()), SegmentIn("c", SESSION),
                  JSON_MUST_FAIL, good="edu"),
    "edu_chunks": Family(lambda lm: StructuredChunkEDUExtractor(lm, edu_extractor=PromptedEDUExtractor(lm)),
                         SegmentIn("c", Session("s2", WHEN, (LONG_TURN,))), JSON_MUST_FAIL, good="chunks"),
    "consolidator": Family(lambda lm: PromptedCausalConsolidator(lm),
                           ConsolidateIn(EventRef("e0", "Ann missed the interview.", WHEN),
                                         (EventRef("e1", "Ann's car broke down.", WHEN),
                                          EventRef("e2", "Bob likes pottery.", WHEN))), JSON_MUST_FAIL, good="links"),
    "verdicts": Family(lambda lm: PromptedCausalVerdicts(lm),
                       ConsolidateIn(EventRef("e0", "Ann missed the interview.", WHEN),
                                     (EventRef("e1", "Ann's car broke down.", WHEN),
                                      EventRef("e2", "Bob likes pottery.", WHEN))), JSON_MUST_FAIL, good="verdicts"),
    "filter": Family(lambda lm: PromptedRelevanceFilter(lm), FilterIn("Rex?", ("Ann has Rex.", "Bob has a cat.")),
                     JSON_MUST_FAIL, good="filter"),
    "reranker": Family(lambda lm: PromptedReranker(lm), RerankIn("Rex?", ("Ann has Rex.", "Bob has a cat.")),
                       JSON_MUST_FAIL, good="rerank"),
    "mentions": Family(lambda lm: PromptedMentionDetector(lm), MentionIn("What did Ann name Rex?"), JSON_MUST_FAIL, good="mentions"),
    "router": Family(lambda lm: PromptedRouter(lm, normalizer=RuleTemporalNormalizer()),
                     RouteIn("When did Ann adopt Rex?", WHEN), JSON_MUST_FAIL, good="route"),
    "planner": Family(lambda lm: PromptedPlanner(lm), PlanIn("When did Ann adopt Rex?", question_date=WHEN),
                      JSON_MUST_FAIL, good="plan"),
    "synthesizer": Family(lambda lm: PromptedSynthesizer(lm, HashingEmbedder(), threshold=0.2),
                          SynthesizeIn("c", "session_1", WHEN, _units()), JSON_MUST_FAIL, good="synthesize"),
    "arguments": Family(lambda lm: PromptedArgumentExtractor(lm), ArgumentIn(("Ann adopted Rex.", "Bob met Ann.")),
                        JSON_MUST_FAIL, good="arguments"),
    "temporal": Family(lambda lm: PromptedTemporalNormalizer(lm), TemporalIn("Yesterday Ann adopted Rex.", WHEN),
                       JSON_MUST_FAIL, good="temporal"),
    "answerer": Family(lambda lm: PromptedAnswerer(lm), _answer_in(), TEXT_MUST_FAIL, good="answer"),
    "adaptive_answerer": Family(lambda lm: AdaptiveAnswerer(lm), _answer_in(), TEXT_MUST_FAIL, good="answer"),
    "reconstructive_answerer": Family(lambda lm: ReconstructiveAnswerer(lm), _answer_in(), TEXT_MUST_FAIL, good="answer"),
    "cot_answerer": Family(lambda lm: CoTAnswerer(lm), _answer_in(), TEXT_MUST_FAIL, good="cot_answer"),
    "judge": Family(lambda lm: CorrectWrongJudge(lm), JudgeIn("Puppy's name?", "Rex", "Rex"), JUDGE_MUST_FAIL, good="judge"),
    "grader": Family(lambda lm: MagmaGraderJudge(lm), JudgeIn("Puppy's name?", "Rex", "Rex"), JUDGE_MUST_FAIL, good="grader"),
    "segmenter": Family(lambda lm: PromptedEventSegmenter(lm, normalizer=RuleTemporalNormalizer()),
                        SegmentIn("c", SESSION), JSON_MUST_FAIL, good="segments"),
    "relations": Family(lambda lm: PromptedRelationExtractor(lm), RelateIn(VIEWS, TURNS, WHEN), JSON_MUST_FAIL,
                        good="relations"),
    "fuser": Family(lambda lm: PromptedEventFuser(lm), FuseIn(VIEWS[1], VIEWS[0], 0.9), JSON_MUST_FAIL, good="fusion"),
    "subgoals": Family(lambda lm: PromptedSubgoalPlanner(lm), SubgoalIn("What is Ann's puppy called?", WHEN),
                       TEXT_MUST_FAIL, good="subgoals"),
    "node_selector": Family(lambda lm: PromptedNodeSelector(lm),
                            SelectIn("Puppy's name?", ((Candidate(VIEWS[0], 0.9), Candidate(VIEWS[1], 0.7)),),
                                     subgoals=("Find the puppy's name",)), TEXT_MUST_FAIL, good="selected"),
    "refiner": Family(lambda lm: PromptedQueryRefiner(lm),
                      RefineIn("When did Ann adopt Rex?", ("Find the date",), (False,), (VIEWS[0].summary,)),
                      TEXT_MUST_FAIL, good="refined"),
    "navigator": Family(lambda lm: PromptedNavigator(lm),
                        NavigateIn("Puppy's breed?", ("Find the breed",), (False,), VIEWS[0],
                                   (Neighbour(VIEWS[1], "related"),)), TEXT_MUST_FAIL, good="navigation"),
    "entities": Family(lambda lm: PromptedEntityExtractor(lm), EntityIn("Ann: Yesterday I adopted Rex."),
                       JSON_MUST_FAIL, good="entities"),
    "describer": Family(lambda lm: PromptedEntityDescriber(lm), DescribeIn("Ann: Rex is a beagle.", ("Rex",), ("",)),
                        JSON_MUST_FAIL, good="descriptions"),
    "facts": Family(lambda lm: PromptedFactExtractor(lm, normalizer=RuleTemporalNormalizer()),
                    FactIn("Ann: Yesterday I adopted Rex.", ("Ann", "Rex"), reference=WHEN), JSON_MUST_FAIL,
                    good="facts"),
    "contradictions": Family(lambda lm: PromptedContradictionDetector(lm),
                             ContradictIn(("Ann lives in Rome.",), ("Ann has a dog.", "Ann lives in Paris.")),
                             JSON_MUST_FAIL, good="contradicted"),
    "categorizer": Family(lambda lm: PromptedCategorizer(lm),
                          CategorizeIn(1, (NodeCard("Rex", ("dog",)), NodeCard("Biscuit", ("cat",)), NodeCard("Rome"))),
                          JSON_MUST_FAIL, good="categories"),
    "global_selector": Family(lambda lm: PromptedGlobalSelector(lm),
                              GlobalSelectIn("Puppy's name?", (HierarchyNode("C1", "Pets", layer=1),
                                                               HierarchyNode("E1", "Rex", ("dog",), "Ann's beagle"))),
                              JSON_MUST_FAIL, good="hierarchy"),
}


def test_the_corpus_is_large_and_varied():
    kinds = {reply.kind for reply in CORPUS}
    assert len(CORPUS) >= 300 and len(kinds) >= 15


# -- well-typed outputs ------------------------------------------------------------------------
def check_typed(value: Any, hint: Any, where: str) -> None:
    """``value`` is what ``hint`` declares (dataclasses field by field); every string in it
    encodes as UTF-8 (no lone surrogate reaches a tokenizer)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        _check_strings(value, where)
    elif origin in (typing.Union, types.UnionType):
        for option in args:
            try:
                check_typed(value, option, where)
                return
            except AssertionError:
                continue
        raise AssertionError(f"{where}: {value!r:.80} is none of {args}")
    elif origin is typing.Literal:
        assert value in args, f"{where}: {value!r} not in {args}"
    elif origin is tuple:
        assert isinstance(value, tuple), f"{where}: {type(value).__name__} is not a tuple"
        if len(args) == 2 and args[1] is Ellipsis:
            for i, element in enumerate(value):
                check_typed(element, args[0], f"{where}[{i}]")
        else:
            assert len(value) == len(args), f"{where}: {len(value)} elements for {args}"
            for i, (element, inner) in enumerate(zip(value, args)):
                check_typed(element, inner, f"{where}[{i}]")
    elif origin is list:
        assert isinstance(value, list), f"{where}: {type(value).__name__} is not a list"
        for i, element in enumerate(value):
            check_typed(element, args[0] if args else Any, f"{where}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), f"{where}: {type(value).__name__} is not a dict"
        _check_strings(value, where)
    elif dataclasses.is_dataclass(hint):
        assert isinstance(value, hint), f"{where}: {type(value).__name__} is not {hint.__name__}"
        hints = typing.get_type_hints(hint)
        for field in dataclasses.fields(hint):
            check_typed(getattr(value, field.name), hints[field.name], f"{where}.{field.name}")
    elif hint is float:
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{where}: {value!r} is not a float"
    elif hint is int:
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is not an int"
    elif hint is str:
        assert isinstance(value, str), f"{where}: {value!r:.80} is not a str"
        _check_strings(value, where)
    elif isinstance(hint, type):
        assert isinstance(value, hint), f"{where}: {type(value).__name__} is not {hint.__name__}"


def _check_strings(value: Any, where: str) -> None:
    if isinstance(value, str):
        value.encode("utf-8")  # raises on a lone surrogate
    elif isinstance(value, dict):
        for key, inner in value.items():
            _check_strings(key, where)
            _check_strings(inner, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for inner in value:
            _check_strings(inner, where)
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            _check_strings(getattr(value, field.name), f"{where}.{field.name}")


def test_the_type_check_can_fail():
    from memlab.stages.event.base import EventOut

    with pytest.raises(AssertionError):
        check_typed(EventOut(entities=(5,)), EventOut, "out")  # type: ignore[arg-type]
    with pytest.raises(UnicodeEncodeError):
        check_typed(EventOut(summary="\ud83d"), EventOut, "out")


def test_the_time_check_flags_a_reply_that_is_slow_every_time_and_not_one_pause(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "LIMIT_S", 0.02)

    def busy(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    _, took = timed(lambda: busy(0.05))
    assert over_limit(lambda: busy(0.05), took) is not None
    assert over_limit(lambda: None, took) is None  # slow the first time only
    assert over_limit(lambda: busy(0.05), 0.01) is None


# -- every reply through every family --------------------------------------------------------------
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_malformed_reply_costs_only_its_own_call(family, caplog):
    spec = FAMILIES[family]
    lm = FuzzLM()
    stage = spec.make(lm)
    out_type = type(stage).Out
    problems: list[str] = []
    caplog.set_level(logging.WARNING, logger="memlab.stage")
    for n, reply in enumerate(CORPUS):
        lm.reply, calls, failures = reply.text, lm.calls, len(stage.failures)
        caplog.clear()
        try:
            out, took = timed(lambda: stage([spec.item]))
        except Exception as e:  # noqa: BLE001 - the point of the test
            problems.append(f"#{n} {reply.kind}: raised {type(e).__name__}: {e!s:.120}")
            continue
        where = f"#{n} {reply.kind} {reply.text[:60]!r}"
        try:
            assert len(out) == 1
            check_typed(out[0], out_type, "out")
        except (AssertionError, UnicodeEncodeError) as e:
            problems.append(f"{where}: badly typed output: {e!s:.200}")
        counted = len(stage.failures) - failures
        retried = lm.calls - calls > 1
        if counted != (1 if retried else 0):
            problems.append(f"{where}: {lm.calls - calls} calls but {counted} failures counted")
        if reply.kind in spec.must_fail and not counted:
            problems.append(f"{where}: accepted ({out[0]!r:.120})")
        if any("parse raised" in record.getMessage() for record in caplog.records):
            problems.append(f"{where}: the parser raised something else than ParseError")
        if (cost := over_limit(lambda: stage([spec.item]), took)) is not None:  # last: it calls again
            problems.append(f"{where}: took {cost:.1f} s")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


# -- replies with 100,000 items ----------------------------------------------------------------------
MANY = 100_000


def _many_items(good: Any) -> list[str]:
    """``good`` with each of its lists (at any depth, each in turn) holding ``MANY`` copies of its
    first item; for a reply keyed by numbers ("verdicts"), ``MANY`` keys; and with an extra key
    holding ``MANY`` items."""
    variants: list[Any] = []

    def walk(node: Any, path: tuple) -> None:
        if isinstance(node, list) and node:
            variants.append((path, [node[0]] * MANY))
            walk(node[0], (*path, 0))
        elif isinstance(node, dict):
            for key, value in node.items():
                walk(value, (*path, key))

    walk(good, ())
    out = []
    for path, crowd in variants:
        doc = json.loads(json.dumps(good))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if path:
            parent[path[-1]] = crowd
        else:
            doc = crowd
        out.append(json.dumps(doc))
    if isinstance(good, dict) and good and all(key.isdigit() for key in good):
        out.append(json.dumps({str(i): next(iter(good.values())) for i in range(MANY)}))
    if isinstance(good, dict):  # beside the fields the reply should hold, a key it should not
        out.append(json.dumps({**good, "notes": ["x"] * MANY}))
    return out


MANY_TEXT: dict[str, list[str]] = {
    "subgoals": ["\n".join(f"Sub-goal {i}: Find the name of Ann's puppy" for i in range(1, MANY + 1))],
    "selected": ["Selected Nodes: [" + ", ".join(["N1", "N2"] * (MANY // 2)) + "]"],
    "refined": ["New Query: When did Ann adopt Rex?\nTarget Sub-goals: " + ", ".join(["1"] * MANY)],
    "navigation": ["ACTION: EXPAND\nNEXT_NODES: [" + ", ".join(["N2"] * MANY) + "]\nSATISFIED_SUBGOALS: "
                   + ", ".join(["1"] * MANY)],
    "answer": [", ".join(["Rex"] * MANY)],
    "cot_answer": ["\n".join(["Ann adopted a puppy named Rex."] * MANY) + "\nAnswer: " + ", ".join(["Rex"] * MANY)],
}


def many_item_replies(family: Family) -> list[str]:
    return _many_items(GOOD[family.good]) if family.good in GOOD else MANY_TEXT[family.good]


def test_every_family_names_a_well_formed_reply_that_it_accepts():
    for name, family in FAMILIES.items():
        lm = FuzzLM()
        lm.reply = json.dumps(GOOD[family.good]) if family.good in GOOD else GOOD_TEXT[family.good]
        stage = family.make(lm)
        stage([family.item])
        assert not stage.failures, f"{name}: its good reply failed: {stage.failures[0].error}"
        assert many_item_replies(family), name


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_reply_with_100000_items_costs_only_its_own_call(family, caplog):
    """Every list a family's reply may hold, given 100,000 items, is refused (or cut to the
    family's bound) within the per-reply limit, and the output stays well typed."""
    spec = FAMILIES[family]
    lm = FuzzLM()
    stage = spec.make(lm)
    caplog.set_level(logging.ERROR, logger="memlab.stage")
    problems = []
    for reply in many_item_replies(spec):
        lm.reply = reply
        out, took = timed(lambda: stage([spec.item]))
        if (cost := over_limit(lambda: stage([spec.item]), took)) is not None:
            problems.append(f"{reply[:80]!r}: took {cost:.1f} s")
        check_typed(out[0], type(stage).Out, "out")
    assert not problems, "\n".join(problems)


# -- whole runs with injected bad replies ---------------------------------------------------------
class InjectingLM(LM):
    """Replies with the next of ``bad`` to every request but each ``good_every``-th (all of them
    when it is None), which gets a plausible reply for its schema (``plausible``); thread-safe
    (MAGMA consolidates in a background thread)."""

    def __init__(self, bad: list[str], good_every: int | None = None) -> None:
        super().__init__(cache=None)
        self.bad, self.good_every, self.calls, self.injected = bad, good_every, 0, 0
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return "injecting"

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        out = []
        for request in requests:
            with self._lock:
                self.calls += 1
                good = self.good_every is not None and self.calls % self.good_every == 0
                text = plausible(request) if good else self.bad[self.injected % len(self.bad)]
                self.injected += not good
            out.append(Completion(text, 1, 1, 0.0, "injecting"))
        return out


def plausible(request: ChatRequest) -> str:
    """A well-formed reply for the request: the ``GOOD`` reply whose keys its schema asks for."""
    keys = set((request.json_schema or {}).get("properties", {}))
    for family, good in GOOD.items():
        if keys and keys == set(good):
            return json.dumps(good)
    if "CORRECT" in request.messages[-1]["content"]:
        return json.dumps(GOOD["judge"])
    if "score" in request.messages[-1]["content"].lower() and "reasoning" in request.messages[-1]["content"]:
        return json.dumps(GOOD["grader"])
    return "Reasoning done.\nAnswer: Rex"


def _swap_models(pipeline, lm: LM) -> None:
    """Every LM of the config-built pipeline becomes ``lm``, every embedder the hashing one."""
    embedder = HashingEmbedder()
    for module in pipeline.modules():
        for attr, value in list(vars(module).items()):
            if isinstance(value, LM):
                setattr(module, attr, lm)
            elif isinstance(value, Embedder):
                setattr(module, attr, embedder)


def _round_robin(replies: list[Reply]) -> list[str]:
    """The replies one kind after another (a reply of every kind, then the next of every kind ...),
    the longest of each kind first, so that even a short run meets every kind at its worst."""
    by_kind: dict[str, list[str]] = {}
    for reply in sorted(replies, key=lambda r: -len(r.text)):
        by_kind.setdefault(reply.kind, []).append(reply.text)
    longest = max(len(texts) for texts in by_kind.values())
    return [texts[i] for i in range(longest) for texts in by_kind.values() if i < len(texts)]


#: Bad replies for whole runs: every kind, but no megabyte ones (a run makes about a hundred calls).
RUN_REPLIES = _round_robin([r for r in CORPUS if len(r.text) < 20_000])


@pytest.mark.parametrize("config,good_every", [("simplemem", None), ("simplemem", 3), ("magma", None), ("magma", 3),
                                               ("emem", None), ("emem_g", 3), ("rag_turns", None)])
def test_whole_runs_with_injected_bad_replies_drop_nothing_and_count_every_failure(tmp_path, config, good_every):
    conversation = first_sessions(load_sample()[0], 2)
    lm = InjectingLM(RUN_REPLIES, good_every)
    pipeline, _, _ = build_pipeline(REPO / "configs" / "pipelines" / f"{config}.yaml", [])
    _swap_models(pipeline, lm)
    judge_lm = InjectingLM(RUN_REPLIES, good_every)
    judge = MagmaGraderJudge(judge_lm) if config.startswith("emem") else CorrectWrongJudge(judge_lm)
    options = RunOptions(max_questions=4, progress=False)
    metrics = run_benchmark(pipeline, [conversation], tmp_path, options, judge=judge)
    assert metrics["build_errors"] == {} and metrics["stopped"] is None  # no conversation dropped, no abort
    assert metrics["n_questions"] == 4
    # JSON lines end at "\n" only: a prediction may hold U+2028 or \x1c, which splitlines() splits on.
    rows = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().split("\n") if line]
    assert len(rows) == 4 and all(row["prediction"] is not None for row in rows)
    # ... nor an event of MAGMA's slow path, nor a verdict: no step raised
    assert not any(stats.get("failed_steps") or stats.get("errors") for stats in metrics["memory"].values())
    assert not any((row["error"] or "").startswith("judge") for row in rows)
    # Every call that ended without a usable reply, the judge's included, is in metrics.json.
    expected = Counter(f.stage for f in (*pipeline.llm_usage().failures, *judge.failures))
    assert lm.injected and judge_lm.injected and sum(expected.values()) > 0
    assert metrics["failures"] == dict(expected)
    assert any(f.stage == type(judge).__name__ for f in judge.failures)
