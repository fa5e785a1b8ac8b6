"""Where a run's answer score is lost: per category, the F1 each question misses (1 - F1) split
three ways, so a gain can be looked for where the loss is.

- **gold disputed**: the audit's errata change the question's gold answer (LoCoMo's
  ``locomo/audit/errata_dev.json``; answer-changing error types only);
- **evidence missing**: some gold evidence turn is not among the units the answerer read
  (``recall@context`` < 1 where the pipeline reports it, else ``recall@K`` with ``--k``);
- **evidence read, answer missed**: all of it was read and the answer still lost F1.

Questions without gold evidence count as "evidence read". The first that applies wins, in that
order.

With ``--data`` (the LoCoMo file the runs answered), the last bucket also counts the questions
whose gold answer is a span of one of their evidence turns (both under LoCoMo's answer
normalisation, whole words): what an extractive answerer could reach, and the F1 lost there is
the most a perfect one, routed perfectly, could win back.

    memlab answer-loss eval/runs/conv26/rag_turns_best --errata ../shared/data/locomo/audit/errata_dev.json
"""

from __future__ import annotations

from pathlib import Path

from memlab.data.errata import ANSWER_CHANGING, load_errata
from memlab.eval.metrics import normalize_answer
from memlab.types import ANSWERABLE_CATEGORIES

BUCKETS = ("gold disputed", "evidence missing", "evidence read, answer missed")
SPAN = "of which gold is a span of an evidence turn"


def disputed_ids(errata: Path | None) -> set[str]:
    """The ids of the questions whose gold answer the errata change (none without errata)."""
    if errata is None:
        return set()
    return {c.question_id for c in load_errata(errata) if c.error_type in ANSWER_CHANGING}


def bucket(row: dict, disputed: set[str], k: int) -> str:
    """Which of ``BUCKETS`` a row's loss falls in (module docstring)."""
    if row["question_id"] in disputed:
        return BUCKETS[0]
    recall = row.get("recall@context")
    if recall is None:
        recall = row.get(f"recall@{k}")
    return BUCKETS[1] if recall is not None and recall < 1 else BUCKETS[2]


def gold_is_evidence_span(row: dict, turn_texts: dict[tuple[str, str], str]) -> bool:
    """Whether ``row``'s gold answer, normalised, is a run of whole words of one of its evidence
    turns (``turn_texts``: (conversation id, turn id) -> text)."""
    gold = normalize_answer(row.get("gold", ""))
    texts = (turn_texts.get((row.get("conversation_id"), turn), "") for turn in row.get("evidence") or ())
    return bool(gold) and any(f" {gold} " in f" {normalize_answer(text)} " for text in texts)


def loss_table(rows: list[dict], disputed: set[str], k: int, metric: str,
               turn_texts: dict[tuple[str, str], str] | None = None) -> dict[str, dict]:
    """Per category and overall (categories 1-4): n, mean ``metric``, and per bucket the
    questions and the F1 lost (a share of the category's loss); with ``turn_texts`` ((conversation
    id, turn id) -> text), the read bucket's questions whose gold is a span of an evidence turn (``SPAN``)."""
    table: dict[str, dict] = {}
    for name in (*ANSWERABLE_CATEGORIES, "overall"):
        chosen = [r for r in rows if r["category"] in ANSWERABLE_CATEGORIES and (name == "overall" or r["category"] == name)]
        if not chosen:
            continue
        lost = {b: 0.0 for b in BUCKETS}
        count = {b: 0 for b in BUCKETS}
        read = []  # the last bucket's rows, for the span count
        for row in chosen:
            b = bucket(row, disputed, k)
            count[b] += 1
            lost[b] += 1.0 - (row.get(metric) or 0.0)
            if b == BUCKETS[2]:
                read.append(row)
        total = sum(lost.values())
        mean = sum(r.get(metric) or 0.0 for r in chosen) / len(chosen)
        table[name] = {"n": len(chosen), metric: mean,
                       "lost": total, **{b: {"questions": count[b], "lost": lost[b],
                                              "share": lost[b] / total if total else 0.0} for b in BUCKETS}}
        if turn_texts is not None:
            span_lost = [1.0 - (r.get(metric) or 0.0) for r in read if gold_is_evidence_span(r, turn_texts)]
            table[name][SPAN] = {"questions": len(span_lost), "lost": sum(span_lost),
                                 "share": sum(span_lost) / total if total else 0.0,
                                 "ceiling": mean + sum(span_lost) / len(chosen)}
    return table


def markdown(table: dict[str, dict], metric: str) -> str:
    """``loss_table``'s table in markdown."""
    spans = any(SPAN in block for block in table.values())
    head = f"| category | n | {metric} | F1 lost | " + " | ".join(f"{b}: questions, share of loss" for b in BUCKETS)
    head += f" | {SPAN}: questions, share of loss, {metric} if all right" if spans else ""
    lines = [head + " |", "|" + "---|" * (4 + len(BUCKETS) + spans)]
    for name, block in table.items():
        cells = [f"{block[b]['questions']}, {block[b]['share']:.2f}" for b in BUCKETS]
        if spans:
            cells.append(f"{block[SPAN]['questions']}, {block[SPAN]['share']:.2f}, {block[SPAN]['ceiling']:.3f}")
        lines.append(f"| {name} | {block['n']} | {block[metric]:.3f} | {block['lost']:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
