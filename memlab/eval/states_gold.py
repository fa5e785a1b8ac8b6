"""Does a prediction state the gold answer word for word? A deterministic acceptance check.

An LLM judge run by a small model rejects many answers that state the gold in other casing,
inflection or around it: "Work." for "work", "adoPTION agency" for "Adoption agencies", "Got new
beds" for "Got new beds for them", "3 times" for "three times" (issue 85's labelled positive control).
``states_gold`` accepts those without a model: a prediction states the gold when

* every content word of the gold (BM25's tokens: lowercase, English function words dropped,
  Porter-stemmed; number words read as digits) is among the prediction's words;
* it is negated where the gold is and only there ("not work" does not state "work", "likely
  yes" does not state "likely no");
* it adds no number the gold lacks ("three times, once ... twice" does not state "twice"), a
  year ("August 2023" states "August") and a list's item numbers aside.

It only ever accepts: where it does not, the prediction may still be right in other words, and
an LLM judge decides (``memlab.eval.judge.RulesFirstJudge``). What it wrongly accepts is measured
on the LoCoMo audit's wrong answers (BENCHMARKS, "Choosing the judge"): a bag of words cannot tell "two cats
and a dog" from "a cat and two dogs".
"""

from __future__ import annotations

import re

from memlab.memory.index import tokenize

#: Number words read as the digits they name, so "3" states "three times" (and "twice" is 2).
_NUMBER_WORDS = {
    "zero": "0", "one": "1", "once": "1", "two": "2", "twice": "2", "three": "3", "thrice": "3", "four": "4",
    "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "half": "0.5",
}
_NUMBER_WORD = re.compile(r"\b(" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# "1. " or "2) " opening a line numbers a list item, and a year dates the answer: neither is a
# number the answer states.
_LIST_MARKER = re.compile(r"^\s*\d+[.)]\s", re.MULTILINE)
_YEAR = re.compile(r"(?:19|20)\d\d")
# Negations, found before tokenising drops them as function words.
_NEGATION = re.compile(r"\b(?:not|no|never|nor|neither|none|nothing|cannot)\b|n't\b", re.IGNORECASE)


def _digits(text: str) -> str:
    """``text`` with its number words as digits and "2,000" as 2000."""
    text = _NUMBER_WORD.sub(lambda m: f" {_NUMBER_WORDS[m.group(1).lower()]} ", text)
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)


def states_gold(prediction: object, gold: object) -> bool:
    """True when ``prediction`` states every content word of ``gold`` and adds no negation and no
    number the gold lacks (module docstring); False otherwise, which is not a verdict of wrong."""
    prediction, gold = _digits(str(prediction)), _digits(str(gold))
    wanted = set(tokenize(gold))
    if not wanted or not wanted <= set(tokenize(prediction)):
        return False
    if bool(_NEGATION.search(prediction)) != bool(_NEGATION.search(gold)):
        return False
    added = set(_NUMBER.findall(_LIST_MARKER.sub(" ", prediction))) - set(_NUMBER.findall(gold))
    return all(_YEAR.fullmatch(number) for number in added)
