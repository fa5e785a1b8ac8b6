"""Describe family: an episode and the entities it names -> each entity's summary and tag
(Mnemis 2.1: "each entity's summary, tag, and episode_idx are extracted according to the
episode context"; ``episode_idx`` is kept in code).

Contract
--------
* One ``EntityDescription`` per ``DescribeIn.names``, in order, ``name`` as given.
* ``summary``: a concise contextual description; given a ``previous`` summary, the new one
  updates it with what the episode adds (an entity seen again keeps what was known).
* ``tags``: at most 5 descriptors of at most 3 words each (the paper's tag rule, appendix D),
  enforced in code.
* A name the reply leaves out keeps its previous summary and no tags; a failed call yields
  that for every name, with ``error`` set (counted failure).
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage

#: Appendix D: "each descriptor maximum 3 words, maximum 5 descriptors".
MAX_TAGS = 5
MAX_TAG_WORDS = 3


@dataclass(frozen=True)
class DescribeIn:
    episode: str
    names: tuple[str, ...]
    #: The current summary of each name ("" for a new entity), aligned with ``names``.
    previous: tuple[str, ...] = ()


@dataclass(frozen=True)
class EntityDescription:
    name: str
    summary: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class DescribeOut:
    descriptions: tuple[EntityDescription, ...] = ()
    error: str | None = None


def clip_tags(tags: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The tag rule: at most ``MAX_TAGS`` descriptors, each cut to ``MAX_TAG_WORDS`` words."""
    clipped = (" ".join(str(tag).split()[:MAX_TAG_WORDS]) for tag in tags)
    return tuple(dict.fromkeys(t for t in clipped if t))[:MAX_TAGS]


def kept_descriptions(item: DescribeIn) -> tuple[EntityDescription, ...]:
    """Every name with its previous summary and no tags (what a failed call leaves)."""
    previous = item.previous or ("",) * len(item.names)
    return tuple(EntityDescription(name, summary) for name, summary in zip(item.names, previous))


class EntityDescriber(Stage[DescribeIn, DescribeOut]):
    """Base class of the describe family (``In = DescribeIn``, ``Out = DescribeOut``)."""

    In = DescribeIn
    Out = DescribeOut
