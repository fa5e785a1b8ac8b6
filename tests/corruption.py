"""Ways to damage a saved file, shared by the integrity sweeps of stage checkpoints and memory folders."""

from __future__ import annotations

from pathlib import Path


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def directory_instead(path: Path) -> None:
    path.unlink()
    path.mkdir()
