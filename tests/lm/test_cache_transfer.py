"""Response-cache export and import (``memlab.lm.cache_transfer``, ``memlab cache``): real
SQLite files on tmp_path, no model."""

from __future__ import annotations

import gzip
import json
import logging

import pytest

from memlab.cli import main
from memlab.lm.cache import CacheError, ResponseCache
from memlab.lm.cache_transfer import FORMAT_VERSION, CacheTransferError, ImportReport, export_cache, import_cache
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


def _exported(source, tmp_path, name="export.jsonl.gz"):
    path = tmp_path / name
    assert export_cache(source, path) == len(ENTRIES)
    return path


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


def test_two_exports_of_the_same_cache_are_the_same_bytes(source, tmp_path):
    first = _exported(source, tmp_path, "one.jsonl.gz").read_bytes()
    assert _exported(source, tmp_path, "two.jsonl.gz").read_bytes() == first
    # an export replaces the file whole and leaves no temporary file behind
    assert _exported(source, tmp_path, "one.jsonl.gz").read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


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
def test_model_filter_is_the_exact_name(source, tmp_path):
    path = tmp_path / "b.jsonl.gz"
    assert export_cache(source, path, model="model-b") == 2
    assert export_cache(source, tmp_path / "none.jsonl.gz", model="model") == 0
    target = ResponseCache(tmp_path / "target.sqlite")
    import_cache(target, path)
    assert target.models() == ["model-b"] and len(target) == 2


def test_contains_filter_is_a_case_sensitive_substring_of_the_request(source, tmp_path):
    assert export_cache(source, tmp_path / "rex.jsonl.gz", contains="Rex") == 2
    assert export_cache(source, tmp_path / "lower.jsonl.gz", contains="rex") == 0
    assert export_cache(source, tmp_path / "both.jsonl.gz", model="model-a", contains="Summarise") == 1
    assert export_cache(source, tmp_path / "accent.jsonl.gz", contains="\u00e9t\u00e9") == 1  # not \\u-escaped
    target = ResponseCache(tmp_path / "target.sqlite")
    import_cache(target, tmp_path / "both.jsonl.gz")
    assert [(e.model, e.completion.text) for e in target.entries()] == [("model-a", "They met.")]


def test_an_export_of_no_entries_is_a_valid_file(source, tmp_path):
    path = tmp_path / "empty.jsonl.gz"
    assert export_cache(source, path, contains="no such text") == 0
    assert len(_read_lines(path)) == 2
    target = ResponseCache(tmp_path / "target.sqlite")
    assert import_cache(target, path) == ImportReport(0, 0, 0) and len(target) == 0


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
    ("folder", "Is a directory"),
])
def test_a_missing_empty_or_plain_file_is_refused(kind, match, target, tmp_path):
    path = tmp_path / "input.jsonl.gz"
    if kind == "zero bytes":
        path.write_bytes(b"")
    elif kind == "empty gzip":
        _write_lines(path, [])
    elif kind == "plain text":
        path.write_bytes(b'{"format": "memlab.response-cache"}\n')
    elif kind == "folder":
        path.mkdir()
    _refused(target, path, match)


def test_an_unwritable_output_folder_is_an_error_and_leaves_nothing(source, tmp_path):
    (tmp_path / "file.txt").write_text("not a folder\n")
    with pytest.raises(CacheTransferError, match="cannot write the cache export .*file.txt/out.jsonl.gz"):
        export_cache(source, tmp_path / "file.txt" / "out.jsonl.gz")
    with pytest.raises(CacheTransferError, match="it is a directory"):
        export_cache(source, tmp_path)
    assert (tmp_path / "file.txt").read_text() == "not a folder\n"


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
    path = tmp_path / "out" / "a.jsonl.gz"  # a missing folder is made
    assert main(["cache", "export", "--cache", str(source.path), "--model", "model-a", str(path)]) == 0
    assert f"exported 3 entries from {source.path} to {path}" in capsys.readouterr().out
    target = tmp_path / "target.sqlite"
    assert main(["cache", "import", "--cache", str(target), str(path)]) == 0
    assert "3 added, 0 already present, 0 conflicting" in capsys.readouterr().out
    assert main(["cache", "import", "--cache", str(target), str(path)]) == 0
    assert "0 added, 3 already present, 0 conflicting" in capsys.readouterr().out
    assert main(["cache", "export", "--cache", str(source.path), "--contains", "nothing like it", str(path)]) == 0
    assert "exported 0 entries" in capsys.readouterr().out


def test_cli_uses_the_default_cache(source, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMLAB_CACHE", str(source.path))
    assert main(["cache", "export", str(tmp_path / "a.jsonl.gz")]) == 0
    assert f"exported 5 entries from {source.path}" in capsys.readouterr().out


def test_cli_bad_input_is_one_error_line(source, tmp_path, capsys, caplog):
    (tmp_path / "file.txt").write_text("not a folder\n")
    export = ["cache", "export", "--cache", str(source.path)]
    assert "file.txt" in _one_error_line([*export, str(tmp_path / "file.txt" / "a.jsonl.gz")], capsys, caplog)
    line = _one_error_line(["cache", "export", "--cache", str(tmp_path / "nope.sqlite"), str(tmp_path / "a.gz")],
                           capsys, caplog)
    assert "no response cache at" in line and not (tmp_path / "nope.sqlite").exists()
    path = tmp_path / "a.jsonl.gz"
    assert main([*export, str(path)]) == 0
    path.write_bytes(path.read_bytes()[:-30])
    target = tmp_path / "target.sqlite"
    assert "truncated" in _one_error_line(["cache", "import", "--cache", str(target), str(path)], capsys, caplog)
    assert "nope.gz" in _one_error_line(["cache", "import", "--cache", str(target), str(tmp_path / "nope.gz")],
                                        capsys, caplog)
    assert len(ResponseCache(target)) == 0
    with pytest.raises(SystemExit) as info:
        main(["cache", "import"])
    assert info.value.code == 2
