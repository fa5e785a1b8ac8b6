"""Evidence recall of rerankers side by side over the same first-stage candidates (issue 5).

    python eval/compare_rerankers.py --data ../shared/data/locomo/locomo10_dev.json \
        --conversations conv-26,conv-30 --checkpoint checkpoints/reranker-minilm-turns [--prompted-questions 20]

The candidates are the top ``--depth`` turn units of ``rag_turns``' hybrid RRF ranking (k=10).
Rows: that first-stage order; the untrained baselines (cosine, in-list BM25 + cosine fusion);
each checkpoint alone and fused with the first-stage order (``OrderFusionReranker``, k=10);
optionally the prompted listwise reranker with the default local LLM on the first N questions
of each conversation (one LLM call per question). Prints one JSON object per row and a table.
"""

from __future__ import annotations

import argparse
import json
import sys

from memlab.data import DataError, load_dataset, select_conversations
from memlab.embed import SentenceTransformerEmbedder
from memlab.stage import Stage
from memlab.stages.rerank import CosineReranker, FusionReranker, OrderFusionReranker, PromptedReranker
from memlab.training.stage_eval import evaluate_reranker, reranker_candidates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations", required=True, help="comma-separated held-out conversation ids")
    parser.add_argument("--checkpoint", action="append", default=[], help="a saved reranker (repeatable)")
    parser.add_argument("--depth", type=int, default=50)
    parser.add_argument("--prompted-questions", type=int, default=0)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    args = parser.parse_args(argv)
    conversations = load_dataset(args.data)
    try:  # an unknown id is refused, never silently dropped
        conversations = select_conversations(conversations, args.conversations.split(","), source=args.data)
    except DataError as e:
        parser.error(str(e))
    embedder = SentenceTransformerEmbedder()
    items = reranker_candidates(conversations, embedder, depth=args.depth)
    rows = {"first stage (hybrid RRF, k=10)": (None, items), "cosine": (CosineReranker(embedder), items),
            "in-list BM25 + cosine RRF": (FusionReranker(embedder), items)}
    for path in args.checkpoint:
        trained = Stage.load(path)
        rows[path] = (trained, items)
        rows[f"{path} fused with first stage"] = (OrderFusionReranker(trained, rrf_k=10), items)
    if args.prompted_questions:
        from memlab.lm.llamacpp import LlamaCppLM

        taken: dict[str, int] = {}
        subset = []
        for item in items:  # the first N questions of each conversation
            if taken.get(item["conversation_id"], 0) < args.prompted_questions:
                taken[item["conversation_id"]] = taken.get(item["conversation_id"], 0) + 1
                subset.append(item)
        rows[f"prompted listwise (first {args.prompted_questions} per conversation)"] = (
            PromptedReranker(lm=LlamaCppLM(args.model, n_ctx=4096)), subset)
        rows[f"first stage (same {len(subset)} questions)"] = (None, subset)
    table = []
    for name, (reranker, data) in rows.items():
        result = evaluate_reranker(reranker, data)
        print(json.dumps({"reranker": name, **result}))
        recalls = result.get("reranked", result["first_stage"])
        ms = result.get("rerank_seconds_per_question", 0.0) * 1000
        table.append(f"| {name} | {result['questions']} | " + " | ".join(f"{recalls[f'recall@{k}']:.3f}" for k in (1, 5, 10, 20))
                     + f" | {ms:.0f} |")
    print("\n| reranker | questions | R@1 | R@5 | R@10 | R@20 | ms/question |\n|---|---|---|---|---|---|---|")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
