"""What building a memory costs, conversation by conversation, without asking it a question.

``build_costs`` builds each conversation's memory with a pipeline and reports, per conversation,
its turns and sessions, the build seconds (wall time less suspensions, ``memlab.clock``: the build
alone), the LLM calls (cached or not), uncached calls and tokens the build made, summed over every
LM of the pipeline (``Pipeline.llm_usage``), and the memory's own statistics (``Pipeline.memory_stats``, its ``structure``
block included: what formed, and what is degenerate). ``eval/time_build.py`` prints them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from memlab.clock import active_seconds
from memlab.pipelines.base import Pipeline
from memlab.types import Conversation

USAGE_KEYS = ("llm_calls", "uncached_calls", "prompt_tokens", "completion_tokens")


def build_costs(pipeline: Pipeline, conversations: Iterable[Conversation]) -> Iterator[dict[str, Any]]:
    """One record per conversation, as soon as its memory is built (module docstring)."""
    for conversation in conversations:
        before = pipeline.llm_usage()
        started = active_seconds()
        memory = pipeline.build(conversation.history())
        seconds = active_seconds() - started
        spent = pipeline.llm_usage().since(before).total
        usage = {key: spent[key] for key in USAGE_KEYS}
        yield {"conversation": conversation.id, "turns": sum(len(s.turns) for s in conversation.sessions),
               "sessions": len(conversation.sessions), "build_seconds": round(seconds, 1), **usage,
               "memory": pipeline.memory_stats(memory)}
