"""A saved memory folder corrupted in every way a disk, a copy or a hand can corrupt it is
refused with ``MemoryStoreError`` and a one-line message naming the problem, never another
exception type (issue 22, section 4)."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from memlab.memory import MemoryGraph, MemoryStoreError, UnitMemory
from memlab.memory.bundle import load_bundle, save_bundle
from tests.corruption import directory_instead, flip_byte, truncate
from tests.memory.helpers import HashingEmbedder, make_units


def _edit_manifest(folder, edit):
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps(edit(manifest)))


def _set(key, value):
    return lambda m: {**m, key: value}


def _rewrite_consistently(folder, name, text):
    """Replace a file and its checksum: contents that pass the manifest but are of the wrong types."""
    (folder / name).write_text(text)
    _edit_manifest(folder, lambda m: {**m, "files": {**m["files"], name: hashlib.sha256(text.encode()).hexdigest()}})


SHA = "0" * 64
UNIT_MEMORY_CASES = {
    "units deleted": (lambda f: (f / "units.jsonl").unlink(), r"file units\.jsonl listed in the manifest is missing"),
    "bm25 truncated": (lambda f: truncate(f / "bm25.json"), r"file bm25\.json is corrupted or truncated"),
    "dense index flipped": (lambda f: flip_byte(f / "dense.faiss"), r"file dense\.faiss is corrupted or truncated"),
    "graph flipped": (lambda f: flip_byte(f / "graph.json"), r"file graph\.json is corrupted or truncated"),
    "dense index a directory": (lambda f: directory_instead(f / "dense.faiss"),
                                r"dense\.faiss listed in the manifest is a directory, not a file"),
    "manifest deleted": (lambda f: (f / "manifest.json").unlink(), r"no manifest\.json; not a saved memory"),
    "manifest a directory": (lambda f: directory_instead(f / "manifest.json"), r"no manifest\.json; not a saved memory"),
    "manifest not json": (lambda f: (f / "manifest.json").write_text("{truncated"),
                          r"manifest\.json: unreadable manifest \(JSONDecodeError"),
    "manifest a list": (lambda f: (f / "manifest.json").write_text("[]"),
                        r"malformed manifest \(a JSON list, not an object\)"),
    "manifest a string": (lambda f: (f / "manifest.json").write_text('"files"'),
                          r"malformed manifest \(a JSON str, not an object\)"),
    "files a list": (lambda f: _edit_manifest(f, _set("files", ["units.jsonl"])), r"malformed manifest \('files' is list"),
    "files null": (lambda f: _edit_manifest(f, _set("files", None)), r"malformed manifest \('files' is NoneType"),
    "files a number": (lambda f: _edit_manifest(f, _set("files", 3)), r"malformed manifest \('files' is int"),
    "files a string": (lambda f: _edit_manifest(f, _set("files", "units.jsonl")), r"malformed manifest \('files' is str"),
    "digest a number": (lambda f: _edit_manifest(f, _set("files", {"units.jsonl": 5})),
                        r"malformed manifest \('files' gives units\.jsonl the digest 5, not a sha256\)"),
    "digest a dict": (lambda f: _edit_manifest(f, _set("files", {"units.jsonl": {}})),
                      r"malformed manifest \('files' gives units\.jsonl the digest \{\}, not a sha256\)"),
    "file outside the folder": (lambda f: _edit_manifest(f, _set("files", {"../elsewhere": SHA})),
                                r"malformed manifest \('files' lists '\.\./elsewhere', not a file inside the folder\)"),
    "file name with a NUL byte": (lambda f: _edit_manifest(f, _set("files", {"units\u0000.jsonl": SHA})),
                                  r"malformed manifest \('files' lists 'units\\x00\.jsonl', not a file inside"),
    "files empty": (lambda f: _edit_manifest(f, _set("files", {})),
                    r"the manifest does not list units\.jsonl, dense\.faiss, dense_ids\.json, bm25\.json"),
    "format version a string": (lambda f: _edit_manifest(f, _set("format_version", "1")),
                                r"malformed manifest \('format_version' is not an integer\)"),
    "format null": (lambda f: _edit_manifest(f, _set("format", None)), r"malformed manifest \('format' is not a string\)"),
    "other format version": (lambda f: _edit_manifest(f, _set("format_version", 99)),
                             r"format version 99, this memlab reads version 1 .*; rebuild the memory"),
    "counts a list": (lambda f: _edit_manifest(f, _set("counts", [6])),
                      r"malformed manifest \('counts' has no number of units\)"),
    "counts without units": (lambda f: _edit_manifest(f, _set("counts", {})),
                             r"malformed manifest \('counts' has no number of units\)"),
    "unit rows of the wrong type": (lambda f: _rewrite_consistently(f, "units.jsonl", "[1, 2]\n"),
                                    r"cannot read its contents: TypeError"),
    "graph of the wrong type": (lambda f: _rewrite_consistently(f, "graph.json", "[]"), r"cannot read its contents"),
}


@pytest.mark.parametrize("corrupt, problem", UNIT_MEMORY_CASES.values(), ids=UNIT_MEMORY_CASES.keys())
def test_a_corrupted_memory_folder_is_refused_in_one_line(corrupt, problem, tmp_path):
    hashing = HashingEmbedder()
    graph = MemoryGraph()
    graph.add_node("u0", "unit")
    folder = UnitMemory.build(make_units(), hashing, graph).save(tmp_path / "mem")
    assert len(UnitMemory.load(folder, hashing)) == 6
    corrupt(folder)
    with pytest.raises(MemoryStoreError, match=problem) as error:
        UnitMemory.load(folder, hashing)
    assert type(error.value) is MemoryStoreError and "\n" not in str(error.value)
    assert str(folder) in str(error.value)


def _bundle(folder, hashing):
    return save_bundle(folder, format="memlab.TestBundle", format_version=1, embedder=hashing,
                       parts={"events": UnitMemory.build(make_units(), hashing)}, graph=MemoryGraph(),
                       state={"step": 3})


BUNDLE_CASES = {
    "parts a string": (lambda f: _edit_manifest(f, _set("parts", "events")), r"'parts' is not a list of sub-folder names"),
    "parts of numbers": (lambda f: _edit_manifest(f, _set("parts", [1])), r"'parts' is not a list of sub-folder names"),
    "part outside the folder": (lambda f: _edit_manifest(f, _set("parts", ["../events"])),
                                r"'parts' is not a list of sub-folder names"),
    "part folder deleted": (lambda f: shutil.rmtree(f / "events"), r"file events/\S+ listed in the manifest is missing"),
    "part manifest files a list": (lambda f: _edit_manifest(f / "events", _set("files", [])),
                                   r"file events/manifest\.json is corrupted or truncated"),
    "state deleted and unlisted": (lambda f: (_edit_manifest(f, lambda m: {**m, "files": {
        k: v for k, v in m["files"].items() if k != "state.json"}}), (f / "state.json").unlink()),
        r"the manifest does not list state\.json"),
}


@pytest.mark.parametrize("corrupt, problem", BUNDLE_CASES.values(), ids=BUNDLE_CASES.keys())
def test_a_corrupted_bundle_is_refused_in_one_line(corrupt, problem, tmp_path):
    hashing = HashingEmbedder()
    folder = _bundle(tmp_path / "bundle", hashing)
    assert load_bundle(folder, format="memlab.TestBundle", format_version=1, embedder=hashing).state == {"step": 3}
    corrupt(folder)
    with pytest.raises(MemoryStoreError, match=problem) as error:
        load_bundle(folder, format="memlab.TestBundle", format_version=1, embedder=hashing)
    assert type(error.value) is MemoryStoreError and "\n" not in str(error.value)
