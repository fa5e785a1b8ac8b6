from memlab.lm.aside_cache import AsideCache
from memlab.lm.cache import ResponseCache
from memlab.lm.types import ChatRequest, Completion


def completion(text: str) -> Completion:
    return Completion(text=text, prompt_tokens=3, completion_tokens=1, latency_s=0.5, model="m")


def test_reads_its_own_file_then_the_shared_one_and_writes_only_its_own(tmp_path):
    shared = ResponseCache.open(tmp_path / "shared.sqlite")
    old, new = ChatRequest.of("old question"), ChatRequest.of("new question")
    shared.put("m", old, completion("from the shared cache"))
    aside = AsideCache(ResponseCache.open(tmp_path / "own.sqlite"), shared)
    assert aside.get("m", old).text == "from the shared cache"
    assert aside.get("m", new) is None
    aside.put("m", new, completion("written aside"))
    assert aside.get("m", new).text == "written aside" and shared.get("m", new) is None
    assert [row["text"] for row in aside.rows()] == ["written aside"]
    # the run's merge: rows the shared cache lacks are added, a stored one is never replaced
    assert shared.merge_rows(aside.rows()) == (1, 0, 0)
    assert shared.merge_rows(aside.rows()) == (0, 1, 0)
    assert len(shared) == 2


def test_an_lm_writes_aside_once_told_to(tmp_path):
    from tests.fakes import ReplayLM

    class CachedReplay(ReplayLM):
        def __init__(self, cache):
            super().__init__(lambda request: "reply")
            self._cache_path = cache

    lm = CachedReplay(str(tmp_path / "shared.sqlite"))
    shared = ResponseCache.open(tmp_path / "shared.sqlite")
    lm.use_cache(AsideCache(ResponseCache.open(tmp_path / "own.sqlite"), shared))
    lm.complete("hello")
    assert len(shared) == 0 and len(ResponseCache.open(tmp_path / "own.sqlite")) == 1
    lm.complete("hello")
    assert len(lm.requests) == 1  # the second call replayed from the aside file


def test_an_lm_without_a_cache_has_none_to_replace(tmp_path):
    import pytest

    from tests.fakes import ReplayLM

    with pytest.raises(ValueError, match="without a response cache"):
        ReplayLM([]).use_cache(AsideCache(ResponseCache.open(tmp_path / "own.sqlite"), None))
