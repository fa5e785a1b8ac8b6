"""Mnemis's node selection prompt (appendix D, ``NODE_SELECTION_PROMPT_TEMPLATE``): one
JSON-constrained call per level of the descent (or per batch of a wide level)."""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.jsonparse import list_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.global_select.base import (
    GlobalSelectIn,
    GlobalSelector,
    GlobalSelectOut,
    HierarchyNode,
    checked_selections,
)


def selection_schema(keys: tuple[str, ...] | None) -> dict:
    uuid: dict = {"type": "string"} if keys is None else {"enum": list(keys)}
    return list_schema({"type": "object", "properties": {"name": {"type": "string", "maxLength": 80}, "uuid": uuid,
                                                         "get_all_children": {"type": "boolean"}},
                        "required": ["name", "uuid", "get_all_children"]}, key="selected")


def node_line(node: HierarchyNode) -> str:
    """What the selector sees of a node: the paper's "category names and tags"."""
    tags = f" | tags: {', '.join(node.tags)}" if node.tags else ""
    return f"- uuid: {node.key} | name: {node.name}{tags}"


class PromptedGlobalSelector(PromptedStage, GlobalSelector):
    """One call on ``prompt`` ({query}, {nodes_info}); the schema restricts ``uuid`` to the
    given keys, and the reply is cut to the contract (``checked_selections``)."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "mnemis/select_nodes",
        max_tokens: PositiveInt = 384,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)

    def render(self, item: GlobalSelectIn) -> ChatRequest:
        text = self.prompt.render(query=item.question, nodes_info="\n".join(node_line(n) for n in item.nodes))
        return self.request(text, json_schema=selection_schema(tuple(n.key for n in item.nodes)))

    def parse(self, text: str, item: GlobalSelectIn) -> GlobalSelectOut:
        rows = parse_json(text, selection_schema(None))["selected"]
        return GlobalSelectOut(checked_selections([(row["uuid"], row["get_all_children"]) for row in rows], item))

    def fallback(self, item: GlobalSelectIn, error: str) -> GlobalSelectOut:
        return GlobalSelectOut(error=error)

    def forward(self, batch: list[GlobalSelectIn]) -> list[GlobalSelectOut]:
        return self.forward_where(batch, lambda item: bool(item.nodes), lambda item: GlobalSelectOut())
