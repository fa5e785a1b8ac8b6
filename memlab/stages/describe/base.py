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
* One description per entity: two names given the same summary (the 1.5B model wrote one
  summary and tags for both speakers of a conv-26 episode) break the rule (``broken_rules``).
  A prompted describer refuses the reply, retries once naming it and counts it in
  ``rejected_replies``; after a second refusal a shared summary is kept only for the one name
  it mentions, and the others keep their previous summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage
from memlab.stages.extraction import one_line

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


def _key(summary: str) -> str:
    return one_line(summary.casefold())


def shared_summaries(descriptions: tuple[EntityDescription, ...]) -> dict[str, list[EntityDescription]]:
    """Summaries (normalised) given to more than one name, with the descriptions that carry them."""
    by_summary: dict[str, list[EntityDescription]] = {}
    for description in descriptions:
        if description.summary:
            by_summary.setdefault(_key(description.summary), []).append(description)
    return {key: found for key, found in by_summary.items() if len({d.name for d in found}) > 1}


def broken_rules(descriptions: tuple[EntityDescription, ...]) -> list[str]:
    """The rules the descriptions break, in words (empty: none)."""
    return [f"{', '.join(repr(d.name) for d in found)} were given the same summary; describe each entity "
            f"by what the messages say about that entity alone" for found in shared_summaries(descriptions).values()]


def without_shared_summaries(item: DescribeIn, descriptions: tuple[EntityDescription, ...]
                             ) -> tuple[EntityDescription, ...]:
    """The salvage of a reply that shared summaries: a shared summary stays with the one name it
    mentions (if exactly one), every other name gets its kept description."""
    kept = {d.name: d for d in kept_descriptions(item)}
    keep_as_is = {id(d) for d in descriptions}
    for found in shared_summaries(descriptions).values():
        mentioned = [d for d in found if d.name.casefold() in d.summary.casefold()]
        for description in found:
            if len(mentioned) != 1 or description is not mentioned[0]:
                keep_as_is.discard(id(description))
    return tuple(d if id(d) in keep_as_is else kept[d.name] for d in descriptions)


class EntityDescriber(Stage[DescribeIn, DescribeOut]):
    """Base class of the describe family (``In = DescribeIn``, ``Out = DescribeOut``)."""

    In = DescribeIn
    Out = DescribeOut
