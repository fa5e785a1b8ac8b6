"""The scoring commands of ``memlab`` (``memlab.cli`` parses them): ``check-judge`` (a judge
against the LoCoMo audit and the labelled answers), ``rescore`` (finished runs scored again, in
place) and ``answer-loss`` (where runs lose their answer score). Each takes the parsed arguments
and returns the exit status: 0, 1 when some answer got no verdict, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

log = logging.getLogger("memlab")


def add_scoring_parsers(commands, path, names, positive) -> None:
    """The three commands' parsers on ``commands`` (argparse subparsers), with the CLI's argument
    types: ``path`` (a non-empty path), ``names`` (comma-separated ids), ``positive`` (an integer >= 1)."""
    check_judge = commands.add_parser("check-judge", help="measure a judge against the LoCoMo audit's gold and "
                                      "wrong answers and, with --labels, labelled real answers "
                                      "(memlab.eval.judge_audit)")
    check_judge.add_argument("config", type=path, help="a judge YAML file, or a shipped judge's name (rules_first: configs/judges)")
    check_judge.add_argument("overrides", nargs="*", help="dotted overrides of the judge config")
    check_judge.add_argument("--audit", type=path, help="the LoCoMo audit folder (../shared/data/locomo/audit); "
                             "without it, only the labelled answers are judged (a candidate's cheap first look)")
    check_judge.add_argument("--conversations", type=names, help="comma-separated conversation ids (default: all)")
    check_judge.add_argument("--max-questions", type=positive, help="at most N questions per conversation")
    check_judge.add_argument("--labels", type=path,
                             help="a labelled positive control (eval/judge_labels/positive_control_dev.json)")
    check_judge.add_argument("--out", type=path, required=True, help="the JSON file to write")

    answer_loss = commands.add_parser("answer-loss", help="where finished runs lose their answer score: per "
                                      "category, the F1 lost on disputed gold, on evidence not read, on evidence "
                                      "read (memlab.eval.answer_loss)")
    answer_loss.add_argument("runs", type=path, nargs="+", metavar="RUN_DIR",
                             help="folders written by memlab run (their predictions.jsonl are pooled)")
    answer_loss.add_argument("--errata", type=path, help="an errata file in the LoCoMo audit's format")
    answer_loss.add_argument("--k", type=positive, default=10,
                             help="units read, for runs without recall@context (default 10)")
    answer_loss.add_argument("--metric", default="f1_amem", help="the per-question score (default f1_amem)")
    answer_loss.add_argument("--data", type=path, help="the LoCoMo file the runs answered: count the answer-missed "
                             "questions whose gold is a span of an evidence turn")
    answer_loss.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")

    rescore = commands.add_parser("rescore", help="score finished runs' recorded answers again, in place, with "
                                  "the current scorers and a judge: only judge calls are paid (memlab.eval.rescore)")
    rescore.add_argument("runs", type=path, nargs="+", metavar="RUN_DIR", help="folders written by memlab run")
    rescore.add_argument("--judge", type=path, required=True, help="a judge YAML file, or a shipped judge's name (rules_first: configs/judges)")
    rescore.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="a dotted override of the judge config (repeatable)")


def cmd_check_judge(args: argparse.Namespace) -> int:
    from memlab.config import instantiate, load_config
    from memlab.eval.conversation import close_lms
    from memlab.eval.judge import Judge
    from memlab.eval.judge_audit import check_judge, load_audit_items
    from memlab.eval.labels import judge_agreement, judge_labelled, judged_items, load_labels
    from memlab.fileio import refuse_writing_into, write_json_atomic

    refuse_writing_into(args.out, "--out", {"the judge config": args.config, "--audit": args.audit,
                                             "--labels": args.labels})
    if args.audit is None and args.labels is None:
        log.error("check-judge needs --audit, --labels or both: there is nothing to judge")
        return 2
    try:  # every input read, and the judge built, before any verdict is paid for
        items = load_audit_items(Path(args.audit), set(args.conversations or ()), args.max_questions) \
            if args.audit else None
        labels = load_labels(args.labels) if args.labels else None
        judge = instantiate(load_config(args.config, args.overrides))
    except (ValueError, TypeError) as e:
        log.error("%s", e)
        return 2
    if not isinstance(judge, Judge):
        log.error("%s: builds a %s, not a judge", args.config, type(judge).__name__)
        return 2
    try:
        result = check_judge(judge, items) if items is not None else {"judge": judge.judge_info()}
        if labels is not None:
            verdicts = judge_labelled(judge, judged_items(labels))
            result["positive_control"] = {"labels": str(args.labels), **judge_agreement(labels, verdicts)}
    finally:
        close_lms(None, judge)
    write_json_atomic(args.out, {"config": str(args.config), "overrides": args.overrides, **result})
    sets = result.get("sets", {})
    control = result.get("positive_control", {}).get("all")
    print(json.dumps({name: sets[name]["rate"] for name in sets}
                     | ({"lenient": result["lenient"]} if "lenient" in result else {})
                     | ({"accepts_right": control["accepts_right"]["rate"], "kappa": control["kappa"]["value"]}
                        if control else {})))
    return 0


def cmd_answer_loss(args: argparse.Namespace) -> int:
    from memlab.eval.answer_loss import disputed_ids, loss_table, markdown

    rows = []
    for run in map(Path, args.runs):
        path = run / "predictions.jsonl"
        if not path.is_file():
            log.error("%s: no predictions.jsonl, so not a finished memlab run", run)
            return 2
        rows += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    turn_texts = None
    if args.data is not None:
        from memlab.data import load_dataset

        turn_texts = {(conversation.id, turn.id): turn.text for conversation in load_dataset(args.data)
                      for session in conversation.sessions for turn in session.turns}
    table = loss_table(rows, disputed_ids(Path(args.errata) if args.errata else None), args.k, args.metric,
                       turn_texts)
    print(json.dumps(table, indent=2) if args.json else markdown(table, args.metric))
    return 0


def cmd_rescore(args: argparse.Namespace) -> int:
    from memlab.config import instantiate, load_config
    from memlab.eval.conversation import close_lms
    from memlab.eval.rescore import rescore_run
    from memlab.fileio import refuse_writing_into

    for folder in args.runs:
        refuse_writing_into(folder, "RUN_DIR", {"the judge config --judge": args.judge})
    try:
        node = load_config(args.judge, args.overrides)
        judge = instantiate(node)
    except ValueError as e:
        log.error("%s", e)
        return 2
    status = 0
    try:
        for folder in args.runs:
            try:
                metrics = rescore_run(folder, judge, node, args.judge)
            except ValueError as e:  # this folder is not a run: say so, go on with the others
                log.error("%s", e)
                status = 2
                continue
            unjudged = metrics["rescored_from"]["unjudged"]
            print(f"{folder}: judge {_figure(metrics['overall'].get('judge'))} over {metrics['overall']['n']} "
                  f"questions" + (f"; {unjudged} answers got no usable verdict" if unjudged else ""))
            if unjudged:
                status = max(status, 1)
    finally:
        close_lms(None, judge)
    return status


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
