"""LLM-as-a-judge: grade a predicted answer against the gold answer.

The judge is a stage family like any other, so a prompted judge and a trained grader are
interchangeable, and the judge's LM is injected (it should not be the pipeline's LM when
the numbers are to be reported). What the judge was — model, prompt and number of runs — is
pinned in metrics.json through ``judge_info()``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from memlab.lm.base import LM, ChatRequest, ParseError
from memlab.lm.jsonparse import parse_json, strip_thinking
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage, Stage

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
    ``score`` is the share of the judge's runs that said correct (1.0 or 0.0 for one run)."""

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
    upper-cased, and must then be CORRECT or WRONG). Without one, the last upper-case
    CORRECT or WRONG in the text is the label and the whole text the explanation.
    Raises ``ParseError`` when neither is found.
    """
    try:
        data = parse_json(text, _LENIENT_SCHEMA)
    except ParseError:
        data = None
    if data is not None:
        label = data["label"].strip().strip(".'\"").upper()
        if label not in LABELS:
            raise ParseError(f"label must be CORRECT or WRONG, got {data['label']!r}")
        explanation = data.get("explanation")
        return label, explanation.strip() if isinstance(explanation, str) else ""
    visible = strip_thinking(text)
    words = _LABEL_WORD.findall(visible)
    if not words:
        raise ParseError('no {"label": ...} JSON and no CORRECT or WRONG in the reply')
    return words[-1], visible.strip()


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


class CorrectWrongJudge(PromptedStage, Judge):
    """Binary judge on SimpleMem's CORRECT/WRONG prompt (appendix A.4, Listing 4).

    With ``runs > 1`` each item is judged ``runs`` times, the requests differing in their
    seed (``seed``, ``seed + 1`` ...), and the majority wins (see ``combine_votes``). Use a
    ``temperature`` above 0 then: a greedy backend would give the same answer every run.
    A reply that cannot be parsed is retried once, then counted in ``failures`` and
    returned as ``correct=None``.
    """

    def __init__(
        self,
        lm: LM,
        runs: int = 1,
        prompt: str = "simplemem/judge_correct_wrong",
        temperature: float = 0.0,
        max_tokens: int = 256,
        seed: int = 0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        if not isinstance(runs, int) or runs < 1:
            raise ValueError(f"CorrectWrongJudge: runs must be a positive integer, got {runs!r}")
        self.runs = runs
        self.seed = seed
        self.template = load_prompt(prompt)
        unknown = self.template.placeholders - _PLACEHOLDERS
        if unknown:
            raise ValueError(
                f"CorrectWrongJudge: prompt {prompt!r} has placeholders {sorted(unknown)}; "
                f"a judge prompt can only use {sorted(_PLACEHOLDERS)}"
            )
        if runs > 1 and temperature == 0:
            log.warning("CorrectWrongJudge: runs=%d at temperature 0 will mostly repeat one verdict", runs)

    def render(self, item: JudgeIn) -> ChatRequest:
        run = item.run if isinstance(item, _Ballot) else 0
        prompt = self.template.render(
            question=item.question, gold_answer=item.gold, generated_answer=item.prediction
        )
        return self.request(prompt, json_schema=LABEL_SCHEMA, seed=self.seed + run)

    def parse(self, text: str, item: JudgeIn) -> JudgeOut:
        label, explanation = parse_label(text)
        correct = label == "CORRECT"
        return JudgeOut(correct=correct, score=float(correct), explanation=explanation)

    def fallback(self, item: JudgeIn, error: str) -> JudgeOut:
        return JudgeOut(correct=None, score=None, explanation="", error=error)

    def forward(self, batch: list[JudgeIn]) -> list[JudgeOut]:
        ballots = [
            _Ballot(item.question, item.gold, item.prediction, run=run) for item in batch for run in range(self.runs)
        ]
        votes = super().forward(ballots)
        return [combine_votes(votes[i * self.runs : (i + 1) * self.runs]) for i in range(len(batch))]

    def judge_info(self) -> dict[str, Any]:
        return {
            "judge_model": self.lm.name,
            "prompt_id": self.template.id,
            "prompt_source": self.template.source,
            "runs": self.runs,
            "temperature": self.temperature,
        }
