"""Does an answer say that the conversation does not hold what was asked?

LoCoMo's adversarial questions (category 5) ask about things the conversation never says, often
about the other speaker; the right answer is to abstain. Its file keeps a planted wrong answer
as ``adversarial_answer``, and the official script counts an answer right when it contains one
of two phrases (``metrics.ADVERSARIAL_PHRASES``: "no information available", "not mentioned"),
so "The conversation doesn't say" or the "Information not found" MAGMA's prompt asks for score
0. ``abstains`` recognises the usual ways to say it: a verb of saying negated ("not mentioned",
"does not say"), a missing-information phrase ("no information", "not enough information"),
inability ("cannot be determined", "I don't know") and the bare "unknown" / "N/A" / "none". A
negated event ("she did not go") is not an abstention. ``ABSTENTION_GOLD`` is the reference a
judge compares an adversarial answer with.
"""

from __future__ import annotations

import re

#: What a judge is given as the gold answer of an adversarial question.
ABSTENTION_GOLD = "The conversation does not mention this."

_SAYING = (r"mention(?:ed)?|stat(?:e|ed)|specif(?:y|ied)|discuss(?:ed)?|sa(?:y|id)|given|provided?|found|available"
           r"|known|indicated?|recorded|addressed|shared|included?|contain(?:ed)?|clear|covered|talked about"
           r"|referenced|noted|reported|revealed")
_PATTERNS = (
    rf"\b(?:not|never) (?:been |being |explicitly |directly |specifically )?(?:{_SAYING})\b",
    rf"\b(?:does|do|did|is|was|are|were|has|have|had)(?: not|n't) (?:been |explicitly |directly )?(?:{_SAYING})\b",
    r"\bno (?:information|info|mention|record|details?|evidence|data|indication|reference)\b",
    r"\b(?:not enough|insufficient|lack of|no relevant) (?:information|context|evidence|details?)\b",
    # SimpleMem's answer prompt (A.3) asks for "I do not have enough information in my memory."; the
    # answerer speaking of itself, since "they do not have enough information" can be an answer.
    r"\bi (?:do not|don't|did not|didn't) have (?:enough|sufficient|any) (?:information|info|context|details?)\b",
    r"\b(?:cannot|can't|can not|could not|couldn't|unable to) (?:be )?(?:determined?|answer(?:ed)?|tell|find|found|say|know|infer(?:red)?)\b",
    r"\bi (?:do not|don't) know\b",
    r"\b(?:unknown|unanswerable|unspecified|unmentioned)\b",
    r"^(?:n/?a|none|nothing)\W*$",
)
_ABSTAINS = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.IGNORECASE)


def abstains(answer: object) -> bool:
    """Whether ``answer`` says that the conversation does not hold what was asked."""
    text = " ".join(str(answer).replace("\u2019", "'").split())
    return bool(text) and _ABSTAINS.search(text) is not None
