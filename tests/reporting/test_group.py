"""A headline group (``memlab.reporting.group``) over hand-made runs: the paired column and the sentence
under the table agree, the unweighted category mean, the R@10 coverage flag and the structure column."""

from __future__ import annotations

import re

import pytest

from memlab.eval.intervals import stratified_mean_interval
from memlab.reporting.group import distinguishable_sentence, group_table, structure_summary, top10_coverage
from memlab.reporting.runs import RunResult

CATEGORIES = ("multi-hop", "temporal", "open-domain", "single-hop")


def _run(name: str, judge_of, retrieved_units: int = 1, memory: dict | None = None) -> RunResult:
    """40 questions, 10 per category, on a 100-turn conversation; ``judge_of(i)`` scores question i."""
    rows = []
    for i in range(40):
        category = CATEGORIES[i % 4]
        verdict = float(judge_of(i))
        rows.append({"question_id": f"q{i}", "conversation_id": "c", "category": category, "prediction": "x",
                     "error": None, "judge": verdict, "f1_amem": verdict / 2 if category == "temporal" else verdict,
                     "retrieved": [[f"D1:{t}" for t in range(u * retrieved_units, (u + 1) * retrieved_units)]
                                   for u in range(10)]})
    mean = sum(r["judge"] for r in rows) / len(rows)
    metrics = {"overall_over": "LoCoMo categories 1-4", "overall": {"n": 40, "judge": mean, "recall@10": 0.5},
               "by_category": {c: {"n": 10, "f1_amem": 0.5} for c in CATEGORIES}, "memory": memory or {},
               "usage": {"build": {"llm_calls": 0}}, "timing": {}}
    return RunResult(name, None, metrics, tuple(rows))


def test_the_sentence_names_exactly_the_rows_the_table_marks_distinguishable():
    best = _run("best", lambda i: i % 10 != 0)            # 0.9
    close = _run("close", lambda i: i % 10 not in (1, 2))  # 0.8: 4 wins, 8 losses, inside the noise at n = 40
    far = _run("far", lambda i: i % 10 == 0)               # 0.1
    labels = {"best": "Best", "close": "Close", "far": "Far"}
    table = group_table([best, close, far], labels, "best", "judge", {"c": 100})
    marked = {line.split("|")[1].strip() for line in table.splitlines()[2:] if line.rstrip(" |").endswith("*")}
    sentence = distinguishable_sentence([best, close, far], labels, "best", "judge")
    assert marked == {"Far"}
    assert sentence.startswith("Best row by judge: Best (0.900).")
    apart = re.search(r"Distinguishable from it \(paired 95% interval excludes 0\): (.*?)\.(?: |$)", sentence)
    level = re.search(r"Not distinguishable from it at this n: (.*?)\.(?: |$)", sentence)
    assert apart and {part.split(" (")[0] for part in apart.group(1).split(", ")} == marked
    assert level and level.group(1).startswith("Close (-0.100")
    assert "| Best | 40 |" in table and "best row" in table.splitlines()[2]


def test_the_category_mean_weights_each_category_once_with_a_stratified_interval():
    run = _run("r", lambda i: True)  # f1_amem 1.0 everywhere but temporal (0.5)
    cell = group_table([run], {}, None, "judge", {"c": 100}).splitlines()[2].split("|")[5].strip()
    assert cell.startswith("0.875 [0.88, 0.88] (4 categories)")
    low, high = stratified_mean_interval([[0.0, 1.0] * 5, [1.0] * 3])
    assert 0.5 < low < 0.75 < high < 1.0 or (low <= 0.75 <= high)
    with pytest.raises(ValueError):
        stratified_mean_interval([[1.0], []])


def test_r_at_10_is_flagged_where_the_top_10_covers_much_of_the_conversation():
    turns = _run("turns", lambda i: True)
    events = _run("events", lambda i: True, retrieved_units=6,
                  memory={"c": {"structure": {"attached_turn_share": 0.13, "degenerate": []}}})
    assert top10_coverage(turns, {"c": 100}) == pytest.approx(0.10)
    assert top10_coverage(events, {"c": 100}) == pytest.approx(0.60)
    table = group_table([turns, events], {}, None, "judge", {"c": 100}).splitlines()
    assert "(10% of the turns)" in table[2] and "too few units" not in table[2]
    assert "(60% of the turns) **too few units for R@10 to mean much**" in table[3]
    assert "**provenance wider than the text read (13% of turns attached)**" in table[3]


def test_the_structure_column_says_what_did_not_form_or_that_nothing_was_recorded():
    assert structure_summary(_run("rag", lambda i: True)) == "no structure recorded"
    formed = _run("m", lambda i: True, memory={"conv-26": {"structure": {"degenerate": []}}})
    assert structure_summary(formed) == "formed (conv-26)"
    degenerate = _run("m", lambda i: True, memory={
        "conv-26": {"structure": {"degenerate": ["no causal edge"]}}, "conv-30": {"structure": {"degenerate": []}}})
    assert structure_summary(degenerate) == "conv-26: **no causal edge**"


def test_a_row_not_finished_shows_what_it_reached_its_cost_and_the_time_left():
    from memlab.reporting.group import unfinished_table

    best = _run("best", lambda i: i % 10 != 0)
    answered = [{"question_id": f"q{i}", "conversation_id": "c", "category": CATEGORIES[i % 4],
                 "judge": float(i % 2), "cold_latency_s": 40.0, "llm_calls": 3, "tokens": 3000} for i in range(10)]
    record = {"row": "slow", "questions": {"c": 40, "d": 40}, "attempt_started": "2026-12-05 02:12 UTC",
              "recorded": "2026-12-05 03:00 UTC", "rows": answered,
              "builds": [{"conversation_id": "c", "seconds": 5944.0, "llm_calls": 751, "prompt_tokens": 1,
                          "completion_tokens": 1, "degenerate": ["hierarchy 44 -> 2 -> 1"]}]}
    table = unfinished_table({"slow": record}, {"slow": "Slow system"}, best, "judge")
    cells = [c.strip() for c in table.splitlines()[2].split("|")[1:-1]]
    assert cells[0] == "Slow system"
    assert cells[1].startswith("c built; 10 of 80 questions answered")
    assert cells[2] == "c: 751 calls, 5,944 s **hierarchy 44 -> 2 -> 1**"
    assert cells[3] == "40.0 (n=10)" and cells[4] == "3.0" and cells[5] == "3,000"
    # 70 questions at 40 s and one build at 5,944 s
    assert cells[6] == f"~{(70 * 40 + 5944) / 3600:.1f} h (70 questions, 1 build)"
    assert cells[7].startswith("0.500 [") and cells[7].endswith("(n=10)")
    # paired on the 10 questions both answered: best scores 0.9 there (q0 wrong), this row 0.5
    assert cells[8].startswith("-0.400 [") and cells[8].endswith("(n=10)")
    assert cells[9] == "-"  # no row stands in for it

    nothing = {**record, "rows": [], "builds": [], "stale": True, "stand_in": "Cheaper variant (complete)"}
    cells = [c.strip() for c in unfinished_table({"slow": nothing}, {}, best, "judge").splitlines()[2].split("|")[1:-1]]
    assert cells[0] == "slow **(recorded with another config than the row's: stale)**"
    assert cells[1].startswith("no build finished; 0 of 80 questions answered")
    assert cells[6] == "unknown (no build finished yet)" and cells[7] == "-" and cells[8] == "-"
    assert cells[9] == "Cheaper variant (complete)"

    running = {**record, "building": {"conversation_id": "d", "seconds": 3600.0, "llm_calls": 120, "prompt_tokens": 1,
                                      "completion_tokens": 1, "degenerate": [], "failures": {}, "reached": None}}
    cells = [c.strip() for c in unfinished_table({"slow": running}, {}, best, "judge").splitlines()[2].split("|")[1:-1]]
    assert cells[1].startswith("c built; d part built; 10 of 80 questions answered")
    assert cells[2] == "c: 751 calls, 5,944 s **hierarchy 44 -> 2 -> 1**; d (unfinished): 120 calls, 3,600 s so far"
    # the hour the running build has done is not counted again
    assert cells[6] == f"~{(70 * 40 + 5944 - 3600) / 3600:.1f} h (70 questions, 1 build)"

    # a build that says how far it got, with the calls it could not use
    said = {**running["building"], "reached": {"turns": 40, "of": 369}, "failures": {"peer.add": 3, "answerer": 1},
            "seconds": 9000.0}
    cells = [c.strip() for c in unfinished_table({"slow": {**record, "building": said}}, {}, best, "judge")
             .splitlines()[2].split("|")[1:-1]]
    assert cells[2].endswith("d (unfinished): 120 calls, 9,000 s so far, 40 of 369 turns added, "
                             "failed calls answerer 1, peer.add 3")
    # past the mean build, the rest of it counts as nothing (never below nothing)
    assert cells[6] == f"~{70 * 40 / 3600:.1f} h (70 questions, 1 build)"


def test_the_date_aware_temporal_column_gives_its_n_or_says_it_was_not_recorded():
    old = _run("old", lambda i: True)
    measured = _run("new", lambda i: True)
    measured.metrics["by_category"]["temporal"] = {"n": 10, "temporal_date": 0.75,
                                                   "ci": {"temporal_date": {"low": 0.41, "high": 0.93, "n": 8}}}
    unresolved = _run("none", lambda i: True)
    unresolved.metrics["by_category"]["temporal"] = {"n": 10, "temporal_date": None, "ci": {"temporal_date": None}}
    table = group_table([old, measured, unresolved], {}, None, "judge", {"c": 100}).splitlines()
    column = table[0].split("|").index(" temporal, date-aware ")
    assert [line.split("|")[column].strip() for line in table[2:]] == [
        "not recorded", "0.750 [0.41, 0.93] (n=8)", "-"]
