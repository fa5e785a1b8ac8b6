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
    memory = pipeline.build(_conversation().history())
    answer = pipeline.answer(memory, Query("q", "what?"))
    kept = [r.unit.source_ids[0] for r in answer.retrieved]
    assert kept[0] == "D2:3"  # newest first in the ranking
    assert 0 < len(kept) < 6
    assert answer.context.splitlines()[-1].endswith("Ann: fact 2.3")  # chronological context
    assert pipeline.lms() == [lm]


def test_build_refuses_a_conversation_with_its_gold_questions():
    """``build`` takes a History: a Conversation (which carries the gold questions) is refused,
    in every pipeline, whether or not it overrides build itself."""
    from memlab.pipelines.rag import RAG
    from memlab.types import Question

    conversation = _conversation()
    conversation = Conversation(conversation.id, conversation.speakers, conversation.sessions,
                                (Question("q1", "c", "what?", "gold", "single-hop", ("D1:1",)),))
    for pipeline_class in (FullContext, RAG):
        assert getattr(pipeline_class.build, "history_only", False), pipeline_class
    with pytest.raises(TypeError, match="FullContext.build takes a History .* not Conversation"):
        FullContext(answerer=PromptedAnswerer(lm=ReplayLM([]))).build(conversation)
    history = conversation.history()
    assert not hasattr(history, "questions")
    assert history.sessions == conversation.sessions and history.id != conversation.id
    assert history.id == conversation.history().id  # stable
    query = conversation.questions[0].as_query()
    assert query.id != "q1" and query.text == "what?"
