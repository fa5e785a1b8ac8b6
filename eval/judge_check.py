"""Check a judge before believing it: does it accept gold answers and reject wrong ones?

    python eval/judge_check.py JUDGE_CONFIG [key=value ...] --audit DIR [--conversations ID,...]
                               [--max-questions N] [--labels FILE] --out FILE

``JUDGE_CONFIG`` is a YAML whose top node is a judge component (``configs/judges/*.yaml``, the
judges memlab ships). ``--audit`` is the LoCoMo audit folder (``../shared/data/locomo/audit``):
its ``wrong_answers_specific_dev.jsonl`` (specific but wrong) and ``wrong_answers_vague_dev.jsonl``
(vague but topical) give, for every dev question of categories 1-4, its gold answer and a wrong
one. The judge sees each question three times, with the gold answer as the prediction (it should
accept) and with each wrong answer (it should reject). Writes ``FILE`` (JSON): per set and per
category, how many it accepted of how many it gave a verdict on, the rate with its Wilson 95%
interval, the reference judge's rate on the same items (gpt-4o-mini with the usual generous
prompt, the audit's ``reference_judge_accepted``), and ``lenient``: whether it accepts more than a
third of the vague wrong answers. ``--labels`` adds the positive control: the judge's verdicts on
real predictions labelled right, partly right or wrong by reading (``memlab.eval.labels``; the
committed set is ``eval/judge_labels/positive_control_dev.json``), as ``positive_control``: its
acceptance of each, and Cohen's kappa, over all of them and per half. Every verdict is cached
like any LLM call, so an interrupted check resumes; the judge's unusable replies are counted, not
guessed.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from memlab.config import ConfigError, instantiate, load_config
from memlab.eval.intervals import wilson_interval
from memlab.eval.judge import Judge, JudgeIn
from memlab.eval.labels import LabelFileError, judge_agreement, judge_labelled, judged_items, load_labels
from memlab.eval.scripting import ScriptError, reports_script_errors
from memlab.fileio import write_json_atomic
from memlab.types import LOCOMO_CATEGORIES

SETS = {"specific_wrong": "wrong_answers_specific_dev.jsonl", "vague_wrong": "wrong_answers_vague_dev.jsonl"}
#: A judge accepting more vague wrong answers than this is flagged beside its scores.
LENIENT_ABOVE = 1 / 3


def load_items(audit: Path, conversations: set[str] | None, max_questions: int | None) -> list[dict[str, Any]]:
    """One item per question: conversation, qa_index, category name, question, gold, and the
    two wrong answers with the reference judge's verdicts (the two files must list the same
    questions)."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for name, file in SETS.items():
        path = audit / file
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ScriptError(f"{path}: cannot read it ({e.strerror or e})") from None
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
                raise ScriptError(f"{path}: line {number}: {e}") from None
    items = [item for item in found.values() if all(name in item for name in SETS)]
    if len(items) != len(found):
        raise ScriptError(f"{audit}: {len(found) - len(items)} questions are in one wrong-answer file only")
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
        raise ScriptError(f"{audit}: no question left to judge")
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
    judged = [v for v in verdicts if v is not None]
    accepted = sum(judged)
    interval = wilson_interval(accepted, len(judged)) if judged else None
    known = [r for r in reference if r is not None]
    return {"accepted": accepted, "judged": len(judged), "no_verdict": len(verdicts) - len(judged),
            "rate": accepted / len(judged) if judged else None,
            "ci": None if interval is None else {"low": interval[0], "high": interval[1]},
            "reference_rate": sum(known) / len(known) if known else None}


@reports_script_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="a judge config (configs/judges/*.yaml)")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--audit", required=True, type=Path, help="the LoCoMo audit folder")
    parser.add_argument("--conversations", help="comma-separated conversation ids (default: all in the audit)")
    parser.add_argument("--max-questions", type=int, help="at most N questions per conversation")
    parser.add_argument("--labels", type=Path, help="a labelled positive control (eval/judge_labels/*.json)")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    items = load_items(args.audit, set(args.conversations.split(",")) if args.conversations else None,
                       args.max_questions)
    try:
        labels = load_labels(args.labels) if args.labels else None
    except LabelFileError as e:
        raise ScriptError(str(e)) from None
    try:
        judge = instantiate(load_config(args.config, args.overrides))
    except (ConfigError, ValueError, TypeError) as e:
        raise ScriptError(str(e)) from None
    if not isinstance(judge, Judge):
        raise ScriptError(f"{args.config}: builds a {type(judge).__name__}, not a judge")
    result = check_judge(judge, items)
    if labels is not None:
        verdicts = judge_labelled(judge, judged_items(labels))
        result["positive_control"] = {"labels": str(args.labels), **judge_agreement(labels, verdicts)}
    write_json_atomic(args.out, {"config": str(args.config), "overrides": args.overrides, **result})
    sets = result["sets"]
    control = result.get("positive_control", {}).get("all")
    print(json.dumps({name: sets[name]["rate"] for name in sets} | {"lenient": result["lenient"]}
                     | ({"accepts_right": control["accepts_right"]["rate"], "kappa": control["kappa"]["value"]}
                        if control else {})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
