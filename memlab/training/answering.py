"""Supervision and LoRA training for the answer stage (issue 83).

**Examples.** ``answer_examples`` takes a pipeline whose answer stage is a prompted answerer and
records, for every question, the exact request that stage would send: the pipeline builds each
conversation's memory and answers as it always does, with a ``RecordingAnswerer`` in the answer
slot that keeps what it is given (the question, the units retrieval chose, within the answer
budget, the question date) and calls no model. The prompted answerer renders each into its chat
messages. The target is the gold answer, the audited one where the LoCoMo errata correct it
(``Question.audited``), and for an adversarial question (category 5) the fixed abstention
``ABSTAIN``. Gold reaches the target only, never the messages: those are what the stage sees.

**Training** (``memlab.recipes.finetune_answerer``) is supervised LoRA fine-tuning on these pairs
(``memlab.training.causal_lm``: the loss on the target's tokens alone). The adapter is saved with
peft's ``save_pretrained`` and served by ``HFLM(model=..., adapter=folder)`` behind the same
prompted answerer: a config swaps the answer stage's LM, no pipeline changes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memlab.eval.abstention import abstains
from memlab.eval.metrics import amem_f1, mean_or_none
from memlab.pipelines.base import Pipeline
from memlab.stages.answer import PromptedAnswerer
from memlab.stages.answer.base import Answerer, AnswerIn, AnswerOut
from memlab.types import ANSWERABLE_CATEGORIES, Conversation

#: What a trained answerer learns to say when the conversation does not hold the answer: one of
#: the official LoCoMo F1's accepted phrases, and what ``memlab.eval.abstention`` recognises.
ABSTAIN = "Not mentioned in the conversation."


@dataclass(frozen=True)
class AnswerExample:
    """One question as the answer stage sees it (``messages``) and what it should answer."""

    conversation_id: str
    question_id: str
    category: str
    messages: tuple[dict[str, str], ...]
    target: str


class RecordingAnswerer(Answerer):
    """Stands in the answer slot: keeps every ``AnswerIn`` it is given and answers nothing, so
    a pipeline's answering runs to the point of the answer call without a model. It shares the
    real answerer's LM, so the pipeline fits the same context budget."""

    def __init__(self, answerer: Answerer) -> None:
        super().__init__()
        self.lm = getattr(answerer, "lm", None)
        self.given: list[AnswerIn] = []

    def forward(self, batch: list[AnswerIn]) -> list[AnswerOut]:
        self.given.extend(batch)
        return [AnswerOut(text="") for _ in batch]


def answer_examples(pipeline: Pipeline, conversations: Iterable[Conversation],
                    categories: Sequence[str] = (*ANSWERABLE_CATEGORIES, "adversarial")) -> list[AnswerExample]:
    """The examples of ``conversations``' questions of ``categories`` (module docstring). The
    pipeline's answer slot is restored afterwards."""
    answerer = getattr(pipeline, "answerer", None)
    if not isinstance(answerer, PromptedAnswerer):
        raise TypeError(f"{type(pipeline).__name__}: its answer stage must be a PromptedAnswerer (it renders the "
                        f"requests a trained answerer learns from), got {type(answerer).__name__}")
    recorder = RecordingAnswerer(answerer)
    pipeline.replace("answerer", recorder)
    examples = []
    try:
        for conversation in conversations:
            questions = [q for q in conversation.questions if q.category in categories]
            if not questions:
                continue
            memory = pipeline.build(conversation.history())
            recorder.given.clear()
            pipeline.answer_many(memory, [q.as_query() for q in questions])
            if len(recorder.given) != len(questions):
                raise RuntimeError(f"{type(pipeline).__name__} asked its answer stage {len(recorder.given)} times for "
                                   f"{len(questions)} questions of {conversation.id}")
            for question, item in zip(questions, recorder.given):
                target = ABSTAIN if question.category == "adversarial" else \
                    (question.audited.answer if question.audited is not None else question.answer)
                examples.append(AnswerExample(conversation.id, question.id, question.category,
                                              tuple(answerer.render(item).messages), str(target)))
    finally:
        pipeline.replace("answerer", answerer)
    return examples


def capped_abstentions(examples: Sequence[AnswerExample], share: float | None, seed: int) -> list[AnswerExample]:
    """``examples`` with the abstention targets (category 5) drawn down, seeded, to at most ``share``
    of what is kept, in their order; None keeps them all. A reader trained on a quarter of
    abstentions learnt to abstain on half the answerable questions (BENCHMARKS, issue 83)."""
    abstaining = [i for i, e in enumerate(examples) if e.category == "adversarial"]
    if share is None or not abstaining:
        return list(examples)
    answering = len(examples) - len(abstaining)
    room = len(abstaining) if share >= 1 else math.floor(share * answering / (1 - share))
    kept = set(random.Random(seed).sample(abstaining, min(room, len(abstaining))))
    return [e for i, e in enumerate(examples) if e.category != "adversarial" or i in kept]


def answer_scores(answers: Sequence[str], examples: Sequence[AnswerExample]) -> dict[str, float | int | None]:
    """How ``answers`` (one a example, generated) score against the examples' targets, as a row
    scores them: ``answer_f1``, the A-Mem F1 over the answerable questions (an abstention scores
    0 there); ``false_abstentions``, the share of them abstained on (``memlab.eval.abstention``);
    ``adversarial_abstained``, the share of category 5 abstained on; and ``score``, the mean over
    every example of its A-Mem F1 (answerable) or of abstaining (category 5): what a validation
    that generates stops early on, since a loss per target token rewards a cheap abstention."""
    if len(answers) != len(examples):
        raise ValueError(f"{len(answers)} answers for {len(examples)} examples")
    answerable = [(a, e) for a, e in zip(answers, examples) if e.category != "adversarial"]
    adversarial = [a for a, e in zip(answers, examples) if e.category == "adversarial"]
    per_example = [amem_f1(a, e.target) for a, e in answerable] + [float(abstains(a)) for a in adversarial]
    return {"score": mean_or_none(per_example),
            "answer_f1": mean_or_none(amem_f1(a, e.target) for a, e in answerable),
            "false_abstentions": mean_or_none(abstains(a) for a, _ in answerable),
            "adversarial_abstained": mean_or_none(abstains(a) for a in adversarial),
            "answerable": len(answerable), "adversarial": len(adversarial)}
