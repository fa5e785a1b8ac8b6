"""Mnemis's category prompt (appendix D, ``extract_category_nodes``): the published system
and user messages, one JSON-constrained call per batch of nodes; or, with ``refer_by="name"``,
memlab's variant that names the members instead of indexing them
(``mnemis/category_system_names``)."""

from __future__ import annotations

from typing import Literal

from memlab.bounds import NonNegativeFloat, PositiveInt, UnitFloat
from memlab.lm.base import LM
from memlab.lm.errors import ParseError, RefusedReplyError, RuleBrokenError
from memlab.lm.jsonparse import list_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.categorize.base import (
    MAX_CATEGORY_SHARE,
    RULED_BATCH,
    CategorizeIn,
    CategorizeOut,
    Categorizer,
    NodeCard,
    broken_rules,
    merged_categories,
)

_ROW = {"type": "object", "properties": {"category": {"type": "string", "maxLength": 60},
                                         "indexes": {"type": "array", "items": {"type": "integer"}}},
        "required": ["category", "indexes"]}
_NAMED_ROW = {"type": "object", "properties": {"category": {"type": "string", "maxLength": 60},
                                               "members": {"type": "array", "items": {"type": "string"}}},
              "required": ["category", "members"]}


def categories_schema(max_categories: int, n_nodes: int | None = None, max_share: float = 1.0) -> dict:
    """The reply's schema; with ``n_nodes``, a category's indexes are among the given nodes'
    (an enum): the 1.5B model otherwise counts on past the last node ("indexes": [23, 24, ...
    188, ...]) until the token limit cuts the reply. From ``RULED_BATCH`` nodes on, the share
    rule is in the grammar too: a category takes at most ``max_share`` of the nodes and a reply
    names at least two categories (the 1.5B model put all 37 nodes of a conv-26 batch in one)."""
    row = _ROW
    schema_min = 0
    if n_nodes is not None:
        most = n_nodes if n_nodes < RULED_BATCH else max(1, int(max_share * n_nodes))
        indexes = {"type": "array", "items": {"enum": list(range(n_nodes))}, "minItems": 1, "maxItems": most}
        row = {**_ROW, "properties": {**_ROW["properties"], "indexes": indexes}}
        schema_min = 2 if n_nodes >= RULED_BATCH else 1
    schema = list_schema(row, key="categories")
    schema["properties"]["categories"]["maxItems"] = max_categories
    if schema_min:
        schema["properties"]["categories"]["minItems"] = schema_min
    return schema


def card_line(index: int | None, card: NodeCard) -> str:
    """``3. Detroit: [city, travel destination]``: the prompt's "1. dog: [domestic animal]"
    (``- Detroit: [...]`` for a prompt that refers to nodes by name)."""
    return f"{'-' if index is None else f'{index}.'} {card.name}: [{', '.join(card.tags)}]"


def names_schema(max_categories: int, names: list[str], max_share: float = 1.0) -> dict:
    """The reply's schema when nodes are referred to by name: members among the batch's names
    (an enum: a name cannot be counted, only read), the share rule as for indexes."""
    schema = categories_schema(max_categories, len(names), max_share)
    row = schema["properties"]["categories"]["items"]
    members = {**row["properties"]["indexes"], "items": {"enum": list(dict.fromkeys(names))}}
    row["properties"] = {"category": row["properties"]["category"], "members": members}
    row["required"] = ["category", "members"]
    return schema


class PromptedCategorizer(PromptedStage, Categorizer):
    """Appendix D: ``system_prompt`` as the system message, ``prompt`` ({content},
    {existing_categories}, {layer}, {previous_layer}, {prev_example}) as the user message.

    The published reply is a bare JSON list of ``{"category", "indexes"}``; memlab's schema
    wraps it in ``{"categories": [...]}`` (what constrained decoders and OpenAI's structured
    outputs accept), and a bare list from an unconstrained backend is read as well. A reply
    that breaks a grouping rule (``broken_rules``, ``max_share``) is refused and retried once
    with the rule named (the family's contract).
    """

    def __init__(
        self,
        lm: LM,
        system_prompt: str = "mnemis/category_system",
        prompt: str = "mnemis/category_user",
        refer_by: Literal["index", "name"] = "index",
        max_categories: PositiveInt = 30,
        max_share: UnitFloat = MAX_CATEGORY_SHARE,
        max_tokens: PositiveInt = 768,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.system_prompt = load_prompt(system_prompt)
        self.prompt = load_prompt(prompt)
        self.refer_by = refer_by
        self.max_categories = max_categories
        self.max_share = max_share

    def render(self, item: CategorizeIn) -> ChatRequest:
        by_name = self.refer_by == "name"
        user = self.prompt.render(
            content="\n".join(card_line(None if by_name else i, card) for i, card in enumerate(item.nodes)),
            existing_categories="\n".join(f"- {card.name}: [{', '.join(card.tags)}]" for card in item.existing)
            or "(none)",
            layer=item.layer, previous_layer=item.layer - 1, prev_example=item.previous_example or "(none)")
        return self.request([{"role": "system", "content": self.system_prompt.render()},
                             {"role": "user", "content": user}],
                            json_schema=self.schema(item))

    def schema(self, item: CategorizeIn) -> dict:
        if self.refer_by == "name":
            return names_schema(self.max_categories, [card.name for card in item.nodes], self.max_share)
        return categories_schema(self.max_categories, len(item.nodes), self.max_share)

    def parse(self, text: str, item: CategorizeIn) -> CategorizeOut:
        if self.refer_by == "name":
            rows = parse_json(text, list_schema(_NAMED_ROW, key="categories"))["categories"]
            index = {}
            for i, card in enumerate(item.nodes):
                index.setdefault(card.name.casefold(), i)
            pairs = [(row["category"], [index[m.casefold()] for m in row["members"] if m.casefold() in index])
                     for row in rows]
        else:
            try:
                rows = parse_json(text, categories_schema(10_000))["categories"]
            except RefusedReplyError:  # a reply that contradicts itself or runs away is not read another way
                raise
            except ParseError:
                rows = parse_json(text, {"type": "array", "items": _ROW})
            pairs = [(row["category"], row["indexes"]) for row in rows]
        categories = merged_categories(pairs, len(item.nodes))
        if not categories:  # the nodes were given to be grouped: no group is no answer
            raise ParseError("no category has a member among the given node indexes" if rows else "no category")
        broken = broken_rules(categories, len(item.nodes), self.max_share)
        if broken:
            refused = {category for category, _ in broken}
            kept = tuple(c for c in categories if c not in refused)[:self.max_categories]
            raise RuleBrokenError("; ".join(rule for _, rule in broken), salvage=CategorizeOut(kept) if kept else None)
        return CategorizeOut(categories[:self.max_categories])

    def fallback(self, item: CategorizeIn, error: str) -> CategorizeOut:
        return CategorizeOut(error=error)

    def forward(self, batch: list[CategorizeIn]) -> list[CategorizeOut]:
        return self.forward_where(batch, lambda item: bool(item.nodes), lambda item: CategorizeOut())
