"""Answer metrics, evidence recall, and their aggregation into per-category means.

Two F1 metrics exist in the literature and papers mix them, so memlab reports both under
distinct names:

* ``locomo_f1`` — the official LoCoMo F1 (snap-research/locomo ``task_eval/evaluation.py``):
  normalised, Porter-stemmed, multiset token overlap, with per-category rules.
* ``amem_f1`` — the F1 most memory papers report (A-Mem's evaluation utilities and those
  derived from it): lowercased, ``.,!?`` turned into spaces, *set* overlap, no stemming.

``bleu1`` is A-Mem-style BLEU-1. Evidence recall (``recall_at_k``, ``recall_at_tokens``)
needs no LLM: every memory unit keeps the ids of the turns it came from. ``aggregate`` turns
per-question rows into the per-category and overall means written to metrics.json.

Every metric coerces its inputs with ``str()``: some LoCoMo gold answers are integers.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping, Sequence

from nltk.stem import PorterStemmer
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from memlab.eval.intervals import mean_interval
from memlab.types import ANSWERABLE_CATEGORIES, LOCOMO_CATEGORIES

# -- LoCoMo F1 -------------------------------------------------------------------------

#: Phrases whose presence makes an answer to an adversarial (unanswerable) question right.
ADVERSARIAL_PHRASES: tuple[str, ...] = ("no information available", "not mentioned")

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
# ASCII punctuation only, as in the official script (curly quotes and dashes survive).
_PUNCTUATION = frozenset(string.punctuation)
_stem = lru_cache(maxsize=1 << 16)(PorterStemmer().stem)


def normalize_answer(text: object) -> str:
    """LoCoMo normalisation, in the official order: drop commas, lowercase, strip ASCII
    punctuation, drop the words a/an/the/and, collapse whitespace."""
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _stemmed_tokens(text: object) -> list[str]:
    return [_stem(word) for word in normalize_answer(text).split()]


def token_f1(prediction: object, gold: object) -> float:
    """The official LoCoMo token F1 of one prediction against one gold string.

    Multiset overlap of the normalised, Porter-stemmed tokens. No overlap gives 0.0, and so
    does a pair that is empty on both sides after normalisation (e.g. "the" vs "a"): the
    official script returns 0 whenever nothing overlaps, and we keep its numbers.
    """
    predicted = _stemmed_tokens(prediction)
    reference = _stemmed_tokens(gold)
    overlap = sum((Counter(predicted) & Counter(reference)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(predicted)
    recall = overlap / len(reference)
    return 2 * precision * recall / (precision + recall)


def locomo_f1(prediction: object, gold: object, category: str) -> float:
    """Official LoCoMo F1 with its category rules (categories by name, see memlab.types).

    * ``multi-hop``: the *raw* prediction and gold are split on ","; the score is the mean,
      over gold parts, of the best ``token_f1`` of any prediction part.
    * ``open-domain``: only the raw gold before its first ";" counts.
    * ``adversarial``: 1.0 if the lowercased prediction contains "no information available"
      or "not mentioned", else 0.0 (the gold is not used).
    * anything else (``temporal``, ``single-hop``, LongMemEval's question types): plain
      ``token_f1``.

    The splits happen before normalisation, as in the official script; normalisation
    removes commas and semicolons, so splitting afterwards would never split.
    """
    if not isinstance(category, str):
        raise TypeError(f"locomo_f1 takes the category name (e.g. 'multi-hop'), got {category!r}")
    prediction, gold = str(prediction), str(gold)
    if category == "adversarial":
        lowered = prediction.lower()
        return float(any(phrase in lowered for phrase in ADVERSARIAL_PHRASES))
    if category == "multi-hop":
        predicted_parts = [part.strip() for part in prediction.split(",")]
        gold_parts = [part.strip() for part in gold.split(",")]
        best = [max(token_f1(p, g) for p in predicted_parts) for g in gold_parts]
        return sum(best) / len(best)
    if category == "open-domain":
        gold = gold.split(";")[0].strip()
    return token_f1(prediction, gold)


# -- A-Mem F1 and BLEU-1 ---------------------------------------------------------------

_AMEM_SEPARATORS = str.maketrans({".": " ", ",": " ", "!": " ", "?": " "})


def _amem_tokens(text: object) -> set[str]:
    return set(str(text).lower().translate(_AMEM_SEPARATORS).split())


def amem_f1(prediction: object, gold: object) -> float:
    """A-Mem F1: lowercase, ``.,!?`` to spaces, whitespace split, *set* overlap F1.

    No stemming and no article removal; repeated words count once. 0.0 when either side
    has no tokens.
    """
    predicted, reference = _amem_tokens(prediction), _amem_tokens(gold)
    overlap = len(predicted & reference)
    if not predicted or not reference or overlap == 0:
        return 0.0
    precision = overlap / len(predicted)
    recall = overlap / len(reference)
    return 2 * precision * recall / (precision + recall)


_BLEU_TOKEN = re.compile(r"\w+|[^\w\s]")
_SMOOTHING = SmoothingFunction().method1


def bleu1(prediction: object, gold: object) -> float:
    """Sentence BLEU-1 (NLTK, smoothing method1) on lowercased word/punctuation tokens.

    Tokens are ``\\w+`` runs and single punctuation marks (no tokenizer download needed).
    0.0 when the prediction or the gold has no tokens (BLEU is undefined there).
    """
    predicted = _BLEU_TOKEN.findall(str(prediction).lower())
    reference = _BLEU_TOKEN.findall(str(gold).lower())
    if not predicted or not reference:
        return 0.0
    return float(sentence_bleu([reference], predicted, weights=(1, 0, 0, 0), smoothing_function=_SMOOTHING))


# -- evidence recall -------------------------------------------------------------------


def _evidence_share(found: set[str], gold_evidence: Iterable[str]) -> float | None:
    gold = set(gold_evidence)
    if not gold:
        return None
    return len(gold & found) / len(gold)


def recall_at_k(
    ranked_source_ids: Sequence[Sequence[str]], gold_evidence: Sequence[str], k: int
) -> float | None:
    """Share of the (distinct) gold evidence turn ids found among the source ids of the
    top-``k`` retrieved units.

    ``ranked_source_ids`` holds one tuple of source turn ids per retrieved unit, best first;
    fewer than ``k`` units just means all of them count. Returns None when the question has
    no gold evidence, so that it is left out of the mean rather than counted as 0.
    """
    if k < 1:
        raise ValueError(f"recall@k needs k >= 1, got {k}")
    found: set[str] = set()
    for source_ids in ranked_source_ids[:k]:
        found.update(source_ids)
    return _evidence_share(found, gold_evidence)


def fitting_prefix(texts: Iterable[str], budget: int, count_tokens: Callable[[str], int]) -> int:
    """How many of ``texts``, taken in order, fit together in ``budget`` tokens (the sum of
    their token counts). The first text that would overflow ends the prefix, even if a
    later, shorter one would still fit: a reader takes the ranking from the top."""
    if budget < 0:
        raise ValueError(f"token budget must be >= 0, got {budget}")
    used = 0
    count = 0
    for text in texts:
        used += count_tokens(text)
        if used > budget:
            break
        count += 1
    return count


def recall_at_tokens(
    units: Sequence[tuple[str, Sequence[str]]],
    gold_evidence: Sequence[str],
    budget: int,
    count_tokens: Callable[[str], int],
) -> float | None:
    """Evidence recall over the longest prefix of the ranked units that fits in ``budget``.

    ``units`` are ``(rendered_text, source_ids)`` pairs, best first; ``count_tokens`` counts
    the tokens of one rendered text (the runner passes the default embedder's tokenizer).
    Budgets compare methods whose units differ in size (a turn vs a session summary). A
    unit that alone exceeds the budget ends the prefix (see ``fitting_prefix``). None when
    the question has no gold evidence.
    """
    kept = fitting_prefix((text for text, _ in units), budget, count_tokens)
    found: set[str] = set()
    for _, source_ids in units[:kept]:
        found.update(source_ids)
    return _evidence_share(found, gold_evidence)


# -- aggregation -----------------------------------------------------------------------


def mean_or_none(values: Iterable[float | bool | None]) -> float | None:
    """Mean of the values that are not None (booleans count as 1/0); None if there are none."""
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _means(rows: list[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """``n``, each key's mean and, under ``ci``, each mean's 95% interval with the number of
    questions it averages (``memlab.eval.intervals.mean_interval``)."""
    summary: dict[str, Any] = {"n": len(rows)}
    intervals: dict[str, Any] = {}
    for key in keys:
        try:
            values = [float(row[key]) for row in rows if row.get(key) is not None]
        except (TypeError, ValueError) as e:
            raise ValueError(f"metric {key!r} has a value that is not a number: {e}") from None
        summary[key] = sum(values) / len(values) if values else None
        interval = mean_interval(values)
        intervals[key] = None if interval is None else {"low": interval[0], "high": interval[1], "n": len(values)}
    summary["ci"] = intervals
    return summary


def _category_order(category: str, first_seen: dict[str, int]) -> tuple[int, int]:
    locomo_order = {name: code for code, name in LOCOMO_CATEGORIES.items()}
    if category in locomo_order:
        return (0, locomo_order[category])
    return (1, first_seen[category])


def aggregate(
    rows: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    overall_categories: Sequence[str] | None = ANSWERABLE_CATEGORIES,
) -> dict[str, Any]:
    """Per-category and overall means of per-question metric rows.

    ``rows`` are dicts with a ``"category"`` and metric values under ``keys``; a value that
    is None (or a key that is absent) means "not measured" and is left out of that mean.
    Returns ``{"overall": {"n": ..., key: mean, ..., "ci": {key: {"low", "high", "n"}}},
    "by_category": {category: {...}}}``: each mean with its 95% interval (Wilson for 0/1 values
    such as a CORRECT / WRONG judge, else a percentile bootstrap over questions, 2,000
    resamples, seed 0) and the questions it averages.

    ``overall`` is the question-weighted mean over the questions whose category is in
    ``overall_categories`` — by default LoCoMo's four answerable categories, the papers'
    convention (adversarial questions appear in ``by_category`` only). Pass None to average
    over every question (e.g. LongMemEval, whose overall covers all question types).
    ``by_category`` lists LoCoMo categories in code order, then others as first seen.
    """
    by_category: dict[str, list[Mapping[str, Any]]] = {}
    first_seen: dict[str, int] = {}
    for index, row in enumerate(rows):
        if "category" not in row:
            raise ValueError(f"metric row {index} has no 'category': {dict(row)!r}")
        category = str(row["category"])
        first_seen.setdefault(category, index)
        by_category.setdefault(category, []).append(row)
    if overall_categories is None:
        overall_rows = list(rows)
    else:
        wanted = set(overall_categories)
        overall_rows = [row for row in rows if str(row["category"]) in wanted]
    ordered = sorted(by_category, key=lambda c: _category_order(c, first_seen))
    return {
        "overall": _means(overall_rows, keys),
        "by_category": {category: _means(by_category[category], keys) for category in ordered},
    }
