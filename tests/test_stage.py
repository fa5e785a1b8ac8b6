import json

import pytest

from memlab.lm.base import ParseError
from memlab.prompts import PromptError, load_prompt
from memlab.stage import Stage, StageError
from memlab.stages.answer import AnswerIn, PromptedAnswerer
from memlab.stages.segment import SegmentIn, TokenChunkSegmenter, TurnSegmenter
from memlab.types import Session, Turn
from tests.fakes import ReplayLM


def test_prompted_answerer_renders_the_published_prompt_and_parses():
    lm = ReplayLM(["ANSWER: 7 May 2023"])
    answerer = PromptedAnswerer(lm=lm)
    out = answerer([AnswerIn("When did Caroline go?", "[8 May 2023] Caroline: I went yesterday.")])
    assert out[0].text == "7 May 2023" and out[0].error is None
    prompt = lm.requests[0].messages[0]["content"]
    assert "CONTEXT: [8 May 2023] Caroline: I went yesterday." in prompt
    assert prompt.rstrip().endswith("QUESTION: When did Caroline go?\n\nANSWER:")
    assert lm.requests[0].max_tokens == 64 and lm.requests[0].temperature == 0.0


def test_unparseable_output_is_retried_once_then_counted_as_a_failure():
    lm = ReplayLM(["   ", "ok now", "", ""])
    answerer = PromptedAnswerer(lm=lm)
    first, second = answerer([AnswerIn("q1", "c"), AnswerIn("q2", "c")])
    # The batch is answered first (q1 -> "   ", q2 -> "ok now"); then q1 alone is retried
    # (-> "") and, still unusable, becomes a counted failure with the fallback output.
    assert second.text == "ok now"
    assert first.text == "" and first.error == "empty answer"
    assert len(answerer.failures) == 1 and answerer.failures[0].stage == "PromptedAnswerer"
    retry = lm.requests[2]
    assert retry.messages[-1]["role"] == "user" and "could not be parsed" in retry.messages[-1]["content"]
    assert lm.remaining == 1


def test_stage_takes_a_batch_not_an_item():
    with pytest.raises(TypeError, match="takes a list"):
        TurnSegmenter()(SegmentIn("c", Session("s", None, ())))


def test_init_kwargs_are_recorded_and_survive_save_load(tmp_path):
    stage = TokenChunkSegmenter(chunk_tokens=64)
    assert stage.init_kwargs == {"chunk_tokens": 64}
    answerer = PromptedAnswerer(lm=ReplayLM([]), max_tokens=12)
    # the LM is a collaborator: not serialised, supplied again at load time
    assert answerer.init_kwargs == {"prompt": "compassmem/answer", "max_tokens": 12, "temperature": 0.0}
    stage.save(tmp_path / "seg")
    assert json.loads((tmp_path / "seg" / "config.json").read_text())["class"] == (
        "memlab.stages.segment.rules.TokenChunkSegmenter")
    assert "torch" in json.loads((tmp_path / "seg" / "versions.json").read_text())
    loaded = Stage.load(tmp_path / "seg")
    assert isinstance(loaded, TokenChunkSegmenter) and loaded.chunk_tokens == 64
    answerer.save(tmp_path / "ans")
    lm = ReplayLM(["x"])
    reloaded = Stage.load(tmp_path / "ans", lm=lm)
    assert reloaded.max_tokens == 12 and reloaded.lm is lm


def test_load_refuses_bad_folders(tmp_path):
    with pytest.raises(StageError, match="no config.json"):
        Stage.load(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(StageError, match="malformed stage config"):
        Stage.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"class": "os.path.join", "kwargs": {}}))
    with pytest.raises(StageError, match="only memlab"):
        Stage.load(tmp_path)


def test_segmenters_keep_provenance():
    turns = tuple(Turn(f"D1:{i}", "A" if i % 2 else "B", "word " * 40) for i in range(1, 9))
    item = SegmentIn("conv", Session("session_1", None, turns))
    per_turn = TurnSegmenter().run_one(item).units
    assert [u.source_ids for u in per_turn] == [(t.id,) for t in turns]
    assert per_turn[0].text.startswith("[unknown date] A: word")
    chunks = TokenChunkSegmenter(chunk_tokens=100).run_one(item).units
    assert len(chunks) > 1
    assert [sid for u in chunks for sid in u.source_ids] == [t.id for t in turns]


def test_prompt_files_have_sources():
    template = load_prompt("compassmem/answer")
    assert "appendix F.2" in template.source and template.placeholders == {"context", "question"}
    with pytest.raises(PromptError, match="needs values"):
        template.render(context="x")
    with pytest.raises(PromptError, match="no prompt file"):
        load_prompt("compassmem/nope")
