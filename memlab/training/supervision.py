"""Training data for memlab's trainable stages, derived from LoCoMo-format conversations.

Every data set is a ``datasets.Dataset`` whose ``info.description`` is its dataset card:
what each row is, how labels were derived, the arguments used and what was skipped.

Splits are always **by conversation**: a conversation is entirely train or entirely
evaluation (``fixed_split``: the 5/2 split with ``FIXED_EVAL_IDS`` held out over the 7 dev
conversations; ``leave_one_out``: one split per conversation).

* **Reranking** (``rerank_examples``): (question, unit text, label); label 1 when the unit's
  ``source_ids`` hold a gold evidence turn. Units and rankings are a first-stage pipeline's
  (its memory of the conversation, built by ``build``: ``rag_turns``' turn units, or any
  pipeline's units); hard negatives are the best-ranked non-positive units of its BM25 and
  dense rankings.
* **Routing** (``routing_examples``): question -> LoCoMo question type (5 classes), retrieval
  intent and complexity. LoCoMo has no intent labels; they are derived by this documented
  mapping (not by a teacher model):

  - ``intent`` = ``WHEN`` for temporal questions (and for adversarial questions matching a
    ``DEFAULT_INTENT_RULES["WHEN"]`` pattern: their category says nothing of what they ask); else ``WHY`` when the question asks for a
    reason or cause (any pattern of ``memlab.stages.route.rules.DEFAULT_INTENT_RULES["WHY"]``
    matches, case-insensitively); else ``ENTITY`` (MAGMA 3.3's T_q).
  - ``complexity`` = ``HIGH`` for multi-hop and open-domain questions (aggregation or
    reasoning over several facts), ``LOW`` otherwise (single-fact lookups; SimpleMem 2.3).

* **Traversal** (``traversal_targets``): per question, the unit / graph-node ids whose
  provenance holds a gold evidence turn: the nodes a traversal policy should reach.
* **Distillation** (``distillation_examples``): a prompted stage's cached LM calls as
  (messages, completion) pairs, to fine-tune a local model in its place; calls whose prompt
  quotes a held-out conversation (``conversation_texts``) are left out.

``evaluable_questions`` is the one definition of the questions retrieval is scored and trained
on (categories 1-4 with gold evidence).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import datasets

from memlab.types import ANSWERABLE_CATEGORIES, LOCOMO_CATEGORIES, Conversation, MemoryUnit, Question

if TYPE_CHECKING:  # imported lazily: building data sets must not load the memory stack eagerly
    from memlab.lm.cache import ResponseCache
    from memlab.pipelines.base import Pipeline
    from memlab.pipelines.magma.memory import MagmaMemory

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
RERANK_FEATURES = datasets.Features(
    {
        "conversation_id": datasets.Value("string"),
        "question_id": datasets.Value("string"),
        "question": datasets.Value("string"),
        "unit_id": datasets.Value("string"),
        "text": datasets.Value("string"),
        "label": datasets.Value("int64"),
        "source": datasets.Value("string"),
        "rank": datasets.Value("int64"),
    }
)


def magma_event_units(memory: "MagmaMemory") -> list[MemoryUnit]:
    """The event nodes of a built MAGMA memory as units (their ``source_ids`` are the provenance)."""
    return [memory.unit(i) for i in memory.events()]


def is_positive(unit: MemoryUnit, evidence: Iterable[str]) -> bool:
    return not set(unit.source_ids).isdisjoint(evidence)


def rerank_examples(
    conversations: Sequence[Conversation],
    first_stage: "Pipeline",
    negatives: int = 8,
    candidates: int = 50,
    categories: Sequence[str] = ANSWERABLE_CATEGORIES,
    seed: int = 0,
    sampling: str = "top",
) -> datasets.Dataset:
    """Labelled (question, unit) pairs for a reranker (see the module docstring).

    ``first_stage`` is the pipeline whose ranking the reranker re-scores (``rag_turns.yaml``,
    ``rag_turns_gemma.yaml``, any pipeline whose ``build`` gives a ``UnitMemory`` and that has
    ``retrieval`` and ``rrf_k``): its memory of each conversation gives the units, and its
    dense and BM25 indexes the rankings. Per question of ``categories`` with gold evidence:
    every positive unit (``source="positive"``, ``rank`` = its rank in the first stage's
    ranking of the first ``candidates`` per side, -1 when outside it), then up to
    ``negatives`` hard negatives, half from BM25 and half from dense (``rank`` = rank in that
    ranking), best ranks first, a unit taken once. With an odd ``negatives`` the side getting
    the extra one is drawn from ``seed`` and the question id; a side that runs out is topped up
    from the other. Questions without a positive unit are skipped and counted in the card.

    ``sampling="uniform"`` draws each side's negatives at random (seeded per question) from its
    top ``candidates`` instead of taking the best-ranked: a reranker that re-scores the whole
    first-stage list must also see the weaker candidates it will meet there, not only the
    hardest ones (trained on the hardest alone, it learns to prefer weak, unrelated units).

    A first stage with ``retrieval="dense"`` (``rag_turns_gemma.yaml``) ranks by the embedder
    alone, so every negative comes from its ranking and a positive's ``rank`` is its rank there.
    """
    from memlab.memory.index import rrf_fuse

    retrieval, rrf_k = getattr(first_stage, "retrieval", None), getattr(first_stage, "rrf_k", None)
    if sampling not in ("top", "uniform"):
        raise ValueError(f"sampling must be 'top' or 'uniform', got {sampling!r}")
    if retrieval not in ("hybrid", "dense"):
        raise ValueError(f"the first stage's retrieval must be 'hybrid' or 'dense', got {retrieval!r}")
    if negatives < 0 or candidates < 1:
        raise ValueError(f"need negatives >= 0 and candidates >= 1, got {negatives} and {candidates}")
    unknown = sorted(set(categories) - set(LOCOMO_CATEGORIES.values()))
    if unknown:
        raise ValueError(f"unknown categories {unknown}; LoCoMo has {list(LOCOMO_CATEGORIES.values())}")
    rows: list[dict[str, Any]] = []
    counts = {"questions": 0, "no_evidence": 0, "no_positive_unit": 0, "positives": 0, "negatives": 0}
    for conversation in conversations:
        memory = first_stage.build(conversation.history())
        conversation_units = list(memory.units.values())
        if not conversation_units:
            raise ValueError(f"conversation {conversation.id}: the first stage built a memory without units")
        questions = evaluable_questions(conversation, categories)
        counts["no_evidence"] += sum(q.category in categories for q in conversation.questions) - len(questions)
        for question in questions:
            positives = [u for u in conversation_units if is_positive(u, question.evidence)]
            if not positives:
                counts["no_positive_unit"] += 1
                continue
            counts["questions"] += 1
            dense = [r.unit.id for r in memory.search_dense(question.text, k=candidates)]
            bm25 = [r.unit.id for r in memory.search_bm25(question.text, k=candidates)] if retrieval == "hybrid" else []
            ranking = [i for i, _ in rrf_fuse([dense, bm25], k=rrf_k)] if retrieval == "hybrid" else dense
            positive_ids = {u.id for u in positives}

            def row(unit: MemoryUnit, label: int, source: str, rank: int) -> dict[str, Any]:
                return {
                    "conversation_id": conversation.id, "question_id": question.id, "question": question.text,
                    "unit_id": unit.id, "text": unit.text, "label": label, "source": source, "rank": rank,
                }

            for unit in positives:
                rows.append(row(unit, 1, "positive", ranking.index(unit.id) if unit.id in ranking else -1))
            rng = random.Random(f"{seed}:{question.id}")
            pools = {"bm25": [i for i in bm25 if i not in positive_ids], "dense": [i for i in dense if i not in positive_ids]}
            extra_to = rng.choice(["bm25", "dense"])  # drawn either way: hybrid rows stay as they were
            if sampling == "uniform":
                for pool in pools.values():
                    rng.shuffle(pool)
            picked = _pick_negatives(pools, negatives, extra_to=extra_to)
            for unit_id, source in picked:
                rank = (bm25 if source == "bm25" else dense).index(unit_id)
                rows.append(row(memory.get(unit_id), 0, source, rank))
            counts["positives"] += len(positives)
            counts["negatives"] += len(picked)
    sides = "BM25 and dense rankings" if retrieval == "hybrid" else "dense ranking"
    card = f"""memlab reranking supervision (memlab.training.supervision.rerank_examples).
Rows: one (question, memory unit) pair; label 1 when the unit's source_ids contain a gold evidence turn id, else 0.
Units: the memory of the first stage, {type(first_stage).__name__}.
First stage: {retrieval} ({"dense and BM25 fused by RRF" if retrieval == "hybrid" else "the embedder's ranking alone"}).
Positives: every unit holding gold evidence (source "positive", rank = rank in the first-stage ranking, -1 if outside).
Negatives: up to {negatives} per question, non-positive units of the {sides} (top {candidates} each,
split evenly, odd one by seed={seed}) of a UnitMemory over the same units (rrf_k={rrf_k}); sampling={sampling!r}
("top": the best-ranked, hardest ones; "uniform": drawn at random within the top {candidates}).
Categories: {list(categories)}. Conversations: {[c.id for c in conversations]}.
Questions used: {counts["questions"]}; skipped without evidence: {counts["no_evidence"]}; skipped with no positive unit: {counts["no_positive_unit"]}.
Rows: {counts["positives"]} positive, {counts["negatives"]} negative."""
    return _dataset(rows, RERANK_FEATURES, card)


def _pick_negatives(rankings: dict[str, list[str]], n: int, extra_to: str) -> list[tuple[str, str]]:
    """Up to ``n`` distinct ids, best first from each ranking, ``n // 2`` per side plus the odd one."""
    other = "dense" if extra_to == "bm25" else "bm25"
    quota = {extra_to: n - n // 2, other: n // 2}
    picked: dict[str, str] = {}
    for source in (extra_to, other):
        for unit_id in rankings[source]:
            if sum(1 for s in picked.values() if s == source) >= quota[source]:
                break
            picked.setdefault(unit_id, source)
    for source in (extra_to, other):  # top up from either side when one ran short
        for unit_id in rankings[source]:
            if len(picked) >= n:
                break
            picked.setdefault(unit_id, source)
    return list(picked.items())


# -- routing ------------------------------------------------------------------------------
#: Label names of the routing columns (stored as strings; a classifier maps them to indexes).
QUESTION_TYPE_LABELS: tuple[str, ...] = tuple(LOCOMO_CATEGORIES[c] for c in sorted(LOCOMO_CATEGORIES))
INTENT_LABELS: tuple[str, ...] = ("WHY", "WHEN", "ENTITY")
COMPLEXITY_LABELS: tuple[str, ...] = ("LOW", "HIGH")
ROUTING_FEATURES = datasets.Features(
    {
        "conversation_id": datasets.Value("string"),
        "question_id": datasets.Value("string"),
        "question": datasets.Value("string"),
        "question_type": datasets.Value("string"),
        "intent": datasets.Value("string"),
        "complexity": datasets.Value("string"),
    }
)
HIGH_COMPLEXITY_TYPES: tuple[str, ...] = ("multi-hop", "open-domain")


def question_intent(question: Question) -> str:
    """WHEN for temporal questions, WHY for reason/cause questions, else ENTITY (module docstring)."""
    from memlab.stages.route.rules import DEFAULT_INTENT_RULES

    if question.category == "temporal":
        return "WHEN"
    # An adversarial question's category says nothing about what it asks; it reads like an
    # ordinary question, so its WHEN is read from the question like the rule router does.
    if question.category == "adversarial" and any(
        re.search(p, question.text, re.IGNORECASE) for p in DEFAULT_INTENT_RULES["WHEN"]
    ):
        return "WHEN"
    if any(re.search(p, question.text, re.IGNORECASE) for p in DEFAULT_INTENT_RULES["WHY"]):
        return "WHY"
    return "ENTITY"


def question_complexity(question: Question) -> str:
    return "HIGH" if question.category in HIGH_COMPLEXITY_TYPES else "LOW"


def routing_examples(conversations: Sequence[Conversation]) -> datasets.Dataset:
    """Every question with its LoCoMo type and derived intent / complexity (module docstring)."""
    rows = []
    for conversation in conversations:
        for question in conversation.questions:
            if question.category not in LOCOMO_CATEGORIES.values():
                raise ValueError(
                    f"question {question.id}: category {question.category!r} is not a LoCoMo category "
                    f"{list(LOCOMO_CATEGORIES.values())}"
                )
            rows.append({
                "conversation_id": conversation.id, "question_id": question.id, "question": question.text,
                "question_type": question.category, "intent": question_intent(question),
                "complexity": question_complexity(question),
            })
    card = f"""memlab routing supervision (memlab.training.supervision.routing_examples).
Rows: one LoCoMo question. question_type: the gold LoCoMo category (5 classes, by name).
intent and complexity are DERIVED by a fixed mapping (LoCoMo has no intent labels; no teacher model):
  intent = WHEN for temporal questions (and adversarial ones matching a DEFAULT_INTENT_RULES["WHEN"] pattern);
  else WHY when a DEFAULT_INTENT_RULES["WHY"] pattern matches the question
  (reason/cause); else ENTITY (MAGMA 3.3).
  complexity = HIGH for {list(HIGH_COMPLEXITY_TYPES)}, LOW otherwise (SimpleMem 2.3).
Conversations: {[c.id for c in conversations]}. Questions: {len(rows)}."""
    return _dataset(rows, ROUTING_FEATURES, card)


# -- traversal ----------------------------------------------------------------------------
def traversal_targets(questions: Iterable[Question], units: Sequence[MemoryUnit]) -> list[dict[str, Any]]:
    """Per question, the ids of ``units`` whose ``source_ids`` hold a gold evidence turn.

    ``questions`` and ``units`` come from one conversation (evidence turn ids are only unique
    within one). Questions without evidence or without any target are skipped.
    """
    questions = list(questions)
    conversation_ids = sorted({q.conversation_id for q in questions})
    if len(conversation_ids) > 1:
        raise ValueError(f"traversal_targets takes one conversation's questions, got {conversation_ids}")
    out = []
    for question in questions:
        targets = [u.id for u in units if is_positive(u, question.evidence)]
        if targets:
            out.append({"question_id": question.id, "question": question.text,
                        "conversation_id": question.conversation_id, "targets": targets})
    return out


# -- distillation -------------------------------------------------------------------------
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
    card = f"""memlab distillation data (memlab.training.supervision.distillation_examples).
Rows: one cached LM call: the request messages and the completion the teacher model produced (json_schema: the
request's constrained-decoding schema as JSON, "" if none). Source: {cache.path}; model: {model or "all"};
first-message pattern: {match!r}; excluded texts: {len(excluded)}. Kept {len(rows)}; dropped {dropped["not_matching"]} not matching,
{dropped["held_out"]} held out (their messages contain a text of an excluded conversation),
{dropped["truncated"]} cut off by the token limit, {dropped["empty"]} empty.
{_DROPPED_LINE}{json.dumps(dropped)}"""
    return _dataset(rows, DISTILLATION_FEATURES, card)


_DROPPED_LINE = "Dropped (JSON): "


def distillation_dropped(dataset: datasets.Dataset) -> dict[str, int]:
    """The per-reason counts of calls ``distillation_examples`` dropped, as recorded in its card."""
    for line in (dataset.info.description or "").splitlines():
        if line.startswith(_DROPPED_LINE):
            return json.loads(line[len(_DROPPED_LINE):])
    raise ValueError("distillation_dropped: the dataset was not made by distillation_examples (no counts in its card)")


def ratio(hits: float, total: float) -> float | None:
    """``hits / total`` for a score with something to count, else None (not 0: nothing was scored)."""
    return hits / total if total else None


def _dataset(rows: list[dict[str, Any]], features: datasets.Features, card: str) -> datasets.Dataset:
    info = datasets.DatasetInfo(description=card, features=features)
    if not rows:  # from_list cannot infer the columns of an empty list
        return datasets.Dataset.from_dict({name: [] for name in features}, features=features, info=info)
    return datasets.Dataset.from_list(rows, features=features, info=info)
