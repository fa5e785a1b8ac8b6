"""Writing result files so that a reader never sees half of one, and the manifest that lets a
reader check a saved folder before trusting it.

Manifest
--------
Every saved folder memlab reads back (a stage checkpoint, a memory) ends with ``manifest.json``,
written last (``write_manifest``)::

    {"format": "memlab.UnitMemory", "format_version": 1, "memlab_version": "0.1.0",
     "versions": {package: version}, "created": iso time,
     "files": {relative path: sha256, ...every other file, sub-folders included}, ...the format's own keys}

``read_manifest`` checks it before anything else is read: its shape, the format and version the
caller reads, and that every listed file is there, a file, with that sha256. Problems raise
``ManifestError`` with a one-line message naming the folder and the file; each format turns
it into its own error type.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from memlab import __version__
from memlab.errors import MemlabError

log = logging.getLogger(__name__)

MANIFEST_FILE = "manifest.json"
#: A recipe's record of its run, beside the weights it wrote (a stage checkpoint, an LM adapter).
TRAINING_FILE = "training.json"
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(MemlabError, ValueError):
    """A saved folder whose manifest is missing, malformed, or does not match its files."""


class OverwriteError(MemlabError, ValueError):
    """A command asked to write where it reads: its output is, or lies inside, one of its inputs."""


def refuse_writing_into(out: str | os.PathLike | None, what: str,
                        inputs: Mapping[str, str | os.PathLike | None]) -> None:
    """The one output rule every command applies before any work: ``OverwriteError`` when the
    output ``out`` (``what`` names it: "--out") is empty, cannot be written (its nearest existing
    folder is a file or not writable), or is, contains, or lies inside one of ``inputs``
    ({description: path}; None entries are skipped), so that no command destroys what it reads (a
    cache exported over itself, a run folder replacing the data inside it). Paths are compared
    resolved: relative to the working folder, links followed."""
    if out is None or not str(out).strip():
        raise OverwriteError(f"{what} must be a path to write to, got {'nothing' if out is None else repr(str(out))}")
    target = Path(out).expanduser().resolve()
    for description, path in inputs.items():
        if path is None or not str(path).strip():
            continue
        source = Path(path).expanduser().resolve()
        if target == source or source in target.parents or target in source.parents:
            where = "is" if target == source else "lies inside" if source in target.parents else "contains"
            raise OverwriteError(f"{what} {out} {where} {description} {path}, which this command reads: "
                                 "writing there would destroy it; choose another path")
    existing = next(p for p in (target, *target.parents) if p.exists())
    if existing != target and not existing.is_dir():
        raise OverwriteError(f"{what} {out}: {existing} is a file, so nothing can be written under it")
    folder = existing if existing.is_dir() else existing.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OverwriteError(f"{what} {out}: {folder} is not writable")


def write_json_atomic(path: str | os.PathLike, payload: Any, sort_keys: bool = False) -> None:
    """``payload`` as indented JSON at ``path``, written through ``atomic_file``."""
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str, sort_keys=sort_keys),
                       encoding="utf-8")


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary sibling of ``path`` to write; once the block ends it is made durable and
    renamed over ``path``: an interrupted run leaves the old file or the new one, never a torn
    one (an error in the block removes the temporary file and leaves ``path`` as it was)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        with tmp.open("rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_folder(target: str | os.PathLike) -> Iterator[Path]:
    """Build a folder that replaces ``target`` whole: yields an empty temporary sibling to write
    into; on a clean exit it is swapped in (``swap_in``), on an error it is removed and
    ``target`` is left as it was. Refusing a ``target`` that must not be replaced is the caller's job."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_staging(target)
    # The owner's pid in the name lets a later writer tell a folder a killed process left behind.
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a saved folder is meant to be shared
        yield tmp
        swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_abandoned_staging(target: str | os.PathLike) -> list[Path]:
    """Remove the staging folders of ``target`` (``atomic_folder``'s) whose process is gone: a
    kill -9 or a lost machine leaves one, which no later run would otherwise notice. A folder whose
    process is alive is another writer's and stays; one without a pid in its name (made before
    names carried it) is named in a warning for its owner to remove. Returns what was removed."""
    target = Path(target)
    removed = []
    for folder in sorted(target.parent.glob(f".{glob.escape(target.name)}.tmp-*")):
        owner = re.fullmatch(rf"\.{re.escape(target.name)}\.tmp-(\d+)-\w+", folder.name)
        if owner is None:
            log.warning("%s: a staging folder of an interrupted write of %s, left by an older memlab; "
                        "remove it once no process writes there", folder, target)
        elif not _process_alive(int(owner.group(1))):
            shutil.rmtree(folder, ignore_errors=True)
            log.info("removed %s: the staging folder of an interrupted write of %s (its process is gone)",
                     folder, target)
            removed.append(folder)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


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


def replaceable_folder_problem(folder: str | os.PathLike, own_files: Iterable[str], what: str) -> str | None:
    """Why ``folder`` may not be replaced whole by a folder of ``what`` (None: it may): it is a
    file, holds files other than ``own_files``, or cannot be created (``creatable_problem``)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if folder.is_dir():
        foreign = sorted(p.name for p in folder.iterdir() if p.name not in set(own_files))
        if foreign:
            return (f"{folder} holds files that are not {what} ({', '.join(foreign[:5])}): it would be "
                    "replaced whole, so choose a new or empty one")
    return creatable_problem(folder)


def creatable_problem(folder: str | os.PathLike) -> str | None:
    """Why ``folder`` (or a sibling swapped in for it) cannot be created: its nearest existing
    ancestor is not a writable folder (None: it can)."""
    parent = next((p for p in Path(folder).absolute().parents if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"{folder}: cannot create a folder under {parent}"
    return None


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


# -- manifest (module docstring) ---------------------------------------------------------
def write_manifest(folder: str | os.PathLike, format: str, format_version: int, versions: Mapping[str, str],
                   skip: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    """Last step of a save whose files are all in ``folder``: write its manifest (``extra`` keys
    added) with the sha256 of every file but those named in ``skip``; returns it."""
    folder = Path(folder)
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    manifest = {
        "format": format,
        "format_version": format_version,
        "memlab_version": __version__,
        "versions": dict(versions),
        "created": datetime.now(timezone.utc).isoformat(),
        "files": {name: sha256_file(folder / name) for name in names if name not in (MANIFEST_FILE, *skip)},
        **extra,
    }
    write_json_atomic(folder / MANIFEST_FILE, manifest, sort_keys=True)
    return manifest


def read_manifest(folder: str | os.PathLike, format: str, format_version: int, required: Iterable[str] = (),
                  remedy: str = "", check_files: bool = True) -> dict[str, Any]:
    """``folder``'s manifest once its shape, format and version are what the caller reads, it
    lists the ``required`` files (those the caller will read: an unlisted file is unchecked) and
    (``check_files``) every listed file matches its sha256; else ``ManifestError``.
    ``remedy`` ends the message for another format version (what the user can do)."""
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ManifestError(f"{path}: unreadable manifest ({type(e).__name__}: {e})") from None
    problem = _manifest_problem(manifest)
    if problem:
        raise ManifestError(f"{path}: malformed manifest ({problem})")
    if manifest["format"] != format:
        raise ManifestError(f"{folder}: holds {manifest['format']!r}, not {format!r}")
    if manifest["format_version"] != format_version:
        raise ManifestError(f"{folder}: format version {manifest['format_version']}, this memlab reads version "
                            f"{format_version} (saved by memlab {manifest.get('memlab_version')}){remedy}")
    unlisted = [name for name in required if name not in manifest["files"]]
    if unlisted:
        raise ManifestError(f"{folder}: the manifest does not list {', '.join(unlisted)}, so it cannot be checked")
    if check_files:
        for name, digest in manifest["files"].items():
            file = folder / name
            if file.is_dir():
                raise ManifestError(f"{folder}: {name} listed in the manifest is a directory, not a file")
            if not file.is_file():
                raise ManifestError(f"{folder}: file {name} listed in the manifest is missing")
            try:
                actual = sha256_file(file)
            except OSError as e:
                raise ManifestError(f"{folder}: cannot read {name} ({type(e).__name__}: {e.strerror or e})") from None
            if actual != digest:
                raise ManifestError(f"{folder}: file {name} is corrupted or truncated "
                                    "(sha256 does not match the manifest)")
    return manifest


def _manifest_problem(manifest: Any) -> str | None:
    """What is wrong with the shape of a parsed manifest (None: nothing)."""
    if not isinstance(manifest, dict):
        return f"a JSON {type(manifest).__name__}, not an object"
    if not isinstance(manifest.get("format"), str):
        return "'format' is not a string"
    if not isinstance(manifest.get("format_version"), int) or isinstance(manifest["format_version"], bool):
        return "'format_version' is not an integer"
    files = manifest.get("files")
    if not isinstance(files, dict):
        return f"'files' is {type(files).__name__}, not an object of file names and sha256 digests"
    for name, digest in files.items():
        # a listed name must stay inside the folder: no absolute path, no '..'
        path = PurePosixPath(name)
        if not name or "\0" in name or path.is_absolute() or ".." in path.parts or name == MANIFEST_FILE:
            return f"'files' lists {name!r}, not a file inside the folder"
        if not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
            return f"'files' gives {name} the digest {digest!r}, not a sha256"
    return None


def is_subfolder_name(name: Any) -> bool:
    """Whether ``name``, read from a saved file, names a direct sub-folder (no path, no '.' or '..')."""
    return isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name


class ChecksumError(MemlabError, ValueError):
    """Bytes whose sha256 (or size) is not the one they were expected to have."""


def write_verified(target: str | os.PathLike, blocks: Iterable[bytes], sha256: str, what: str) -> Path:
    """Stream ``blocks`` into ``target``, renaming it into place only once their sha256 is ``sha256``.

    A crash, an error raised by ``blocks`` or a wrong checksum (``ChecksumError`` naming ``what``)
    leaves no file at ``target`` that looks usable: only a verified file is ever renamed there.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    tmp = Path(name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for block in blocks:
                digest.update(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256:
            raise ChecksumError(f"{what}: sha256 is {digest.hexdigest()}, expected {sha256}")
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a models folder may be shared
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def recorded_split(folder: str | os.PathLike) -> frozenset[str]:
    """The train and validation conversation ids of ``folder``'s training record (none: empty);
    a ValueError names a record that is unreadable or malformed."""
    path = Path(folder) / TRAINING_FILE
    if not path.exists():
        return frozenset()
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable training record ({type(e).__name__}: {e})") from None
    split = record.get("split", {}) if isinstance(record, dict) else None
    parts = [split.get(part, []) for part in ("train", "validation")] if isinstance(split, dict) else None
    if parts is None or not all(isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in parts):
        raise ValueError(f"{path}: malformed training record ('split' must give lists of conversation ids "
                         "under 'train' and 'validation')")
    return frozenset(parts[0]) | frozenset(parts[1])
