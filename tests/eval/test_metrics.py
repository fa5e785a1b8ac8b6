"""Metrics against hand-computed values (the computation is in the comment of each case)."""

from __future__ import annotations

import math

import pytest

from memlab.eval.metrics import (
    aggregate,
    amem_f1,
    bleu1,
    fitting_prefix,
    locomo_f1,
    mean_or_none,
    normalize_answer,
    recall_at_k,
    recall_at_tokens,
    token_f1,
)

# -- LoCoMo F1 ---------------------------------------------------------------------------


def test_normalize_answer_follows_the_official_order():
    # commas dropped, lowercased, ASCII punctuation stripped, a/an/the/and dropped as words
    # (not inside words: "band", "theory" stay), whitespace collapsed.
    assert normalize_answer("The band, and a Theory-of Mind!") == "band theoryof mind"
    # Curly apostrophes are not ASCII punctuation and survive, as in the official script.
    assert normalize_answer("Mel’s") == "mel’s"


def test_exact_match_is_one():
    # tokens: [sweden] vs [sweden]: overlap 1, P = R = 1, F1 = 1
    assert locomo_f1("Sweden", "Sweden", "single-hop") == 1.0


def test_stemming_matches_running_and_runs():
    # "She likes running" -> she, like, run ; gold "runs" -> run
    # overlap 1, P = 1/3, R = 1/1, F1 = 2 * (1/3) * 1 / (4/3) = 0.5
    assert locomo_f1("She likes running", "runs", "single-hop") == pytest.approx(0.5)


def test_articles_and_conjunction_are_removed():
    # "The Eiffel Tower and a bridge" -> eiffel, tower, bridg ; gold "eiffel tower" -> eiffel, tower
    # overlap 2, P = 2/3, R = 2/2, F1 = 2 * (2/3) * 1 / (5/3) = 0.8
    assert locomo_f1("The Eiffel Tower and a bridge", "eiffel tower", "temporal") == pytest.approx(0.8)


def test_overlap_is_a_multiset():
    # "paris paris" -> pari, pari ; gold -> pari: Counter overlap min(2, 1) = 1
    # P = 1/2, R = 1/1, F1 = 2 * 0.5 * 1 / 1.5 = 2/3   (A-Mem's set overlap gives 1.0, below)
    assert locomo_f1("paris paris", "Paris", "single-hop") == pytest.approx(2 / 3)


def test_integer_gold_is_coerced():
    # "In 2022." -> in, 2022 ; gold 2022 -> 2022: overlap 1, P = 1/2, R = 1, F1 = 2/3
    assert locomo_f1("In 2022.", 2022, "temporal") == pytest.approx(2 / 3)


def test_commas_inside_an_answer_are_dropped_not_split_outside_multi_hop():
    # "May 7 2023" vs "7 May, 2023" -> {may, 7, 2023} on both sides: overlap 3, F1 = 1
    assert locomo_f1("May 7 2023", "7 May, 2023", "temporal") == 1.0


def test_multi_hop_averages_best_match_per_gold_part():
    # Prediction has no comma: one part, tokens she, enjoy, hike, paint ("and" dropped).
    # gold part "painting" -> paint: overlap 1, P = 1/4, R = 1, F1 = 2*0.25/1.25 = 0.4
    # gold part "hiking"   -> hike : same, 0.4 ; mean 0.4
    assert locomo_f1("She enjoys hiking and painting", "painting, hiking", "multi-hop") == pytest.approx(0.4)
    # The plain rule on the same pair: gold "painting hiking" -> paint, hike;
    # overlap 2, P = 2/4, R = 2/2, F1 = 2*0.5*1/1.5 = 2/3. The split happens on the raw string.
    assert locomo_f1("She enjoys hiking and painting", "painting, hiking", "single-hop") == pytest.approx(2 / 3)


def test_multi_hop_splits_prediction_too():
    # prediction parts [hike], [paint]; gold parts painting -> 1.0 (vs "painting"),
    # hiking -> 1.0 (vs "hiking"), swimming -> swim matches neither -> 0.0; mean 2/3
    score = locomo_f1("hiking, painting", "painting, hiking, swimming", "multi-hop")
    assert score == pytest.approx(2 / 3)


def test_open_domain_keeps_gold_before_first_semicolon():
    # gold "Likely yes; she loves the outdoors" -> "Likely yes" -> like, ye ; prediction the same
    # overlap 2, P = R = 1, F1 = 1
    gold = "Likely yes; she loves the outdoors"
    assert locomo_f1("Likely yes", gold, "open-domain") == 1.0
    # Without the rule (e.g. single-hop): gold -> like, ye, she, love, outdoor ("the" dropped)
    # overlap 2, P = 2/2, R = 2/5, F1 = 2 * 1 * 0.4 / 1.4 = 0.5714...
    assert locomo_f1("Likely yes", gold, "single-hop") == pytest.approx(0.8 / 1.4)


def test_other_category_names_use_plain_f1():
    # LongMemEval type: no ';' rule. gold "Paris; France" -> pari, franc ; prediction -> pari
    # overlap 1, P = 1, R = 1/2, F1 = 2/3
    assert locomo_f1("Paris", "Paris; France", "knowledge-update") == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "prediction, expected",
    [
        ("Not mentioned in the conversation.", 1.0),
        ("No information available", 1.0),
        ("NO INFORMATION AVAILABLE.", 1.0),  # the check is on the lowercased prediction
        ("He went to Paris", 0.0),  # even when it equals the gold: the question is unanswerable
        ("There is no information about that", 0.0),  # neither exact phrase
    ],
)
def test_adversarial_rule(prediction, expected):
    assert locomo_f1(prediction, "He went to Paris", "adversarial") == expected


def test_empty_after_normalisation_scores_zero():
    # "the" -> [] and "a" -> []: nothing overlaps; the official script returns 0 (our choice too)
    assert token_f1("the", "a") == 0.0
    assert locomo_f1("", "Sweden", "single-hop") == 0.0
    assert locomo_f1("Sweden", "!!", "single-hop") == 0.0


def test_no_overlap_scores_zero():
    assert locomo_f1("Berlin", "Sweden", "temporal") == 0.0


def test_category_code_is_refused():
    # Codes are easy to mislabel (some repos swap them); the rules are keyed by name.
    with pytest.raises(TypeError, match="category name"):
        locomo_f1("Berlin", "Sweden", 1)


# -- A-Mem F1 ---------------------------------------------------------------------------


def test_amem_f1_keeps_articles_and_uses_sets():
    # {the, cat, sat} vs {the, cat}: overlap 2, P = 2/3, R = 1, F1 = 0.8 ("the" counts here)
    assert amem_f1("The cat sat.", "the cat") == pytest.approx(0.8)
    # {paris} vs {paris}: a repeated word counts once -> 1.0 (LoCoMo F1 gives 2/3, above)
    assert amem_f1("paris paris", "Paris") == 1.0


def test_amem_f1_does_not_stem_or_strip_other_punctuation():
    # {running} vs {runs}: no overlap -> 0 (LoCoMo F1 stems both to "run")
    assert amem_f1("running", "runs") == 0.0
    # "smith's" keeps its apostrophe: {smith's} vs {smith} -> 0
    assert amem_f1("Smith's", "smith") == 0.0
    # ".,!?" become spaces: "yes!no" -> {yes, no} vs {no}: P = 1/2, R = 1, F1 = 2/3
    assert amem_f1("yes!no", "no") == pytest.approx(2 / 3)


def test_amem_f1_integer_gold_and_empty_sides():
    # "In 2022." -> {in, 2022} vs {2022}: P = 1/2, R = 1, F1 = 2/3
    assert amem_f1("In 2022.", 2022) == pytest.approx(2 / 3)
    assert amem_f1("", "x") == 0.0
    assert amem_f1("...", "x") == 0.0  # only separators: no tokens
    assert amem_f1("x", "") == 0.0


# -- BLEU-1 -----------------------------------------------------------------------------


def test_bleu1_clipped_unigram_precision():
    # pred the, cat, sat, on, the, mat ; ref the, cat, is, on, the, mat
    # clipped matches: the 2, cat 1, on 1, mat 1, sat 0 -> 5/6 ; lengths equal -> BP = 1
    assert bleu1("The cat sat on the mat", "the cat is on the mat") == pytest.approx(5 / 6)


def test_bleu1_brevity_penalty():
    # pred [cat], ref [the, cat]: p1 = 1/1 ; c = 1 < r = 2 -> BP = exp(1 - 2/1) = e^-1
    assert bleu1("cat", "the cat") == pytest.approx(math.exp(-1))


def test_bleu1_counts_punctuation_tokens():
    # pred [paris, .], ref [paris]: p1 = 1/2 ; c = 2 > r = 1 -> BP = 1 -> 0.5
    assert bleu1("Paris.", "Paris") == pytest.approx(0.5)


def test_bleu1_zero_cases():
    assert bleu1("dog", "cat") == 0.0  # no unigram matches
    assert bleu1("", "cat") == 0.0
    assert bleu1("cat", "") == 0.0
    # integers are coerced: pred [2022], ref [2022] -> 1.0
    assert bleu1("2022", 2022) == 1.0


# -- evidence recall --------------------------------------------------------------------

RANKED = [("D1:1",), ("D1:2", "D1:3"), ("D2:1",)]


@pytest.mark.parametrize("k, expected", [(1, 0.0), (2, 0.5), (3, 1.0), (10, 1.0)])
def test_recall_at_k(k, expected):
    # gold {D1:3, D2:1}: top-1 sources {D1:1} -> 0/2 ; top-2 adds D1:2, D1:3 -> 1/2 ;
    # top-3 adds D2:1 -> 2/2 ; k beyond the list -> all units -> 2/2
    assert recall_at_k(RANKED, ("D1:3", "D2:1"), k) == expected


def test_recall_at_k_without_evidence_is_none_and_gold_is_deduplicated():
    assert recall_at_k(RANKED, (), 5) is None
    # gold {D1:3} after de-duplication; found at rank 2 -> 1/1
    assert recall_at_k(RANKED, ("D1:3", "D1:3"), 2) == 1.0
    with pytest.raises(ValueError, match="k >= 1"):
        recall_at_k(RANKED, ("D1:3",), 0)


UNITS = [
    ("a b c", ("D1:1",)),  # 3 tokens
    ("d e", ("D1:3",)),  # 2 tokens
    ("f g h i", ("D2:1",)),  # 4 tokens
    ("j", ("D3:1",)),  # 1 token
]


def _words(text: str) -> int:
    return len(text.split())


def test_recall_at_tokens_uses_the_fitting_prefix():
    gold = ("D1:3", "D3:1")
    # budget 5: 3 + 2 = 5 fits, + 4 = 9 overflows -> prefix of 2 units, sources {D1:1, D1:3}
    # -> 1/2. "j" (1 token) would still fit but the prefix ended at the 4-token unit.
    assert recall_at_tokens(UNITS, gold, 5, _words) == 0.5
    # budget 2: the first unit alone (3 tokens) exceeds it -> empty prefix -> 0/2
    assert recall_at_tokens(UNITS, gold, 2, _words) == 0.0
    # budget 10: 3 + 2 + 4 + 1 = 10 -> all units -> 2/2
    assert recall_at_tokens(UNITS, gold, 10, _words) == 1.0
    assert recall_at_tokens(UNITS, (), 10, _words) is None


def test_fitting_prefix():
    texts = [text for text, _ in UNITS]
    assert [fitting_prefix(texts, b, _words) for b in (0, 2, 3, 5, 8, 9, 10)] == [0, 0, 1, 2, 2, 3, 4]
    with pytest.raises(ValueError, match="budget"):
        fitting_prefix(texts, -1, _words)


# -- aggregation ------------------------------------------------------------------------


def test_mean_or_none():
    assert mean_or_none([1.0, None, 0.0]) == 0.5
    assert mean_or_none([None, None]) is None
    assert mean_or_none([]) is None
    assert mean_or_none([True, False, False, True]) == 0.5  # judge verdicts


def test_aggregate_overall_is_question_weighted_over_answerable_categories():
    rows = [
        {"category": "adversarial", "f1": 1.0, "recall": None, "correct": True},
        {"category": "single-hop", "f1": 0.5, "recall": 1.0, "correct": True},
        {"category": "multi-hop", "f1": 1.0, "recall": None, "correct": None},
        {"category": "single-hop", "f1": 0.0, "recall": 0.5, "correct": False},
    ]
    result = aggregate(rows, ["f1", "recall", "correct"])
    # overall over the 3 answerable questions: f1 (0.5 + 1.0 + 0.0) / 3 = 0.5
    # (the mean of category means would be (1.0 + 0.25) / 2 = 0.625); adversarial excluded.
    # recall: None left out -> (1.0 + 0.5) / 2 = 0.75 ; correct: (1 + 0) / 2 = 0.5
    assert means(result["overall"]) == {"n": 3, "f1": 0.5, "recall": 0.75, "correct": 0.5}
    by_category = result["by_category"]
    # LoCoMo code order (1 multi-hop ... 5 adversarial), whatever the row order
    assert list(by_category) == ["multi-hop", "single-hop", "adversarial"]
    assert means(by_category["single-hop"]) == {"n": 2, "f1": 0.25, "recall": 0.75, "correct": 0.5}
    assert means(by_category["multi-hop"]) == {"n": 1, "f1": 1.0, "recall": None, "correct": None}
    assert means(by_category["adversarial"]) == {"n": 1, "f1": 1.0, "recall": None, "correct": 1.0}
    # every mean carries its interval and the questions it averages: Wilson for 0/1 verdicts
    ci = result["overall"]["ci"]
    assert ci["correct"] == {"low": pytest.approx(0.0945, abs=1e-4), "high": pytest.approx(0.9055, abs=1e-4), "n": 2}
    assert ci["f1"]["n"] == 3 and 0.0 <= ci["f1"]["low"] < 0.5 < ci["f1"]["high"] <= 1.0  # bootstrap
    assert by_category["multi-hop"]["ci"]["recall"] is None and by_category["multi-hop"]["ci"]["correct"] is None


def means(block: dict) -> dict:
    return {key: value for key, value in block.items() if key != "ci"}


def test_intervals_wilson_bootstrap_and_the_detectable_difference():
    from memlab.eval.intervals import bootstrap_interval, detectable_difference, mean_interval, wilson_interval

    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(13, 13) == pytest.approx((0.7719, 1.0), abs=1e-4)  # 13 of 13 cited events
    low, high = bootstrap_interval([0.0, 1.0] * 50 + [0.5] * 100)
    assert low < 0.5 < high and high - low < 0.15
    assert bootstrap_interval([0.2, 0.9, 0.4]) == bootstrap_interval([0.2, 0.9, 0.4])  # seeded
    assert mean_interval([]) is None and mean_interval([1.0, 0.0, 1.0]) == wilson_interval(2, 3)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(3, 2)
    # 2.80 standard errors of the difference: two runs of spread 0.5025 over 100 questions detect 0.199
    spread = [0.0, 1.0] * 50
    assert detectable_difference(spread, spread) == pytest.approx(2.8016 * (2 * 0.5025 ** 2 / 100) ** 0.5, abs=1e-3)
    assert detectable_difference([0.0] * 20, [0.0] * 20) is None and detectable_difference([1.0], [0.0]) is None
    with pytest.raises(ValueError, match="both runs"):
        detectable_difference([1.0], [1.0, 0.0])


def test_aggregate_all_questions_for_other_benchmarks():
    rows = [
        {"category": "temporal-reasoning", "f1": 1.0},
        {"category": "multi-session", "f1": 0.0},
        {"category": "temporal-reasoning", "f1": 0.5},
    ]
    # default: no answerable LoCoMo category present -> empty overall
    assert aggregate(rows, ["f1"])["overall"] == {"n": 0, "f1": None, "ci": {"f1": None}}
    result = aggregate(rows, ["f1"], overall_categories=None)
    # all three: (1.0 + 0.0 + 0.5) / 3 = 0.5 ; categories in first-seen order
    assert means(result["overall"]) == {"n": 3, "f1": 0.5}
    assert list(result["by_category"]) == ["temporal-reasoning", "multi-session"]
    assert result["by_category"]["temporal-reasoning"]["f1"] == 0.75


def test_aggregate_rejects_bad_rows():
    with pytest.raises(ValueError, match="row 1 has no 'category'"):
        aggregate([{"category": "temporal", "f1": 1.0}, {"f1": 0.0}], ["f1"])
    with pytest.raises(ValueError, match="'f1'"):
        aggregate([{"category": "temporal", "f1": "high"}], ["f1"])
