"""Prompt and generation speed of a local GGUF model through LlamaCppLM (no cache).

    python eval/llm_speed.py [--model qwen2.5-coder-1.5b-instruct-q4_k_m] [--threads N[,N...]]

With several thread counts (``--threads 1,2``) each is measured and the fastest for generation
is named beside ``LlamaCppLM``'s default (every available core).

Prompt speed: a ~770-token prompt answered with one token. Generation speed: a 64-token
completion of a short prompt, minus that prompt's time at the measured prompt speed; then
the same for a 96-token completion under a JSON schema, with memlab's greedy grammar check
(``fast_grammar``) and with llama.cpp's full grammar sampler.
The prompts differ, so llama.cpp's prefix cache cannot skip the later ones.
"""

from __future__ import annotations

import argparse

from memlab.clock import active_seconds
from memlab.lm import ChatRequest, LlamaCppLM
from memlab.lm.llamacpp import available_cores
from memlab.lm.models import DEFAULT_MODEL


def filler(seed: int) -> str:
    return " ".join(f"On day {i + seed} Priya walked dog {i * seed}, fed the cat and wrote notes about clinic {seed}."
                    for i in range(30))


WALKS_SCHEMA = {
    "type": "object",
    "properties": {"walks": {"type": "array", "items": {
        "type": "object",
        "properties": {"day": {"type": "integer"}, "dog": {"type": "integer"}, "note": {"type": "string"}},
        "required": ["day", "dog", "note"]}}},
    "required": ["walks"],
}


def speeds(model: str, threads: int | None) -> tuple[LlamaCppLM, float, float, float]:
    """The loaded model and its load time (s), prompt speed and generation speed (tokens/s)."""
    lm = LlamaCppLM(model=model, cache=None, n_threads=threads)
    start = active_seconds()
    lm.warm_up()
    load = active_seconds() - start
    prompt = lm.generate([ChatRequest.of(f"Summarise in two sentences:\n{filler(7)}", max_tokens=1)])[0]
    prompt_speed = prompt.prompt_tokens / prompt.latency_s
    story = lm.generate([ChatRequest.of(f"Write a 60-word story about {filler(3)[:200]}", max_tokens=64)])[0]
    generation_s = story.latency_s - story.prompt_tokens / prompt_speed
    print(f"model {model}, n_threads {lm.n_threads}: load {load:.1f} s; "
          f"prompt {prompt.prompt_tokens} tokens at {prompt_speed:.0f} tokens/s; "
          f"generation {story.completion_tokens} tokens at {story.completion_tokens / generation_s:.1f} tokens/s")
    return lm, load, prompt_speed, story.completion_tokens / generation_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--threads", default=None,
                        help="n_threads, or several comma-separated to compare (default: LlamaCppLM's, every available core)")
    args = parser.parse_args()
    counts = [int(n) for n in args.threads.split(",")] if args.threads else [None]
    measured = {}
    for threads in counts:
        lm, _, prompt_speed, generation = speeds(args.model, threads)
        measured[lm.n_threads] = (generation, prompt_speed)
        lm.close()
    best = max(measured, key=lambda n: measured[n][0])
    if len(measured) > 1:
        print(f"fastest generation: n_threads {best} (LlamaCppLM's default here: {available_cores()})")
    prompt_speed = measured[best][1]
    lm = LlamaCppLM(model=args.model, cache=None, n_threads=best)
    full = LlamaCppLM(model=args.model, cache=None, n_threads=best, fast_grammar=False)
    for label, model in (("memlab's greedy check", lm), ("llama.cpp's full grammar sampler", full)):
        request = ChatRequest.of(f"List the walks as JSON: {filler(5)[:400]}", max_tokens=96, json_schema=WALKS_SCHEMA)
        model.warm_up()
        model._load().reset()  # the same fresh state for both
        walks = model.generate([request])[0]
        generation_s = walks.latency_s - walks.prompt_tokens / prompt_speed
        print(f"JSON-schema generation ({label}): {walks.completion_tokens} tokens at "
              f"{walks.completion_tokens / generation_s:.1f} tokens/s")
        model.close()


if __name__ == "__main__":
    main()
