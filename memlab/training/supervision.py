"""What every trainable family's supervision shares: the by-conversation split, the questions
retrieval is scored and trained on, what makes a unit a positive, and the carded data set.

Every data set is a ``datasets.Dataset`` whose ``info.description`` is its dataset card
(``dataset_with_card``): what each row is, how labels were derived, the arguments used and
what was skipped. Each family's own data lives in its module (``memlab.training.rerank``,
``route``, ``traversal``, ``distill``, ``segmentation``, ``relations``, ``navigation``,
``selection``).

Splits are always **by conversation**: a conversation is entirely train or entirely
evaluation (``fixed_split``: the 5/2 split with ``FIXED_EVAL_IDS`` held out over the 7 dev
conversations; ``leave_one_out``: one split per conversation).

``evaluable_questions`` is the one definition of the questions retrieval is scored and trained
on (categories 1-4 with gold evidence); ``is_positive`` the one definition of a unit holding
gold evidence (its ``source_ids`` hold an evidence turn).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import datasets

from memlab.types import LOCOMO_CATEGORIES, Conversation, MemoryUnit, Question

#: The evaluation conversations of the fixed 5/2 split over the 7 LoCoMo dev conversations.
FIXED_EVAL_IDS: tuple[str, ...] = ("conv-26", "conv-30")


# -- splits -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Split:
    """A by-conversation split: ``train_ids`` and ``eval_ids`` never share a conversation."""

    name: str
    train_ids: tuple[str, ...]
    eval_ids: tuple[str, ...]

    def __post_init__(self) -> None:
        shared = sorted(set(self.train_ids) & set(self.eval_ids))
        if shared:
            raise ValueError(f"split {self.name!r}: conversations {shared} are in both train and eval")
        if not self.train_ids:
            raise ValueError(f"split {self.name!r}: no training conversation left")
        if not self.eval_ids:
            raise ValueError(f"split {self.name!r}: no evaluation conversation")


def _unique_ids(conversation_ids: Iterable[str]) -> tuple[str, ...]:
    if isinstance(conversation_ids, str):
        raise TypeError(f"expected a sequence of conversation ids, got one string {conversation_ids!r}")
    return tuple(dict.fromkeys(conversation_ids))


def fixed_split(conversation_ids: Iterable[str], eval_ids: Sequence[str] = FIXED_EVAL_IDS) -> Split:
    """``eval_ids`` held out, every other conversation for training."""
    ids = _unique_ids(conversation_ids)
    eval_ids = _unique_ids(eval_ids)
    missing = [i for i in eval_ids if i not in ids]
    if missing:
        raise ValueError(f"fixed_split: evaluation conversations {missing} are not among {list(ids)}")
    train = tuple(i for i in ids if i not in eval_ids)
    if not train:
        raise ValueError(f"fixed_split: holding out {list(eval_ids)} leaves no training conversation")
    return Split(name="fixed-" + "+".join(eval_ids), train_ids=train, eval_ids=eval_ids)


def leave_one_out(conversation_ids: Iterable[str]) -> list[Split]:
    """One split per conversation, holding it out and training on all the others."""
    ids = _unique_ids(conversation_ids)
    if len(ids) < 2:
        raise ValueError(f"leave_one_out needs at least 2 conversations, got {list(ids)}")
    return [Split(name=f"loo-{held}", train_ids=tuple(i for i in ids if i != held), eval_ids=(held,)) for held in ids]


def evaluable_questions(conversation: Conversation, categories: Sequence[str] | None = None) -> list[Question]:
    """The questions retrieval can be scored on: those with gold evidence, of ``categories`` when
    given; by default every category but LoCoMo's adversarial one (no answer in the
    conversation): LoCoMo's categories 1-4, and every LongMemEval question with evidence."""
    return [q for q in conversation.questions if q.evidence
            and (q.category in categories if categories is not None else q.category != LOCOMO_CATEGORIES[5])]


def split_conversations(
    conversations: Sequence[Conversation], split: Split
) -> tuple[list[Conversation], list[Conversation]]:
    """The (train, eval) conversations of ``split``, in the split's id order."""
    by_id = {c.id: c for c in conversations}
    missing = [i for i in (*split.train_ids, *split.eval_ids) if i not in by_id]
    if missing:
        raise ValueError(f"split {split.name!r}: conversations {missing} are not in the data ({sorted(by_id)})")
    return [by_id[i] for i in split.train_ids], [by_id[i] for i in split.eval_ids]


# -- reranking ----------------------------------------------------------------------------




def is_positive(unit: MemoryUnit, evidence: Iterable[str]) -> bool:
    return not set(unit.source_ids).isdisjoint(evidence)






# -- routing ------------------------------------------------------------------------------








# -- traversal ----------------------------------------------------------------------------


# -- distillation -------------------------------------------------------------------------












def ratio(hits: float, total: float) -> float | None:
    """``hits / total`` for a score with something to count, else None (not 0: nothing was scored)."""
    return hits / total if total else None


def dataset_with_card(rows: list[dict[str, Any]], features: datasets.Features, card: str) -> datasets.Dataset:
    info = datasets.DatasetInfo(description=card, features=features)
    if not rows:  # from_list cannot infer the columns of an empty list
        return datasets.Dataset.from_dict({name: [] for name in features}, features=features, info=info)
    return datasets.Dataset.from_list(rows, features=features, info=info)
