"""Score a CompassMem fuser against another on the pairs a build asks: agreement with a teacher.

    python eval/compare_fusers.py TEACHER_CONFIG CANDIDATE_CONFIG --data PATH --conversations ID[,ID...]
                                  [--sessions N] [--allow-training-overlap] [--pairs-out FILE]

Builds each conversation with TEACHER_CONFIG (its fuser is typically the prompted F.1 coreference
call replayed from the response cache: ``compassmem_teacher.yaml``), records every (new event,
existing event) pair its fusion step asks and the teacher's outcome (``fusion_outcome``: merge, a
relation edge, or no link), then asks CANDIDATE_CONFIG's fuser (e.g. the ``ClassifierFuser`` of
``compassmem_trained_construction.yaml``) the same pairs. Prints one JSON object: the pairs, the
teacher's and the candidate's outcome counts (merge / link / none), accuracy and macro-F1 of the
candidate over the three outcomes, the same for the majority-outcome baseline, and the link
agreement (link or not) with its F1. The candidate sees the teacher's events, so the score is the
fusion decision alone, not the segmentation before it. ``--pairs-out`` writes each pair (the two
event lines, their cosine, both outcomes and relations) as JSON lines, for checking by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from memlab.config import build_pipeline
from memlab.data import DataError
from memlab.data.select import load_conversations
from memlab.eval.runner import refuse_training_overlap
from memlab.training.fusion import RecordingFuser, fusion_scores, outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("teacher")
    parser.add_argument("candidate")
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations", required=True, help="comma-separated conversation ids")
    parser.add_argument("--sessions", type=int, help="only the first N sessions of each conversation")
    parser.add_argument("--pairs-out", help="write every pair and both outcomes to this JSONL file")
    parser.add_argument("--allow-training-overlap", action="store_true",
                        help="score on conversations the candidate's trained stages learnt from (refused otherwise)")
    args = parser.parse_args(argv)
    teacher, _, _ = build_pipeline(args.teacher)
    candidate, _, _ = build_pipeline(args.candidate)
    ids = args.conversations.split(",")
    try:
        conversations = load_conversations(args.data, ids, sessions=args.sessions)
        refuse_training_overlap(candidate.fuser, conversations, args.allow_training_overlap)
    except (DataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    teacher.eval()
    candidate.eval()
    recorder = RecordingFuser(teacher.fuser)
    teacher.replace("fuser", recorder)
    for conversation in conversations:
        teacher.build(conversation.history())
    if not recorder.asked:
        print("error: the teacher's builds asked no fusion pair (one session each?)", file=sys.stderr)
        return 1
    pairs = [item for item, _ in recorder.asked]
    gold = [outcome(out, item, teacher.merge_threshold) for item, out in recorder.asked]
    replies = candidate.fuser(pairs)
    predicted = [outcome(out, item, teacher.merge_threshold) for item, out in zip(pairs, replies)]
    if args.pairs_out:
        with open(args.pairs_out, "w", encoding="utf-8") as f:
            for (item, first), second, g, p in zip(recorder.asked, replies, gold, predicted):
                f.write(json.dumps({"existing": item.existing.describe(), "new": item.new.describe(),
                                    "similarity": round(item.similarity, 3), "teacher": g, "teacher_relation":
                                    first.relation, "candidate": p, "candidate_relation": second.relation}) + "\n")
    majority = [Counter(gold).most_common(1)[0][0]] * len(gold)
    print(json.dumps({"conversations": ids, "sessions": args.sessions, "pairs": len(pairs),
                      "teacher": dict(Counter(gold)), "candidate": dict(Counter(predicted)),
                      "candidate_scores": fusion_scores(gold, predicted), "majority": majority[0],
                      "majority_scores": fusion_scores(gold, majority),
                      "teacher_failed": sum(out.error is not None for _, out in recorder.asked)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
