"""Score CompassMem's cross-session links against LoCoMo's observations: are linked events about the same thing?

    python eval/fusion_vs_observations.py CONFIG [key=value ...] --data PATH --conversations ID[,ID...]
                                          [--percentile P] [--allow-training-overlap]

Builds each conversation's memory with CONFIG (a CompassMem config; use one whose construction
calls no LLM, or one whose calls are cached). Every event after the first session has an e*:
its most similar event of an earlier session (what fusion asks about). A pair (e*, event) is
*related by the observations* when an observation citing a turn of one and an observation
citing a turn of the other are as similar as the ``--percentile`` (default 90) of cross-session
observation pairs, speaker names removed (the rule and threshold of
``memlab.training.observation_boundaries``, embedder all-MiniLM-L6-v2). The annotations are read
here, by the evaluation, never by the pipeline. Prints per conversation and pooled: pairs,
pairs related by the observations (the base rate), pairs the memory links across sessions, and
the links' precision and recall against the observations. Pairs with no observation on either
side are left out.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np

from memlab.embed import SentenceTransformerEmbedder
from memlab.embed.similarity import cross_group_percentile, unit_rows
from memlab.eval.scripting import ScriptError, add_build_arguments, pipeline_and_conversations, reports_script_errors
from memlab.memory.structure import session_of
from memlab.training.observation_boundaries import without_names


def observation_vectors(conversation, embedder) -> tuple[dict[str, list[int]], np.ndarray, list[str]]:
    """Per turn id, the indices of the observations citing it; the observations' unit vectors
    (speaker names removed); each one's session id."""
    by_turn: dict[str, list[int]] = defaultdict(list)
    texts, sessions = [], []
    for annotation in conversation.annotations:
        for observation in annotation.observations:
            for turn_id in observation.source_ids:
                by_turn[turn_id].append(len(texts))
            texts.append(without_names(observation.text, conversation.speakers))
            sessions.append(annotation.session_id)
    return by_turn, unit_rows(embedder.encode(texts)), sessions


@reports_script_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(parser, sessions=False)
    parser.add_argument("--percentile", type=float, default=90.0)
    args = parser.parse_args(argv)
    pipeline, conversations = pipeline_and_conversations(args)
    if any(not c.annotations for c in conversations):
        raise ScriptError("every conversation needs LoCoMo's observation annotations")
    embedder = SentenceTransformerEmbedder()
    pooled = defaultdict(int)
    for conversation in conversations:
        by_turn, facts, fact_sessions = observation_vectors(conversation, embedder)
        threshold = cross_group_percentile(facts, fact_sessions, args.percentile)
        memory = pipeline.build(conversation.history())
        events = [memory.unit(i) for i in memory.events()]
        order = {s.id: n for n, s in enumerate(conversation.sessions)}
        step = {e.id: order.get(session_of(e), -1) for e in events}
        vectors = unit_rows(memory.index.vectors([e.id for e in events]))
        linked = {frozenset((u, v)) for u, v, _ in memory.graph.edges("relation")}
        counts = defaultdict(int)
        for i, event in enumerate(events):
            earlier = [j for j, other in enumerate(events) if step[other.id] < step[event.id]]
            if not earlier:
                continue
            nearest = earlier[int(np.argmax(vectors[earlier] @ vectors[i]))]
            mine = [k for t in event.source_ids for k in by_turn.get(t, ())]
            theirs = [k for t in events[nearest].source_ids for k in by_turn.get(t, ())]
            if not mine or not theirs:
                counts["no_observation"] += 1
                continue
            related = float((facts[mine] @ facts[theirs].T).max()) >= threshold
            is_linked = frozenset((event.id, events[nearest].id)) in linked
            counts["pairs"] += 1
            counts["related"] += related
            counts["linked"] += is_linked
            counts["linked_related"] += is_linked and related
        row = {"conversation": conversation.id, "threshold": round(threshold, 4), **counts}
        print(json.dumps(summary(row)), flush=True)
        for key, value in counts.items():
            pooled[key] += value
    print(json.dumps(summary({"conversation": "pooled", **pooled})))
    return 0


def summary(row: dict) -> dict:
    """``row``'s counts with the base rate, and the links' precision and recall against the observations."""
    pairs, related, linked, hits = (row.get(k, 0) for k in ("pairs", "related", "linked", "linked_related"))
    return {**row, "base_rate": round(related / pairs, 3) if pairs else None,
            "precision": round(hits / linked, 3) if linked else None,
            "recall": round(hits / related, 3) if related else None}


if __name__ == "__main__":
    raise SystemExit(main())
