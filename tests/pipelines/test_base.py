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


class _CountingLM(ReplayLM):
    """A replay LM whose tokenizer counts words and records that it was asked."""

    def __init__(self, script, context_window: int) -> None:
        super().__init__(script)
        self.context_window = context_window
        self.counted = 0

    def count_tokens(self, text: str) -> int:
        self.counted += 1
        return len(text.split())


def _units(texts):
    from memlab.types import MemoryUnit

    return [MemoryUnit(f"u{i}", text, (f"D1:{i}",)) for i, text in enumerate(texts)]


def test_fit_units_keeps_the_prefix_that_fits_and_tokenizes_only_when_the_bytes_do_not():
    from memlab.pipelines.context_budget import answer_budget, fit_units

    lm = _CountingLM([], context_window=100)
    count, budget = answer_budget(PromptedAnswerer(lm=lm), None, reserve_tokens=90)
    assert budget == 10
    short = _units(["a b", "c"])  # 6 bytes with newlines: cannot exceed 10 tokens
    assert fit_units(short, count, budget) == short and lm.counted == 0
    long = _units(["one two three four", "five six seven", "eight", "nine ten"])
    assert [u.id for u in fit_units(long, count, budget)] == ["u0", "u1"]  # 5 + 4 tokens; "eight" would make 11
    assert answer_budget(PromptedAnswerer(lm=lm), 7, reserve_tokens=90)[1] == 7  # the config's budget wins


def test_rag_cuts_its_top_k_to_the_context_budget_and_says_how_many_it_showed():
    from memlab.eval.runner import context_recall
    from memlab.pipelines.rag import RAG
    from memlab.types import Answer
    from tests.memory.helpers import HashingEmbedder

    lm = _CountingLM(lambda request: "fact", context_window=512 + 12)
    rag = RAG(TurnSegmenter(with_date=False), HashingEmbedder(), PromptedAnswerer(lm=lm), retrieval="bm25", top_k=6)
    memory = rag.build(_conversation().history())
    answer = rag.answer(memory, Query("q", "fact 1.2"))
    # each unit "Ann: fact s.i" is 3 words + 1 newline: 3 of the 6 fit in 12 tokens
    assert answer.shown == 3 and len(answer.context.splitlines()) == 3
    assert len(answer.retrieved) == 6  # the ranking is kept whole for recall@k
    gold_first = ("D1:2",)
    assert context_recall(answer.retrieved, answer, tuple(answer.retrieved[0].unit.source_ids)) == 1.0
    assert context_recall(answer.retrieved, Answer("x", answer.retrieved, "", shown=0), gold_first) == 0.0
    assert context_recall(answer.retrieved, Answer("x", answer.retrieved), gold_first) is None
    unlimited = RAG(TurnSegmenter(with_date=False), HashingEmbedder(), PromptedAnswerer(lm=_CountingLM(
        lambda request: "fact", context_window=4096)), retrieval="bm25", top_k=6)
    assert unlimited.answer(unlimited.build(_conversation().history()), Query("q", "fact 1.2")).shown == 6


def test_llm_usage_is_what_a_phase_cost_its_stages_and_the_calls_that_failed():
    """``Pipeline.llm_usage()`` is the one account the runner reads: totals over the LMs, each
    prompted stage's own counters, and the failed calls, diffed between two moments by ``since``."""
    lm = ReplayLM(["Rex", "<think>The dog is called Rex.", "<think>Let me think again"])
    pipeline = FullContext(answerer=PromptedAnswerer(lm=lm))
    memory = pipeline.build(_conversation().history())
    start = pipeline.llm_usage()
    assert start.total["llm_calls"] == 0 and start.failures == () and start.stages["answerer"]["llm_calls"] == 0
    pipeline.answer(memory, Query("q1", "what?"))
    first = pipeline.llm_usage()
    assert first.since(start).total["llm_calls"] == 1 and first.since(start).failures == ()
    pipeline.answer(memory, Query("q2", "what?"))  # an unclosed reasoning block, twice: one failure
    second = pipeline.llm_usage().since(first)
    assert second.total["llm_calls"] == 2 and second.stages["answerer"]["llm_calls"] == 2
    assert second.failure_counts() == {"PromptedAnswerer": 1} and second.failures[0].completion.startswith("<think>")
    assert pipeline.llm_usage().since(start).failure_counts() == {"PromptedAnswerer": 1}


def test_memory_stats_are_what_the_memory_says_about_itself_plus_its_structure():
    from memlab.memory.base import Memory

    class Counted(Memory):
        def stats(self):
            return {"units": 3}

        def structure(self):
            return {"kinds": {"turn": 3}, "degenerate": []}

    pipeline = FullContext(answerer=PromptedAnswerer(lm=ReplayLM([])))
    assert super(FullContext, pipeline).memory_stats(Counted()) == {
        "units": 3, "structure": {"kinds": {"turn": 3}, "degenerate": []}}
    assert super(FullContext, pipeline).memory_stats(Memory()) == {}  # nothing formed, nothing said
    assert pipeline.memory_stats(pipeline.build(_conversation().history())) == {}  # its turns, as given
