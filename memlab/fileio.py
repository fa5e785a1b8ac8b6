"""Writing result files so that a reader never sees half of one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def write_json_atomic(path: str | os.PathLike, payload: Any) -> None:
    """``payload`` as indented JSON at ``path``, via a temporary sibling made durable and then
    renamed over it: an interrupted run leaves the old file or the new one, never a torn one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(json.dumps(payload, indent=2, ensure_ascii=False, default=str))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextmanager
def atomic_folder(target: str | os.PathLike) -> Iterator[Path]:
    """Build a folder that replaces ``target`` whole: yields an empty temporary sibling to write
    into; on a clean exit it is swapped in (``swap_in``), on an error it is removed and
    ``target`` is left as it was. Refusing a ``target`` that must not be replaced is the caller's job."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a saved folder is meant to be shared
        yield tmp
        swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def swap_in(tmp: str | os.PathLike, target: str | os.PathLike) -> None:
    """Put the complete folder ``tmp`` at its sibling ``target``, durably: ``tmp`` is fsynced
    first; an existing ``target`` is moved aside, put back if the swap fails, and deleted only
    once the new folder is in place (``interrupted_backups`` finds one a crash left behind)."""
    tmp, target = Path(tmp), Path(target)
    _fsync_tree(tmp)
    if not target.exists():
        os.rename(tmp, target)
    else:
        # rename() cannot replace a non-empty directory: move the old one aside first.
        backup = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(target, backup)
        try:
            os.rename(tmp, target)
        except BaseException:
            os.rename(backup, target)
            raise
        _fsync_dir(target.parent)
        shutil.rmtree(backup, ignore_errors=True)
    _fsync_dir(target.parent)


def interrupted_backups(target: str | os.PathLike) -> list[Path]:
    """Previous versions of ``target`` that a ``swap_in`` interrupted by a crash left beside it, oldest name first."""
    target = Path(target)
    return sorted(target.parent.glob(f".{target.name}.old-*")) if target.parent.is_dir() else []


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        elif path.is_dir():
            _fsync_dir(path)
    _fsync_dir(folder)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
