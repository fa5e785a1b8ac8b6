"""Seconds and peak memory of one LoRA step of ``finetune_answerer`` on a CPU, for a choice of
base-weight dtype and gradient checkpointing: what decides whether a student fits the machine.

    python eval/answerer_step_memory.py [--student qwen2.5-coder-1.5b-instruct-q4_k_m]
        [--dtype float32|bfloat16] [--recompute] [--rank 8]

The batch is four training examples (conv-41 and conv-42) from the committed examples file,
taken a quarter of the way down the list sorted by length (about 950 tokens each for the 1.5B's
tokenizer: a long batch, not the longest), tokenised as the recipe does; the step is one forward
and backward under bf16 autocast, as the recipe trains. Run each setting in its own process: the
peak is the process's (``ru_maxrss``), model loading included. A setting that needs more memory
than the machine has is killed by the kernel and prints nothing after ``loaded``.
"""

from __future__ import annotations

import argparse
import resource
from pathlib import Path

import torch

from memlab.clock import active_seconds
from memlab.lm.hf import HFLM
from memlab.recipes.finetune_answerer import read_examples
from memlab.training.causal_lm import add_lora, completion_loss, recompute_activations, tokenize_pair

EXAMPLES = Path(__file__).resolve().parents[1] / "checkpoints" / "answerer-examples.jsonl.gz"


def peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--student", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--recompute", action="store_true", help="gradient checkpointing (recompute_activations)")
    parser.add_argument("--rank", type=int, default=8)
    args = parser.parse_args()

    tokenizer, base = HFLM(args.student, cache=None, dtype=args.dtype).loaded()
    print(f"loaded: peak {peak_mb()} MB", flush=True)
    _, by_conversation = read_examples(EXAMPLES)
    rows = [tokenize_pair(tokenizer, e.messages, e.target, 2048)
            for conversation in ("conv-41", "conv-42") for e in by_conversation[conversation]]
    rows = sorted((r for r in rows if r is not None), key=lambda r: -len(r["input_ids"]))
    batch = rows[len(rows) // 4:len(rows) // 4 + 4]
    model = add_lora(base, args.rank, 2 * args.rank)
    if args.recompute:
        recompute_activations(model)
    model.train()
    started = active_seconds()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        completion_loss(model, batch, tokenizer.pad_token_id).backward()
    print(f"{args.student} {args.dtype} recompute={args.recompute}: tokens {[len(r['input_ids']) for r in batch]}, "
          f"step {active_seconds() - started:.1f} s, peak {peak_mb()} MB, torch threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
