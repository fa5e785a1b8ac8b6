"""Greedy generation of N independent requests decoded together (one ``llama_decode`` a step for all N
sequences), against one at a time, on this machine's cores, with llama-cpp-python's low-level API.

    python eval/batched_decode_speed.py [N ...]        # default 1 2 4 8; run it on an idle machine

Each sequence gets its own prompt of about 900 tokens (decoded alone, in 512-token chunks), then 64 greedy steps
decode one token of every sequence per call. It prints prompt and generation tokens/s for each N, and whether
sequence 0's 64 tokens are the ones it gets decoded alone (N = 1 must come first for that). memlab's
``LlamaCppLM`` decodes one request at a time; this measures what batching independent requests would buy
(BENCHMARKS.md, "Local LLM speed").
"""
import argparse
import time

import llama_cpp as L
import numpy as np

from memlab.lm.llamacpp import available_cores
from memlab.lm.models import DEFAULT_MODEL, resolve_model

STEPS = 64
TOPICS = ["a camping trip in June", "a new painting class", "adopting a dog", "a marathon in Boston",
          "moving to a new city", "a job interview", "a family dinner", "learning the guitar"]


def prompt(i):
    body = " ".join(f"Turn {k}: Caroline said she keeps thinking about {TOPICS[i]} and what it meant to her." for k in range(40))
    return (f"<|im_start|>system\nYou extract facts.<|im_end|>\n<|im_start|>user\n{body}\n"
            f"List every fact about {TOPICS[i]} as JSON.<|im_end|>\n<|im_start|>assistant\n")


def tokenize(text):
    raw = text.encode()
    buf = (L.llama_token * (len(raw) + 16))()
    n = L.llama_tokenize(vocab, raw, len(raw), buf, len(buf), False, True)
    return list(buf[:n])


def run(n_seq):
    assert n_seq <= len(TOPICS), f"at most {len(TOPICS)} requests"
    cp = L.llama_context_default_params()
    cp.n_ctx = 1024 * n_seq
    cp.n_batch = 512
    cp.n_ubatch = 512
    cp.n_seq_max = n_seq
    cp.n_threads = cp.n_threads_batch = available_cores()  # as LlamaCppLM
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(512, 0, n_seq)
    toks = [tokenize(prompt(i)) for i in range(n_seq)]
    last = [None] * n_seq

    def decode(items):  # items: (token, pos, seq, want_logits)
        batch.n_tokens = len(items)
        for j, (t, p, s, w) in enumerate(items):
            batch.token[j] = t
            batch.pos[j] = p
            batch.n_seq_id[j] = 1
            batch.seq_id[j][0] = s
            batch.logits[j] = w
        assert L.llama_decode(ctx, batch) == 0

    t0 = time.perf_counter()
    for s, tk in enumerate(toks):
        for start in range(0, len(tk), 512):
            chunk = tk[start:start + 512]
            decode([(t, start + k, s, start + k == len(tk) - 1) for k, t in enumerate(chunk)])
        last[s] = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).argmax()
    t_prompt = time.perf_counter() - t0
    outs = [[int(last[s])] for s in range(n_seq)]
    t0 = time.perf_counter()
    for step in range(STEPS - 1):
        decode([(outs[s][-1], len(toks[s]) + step, s, True) for s in range(n_seq)])
        for s in range(n_seq):
            outs[s].append(int(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, s), shape=(n_vocab,)).argmax()))
    t_gen = time.perf_counter() - t0
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    ptoks = sum(map(len, toks))
    print(f"N={n_seq}: prompt {ptoks} tokens in {t_prompt:.1f} s ({ptoks / t_prompt:.0f}/s); "
          f"generation {n_seq * (STEPS - 1)} tokens in {t_gen:.1f} s ({n_seq * (STEPS - 1) / t_gen:.1f}/s, "
          f"{t_gen / (STEPS - 1) * 1000:.0f} ms a step)", flush=True)
    return outs


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[1, 2, 4, 8], help="requests decoded together")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args()
    L.llama_backend_init()
    model = L.llama_model_load_from_file(str(resolve_model(args.model)).encode(), L.llama_model_default_params())
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    decoded_alone = None  # sequence 0's tokens at N = 1, the reference for every larger batch
    for n in args.sizes:
        outs = run(n)
        if n == 1:
            decoded_alone = outs[0]
        elif decoded_alone is not None:
            print(f"  sequence 0 the same as decoded alone: {outs[0] == decoded_alone}", flush=True)

