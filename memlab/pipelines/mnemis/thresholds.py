"""Carry Mnemis's similarity thresholds from one embedder to another, on a saved memory.

Mnemis compares embeddings three times while it builds (2.1): an entity name with the names
already there (``entity_threshold``), a fact with the facts on the same two entities
(``fact_threshold``) and, for invalidation candidates, a fact's predicate (the fact less its two
entity names) with the predicates of facts sharing an entity (``predicate_similarity``). Each
threshold was set for the reference config's embedder; for another embedder the same value
is not the same cut. On the memory's own names, facts and predicates, ``carried`` gives for each
comparison the sample's size, the percentile the reference threshold has under the
reference embedder and the cosine at that percentile under the target embedder: the
threshold of the same selectivity (``memlab.embed.similarity``). It also gives the cosines of
hand-written predicate pairs (conflicts, which must reach ``predicate_similarity``, and a topic
neighbour, which must not) under both embedders, to check the carried value by reading.

The names and facts of a saved memory are what de-duplication left: pairs above a de-duplication
threshold were merged, so the sample's top tail is thin, and a threshold no pair reaches is not
carried (said with the reason). ``eval/mnemis_thresholds.py`` prints it for two configs.
"""

from __future__ import annotations

import itertools

import numpy as np

from memlab.embed.similarity import percentile_of, unit_rows, value_at
from memlab.pipelines.mnemis.memory import MnemisMemory

#: (predicate, predicate, kind): a conflict must be shown to the contradiction detector, a
#: neighbour need not be (conv-26's "went to a support group" closed by "is keen on counseling").
PREDICATE_PAIRS = (
    ("lives in", "moved to", "conflict"),
    ("is dating", "broke up with", "conflict"),
    ("works at", "quit her job at", "conflict"),
    ("plans to visit", "cancelled the trip to", "conflict"),
    ("went to a support group", "is keen on counseling", "neighbour"),
)


def nearest_other(vectors: np.ndarray) -> np.ndarray:
    """Each row's highest cosine to another row."""
    unit = unit_rows(vectors)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    return sims.max(axis=1) if len(unit) > 1 else np.zeros(0, dtype=np.float32)


def samples(memory: MnemisMemory, encode) -> dict[str, np.ndarray]:
    """The three comparisons' cosines under ``encode``, on the memory's own texts."""
    names = [memory.graph.node(e)["name"] for e in memory.entities.units]
    facts = list(memory.facts.units)
    fact_vectors = unit_rows(encode([memory.facts.get(f).text for f in facts])) if facts else None
    predicate_vectors = unit_rows(encode([memory.predicate(f) for f in facts])) if facts else None
    same_pair, shared_entity = [], []
    for (i, a), (j, b) in itertools.combinations(enumerate(facts), 2):
        ends_a, ends_b = set(memory.fact_ends(a)), set(memory.fact_ends(b))
        if ends_a == ends_b:
            same_pair.append(float(fact_vectors[i] @ fact_vectors[j]))
        if ends_a & ends_b:
            shared_entity.append(float(predicate_vectors[i] @ predicate_vectors[j]))
    return {"entity_threshold": nearest_other(encode(names)) if len(names) > 1 else np.zeros(0),
            "fact_threshold": np.asarray(same_pair), "predicate_similarity": np.asarray(shared_entity)}


def carried(memory: MnemisMemory, reference, target) -> dict:
    """Each threshold of the ``reference`` Mnemis carried onto the ``target`` Mnemis's embedder at
    the same selectivity on ``memory``'s texts, and the hand-written predicate pairs' cosines under
    both (module docstring)."""
    found: dict = {"reference": reference.embedder.identity, "target": target.embedder.identity, "thresholds": {}}
    ours, theirs = samples(memory, reference.embedder.encode), samples(memory, target.embedder.encode)
    for key in ours:
        value = getattr(reference.construction, key)  # a threshold of ConstructionSettings
        if not len(ours[key]):
            found["thresholds"][key] = {"pairs": 0, "reference": value, "target": None}
            continue
        percentile = percentile_of(value, ours[key])
        row = {"pairs": len(ours[key]), "reference": value, "percentile": round(percentile, 1)}
        if percentile >= 100.0:  # nothing reaches the threshold: a de-duplicated memory's own texts
            row.update(target=None, why="no pair of the memory reaches the reference threshold (what de-duplication "
                                        "left), so the sample cannot place it")
        else:
            row["target"] = round(value_at(percentile, theirs[key]), 3)
        found["thresholds"][key] = row
    pairs = []
    for left, right, kind in PREDICATE_PAIRS:
        cosines = [float(np.dot(*unit_rows(m.encode([left, right])))) for m in (reference.embedder, target.embedder)]
        pairs.append({"pair": [left, right], "kind": kind, "reference": round(cosines[0], 3), "target": round(cosines[1], 3)})
    found["predicate_pairs"] = pairs
    return found
