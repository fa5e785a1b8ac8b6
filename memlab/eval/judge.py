"""LLM-as-a-judge: grade a predicted answer against the gold answer.

The judge is a stage family like any other, so a prompted judge and a trained grader are
interchangeable, and the judge's LM is injected (it should not be the pipeline's LM when
the numbers are to be reported). What the judge was — model, prompt and number of runs — is
pinned in metrics.json through ``judge_info()``.

Two prompted judges: ``CorrectWrongJudge`` (SimpleMem's binary CORRECT/WRONG prompt, or another
prompt with its output) and ``MagmaGraderJudge`` (MAGMA's continuous semantic grader, appendix
C.3). Three that combine judges: ``AgreementJudge`` (both must accept), ``AnyOfJudge`` (one must)
and ``RulesFirstJudge`` (the calendar and a word-for-word check decide first: memlab's judge, chosen
in issue 85 on a labelled positive control). What the runner records per question is
``Judge.metric(verdict)``: 1/0 for a binary judge, the score for a graded one, so metrics.json's
``judge`` means are accuracy or mean score.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.eval.states_gold import states_gold
from memlab.eval.temporal_match import temporal_correct
from memlab.lm.base import LM
from memlab.lm.errors import ParseError, RefusedReplyError
from memlab.lm.jsonparse import parse_json, visible_text
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import Failure, PromptedStage, Stage
from memlab.telemetry import Usage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JudgeIn:
    question: str
    gold: str
    prediction: str


@dataclass(frozen=True)
class JudgeOut:
    """A verdict. ``correct`` is None when the judge gave no usable verdict (``error`` says
    why); such questions are left out of the judge accuracy rather than counted wrong.
    ``score`` is the share of the judge's runs that said correct (1.0 or 0.0 for one run),
    or, for a graded judge, its mean score in [0, 1]."""

    correct: bool | None
    score: float | None
    explanation: str
    error: str | None = None


class Judge(Stage[JudgeIn, JudgeOut]):
    """Family base of answer judges: ``forward([JudgeIn]) -> [JudgeOut]``, one verdict per
    item, plus ``judge_info()``: the JSON-serialisable identity of the judge (model, prompt,
    runs ...) that the runner writes next to the judge's numbers."""

    In = JudgeIn
    Out = JudgeOut

    def judge_info(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def lms(self) -> list[LM]:
        """The LMs this judge calls (the runner closes them after a run); none by default."""
        return []

    def llm_usage(self) -> Usage:
        """This judge's LLM use so far (``memlab.telemetry``), what the runner reads of it."""
        return Usage.of(self.lms(), failures=self._failed_calls())

    def _failed_calls(self) -> list[Failure]:
        """The unusable LLM outputs this judge got so far; none by default."""
        return []

    def metric(self, out: JudgeOut) -> float | None:
        """The per-question value the runner records and averages: by default 1.0 / 0.0 for
        correct / wrong (None when there was no usable verdict); graded judges override it."""
        return None if out.correct is None else float(out.correct)


LABELS = ("CORRECT", "WRONG")

#: Requested from backends with constrained decoding; the explanation comes first so the
#: model reasons before it commits to a label, as the prompt asks.
LABEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"explanation": {"type": "string"}, "label": {"enum": list(LABELS)}},
    "required": ["label"],
}
# What the parser accepts: any string label, normalised and checked below, so that a
# lowercase "correct" in otherwise valid JSON is read instead of sent back for a retry.
_LENIENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"label": {"type": "string"}},
    "required": ["label"],
}
# Upper case only: in prose, "correct" is often negated ("not correct"), while the prompt
# asks for the label in capitals.
_LABEL_WORD = re.compile(r"\b(CORRECT|WRONG)\b")
_PLACEHOLDERS = {"question", "gold_answer", "generated_answer"}


def parse_label(text: str) -> tuple[str, str]:
    """``(label, explanation)`` from a judge completion.

    A JSON object with a ``"label"`` key wins (fenced or not; the label is trimmed and
    upper-cased, and must then be CORRECT or WRONG). JSON that contradicts itself
    or runs away (a ``RefusedReplyError``) is a failure. Without a label key, the reply's prose must state
    one label (``stated``): an upper-case CORRECT or WRONG, and the whole text is the
    explanation. Raises ``ParseError`` when no label is stated unambiguously.
    """
    try:
        data = parse_json(text, _LENIENT_SCHEMA)
    except RefusedReplyError:
        raise
    except ParseError:
        data = None
    if data is not None:
        label = data["label"].strip().strip(".'\"").upper()
        if label not in LABELS:
            raise ParseError(f"label must be CORRECT or WRONG, got {data['label']!r}")
        explanation = data.get("explanation")
        return label, explanation.strip() if isinstance(explanation, str) else ""
    visible = visible_text(text)
    label = stated(visible, _LABEL_WORD.findall)
    if label is None:
        raise ParseError('no {"label": ...} JSON and no CORRECT or WRONG in the reply')
    return label, visible.strip()


def stated(visible: str, find) -> Any:
    """The one value ``find(text) -> list`` finds in a reply's prose, or None if it finds none.

    A reply that names several values (reasoning about both labels, an echoed schema listing
    every allowed one) states the value its last non-empty line names alone, its conclusion;
    without such a conclusion the reply does not say which it means: ``ParseError``, so the
    judge retries and then counts the question as unjudged, never guesses a verdict.
    """
    found = find(visible)
    if len(set(found)) <= 1:
        return found[0] if found else None
    last_line = next((line for line in reversed(visible.splitlines()) if line.strip()), "")
    concluded = set(find(last_line))
    if len(concluded) == 1:
        return concluded.pop()
    raise ParseError(f"the reply names {', '.join(map(str, sorted(set(found))))} and does not conclude with one")


@dataclass(frozen=True)
class _Ballot(JudgeIn):
    """One of ``runs`` independent requests for the same item (``run`` picks the seed)."""

    run: int = 0


def combine_votes(votes: list[JudgeOut]) -> JudgeOut:
    """Majority verdict of several runs; unusable runs are ignored.

    ``score`` is the share of usable runs that said CORRECT; ``correct`` is ``score > 0.5``,
    so a tie counts as WRONG (the judge was not convinced). If no run was usable the verdict
    is None, with the last run's error.
    """
    decided = [vote for vote in votes if vote.correct is not None]
    if not decided:
        error = next((vote.error for vote in reversed(votes) if vote.error), None)
        return JudgeOut(correct=None, score=None, explanation="", error=error or "no usable verdict")
    score = sum(vote.correct for vote in decided) / len(decided)
    correct = score > 0.5
    # Some usable run always agrees with the majority (a tie has a WRONG run).
    explanation = next(vote.explanation for vote in decided if vote.correct == correct)
    return JudgeOut(correct=correct, score=score, explanation=explanation)


class PromptedJudge(PromptedStage, Judge):
    """What the prompted judges share: a template that may use only ``PLACEHOLDERS``,
    ``runs`` requests per item differing in their seed (``seed``, ``seed + 1`` ...) and
    merged by ``combine``, and the judge identity for metrics.json. Use a ``temperature``
    above 0 with ``runs > 1``: a greedy backend would give the same answer every run. A reply
    that cannot be parsed is retried once, then counted in ``failures`` and returned as
    ``correct=None``."""

    PLACEHOLDERS: frozenset[str] = frozenset()

    def __init__(self, lm: LM, runs: int, prompt: str, temperature: float, max_tokens: int, seed: int) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        name = type(self).__name__
        if not isinstance(runs, int) or runs < 1:
            raise ValueError(f"{name}: runs must be a positive integer, got {runs!r}")
        self.runs = runs
        self.seed = seed
        self.template = load_prompt(prompt)
        unknown = self.template.placeholders - self.PLACEHOLDERS
        if unknown:
            raise ValueError(
                f"{name}: prompt {prompt!r} has placeholders {sorted(unknown)}; "
                f"a judge prompt can only use {sorted(self.PLACEHOLDERS)}"
            )
        if runs > 1 and temperature == 0:
            log.warning("%s: runs=%d at temperature 0 will mostly repeat one verdict", name, runs)

    def seed_of(self, item: JudgeIn) -> int:
        return self.seed + (item.run if isinstance(item, _Ballot) else 0)

    def combine(self, votes: list[JudgeOut]) -> JudgeOut:  # pragma: no cover - abstract
        raise NotImplementedError

    def fallback(self, item: JudgeIn, error: str) -> JudgeOut:
        return JudgeOut(correct=None, score=None, explanation="", error=error)

    def forward(self, batch: list[JudgeIn]) -> list[JudgeOut]:
        ballots = [
            _Ballot(item.question, item.gold, item.prediction, run=run) for item in batch for run in range(self.runs)
        ]
        votes = super().forward(ballots)
        return [self.combine(votes[i * self.runs : (i + 1) * self.runs]) for i in range(len(batch))]

    def lms(self) -> list[LM]:
        return [self.lm]

    def _failed_calls(self) -> list[Failure]:
        return list(self.failures)

    def judge_info(self) -> dict[str, Any]:
        return {
            "judge_model": self.lm.name,
            "prompt_id": self.template.id,
            "prompt_source": self.template.source,
            "runs": self.runs,
            "temperature": self.temperature,
        }


class CorrectWrongJudge(PromptedJudge):
    """Binary judge on SimpleMem's CORRECT/WRONG prompt (appendix A.4, Listing 4); several
    runs are merged by majority (``combine_votes``)."""

    PLACEHOLDERS = frozenset(_PLACEHOLDERS)

    def __init__(
        self,
        lm: LM,
        runs: PositiveInt = 1,
        prompt: str = "simplemem/judge_correct_wrong",
        temperature: NonNegativeFloat = 0.0,
        max_tokens: PositiveInt = 256,
        seed: int = 0,
    ) -> None:
        super().__init__(lm, runs, prompt, temperature, max_tokens, seed)

    def render(self, item: JudgeIn) -> ChatRequest:
        prompt = self.template.render(
            question=item.question, gold_answer=item.gold, generated_answer=item.prediction
        )
        return self.request(prompt, json_schema=LABEL_SCHEMA, seed=self.seed_of(item))

    def parse(self, text: str, item: JudgeIn) -> JudgeOut:
        label, explanation = parse_label(text)
        correct = label == "CORRECT"
        return JudgeOut(correct=correct, score=float(correct), explanation=explanation)

    def combine(self, votes: list[JudgeOut]) -> JudgeOut:
        return combine_votes(votes)


#: MAGMA's grader (appendix C.3) asks for ``{"score": float, "reasoning": ...}``, score first.
SCORE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}, "reasoning": {"type": "string"}},
    "required": ["score"],
}
_LENIENT_SCORE_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}
# The sign is read (a separator class without "-"), so "score: -0.5" is out of range, not 0.5.
# The number must end there: "1e400" is not a score of 1.
_SCORE_IN_PROSE = re.compile(r"\bscore\b[\s:=*\"'`]{0,4}([-+]?(?:\d+(?:\.\d+)?|\.\d+))(?!\.?\d|[eE][-+]?\d)",
                             re.IGNORECASE)
_BARE_NUMBER = re.compile(r"\s*([-+]?(?:\d+(?:\.\d+)?|\.\d+))\s*")


def parse_score(text: str) -> tuple[float, str]:
    """``(score, reasoning)`` from a grader completion.

    A JSON object with a numeric ``"score"`` wins; without one, the reply's prose must state
    one "score: x" (``stated``), or be only a number. The score must lie in [0, 1]; anything
    else raises ``ParseError``.
    """
    try:
        data = parse_json(text, _LENIENT_SCORE_SCHEMA)
    except RefusedReplyError:
        raise
    except ParseError:
        data = None
    if data is not None:
        score, reasoning = float(data["score"]), data.get("reasoning")
        reasoning = reasoning.strip() if isinstance(reasoning, str) else ""
    else:
        visible = visible_text(text)
        found = stated(visible, lambda part: [float(x) for x in _SCORE_IN_PROSE.findall(part)])
        bare = _BARE_NUMBER.fullmatch(visible)
        if found is None and not bare:
            raise ParseError('no {"score": ...} JSON and no "score: <number>" in the reply')
        score, reasoning = (found if found is not None else float(bare.group(1))), visible.strip()
    if not 0.0 <= score <= 1.0:
        raise ParseError(f"score must lie in [0, 1], got {score}")
    return score, reasoning


class MagmaGraderJudge(PromptedJudge):
    """MAGMA's continuous semantic grader (appendix C.3): a score in [0, 1] per answer.

    The per-question ``judge`` value in predictions.jsonl, and so the judge means in
    metrics.json, is the score (the mean over usable runs when ``runs > 1``), as MAGMA
    reports it. ``correct`` is ``score >= pass_mark``, kept for readers of verdicts only.
    """

    PLACEHOLDERS = frozenset({"question", "gold", "generated"})

    def __init__(
        self,
        lm: LM,
        runs: PositiveInt = 1,
        prompt: str = "magma/judge_semantic",
        temperature: NonNegativeFloat = 0.0,
        max_tokens: PositiveInt = 256,
        seed: int = 0,
        pass_mark: float = 0.5,
    ) -> None:
        super().__init__(lm, runs, prompt, temperature, max_tokens, seed)
        self.pass_mark = pass_mark

    def render(self, item: JudgeIn) -> ChatRequest:
        prompt = self.template.render(question=item.question, gold=item.gold, generated=item.prediction)
        return self.request(prompt, json_schema=SCORE_SCHEMA, seed=self.seed_of(item))

    def parse(self, text: str, item: JudgeIn) -> JudgeOut:
        score, reasoning = parse_score(text)
        return JudgeOut(correct=score >= self.pass_mark, score=score, explanation=reasoning)

    def combine(self, votes: list[JudgeOut]) -> JudgeOut:
        usable = [vote for vote in votes if vote.score is not None]
        if not usable:
            error = next((vote.error for vote in reversed(votes) if vote.error), None)
            return JudgeOut(correct=None, score=None, explanation="", error=error or "no usable score")
        score = sum(vote.score for vote in usable) / len(usable)
        return JudgeOut(correct=score >= self.pass_mark, score=score, explanation=usable[0].explanation)

    def metric(self, out: JudgeOut) -> float | None:
        return out.score

    def judge_info(self) -> dict[str, Any]:
        return {**super().judge_info(), "scale": "continuous [0, 1], mean score"}


class PairJudge(Judge):
    """Two judges, one verdict: the first judge's ``DECISIVE`` verdict settles an item, and the
    second is asked only about the others, where its ``DECISIVE`` verdict settles it in turn;
    otherwise, if either gave no usable verdict, neither does the pair, and if both gave the
    other verdict, that is the pair's. The metric is 1/0 (a graded judge counts through its own
    ``correct``, its pass mark). Each judge keeps its own LM, prompt and cache entries, so
    pairing two judges already run costs no model call."""

    DECISIVE: bool

    def __init__(self, first: Judge, second: Judge) -> None:
        super().__init__()
        for name, judge in (("first", first), ("second", second)):
            if not isinstance(judge, Judge):
                raise TypeError(f"{type(self).__name__}: {name} must be a judge, got {type(judge).__name__}")
        self.first = first
        self.second = second

    def forward(self, batch: list[JudgeIn]) -> list[JudgeOut]:
        firsts = self.first(batch)
        asked = [i for i, out in enumerate(firsts) if out.correct is not self.DECISIVE]
        seconds = dict(zip(asked, self.second([batch[i] for i in asked]) if asked else [], strict=True))
        return [self._combine(out, seconds[i]) if i in seconds else self._verdict(self.DECISIVE, out.explanation)
                for i, out in enumerate(firsts)]

    def _combine(self, a: JudgeOut, b: JudgeOut) -> JudgeOut:
        if b.correct is self.DECISIVE:
            return self._verdict(self.DECISIVE, b.explanation)
        if a.correct is None or b.correct is None:
            error = "; ".join(out.error or "no usable verdict" for out in (a, b) if out.correct is None)
            return JudgeOut(correct=None, score=None, explanation="", error=error)
        return self._verdict(not self.DECISIVE, f"{a.explanation} | {b.explanation}")

    @staticmethod
    def _verdict(correct: bool, explanation: str) -> JudgeOut:
        return JudgeOut(correct=correct, score=float(correct), explanation=explanation)

    def lms(self) -> list[LM]:
        return self.first.lms() + self.second.lms()

    def _failed_calls(self) -> list[Failure]:
        return [*self.first.llm_usage().failures, *self.second.llm_usage().failures]


class AgreementJudge(PairJudge):
    """Two judges that must agree: an answer is accepted only when both accept it, so a rejection
    by either is decisive (``PairJudge``). The remedy for a lenient judge (issue 42): a vague but
    topical wrong answer that one judge waves through is rejected unless the other accepts it too.
    """

    DECISIVE = False

    def judge_info(self) -> dict[str, Any]:
        return {"agreement_of": [self.first.judge_info(), self.second.judge_info()],
                "rule": "accepted only when both judges accept"}


class AnyOfJudge(PairJudge):
    """Two judges of which one must accept, so an acceptance by either is decisive (``PairJudge``):
    for a strict judge whose rejections a second opinion may overturn (issue 85)."""

    DECISIVE = True

    def judge_info(self) -> dict[str, Any]:
        return {"any_of": [self.first.judge_info(), self.second.judge_info()],
                "rule": "accepted when either judge accepts"}


class RulesFirstJudge(Judge):
    """Deterministic checks first, an LLM judge for the rest (issue 85).

    * A gold that is a date phrase the calendar resolves (``memlab.eval.temporal_match``) is
      decided by the calendar, both ways: a predicted day inside the gold's days is right, any
      other answer wrong. A small LLM judge rejects correctly resolved dates ("20 May 2023" for
      "the weekend before May 24, 2023") and accepts a near miss.
    * A prediction that states the gold word for word (``memlab.eval.states_gold``) is accepted.
    * Every other item goes to ``judge``, in one batch; only those cost model calls, so a row
      already judged by ``judge`` is re-judged from the cache.

    The metric is 1/0; ``judge`` counts through its own ``correct``.
    """

    def __init__(self, judge: Judge) -> None:
        super().__init__()
        if not isinstance(judge, Judge):
            raise TypeError(f"RulesFirstJudge: judge must be a judge, got {type(judge).__name__}")
        self.judge = judge

    @staticmethod
    def decide(item: JudgeIn) -> JudgeOut | None:
        """The rules' verdict on ``item``, or None where they leave it to the LLM judge."""
        on_calendar = temporal_correct(item.prediction, item.gold)
        if on_calendar is not None:
            correct = bool(on_calendar)
            where = "inside" if correct else "not inside"
            return JudgeOut(correct=correct, score=float(correct),
                            explanation=f"calendar: the predicted date is {where} the days the gold denotes")
        if states_gold(item.prediction, item.gold):
            return JudgeOut(correct=True, score=1.0, explanation="states every content word of the gold")
        return None

    def forward(self, batch: list[JudgeIn]) -> list[JudgeOut]:
        outs: list[JudgeOut | None] = [self.decide(item) for item in batch]
        undecided = [i for i, out in enumerate(outs) if out is None]
        if undecided:
            for i, out in zip(undecided, self.judge([batch[i] for i in undecided]), strict=True):
                outs[i] = out if out.correct is None else JudgeOut(out.correct, float(out.correct), out.explanation)
        return outs

    def lms(self) -> list[LM]:
        return self.judge.lms()

    def _failed_calls(self) -> list[Failure]:
        return list(self.judge.llm_usage().failures)

    def judge_info(self) -> dict[str, Any]:
        return {"rules_first": ["a date phrase the calendar resolves decides both ways (memlab.eval.temporal_match)",
                                "a prediction stating every content word of the gold is accepted "
                                "(memlab.eval.states_gold)"],
                "then": self.judge.judge_info()}
