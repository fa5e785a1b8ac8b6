"""Teacher labels replayed from the response cache: the prompted run's replies, no model call."""

from __future__ import annotations

import pytest

from memlab.config import ConfigError
from memlab.lm.cache_only import CacheMissError, CacheOnlyLM
from memlab.lm.types import ChatRequest
from memlab.training.teacher import teacher_sessions
from memlab.types import Conversation
from tests.fakes import ReplayLM
from tests.pipelines.test_compassmem import Script, history, pipeline


class CachedReplayLM(ReplayLM):
    """A scripted LM that writes its replies to a response cache, as a real backend does."""

    def __init__(self, script, cache: str) -> None:
        super().__init__(script)
        self._cache_path = cache


def test_cache_only_lm_replays_hits_and_refuses_misses(tmp_path):
    lm = CachedReplayLM(["first"], str(tmp_path / "cache.sqlite"))
    request = ChatRequest.of("hello")
    assert lm.generate([request])[0].text == "first"
    replay = CacheOnlyLM(lm)
    assert replay.name == lm.name and replay.generate([request])[0].text == "first"
    with pytest.raises(CacheMissError, match="not in the response cache"):
        replay.generate([ChatRequest.of("never asked")])
    assert len(lm.requests) == 1  # the wrapped model was never called again


def test_teacher_sessions_replay_the_prompted_build_and_skip_what_is_not_cached(tmp_path):
    from memlab.embed import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()
    script = Script()
    prompted = pipeline(script, embedder)
    lm = CachedReplayLM(script, str(tmp_path / "cache.sqlite"))
    for stage in (prompted.segmenter, prompted.relation_extractor):
        stage.lm = lm
    h = history()
    conversation = Conversation("conv-x", h.speakers, h.sessions)
    # the prompted build of the first two sessions only (the background run has not gone further)
    prompted.build(Conversation("conv-x", h.speakers, h.sessions[:2]).history())
    calls = len(lm.requests)
    with pytest.raises(ConfigError, match="would call a model"):  # a teacher only ever replays
        teacher_sessions([conversation], pipeline=prompted)
    for stage in (prompted.segmenter, prompted.relation_extractor):
        stage.lm = CacheOnlyLM(lm)  # as configs/pipelines/compassmem_teacher.yaml declares it
    found, counts = teacher_sessions([conversation], pipeline=prompted)
    assert len(lm.requests) == calls  # replayed, not asked again
    assert [t.session.id for t in found] == ["session_1", "session_2"] and counts["not_cached"] == 1
    assert all(len(t.events) == 2 and len(t.relations) == 1 and not t.failed for t in found)
    assert found[0].relations[0].label == "causal"
    # each call's window of turns is kept (the segment labels mask what lies across windows)
    assert all(sum(map(len, t.windows)) == len(t.session.turns) for t in found)
    assert [turn_id for window in found[0].windows for turn_id in window] == [turn.id for turn in found[0].session.turns]
