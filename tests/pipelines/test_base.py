import pytest

from memlab.pipelines.fullcontext import FullContext
from memlab.stages.answer import PromptedAnswerer
from memlab.stages.segment import TokenChunkSegmenter, TurnSegmenter
from memlab.types import Conversation, Query, Session, Turn
from tests.fakes import ReplayLM


def _conversation():
    turns = lambda s: tuple(Turn(f"D{s}:{i}", "Ann", f"fact {s}.{i}") for i in range(1, 4))
    return Conversation("c", ("Ann", "Bob"), tuple(Session(f"session_{s}", None, turns(s)) for s in (1, 2)))


def test_named_stages_and_replace():
    pipeline = FullContext(answerer=PromptedAnswerer(lm=ReplayLM([])))
    assert [n for n, _ in pipeline.named_stages()] == ["answerer", "segmenter"]
    old = pipeline.replace("segmenter", TokenChunkSegmenter())
    assert isinstance(old, TurnSegmenter) and isinstance(pipeline.segmenter, TokenChunkSegmenter)
    with pytest.raises(KeyError, match="no stage slot"):
        pipeline.replace("retriever", TurnSegmenter())
    with pytest.raises(TypeError, match="takes AnswerIn"):
        pipeline.replace("answerer", TurnSegmenter())


def test_fullcontext_keeps_the_newest_turns_within_budget():
    lm = ReplayLM(["fact"])
    pipeline = FullContext(answerer=PromptedAnswerer(lm=lm), max_context_tokens=3 * 8)
    memory = pipeline.build(_conversation())
    answer = pipeline.answer(memory, Query("q", "what?"))
    kept = [r.unit.source_ids[0] for r in answer.retrieved]
    assert kept[0] == "D2:3"  # newest first in the ranking
    assert 0 < len(kept) < 6
    assert answer.context.splitlines()[-1].endswith("Ann: fact 2.3")  # chronological context
    assert pipeline.lms() == [lm]
