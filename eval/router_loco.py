"""Question-type routers scored leave-one-conversation-out over the dev conversations (issue 25).

    python eval/router_loco.py --data ../shared/data/locomo/locomo10_dev.json [--trained DIR] [--checkpoint PATH]

Each conversation is scored by a router that never saw it. Rows:

* the rule router (``RuleRouter``; nothing to train);
* linear probes refitted per fold on the other conversations' questions of categories 1-4:
  TF-IDF (word 1-2-grams) + logistic regression, and frozen-MiniLM vectors + logistic regression
  (the regularisation ``C`` is picked per fold by an inner leave-one-conversation-out over the
  training conversations only);
* ``--trained DIR``: a trained router per fold, ``DIR/<conversation id>`` (e.g. ``memlab train
  finetune_router ... data.eval_ids=[<id>]``), checked never to have trained on its conversation;
* ``--checkpoint PATH``: one saved router, scored only on conversations it did not train on.

Accuracy is over categories 1-4 (a 4-way choice: LoCoMo's adversarial questions are not a type
a router can see); mean over conversations and per conversation, plus ms per question.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from memlab.data import DataError, load_dataset, select_conversations
from memlab.stage import Stage, trained_conversations
from memlab.stages.route import RuleRouter
from memlab.training.stage_eval import predict_question_types
from memlab.types import ANSWERABLE_CATEGORIES, Conversation

C_GRID = (0.3, 1.0, 3.0, 10.0)


def labelled(conversations: list[Conversation]) -> tuple[list[str], list[str], list[str]]:
    rows = [(c.id, q.text, q.category) for c in conversations for q in c.questions if q.category in ANSWERABLE_CATEGORIES]
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


def tfidf_probe(c: float) -> Callable:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    def fit(texts, labels, _vectors):
        model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, lowercase=True),
                              LogisticRegression(C=c, max_iter=1000))
        model.fit(texts, labels)
        return lambda texts, _v: list(model.predict(texts))
    return fit


def vector_probe(c: float) -> Callable:
    from sklearn.linear_model import LogisticRegression

    def fit(_texts, labels, vectors):
        model = LogisticRegression(C=c, max_iter=1000).fit(vectors, labels)
        return lambda _t, v: list(model.predict(v))
    return fit


def inner_choice(make: Callable[[float], Callable], ids, texts, labels, vectors) -> float:
    """The ``C`` with the best mean accuracy over an inner leave-one-conversation-out (training data only)."""
    ids, labels = np.array(ids), np.array(labels)
    best, best_c = -1.0, C_GRID[0]
    for c in C_GRID:
        scores = []
        for held in sorted(set(ids)):
            train, test = ids != held, ids == held
            predict = make(c)([t for t, m in zip(texts, train) if m], labels[train], vectors[train])
            scores.append(np.mean(np.array(predict([t for t, m in zip(texts, test) if m], vectors[test])) == labels[test]))
        if np.mean(scores) > best:
            best, best_c = float(np.mean(scores)), c
    return best_c


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations", help="comma-separated ids (default: all)")
    parser.add_argument("--trained", help="folder of trained routers, one per held-out conversation id")
    parser.add_argument("--checkpoint", action="append", default=[])
    parser.add_argument("--out", help="write the rows as JSON lines here too")
    args = parser.parse_args(argv)
    conversations = load_dataset(args.data)
    try:
        if args.conversations:
            conversations = select_conversations(conversations, args.conversations.split(","), source=args.data)
    except DataError as e:
        parser.error(str(e))
    from memlab.embed import SentenceTransformerEmbedder

    ids, texts, labels = labelled(conversations)
    vectors = SentenceTransformerEmbedder().encode(texts)
    ids_array, labels_array = np.array(ids), np.array(labels)
    results: dict[str, dict[str, float]] = {}
    seconds: dict[str, float] = {}
    notes: dict[str, dict] = {}

    def record(name: str, conversation: str, predicted: list[str], elapsed: float) -> None:
        mask = ids_array == conversation
        results.setdefault(name, {})[conversation] = float(np.mean(np.array(predicted) == labels_array[mask]))
        seconds[name] = seconds.get(name, 0.0) + elapsed

    for conversation in sorted(set(ids)):
        test, train = ids_array == conversation, ids_array != conversation
        test_texts = [t for t, m in zip(texts, test) if m]
        started = time.perf_counter()
        record("rule router", conversation, predict_question_types(RuleRouter(), test_texts),
               time.perf_counter() - started)
        for name, make in (("TF-IDF + logistic regression", tfidf_probe), ("frozen MiniLM + logistic regression",
                                                                          vector_probe)):
            train_ids = [i for i, m in zip(ids, train) if m]
            train_texts = [t for t, m in zip(texts, train) if m]
            c = inner_choice(make, train_ids, train_texts, labels_array[train], vectors[train])
            notes.setdefault(name, {})[conversation] = {"C": c}
            predict = make(c)(train_texts, labels_array[train], vectors[train])
            started = time.perf_counter()
            # Query encoding is part of a MiniLM probe's cost: time it on the texts, not the cached vectors.
            test_vectors = SentenceTransformerEmbedder().encode(test_texts) if "MiniLM" in name else None
            record(name, conversation, predict(test_texts, test_vectors), time.perf_counter() - started)
        routers = []
        if args.trained:
            routers.append((f"trained per fold ({args.trained})", Path(args.trained) / conversation))
        routers += [(path, Path(path)) for path in args.checkpoint]
        for name, path in routers:
            router = Stage.load(path)
            if conversation in {c for ids in trained_conversations(router).values() for c in ids}:
                if args.trained and name.startswith("trained per fold"):
                    raise SystemExit(f"{path} was trained on {conversation}: not a leave-one-out router")
                continue  # a single checkpoint is scored only where it did not train
            router.eval()
            started = time.perf_counter()
            record(name, conversation, predict_question_types(router, test_texts), time.perf_counter() - started)

    counts = {c: int(np.sum(ids_array == c)) for c in sorted(set(ids))}
    print("| router | mean over conversations | " + " | ".join(counts) + " | ms/question |")
    print("|---|---|" + "---|" * len(counts) + "---|")
    for name, per in results.items():
        questions = sum(counts[c] for c in per)
        row = {"router": name, "mean": float(np.mean(list(per.values()))), "per_conversation": per,
               "ms_per_question": 1000 * seconds[name] / questions, "notes": notes.get(name, {})}
        if args.out:
            with open(args.out, "a", encoding="utf-8") as out:
                out.write(json.dumps(row) + "\n")
        cells = " | ".join(f"{per[c]:.3f}" if c in per else "-" for c in counts)
        print(f"| {name} | {row['mean']:.3f} | {cells} | {row['ms_per_question']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
