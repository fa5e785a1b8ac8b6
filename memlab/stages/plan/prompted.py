"""Prompted planner: SimpleMem's planning prompt (appendix A.2) -> a ``PlanOut``.

The complexity the model assigns sets the depth: LOW -> ``min_depth``, HIGH ->
``max_depth`` (Table 7's retrieval range [3, 20]; section 3.1: k_min = 3 for simple lookups,
k_max = 20 for complex reasoning). Parsing is lenient where that is safe: the paper's key
``temporalConstraints`` and ``temporal_constraints`` are both read; a time range that does
not parse, or whose start is after its end, is dropped; a date-only end covers its whole
day; an empty semantic query is the query itself; lexical keys are capped at ``max_keys``.

For the weak local model two guards (memlab's, not the paper's): ``temporalConstraints`` is
nullable in the request schema, since a schema that requires a range makes a constrained
decoder invent one for a query with no time in it; and a plan that copies the prompt's own
example (its date range, its lexical keys or its semantic query, read from the template's
OUTPUT FORMAT example) is a ``ParseError``, so it is retried and then falls back rather than
steering retrieval to the example's people and month. A copied key or year that the query
itself names is not a copy. The retry is a fresh call on ``retry_prompt`` (A.2 with its
example replaced by a list of the keys): the 1.5B model copied the example again when told
so, on nearly every conv-26 question. ``retry_prompt=None`` retries with a follow-up message.
"""

from __future__ import annotations

import json
from datetime import datetime, time
from typing import Any

from memlab.bounds import NonNegativeFloat, NonNegativeInt, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import PromptTemplate, load_prompt
from memlab.stage import PromptedStage
from memlab.stages.compress.base import parse_timestamp
from memlab.stages.plan.base import COMPLEXITY_LEVELS, PlanIn, Planner, PlanOut

PARSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"complexity": {"type": "string"}},
    "required": ["complexity"],
}


def request_schema(max_keys: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "complexity": {"type": "string", "enum": list(COMPLEXITY_LEVELS)},
            "retrieval_rationale": {"type": "string"},
            "lexical_keys": {"type": "array", "items": {"type": "string"}, "maxItems": max_keys},
            "temporalConstraints": {
                "anyOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "properties": {"start": {"type": "string"}, "end": {"type": "string"}},
                        "required": ["start", "end"],
                    },
                ]
            },
            "semantic_query": {"type": "string"},
        },
        "required": ["complexity", "retrieval_rationale", "lexical_keys", "temporalConstraints", "semantic_query"],
    }


def time_range(value: Any) -> tuple[datetime | None, datetime | None]:
    """``(start, end)`` from the plan's temporal constraints; (None, None) when unusable."""
    if not isinstance(value, dict):
        return None, None
    start, end = parse_timestamp(value.get("start")), parse_timestamp(value.get("end"))
    raw_end = str(value.get("end") or "")
    if end is not None and "T" not in raw_end and end.time() == time(0):
        end = datetime.combine(end.date(), time(23, 59, 59))
    if start is not None and end is not None and start > end:
        return None, None
    return start, end


def prompt_example(body: str) -> dict[str, Any]:
    """The example plan a template shows after ``OUTPUT FORMAT``; ``{}`` when it has none."""
    _, marker, rest = body.partition("OUTPUT FORMAT")
    start = rest.find("{")
    if not marker or start < 0:
        return {}
    try:
        example, _ = json.JSONDecoder().raw_decode(rest[start:])
    except json.JSONDecodeError:
        return {}
    return example if isinstance(example, dict) else {}


def _norm(text: Any) -> str:
    return " ".join(str(text).lower().split())


def copied_from_example(data: dict[str, Any], example: dict[str, Any], query: str) -> str | None:
    """Why ``data`` looks copied from the prompt's ``example`` (None when it does not)."""
    if not example:
        return None
    query_text = _norm(query)
    example_keys = {_norm(k) for k in example.get("lexical_keys") or [] if _norm(k)}
    keys = data.get("lexical_keys") if isinstance(data.get("lexical_keys"), list) else []
    copied = sorted({_norm(k) for k in keys} & example_keys - {k for k in example_keys if k in query_text})
    if copied:
        return f"lexical keys {copied} are the prompt example's, not the query's"
    if _norm(data.get("semantic_query") or "") == _norm(example.get("semantic_query") or "") != "":
        return "semantic query is the prompt example's"
    ours = time_range(data.get("temporalConstraints") or data.get("temporal_constraints"))
    theirs = time_range(example.get("temporalConstraints"))
    if ours != (None, None) and ours == theirs and str(theirs[0].year) not in query_text:
        return "temporal constraints are the prompt example's range"
    return None


class PromptedPlanner(PromptedStage, Planner):
    def __init__(
        self,
        lm: LM,
        prompt: str = "simplemem/plan",
        retry_prompt: str | None = "simplemem/plan_retry",
        min_depth: PositiveInt = 3,
        max_depth: PositiveInt = 20,
        max_keys: NonNegativeInt = 6,
        max_tokens: PositiveInt = 200,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        if not 1 <= min_depth <= max_depth:
            raise ValueError(f"need 1 <= min_depth <= max_depth, got {min_depth}, {max_depth}")
        self.prompt = load_prompt(prompt)
        self.retry_prompt = load_prompt(retry_prompt) if retry_prompt else None
        self.example = prompt_example(self.prompt.body)
        self.min_depth = min_depth
        self.max_depth = max_depth
        self.max_keys = max_keys

    def depth_for(self, complexity: str) -> int:
        return self.min_depth if complexity == "LOW" else self.max_depth

    @staticmethod
    def query_text(item: PlanIn) -> str:
        if item.question_date is None:
            return item.query
        return f"{item.query} (asked on {item.question_date.isoformat()})"

    def render(self, item: PlanIn) -> ChatRequest:
        return self.render_prompt(self.prompt, item)

    def render_prompt(self, prompt: PromptTemplate, item: PlanIn) -> ChatRequest:
        return self.request(prompt.render(user_query=self.query_text(item)), json_schema=request_schema(self.max_keys))

    def parse(self, text: str, item: PlanIn) -> PlanOut:
        data = parse_json(text, PARSE_SCHEMA)
        complexity = str(data["complexity"]).strip().upper()
        if complexity not in COMPLEXITY_LEVELS:
            raise ParseError(f"complexity must be one of {COMPLEXITY_LEVELS}, got {data['complexity']!r}")
        copy = copied_from_example(data, self.example, self.query_text(item))
        if copy is not None:
            raise ParseError(f"plan copies the prompt's example: {copy}")
        keys_raw = data.get("lexical_keys") if isinstance(data.get("lexical_keys"), list) else []
        keys = tuple(dict.fromkeys(str(k).strip() for k in keys_raw if str(k).strip()))[: self.max_keys]
        constraints = data.get("temporalConstraints") or data.get("temporal_constraints")
        start, end = time_range(constraints)
        semantic = " ".join(str(data.get("semantic_query") or "").split()) or item.query
        return PlanOut(
            semantic_query=semantic,
            lexical_keys=keys,
            depth=self.depth_for(complexity),
            complexity=complexity,
            start=start,
            end=end,
            rationale=str(data.get("retrieval_rationale") or ""),
        )

    def fallback(self, item: PlanIn, error: str) -> PlanOut:
        # No plan: search with the query itself, as deep as a complex query would go.
        return PlanOut(semantic_query=item.query, lexical_keys=(), depth=self.max_depth, complexity="HIGH", error=error)
