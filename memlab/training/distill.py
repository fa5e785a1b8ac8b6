"""The distillation family: a prompted stage's cached LM calls as (messages, completion) pairs,
to fine-tune a local model in its place (``distillation_examples``); calls whose prompt quotes a
held-out conversation (``conversation_texts``) are left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

import datasets

from memlab.training.supervision import dataset_with_card
from memlab.types import Conversation

if TYPE_CHECKING:
    from memlab.lm.cache import ResponseCache


DISTILLATION_FEATURES = datasets.Features(
    {
        "model": datasets.Value("string"),
        "messages": datasets.List({"role": datasets.Value("string"), "content": datasets.Value("string")}),
        "completion": datasets.Value("string"),
        "json_schema": datasets.Value("string"),
    }
)


def conversation_texts(conversations: Iterable[Conversation], min_chars: int = 20) -> list[str]:
    """The texts by which a prompt shows it was made from ``conversations``: every turn text of at
    least ``min_chars`` characters (shorter ones, "Thanks!", occur in any conversation) and every
    question text; for ``distillation_examples(exclude=...)``."""
    texts = []
    for conversation in conversations:
        texts += [turn.text for _, turn in conversation.turns() if len(turn.text.strip()) >= min_chars]
        texts += [question.text for question in conversation.questions]
    return texts


def _normalise_space(text: str) -> str:
    return " ".join(text.split())


def distillation_examples(
    cache: "ResponseCache", model: str | None = None, match: str | None = None, exclude: Iterable[str] = ()
) -> datasets.Dataset:
    """The cached calls of ``model`` (all models if None) as supervised (messages, completion) rows.

    ``match``: a regular expression searched in the request's first message, to keep one
    prompted stage's calls. Completions cut off by the token limit (``finish_reason ==
    "length"``) and empty ones are dropped (and counted in the card). ``exclude``: texts of
    held-out conversations (``conversation_texts``); a call whose messages contain any of them
    (whitespace-normalised) is dropped and counted in the card as "held out", since the cache
    also holds the calls a pipeline made on the evaluation conversations.
    """
    try:
        pattern = re.compile(match) if match is not None else None
    except re.error as e:
        raise ValueError(f"distillation_examples: bad match pattern {match!r} ({e})") from None
    excluded = {text for text in map(_normalise_space, exclude) if text}
    rows = []
    dropped = {"not_matching": 0, "held_out": 0, "truncated": 0, "empty": 0}
    for entry in cache.entries(model):
        messages = entry.request.messages
        if pattern is not None and not (messages and pattern.search(messages[0].get("content", ""))):
            dropped["not_matching"] += 1
        elif excluded and any(text in content for content in (_normalise_space(m.get("content", "")) for m in messages)
                              for text in excluded):
            dropped["held_out"] += 1
        elif entry.completion.finish_reason == "length":
            dropped["truncated"] += 1
        elif not entry.completion.text.strip():
            dropped["empty"] += 1
        else:
            schema = entry.request.json_schema
            rows.append({
                "model": entry.model,
                "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
                "completion": entry.completion.text,
                "json_schema": json.dumps(schema, sort_keys=True) if schema is not None else "",
            })
    card = f"""memlab distillation data (memlab.training.distill.distillation_examples).
Rows: one cached LM call: the request messages and the completion the teacher model produced (json_schema: the
request's constrained-decoding schema as JSON, "" if none). Source: {cache.path}; model: {model or "all"};
first-message pattern: {match!r}; excluded texts: {len(excluded)}. Kept {len(rows)}; dropped {dropped["not_matching"]} not matching,
{dropped["held_out"]} held out (their messages contain a text of an excluded conversation),
{dropped["truncated"]} cut off by the token limit, {dropped["empty"]} empty.
{_DROPPED_LINE}{json.dumps(dropped)}"""
    return dataset_with_card(rows, DISTILLATION_FEATURES, card)


_DROPPED_LINE = "Dropped (JSON): "


def distillation_dropped(dataset: datasets.Dataset) -> dict[str, int]:
    """The per-reason counts of calls ``distillation_examples`` dropped, as recorded in its card."""
    for line in (dataset.info.description or "").splitlines():
        if line.startswith(_DROPPED_LINE):
            return json.loads(line[len(_DROPPED_LINE):])
    raise ValueError("distillation_dropped: the dataset was not made by distillation_examples (no counts in its card)")
