"""Check a judge before believing it: does it accept gold answers and reject wrong ones?

The LoCoMo audit folder (``../shared/data/locomo/audit``) gives, for every dev question of
categories 1-4, its gold answer and two wrong ones: ``wrong_answers_specific_dev.jsonl`` (specific
but wrong) and ``wrong_answers_vague_dev.jsonl`` (vague but topical). ``check_judge`` shows the
judge each question three times, with the gold as the prediction (it should accept) and with each
wrong answer (it should reject), and counts per set and per category how many it accepted of how
many it gave a verdict on, the rate with its Wilson 95% interval, the reference judge's rate on the
same items (gpt-4o-mini with the usual generous prompt, the audit's ``reference_judge_accepted``),
and ``lenient``: whether it accepts more than a third of the vague wrong answers.

A check on the gold alone cannot tell a judge from a string matcher; ``memlab check-judge
--labels`` adds the positive control of ``memlab.eval.labels`` (real predictions labelled by
reading). Every verdict is cached like any LLM call, so an interrupted check resumes; the
judge's unusable replies are counted, not guessed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from memlab.errors import MemlabError
from memlab.eval.intervals import wilson_interval
from memlab.eval.judge import Judge, JudgeIn
from memlab.types import LOCOMO_CATEGORIES

SETS = {"specific_wrong": "wrong_answers_specific_dev.jsonl", "vague_wrong": "wrong_answers_vague_dev.jsonl"}
#: A judge accepting more vague wrong answers than this is flagged beside its scores.
LENIENT_ABOVE = 1 / 3


class AuditFileError(MemlabError, ValueError):
    """An audit folder whose wrong-answer files cannot be read as the audit writes them."""


def load_audit_items(audit: Path, conversations: set[str] | None = None,
                     max_questions: int | None = None) -> list[dict[str, Any]]:
    """One item per question: conversation, qa_index, category name, question, gold, and the
    two wrong answers with the reference judge's verdicts (the two files must list the same
    questions); only ``conversations`` and the first ``max_questions`` of each where given."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for name, file in SETS.items():
        path = audit / file
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise AuditFileError(f"{path}: cannot read it ({e.strerror or e})") from None
        for number, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
                key = (row["conversation"], int(row["qa_index"]))
                item = found.setdefault(key, {"conversation": key[0], "qa_index": key[1],
                                              "category": LOCOMO_CATEGORIES[int(row["category"])],
                                              "question": row["question"], "gold": str(row["golden_answer"])})
                if item["question"] != row["question"]:
                    raise ValueError(f"question differs from the other set's: {row['question']!r:.60}")
                item[name] = str(row["wrong_answer"])
                item[f"{name}_reference"] = row.get("reference_judge_accepted")
            except (ValueError, KeyError, TypeError) as e:
                raise AuditFileError(f"{path}: line {number}: {e}") from None
    items = [item for item in found.values() if all(name in item for name in SETS)]
    if len(items) != len(found):
        raise AuditFileError(f"{audit}: {len(found) - len(items)} questions are in one wrong-answer file only")
    if conversations:
        items = [item for item in items if item["conversation"] in conversations]
    if max_questions:
        seen: dict[str, int] = defaultdict(int)
        kept = []
        for item in items:
            seen[item["conversation"]] += 1
            if seen[item["conversation"]] <= max_questions:
                kept.append(item)
        items = kept
    if not items:
        raise AuditFileError(f"{audit}: no question left to judge")
    return items


def check_judge(judge: Judge, items: list[dict[str, Any]], batch_size: int = 8) -> dict[str, Any]:
    """The acceptance counts of ``judge`` on the gold and the wrong answers of ``items``."""
    predictions = {"gold": "gold", **{name: name for name in SETS}}
    verdicts: dict[str, list[bool | None]] = {}
    for name, field in predictions.items():
        inputs = [JudgeIn(item["question"], item["gold"], item[field]) for item in items]
        outs = [out for start in range(0, len(inputs), batch_size) for out in judge(inputs[start:start + batch_size])]
        verdicts[name] = [out.correct for out in outs]
    result: dict[str, Any] = {"judge": judge.judge_info(), "questions": len(items), "sets": {}, "by_category": {}}
    for name in predictions:
        result["sets"][name] = acceptance(verdicts[name], [item.get(f"{name}_reference") for item in items])
        for category in dict.fromkeys(item["category"] for item in items):
            chosen = [i for i, item in enumerate(items) if item["category"] == category]
            result["by_category"].setdefault(category, {})[name] = acceptance(
                [verdicts[name][i] for i in chosen], [items[i].get(f"{name}_reference") for i in chosen])
    vague = result["sets"]["vague_wrong"]["rate"]
    result["lenient"] = vague is not None and vague > LENIENT_ABOVE
    return result


def acceptance(verdicts: list[bool | None], reference: list[bool | None]) -> dict[str, Any]:
    """How many of ``verdicts`` accepted, of those given, with the Wilson interval, and the
    reference judge's rate on the same items."""
    judged = [v for v in verdicts if v is not None]
    accepted = sum(judged)
    interval = wilson_interval(accepted, len(judged)) if judged else None
    known = [r for r in reference if r is not None]
    return {"accepted": accepted, "judged": len(judged), "no_verdict": len(verdicts) - len(judged),
            "rate": accepted / len(judged) if judged else None,
            "ci": None if interval is None else {"low": interval[0], "high": interval[1]},
            "reference_rate": sum(known) / len(known) if known else None}
