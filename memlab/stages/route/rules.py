"""Rule-based router: the first label whose patterns match the question wins."""

from __future__ import annotations

import re

from memlab.stages.route.base import IntentRouter, RouteIn, RouteOut, query_signals
from memlab.stages.temporal import TemporalNormalizer

#: Patterns per intent, tried in order; a question matching none gets ``default_intent``.
DEFAULT_INTENT_RULES: dict[str, list[str]] = {
    "WHY": [r"\bwhy\b", r"\bwhat (?:caused|made|led|motivated|inspired)\b", r"\breasons?\b", r"\bbecause\b",
            r"\bhow come\b"],
    "WHEN": [r"\bwhen\b", r"\bwhat (?:date|day|time|year|month|week)\b", r"\bwhich (?:date|day|year|month|week)\b",
             r"\bhow long\b", r"\bhow many (?:days|weeks|months|years)\b", r"\b(?:before|after|since|until)\b"],
}
#: Patterns per question type (LoCoMo-style, for the answer prompt's instruction only).
DEFAULT_TYPE_RULES: dict[str, list[str]] = {
    "temporal": DEFAULT_INTENT_RULES["WHEN"],
    "open-domain": [r"\b(?:would|could|might|likely|probably)\b"],
    "multi-hop": [r"\b(?:both|all|common|together|and (?:her|his|their))\b", r"\bwhat (?:kinds?|types?) of\b",
                  r"\bhow many\b"],
}


class RuleRouter(IntentRouter):
    """Regular-expression rules (case-insensitive) for the intent and the question type.

    ``intent_rules`` / ``type_rules`` map a label to patterns; labels are tried in the
    mapping's order; ``default_intent`` / ``default_type`` apply when none matches
    (``default_type=None`` leaves the type unset). ``normalizer`` resolves the time window.
    """

    def __init__(
        self,
        intent_rules: dict[str, list[str]] | None = None,
        default_intent: str = "ENTITY",
        type_rules: dict[str, list[str]] | None = None,
        default_type: str | None = "single-hop",
        normalizer: TemporalNormalizer | None = None,
    ) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.intent_rules = _compile(DEFAULT_INTENT_RULES if intent_rules is None else intent_rules, "intent_rules")
        self.type_rules = _compile(DEFAULT_TYPE_RULES if type_rules is None else type_rules, "type_rules")
        self.default_intent = default_intent
        self.default_type = default_type

    @property
    def intents(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.intent_rules, self.default_intent]))

    def route(self, item: RouteIn) -> RouteOut:
        window, keywords = query_signals(item, self.normalizer)
        return RouteOut(
            intent=_first_match(self.intent_rules, item.question, self.default_intent),
            question_type=_first_match(self.type_rules, item.question, self.default_type),
            time_window=window,
            keywords=keywords,
        )

    def forward(self, batch: list[RouteIn]) -> list[RouteOut]:
        return [self.route(item) for item in batch]


def _compile(rules: dict[str, list[str]], name: str) -> dict[str, list[re.Pattern]]:
    compiled = {}
    for label, patterns in rules.items():
        try:
            compiled[label] = [re.compile(p, re.IGNORECASE) for p in patterns]
        except re.error as e:
            raise ValueError(f"{name}[{label!r}]: bad pattern ({e})") from None
    return compiled


def _first_match(rules: dict[str, list[re.Pattern]], text: str, default: str | None) -> str | None:
    for label, patterns in rules.items():
        if any(p.search(text) for p in patterns):
            return label
    return default
