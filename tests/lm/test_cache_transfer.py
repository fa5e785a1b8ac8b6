"""Response-cache export and import (``memlab.lm.cache_transfer``, ``memlab cache``): real
SQLite files and folders of shards on tmp_path (and a real git repository), no model."""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import subprocess

import pytest

from memlab.cli import main
from memlab.lm import cache_transfer
from memlab.lm.cache import CacheError, ResponseCache
from memlab.lm.cache_transfer import (
    FORMAT_VERSION,
    CacheTransferError,
    ExportReport,
    ImportReport,
    export_shards,
    import_cache,
    shard_paths,
)
from memlab.lm.types import ChatRequest, Completion


def _completion(text: str, **kw) -> Completion:
    fields = dict(text=text, prompt_tokens=12, completion_tokens=3, latency_s=0.25, model="gguf", finish_reason="stop")
    return Completion(**{**fields, **kw})


#: (model, prompt, reply) of the filled cache
ENTRIES = [
    ("model-a", "Who is Rex?", "a dog"),
    ("model-a", "Where does Caroline live? \u00e9t\u00e9", "Boston"),
    ("model-a", "Summarise session 1", "They met."),
    ("model-b", "Who is Rex?", "a cat"),
    ("model-b", "Summarise session 2", "They parted."),
]


@pytest.fixture
def source(tmp_path) -> ResponseCache:
    cache = ResponseCache(tmp_path / "source.sqlite")
    for model, prompt, reply in ENTRIES:
        cache.put(model, ChatRequest.of(prompt, max_tokens=64), _completion(reply, latency_s=len(reply) / 10))
    yield cache
    cache.close()


def _rows(cache: ResponseCache) -> list[dict]:
    return list(cache.rows())


def _read_lines(path) -> list[bytes]:
    with gzip.open(path, "rb") as f:
        return f.read().splitlines(keepends=True)


def _write_lines(path, lines: list[bytes]) -> None:
    with gzip.open(path, "wb") as f:
        f.write(b"".join(lines))


def _exported(source, tmp_path, name="export"):
    """The one shard an export of the whole ``source`` into a new folder ``name`` writes."""
    report = export_shards(source, tmp_path / name)
    assert report.exported == len(ENTRIES) and report.already_exported == 0 and len(report.shards) == 1
    return report.shards[0]


# -- round trip ------------------------------------------------------------------------------
def test_round_trip_into_an_empty_cache_gives_the_same_rows_and_hits(source, tmp_path):
    path = _exported(source, tmp_path)
    target = ResponseCache(tmp_path / "target.sqlite")
    assert import_cache(target, path) == ImportReport(added=5, already_present=0, conflicting=0)
    assert _rows(target) == _rows(source)  # every column, created_at and latency included
    for model, prompt, reply in ENTRIES:
        hit = target.get(model, ChatRequest.of(prompt, max_tokens=64))
        assert hit is not None and hit.text == reply and hit.cached
    assert {(e.model, e.completion.text) for e in target.entries()} == {(m, r) for m, _, r in ENTRIES}


def test_the_file_is_a_header_the_entries_in_key_order_and_a_trailer(source, tmp_path):
    lines = [json.loads(line) for line in _read_lines(_exported(source, tmp_path))]
    header, entries, trailer = lines[0], lines[1:-1], lines[-1]
    assert header["format"] == "memlab.response-cache" and header["version"] == FORMAT_VERSION
    assert header["schema_version"] == 1 and header["entries"] == trailer["entries"] == 5
    assert [e["key"] for e in entries] == sorted(e["key"] for e in entries)
    assert set(entries[0]) == {"key", "model", "request", "text", "prompt_tokens", "completion_tokens",
                               "latency_s", "completion_model", "finish_reason", "created_at"}


def test_two_exports_of_the_same_cache_are_the_same_bytes_under_a_name_from_their_content(source, tmp_path):
    first = _exported(source, tmp_path, "one")
    second = _exported(source, tmp_path, "two")
    assert first.name == second.name and first.read_bytes() == second.read_bytes()
    assert first.name.startswith("responses-") and first.name.endswith(".jsonl.gz") and len(first.name) == 35
    assert [p.name for p in (tmp_path / "one").iterdir()] == [first.name]  # no temporary file left behind


def test_an_export_adds_only_what_the_folder_lacks_and_never_changes_a_shard(source, tmp_path):
    folder = tmp_path / "caches"
    first = _exported(source, tmp_path, "caches")
    before = first.read_bytes()
    assert export_shards(source, folder) == ExportReport(shards=(), exported=0, already_exported=5)
    assert shard_paths(folder) == [first]  # nothing new: nothing written
    source.put("model-c", ChatRequest.of("A new question"), _completion("a new reply"))
    report = export_shards(source, folder)
    assert report.exported == 1 and report.already_exported == 5 and len(report.shards) == 1
    assert first.read_bytes() == before and len(shard_paths(folder)) == 2
    assert [json.loads(line)["text"] for line in _read_lines(report.shards[0])[1:-1]] == ["a new reply"]
    target = ResponseCache(tmp_path / "target.sqlite")
    assert import_cache(target, folder) == ImportReport(added=6, already_present=0, conflicting=0)
    assert _rows(target) == _rows(source)


def test_a_large_export_is_split_into_shards_under_the_size_limits(source, tmp_path, monkeypatch):
    monkeypatch.setattr(cache_transfer, "MAX_SHARD_BYTES", 1200)  # about two entry lines
    report = export_shards(source, tmp_path / "caches")
    assert report.exported == 5 and len(report.shards) >= 3
    counts = [len(_read_lines(shard)) - 2 for shard in report.shards]
    assert sum(counts) == 5 and max(counts) <= 2
    monkeypatch.setattr(cache_transfer, "MAX_SHARD_BYTES", 1 << 20)
    monkeypatch.setattr(cache_transfer, "MAX_SHARD_GZ_BYTES", 500)  # a compressed shard over it is halved
    split = export_shards(source, tmp_path / "halved")
    assert len(split.shards) > 1 and all(shard.stat().st_size <= 500 or len(_read_lines(shard)) == 3
                                         for shard in split.shards)
    for folder in ("caches", "halved"):
        target = ResponseCache(tmp_path / f"{folder}.sqlite")
        assert import_cache(target, tmp_path / folder) == ImportReport(added=5, already_present=0, conflicting=0)
        assert _rows(target) == _rows(source)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_two_exports_with_no_new_call_leave_git_status_clean(source, tmp_path):
    repo = tmp_path / "repo"

    def git(*args) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout

    repo.mkdir()
    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    export_shards(source, repo / "eval" / "caches")
    git("add", "-A")
    git("commit", "-q", "-m", "export")
    for _ in range(2):
        assert export_shards(source, repo / "eval" / "caches").shards == ()
        assert git("status", "--porcelain", "--untracked-files=all") == ""


def test_an_export_refuses_a_folder_whose_shards_cannot_be_trusted(source, tmp_path):
    shard = _exported(source, tmp_path, "caches")
    shard.write_bytes(shard.read_bytes()[:-30])
    source.put("model-c", ChatRequest.of("A new question"), _completion("a new reply"))
    with pytest.raises(CacheTransferError, match=f"{shard}.*truncated"):
        export_shards(source, tmp_path / "caches")
    assert shard_paths(tmp_path / "caches") == [shard]


def test_a_second_import_adds_nothing(source, tmp_path):
    path = _exported(source, tmp_path)
    target = ResponseCache(tmp_path / "target.sqlite")
    import_cache(target, path)
    before = _rows(target)
    assert import_cache(target, path) == ImportReport(added=0, already_present=5, conflicting=0)
    assert _rows(target) == before


def test_importing_into_the_source_itself_adds_nothing(source, tmp_path):
    assert import_cache(source, _exported(source, tmp_path)) == ImportReport(0, 5, 0)


# -- filters ---------------------------------------------------------------------------------
def _export(source, folder, **filters) -> int:
    return export_shards(source, folder, **filters).exported


def test_model_filter_is_the_exact_name(source, tmp_path):
    assert _export(source, tmp_path / "b", model="model-b") == 2
    assert _export(source, tmp_path / "none", model="model") == 0
    target = ResponseCache(tmp_path / "target.sqlite")
    import_cache(target, tmp_path / "b")
    assert target.models() == ["model-b"] and len(target) == 2


def test_contains_filter_is_a_case_sensitive_substring_of_the_request(source, tmp_path):
    assert _export(source, tmp_path / "rex", contains="Rex") == 2
    assert _export(source, tmp_path / "lower", contains="rex") == 0
    assert _export(source, tmp_path / "both", model="model-a", contains="Summarise") == 1
    assert _export(source, tmp_path / "accent", contains="\u00e9t\u00e9") == 1  # not \\u-escaped
    target = ResponseCache(tmp_path / "target.sqlite")
    import_cache(target, tmp_path / "both")
    assert [(e.model, e.completion.text) for e in target.entries()] == [("model-a", "They met.")]


def test_an_export_of_no_entries_writes_nothing_and_an_empty_folder_is_no_import(source, tmp_path):
    assert export_shards(source, tmp_path / "empty", contains="no such text") == ExportReport((), 0, 0)
    assert not (tmp_path / "empty").exists() or shard_paths(tmp_path / "empty") == []
    (tmp_path / "empty").mkdir(exist_ok=True)
    target = ResponseCache(tmp_path / "target.sqlite")
    with pytest.raises(CacheTransferError, match="holds no response-cache shard"):
        import_cache(target, tmp_path / "empty")


# -- conflicts -------------------------------------------------------------------------------
def test_an_entry_cached_with_another_text_is_kept_and_reported(source, tmp_path):
    path = _exported(source, tmp_path)
    target = ResponseCache(tmp_path / "target.sqlite")
    request = ChatRequest.of("Who is Rex?", max_tokens=64)
    target.put("model-a", request, _completion("a wolf"))
    report = import_cache(target, path)
    assert report == ImportReport(added=4, already_present=0, conflicting=1)
    assert "1 conflicting (kept the text already cached)" in str(report)
    assert target.get("model-a", request).text == "a wolf" and len(target) == 5


# -- a file that cannot be trusted: refused, the cache unchanged -----------------------------
@pytest.fixture
def target(tmp_path) -> ResponseCache:
    """A cache holding one entry of its own, which a refused import must leave alone."""
    cache = ResponseCache(tmp_path / "target.sqlite")
    cache.put("model-z", ChatRequest.of("mine"), _completion("kept"))
    yield cache
    cache.close()


def _refused(target, path, match) -> None:
    before = _rows(target)
    with pytest.raises(CacheTransferError, match=match) as info:
        import_cache(target, path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert _rows(target) == before


def test_a_truncated_gzip_file_is_refused(source, target, tmp_path):
    path = _exported(source, tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    _refused(target, path, "truncated")


def test_a_file_cut_after_some_lines_is_refused(source, target, tmp_path):
    path = _exported(source, tmp_path)
    lines = _read_lines(path)
    _write_lines(path, lines[:3])  # recompressed: a valid gzip stream without the trailer
    _refused(target, path, "truncated: it ends after 2 of 5 entries")
    _write_lines(path, lines[:3] + [lines[3][:20]])  # a line cut in the middle
    _refused(target, path, "line 4 is cut short")


def test_lines_removed_are_refused_by_the_trailer(source, target, tmp_path):
    path = _exported(source, tmp_path)
    lines = _read_lines(path)
    _write_lines(path, lines[:2] + lines[3:])
    _refused(target, path, "holds 4 entries, its header says 5 and its trailer 5")


def test_an_altered_request_is_refused(source, target, tmp_path):
    path = _exported(source, tmp_path)
    lines = _read_lines(path)
    row = json.loads(lines[2])
    row["request"] = row["request"].replace("64", "65")
    lines[2] = (json.dumps(row) + "\n").encode()
    _write_lines(path, lines)
    _refused(target, path, "line 3: the entry's key does not match its model and request")


def test_an_altered_text_is_refused_by_the_digest(source, target, tmp_path):
    path = _exported(source, tmp_path)
    lines = _read_lines(path)
    lines[-2] = lines[-2].replace(b'"text":"', b'"text":"not ')
    _write_lines(path, lines)
    _refused(target, path, "do not match the trailer's sha256")


@pytest.mark.parametrize("field, value, match", [
    ("version", FORMAT_VERSION + 1, f"format version {FORMAT_VERSION + 1}; this memlab reads version {FORMAT_VERSION}"),
    ("schema_version", 99, "layout version 99; this memlab's cache is version 1"),
    ("format", "something.else", "is not a memlab response-cache export"),
])
def test_another_format_or_cache_version_is_refused(field, value, match, source, target, tmp_path):
    path = _exported(source, tmp_path)
    lines = _read_lines(path)
    lines[0] = (json.dumps({**json.loads(lines[0]), field: value}) + "\n").encode()
    _write_lines(path, lines)
    _refused(target, path, match)


@pytest.mark.parametrize("kind, match", [
    ("zero bytes", "is empty"),
    ("empty gzip", "is empty"),
    ("plain text", "not a readable gzip file"),
    ("missing", "No such file"),
])
def test_a_missing_empty_or_plain_file_is_refused(kind, match, target, tmp_path):
    path = tmp_path / "input.jsonl.gz"
    if kind == "zero bytes":
        path.write_bytes(b"")
    elif kind == "empty gzip":
        _write_lines(path, [])
    elif kind == "plain text":
        path.write_bytes(b'{"format": "memlab.response-cache"}\n')
    _refused(target, path, match)


def test_an_unwritable_output_folder_is_an_error_and_leaves_nothing(source, tmp_path):
    (tmp_path / "file.txt").write_text("not a folder\n")
    with pytest.raises(CacheTransferError, match="cannot write the cache export .*file.txt/sub/responses-"):
        export_shards(source, tmp_path / "file.txt" / "sub")
    with pytest.raises(CacheTransferError, match="file.txt: it is a file; an export is a folder of shards"):
        export_shards(source, tmp_path / "file.txt")
    assert (tmp_path / "file.txt").read_text() == "not a folder\n"


def test_a_folder_import_checks_every_shard_before_it_adds_any(source, target, tmp_path, monkeypatch):
    monkeypatch.setattr(cache_transfer, "MAX_SHARD_BYTES", 1200)
    shards = export_shards(source, tmp_path / "caches").shards
    shards[-1].write_bytes(shards[-1].read_bytes()[:-30])
    _refused(target, tmp_path / "caches", "truncated")


def test_a_merge_is_all_or_nothing(source, target):
    """A file that changes between the check and the insert, or a bad row, rolls the insert back."""
    before = _rows(target)

    def failing_rows():
        yield from _rows(source)[:3]
        raise CacheTransferError("the file changed meanwhile")

    with pytest.raises(CacheTransferError, match="changed meanwhile"):
        target.merge_rows(failing_rows())
    bad = {**_rows(source)[0], "text": "x"}
    bad["request"] = bad["request"].replace("64", "65")
    with pytest.raises(CacheError, match="key does not match"):
        target.merge_rows([_rows(source)[1], bad])
    assert _rows(target) == before
    target.put("model-z", ChatRequest.of("after"), _completion("still writable"))  # no transaction left open
    assert len(target) == 2


# -- the command -----------------------------------------------------------------------------
def _one_error_line(argv, capsys, caplog) -> str:
    caplog.clear()
    capsys.readouterr()
    assert main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    lines += [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    return lines[0]


def test_cli_round_trip(source, tmp_path, capsys):
    folder = tmp_path / "out" / "caches"  # a missing folder is made
    assert main(["cache", "export", "--cache", str(source.path), "--model", "model-a", str(folder)]) == 0
    [shard] = shard_paths(folder)
    assert f"exported 3 entries from {source.path} (0 already in {folder}'s shards) to {shard}" \
        in capsys.readouterr().out
    assert main(["cache", "export", "--cache", str(source.path), "--model", "model-a", str(folder)]) == 0
    assert f"nothing new to export from {source.path}: 3 already in {folder}'s shards; wrote nothing" \
        in capsys.readouterr().out
    target = tmp_path / "target.sqlite"
    for path in (folder, shard):  # the folder, or any shard
        assert main(["cache", "import", "--cache", str(target), str(path)]) == 0
    out = capsys.readouterr().out
    assert "3 added, 0 already present, 0 conflicting" in out and "0 added, 3 already present" in out


def test_cli_uses_the_default_cache(source, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMLAB_CACHE", str(source.path))
    assert main(["cache", "export", str(tmp_path / "caches")]) == 0
    assert f"exported 5 entries from {source.path}" in capsys.readouterr().out


def test_cli_bad_input_is_one_error_line(source, tmp_path, capsys, caplog):
    (tmp_path / "file.txt").write_text("not a folder\n")
    export = ["cache", "export", "--cache", str(source.path)]
    assert "file.txt" in _one_error_line([*export, str(tmp_path / "file.txt" / "caches")], capsys, caplog)
    assert "it is a file" in _one_error_line([*export, str(tmp_path / "file.txt")], capsys, caplog)
    line = _one_error_line(["cache", "export", "--cache", str(tmp_path / "nope.sqlite"), str(tmp_path / "c")],
                           capsys, caplog)
    assert "no response cache at" in line and not (tmp_path / "nope.sqlite").exists()
    folder = tmp_path / "caches"
    assert main([*export, str(folder)]) == 0
    [path] = shard_paths(folder)
    path.write_bytes(path.read_bytes()[:-30])
    target = tmp_path / "target.sqlite"
    assert "truncated" in _one_error_line(["cache", "import", "--cache", str(target), str(folder)], capsys, caplog)
    assert "nope.gz" in _one_error_line(["cache", "import", "--cache", str(target), str(tmp_path / "nope.gz")],
                                        capsys, caplog)
    assert len(ResponseCache(target)) == 0
    with pytest.raises(SystemExit) as info:
        main(["cache", "import"])
    assert info.value.code == 2


def test_copy_model_replays_a_renamed_lm(source, tmp_path, capsys, caplog):
    """An LM whose name changed while its outputs did not (an adapter's identity no longer covering
    its card) still replays: its entries are stored again under the new name, the old ones kept."""
    request = ChatRequest.of("Who is Rex?", max_tokens=64)
    assert source.get("model-a+new", request) is None
    assert main(["cache", "copy-model", "--cache", str(source.path), "model-a", "model-a+new"]) == 0
    assert "3 added, 0 already there, 0 already there with another text" in capsys.readouterr().out
    assert source.get("model-a+new", request).text == "a dog" and source.get("model-a", request).text == "a dog"
    assert source.get("model-b", request).text == "a cat" and len(source) == 8
    assert source.copy_model("model-a", "model-a+new") == (0, 3, 0)  # again: nothing new
    assert "no entry of model 'model-c'" in _one_error_line(
        ["cache", "copy-model", "--cache", str(source.path), "model-c", "model-d"], capsys, caplog)
    line = _one_error_line(["cache", "copy-model", "--cache", str(tmp_path / "nope.sqlite"), "model-a", "x"],
                           capsys, caplog)
    assert "no response cache at" in line and not (tmp_path / "nope.sqlite").exists()
