"""Reading a MAGMA memory by hand: its causal links listed for checking. A person sets each row's
``hand_checked_causal`` to true or false after reading the two events; the file is the
precision's evidence (BENCHMARKS.md, "Issue 40")."""

from __future__ import annotations

import random
from typing import Any

from memlab.pipelines.magma.memory import MagmaMemory


def causal_links(memory: MagmaMemory, conversation_id: str) -> list[dict[str, Any]]:
    """Every causal edge of ``memory`` as ``{conversation, cause, effect, score, cause_text,
    effect_text, hand_checked_causal: None}``."""
    return [{"conversation": conversation_id, "cause": cause, "effect": effect, "score": data.get("weight"),
             "cause_text": memory.unit(cause).text, "effect_text": memory.unit(effect).text,
             "hand_checked_causal": None}
            for cause, effect, data in memory.graph.edges("causal")]


def sample_links(rows: list[dict[str, Any]], sample: int | None, seed: int = 0) -> list[dict[str, Any]]:
    """``sample`` of ``rows`` drawn at random with ``seed`` (None, or not fewer than the rows: all)."""
    return rows if sample is None or sample >= len(rows) else random.Random(seed).sample(rows, sample)
