"""memlab.lm.retime: cached latencies recorded across a pause are measured again, their replies kept."""

from memlab.lm.cache import ResponseCache
from memlab.lm.retime import retime
from memlab.lm.types import ChatRequest, Completion
from tests.fakes import ReplayLM


def _fill(cache: ResponseCache) -> dict[str, ChatRequest]:
    """Twenty entries whose latency follows their token counts, and two recorded across a pause."""
    requests = {}
    for i in range(20):
        request = ChatRequest.of(f"question {i} about Caroline")
        prompt, completion = 100 + 37 * i, 10 + 11 * (i % 7)
        cache.put("replay", request, Completion(f"answer {i}", prompt, completion, 0.01 * prompt + 0.1 * completion + 1))
        requests[f"ok{i}"] = request
    for name in ("paused", "paused-longer", "paused-shorter"):
        request = ChatRequest.of(f"{name}: a question about Caroline")
        cache.put("replay", request, Completion(f"{name} answer", 400, 50, 900.0))
        requests[name] = request
    return requests


def _rerun(request: ChatRequest) -> str:
    """The reply a re-run gives: the same, a longer one (ReplayLM counts 4 characters a
    token), or a shorter one."""
    name = request.messages[-1]["content"].split(":")[0]
    return {"paused": "paused answer", "paused-longer": "x" * 4 * 80}.get(name, "short")


def test_retime_re_runs_only_the_suspect_entries_and_keeps_their_replies(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    requests = _fill(cache)
    lm = ReplayLM(_rerun)

    assert [r["status"] for r in retime(cache, lm, dry_run=True)] == ["dry run"] * 3
    assert lm.requests == []

    report = retime(cache, lm)
    assert [r["status"] for r in report] == [
        "re-timed", "re-timed (other reply, as long or longer)", "shorter reply: left as recorded"]
    assert [r.messages[-1]["content"].split(":")[0] for r in lm.requests] == ["paused", "paused-longer", "paused-shorter"]
    for name in ("paused", "paused-longer"):
        assert cache.get("replay", requests[name]).latency_s == 0.0  # ReplayLM's measured latency
        assert cache.get("replay", requests[name]).text == f"{name} answer"  # the text the runs used
    assert cache.get("replay", requests["paused-shorter"]).latency_s == 900.0
    assert cache.get("replay", requests["ok3"]).latency_s == 0.01 * 211 + 0.1 * 43 + 1


def test_retime_can_be_limited_to_requests_containing_a_text(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    _fill(cache)
    report = retime(cache, ReplayLM([]), contains="paused-shorter", dry_run=True)
    assert len(report) == 1 and report[0]["recorded_s"] == 900.0
