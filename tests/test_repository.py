"""The repository stays cheap to clone: no tracked file over 5 MB (the response cache grows by
new shards of ``eval/caches/``, never by a rewritten file; README, "Moving the response cache")."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIMIT = 5_000_000


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_no_tracked_file_is_over_5_mb():
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    paths = [REPO / name for name in listed.decode().split("\0") if name]
    assert len(paths) > 100
    large = {str(p.relative_to(REPO)): p.stat().st_size for p in paths if p.is_file() and p.stat().st_size > LIMIT}
    assert large == {}, "tracked files over 5 MB (split a cache export into shards: memlab cache export FOLDER)"


def test_the_committed_cache_is_shards_each_under_the_limit():
    shards = sorted((REPO / "eval" / "caches").glob("*.jsonl.gz"))
    assert shards and all(p.name.startswith("responses-") and p.stat().st_size <= LIMIT for p in shards)
