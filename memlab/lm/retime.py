"""Re-measure cached LLM calls whose recorded latency includes a pause or a contended core.

Before ``memlab.clock`` a run paused with SIGSTOP or Ctrl-Z counted the pause into the call
in flight; a second llama.cpp job on the same cores slows both several times over (their
threads wait for each other at every barrier). The response cache keeps such a latency, and
every later run through the cache reports it again in its build seconds and model seconds.
``retime`` finds such entries of one local model (recorded latency above ``factor``
times what the entry's token counts predict, plus ``slack_s`` seconds; the prediction is a
least-squares fit of latency on prompt and completion tokens over the model's entries
recorded below 120 s), runs each request again, uncached, and stores the new latency when
the reply is the same or at least as long (completion tokens down to ``length_tolerance``
fewer; a longer reply can only over-state the cost); the cached text is kept either way,
since it is what the runs used. llama.cpp reuses the KV
cache of the previous request's common prefix, so a long greedy reply is seldom reproduced
token for token out of its original order; the cost of the request, which is what the
latency stands for, is.

``eval/retime_cache.py`` runs it on a local model; run it with the cores otherwise idle, or the
new figures carry the contention instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlab.errors import MemlabError
from memlab.lm.base import LM
from memlab.lm.cache import CacheEntry, ResponseCache


class RetimeError(MemlabError, ValueError):
    """Too few entries of a model to predict its latencies from."""


@dataclass(frozen=True)
class Suspect:
    entry: CacheEntry
    predicted_s: float


def latency_fit(entries: list[CacheEntry], ceiling_s: float) -> np.ndarray:
    """Least-squares (seconds per prompt token, per completion token, per call) over the
    entries recorded below ``ceiling_s``."""
    rows = [e.completion for e in entries if e.completion.latency_s < ceiling_s]
    if len(rows) < 3:
        raise RetimeError(f"only {len(rows)} entries below {ceiling_s} s: too few to predict latencies from")
    x = np.array([[c.prompt_tokens, c.completion_tokens, 1.0] for c in rows])
    y = np.array([c.latency_s for c in rows])
    return np.linalg.lstsq(x, y, rcond=None)[0]


def suspects(entries: list[CacheEntry], factor: float, slack_s: float, ceiling_s: float) -> list[Suspect]:
    coef = latency_fit(entries, ceiling_s)
    found = []
    for entry in entries:
        c = entry.completion
        predicted = float(coef @ [c.prompt_tokens, c.completion_tokens, 1.0])
        if c.latency_s > factor * max(predicted, 0.0) + slack_s:
            found.append(Suspect(entry, predicted))
    return found


def retime(cache: ResponseCache, lm: LM, contains: str = "", factor: float = 2.5, slack_s: float = 30.0,
           ceiling_s: float = 120.0, length_tolerance: float = 0.1, dry_run: bool = False) -> list[dict]:
    """Re-run the suspect entries of ``lm.name`` (whose request text contains ``contains``)
    and store each new latency whose reply is the same or at least as long (module docstring).
    Returns one record per suspect."""
    entries = list(cache.entries(model=lm.name))
    report = []
    for suspect in suspects(entries, factor, slack_s, ceiling_s):
        request, old = suspect.entry.request, suspect.entry.completion
        if contains and not any(contains in m["content"] for m in request.messages):
            continue
        record = {"prompt_tokens": old.prompt_tokens, "completion_tokens": old.completion_tokens,
                  "recorded_s": round(old.latency_s, 1), "predicted_s": round(suspect.predicted_s, 1),
                  "new_completion_tokens": None, "new_s": None, "status": "dry run"}
        if not dry_run:
            new = lm.generate([request])[0]
            record.update(new_completion_tokens=new.completion_tokens, new_s=round(new.latency_s, 1))
            as_long = new.completion_tokens >= (1.0 - length_tolerance) * old.completion_tokens
            same = new.text == old.text
            if same or as_long:
                cache.set_latency(lm.name, request, new.latency_s)
                record["status"] = "re-timed" if same else "re-timed (other reply, as long or longer)"
            else:
                record["status"] = "shorter reply: left as recorded"
        report.append(record)
    return report
