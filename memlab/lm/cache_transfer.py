"""Moving response-cache entries between machines: append-only folders of self-checking shards.

An export is a folder of shards (``eval/caches/`` in this repository). ``export_shards`` writes
only the entries that no shard in the folder holds yet, into new shards; a shard, once written,
never changes, so a folder under git grows by new files and never rewrites an old one (a gzip
stream does not delta: a rewritten 14 MB file added 14 MB to the history per commit). An export
with nothing new writes nothing.

A shard is gzip-compressed JSON lines (UTF-8)::

    {"format": "memlab.response-cache", "version": 1, "schema_version": 1, "entries": N,
     "filter": {"model": M or null, "contains": TEXT or null}, "memlab_version": "..."}
    {"key": ..., "model": ..., "request": ..., "text": ..., ...every column of the row}    N lines
    {"trailer": "memlab.response-cache", "entries": N, "sha256": digest of every line above}

* It is named by its content: ``responses-<sha256 of its entry lines, 16 hex>.jsonl.gz``.
* Entries are in key order and the gzip header carries no time or name, so two exports of the
  same entries are the same bytes under the same name.
* A shard holds at most ``MAX_SHARD_BYTES`` of entry lines and compresses to at most
  ``MAX_SHARD_GZ_BYTES`` (a larger export is split), so no tracked file passes 5 MB.
* Each shard is written to a temporary sibling and renamed into place: an interrupted export
  leaves whole shards only, and running it again writes the rest.
* ``import_cache`` takes a folder (every ``*.jsonl.gz`` in it) or one shard. It reads every
  shard whole and checks it before it writes anything: the header's format, export version and
  cache layout version (``SCHEMA_VERSION``); every row's columns and its key, recomputed from
  its model and request (an altered row does not match); keys strictly increasing (no row
  twice); the trailer's count and digest (a truncated or shortened file has no trailer or the
  wrong one). It then adds the rows in one transaction that rolls back if a file changed in
  between. A row already stored is never replaced: one with another text is counted as
  conflicting and the stored one kept.
* Every problem with a file is a ``CacheTransferError`` (a ``CacheError``) naming it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import re
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from memlab import __version__
from memlab.lm.cache import COLUMNS, SCHEMA_VERSION, CacheError, ResponseCache, payload_key, request_from_payload

FORMAT = "memlab.response-cache"
#: Bumped when the export file's layout changes; another version is refused with a clear message.
FORMAT_VERSION = 1
_KEY = re.compile(r"[0-9a-f]{64}")
#: The longest latency an imported entry may record: one LLM call of a day is a corrupted value.
MAX_LATENCY_S = 86_400.0
SHARD_PREFIX, SHARD_SUFFIX = "responses-", ".jsonl.gz"
#: Entry lines per shard, uncompressed: about 3.5 MB of gzip for LLM replies (ratio 4.7 measured).
MAX_SHARD_BYTES = 16 << 20
#: The most a shard may compress to; a larger one is split (the repository keeps files under 5 MB).
MAX_SHARD_GZ_BYTES = 4_500_000


class CacheTransferError(CacheError):
    """A shard or export folder that cannot be written, or read back and trusted; names it."""


@dataclass(frozen=True)
class ImportReport:
    """What ``import_cache`` did with the shards' entries."""

    added: int
    already_present: int  # stored already, with the same text
    conflicting: int  # stored already with another text: the stored row was kept

    def __str__(self) -> str:
        line = f"{self.added} added, {self.already_present} already present, {self.conflicting} conflicting"
        return line + (" (kept the text already cached)" if self.conflicting else "")


def _line(payload: dict[str, Any]) -> bytes:
    # keys in the order given (the header's format first; a row's in table order): deterministic
    return (json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


@dataclass(frozen=True)
class ExportReport:
    """What ``export_shards`` wrote: the new shards, and how many selected entries went into
    them or were held by the folder's shards already."""

    shards: tuple[Path, ...]
    exported: int
    already_exported: int


def shard_paths(path: str | os.PathLike) -> list[Path]:
    """The shards ``path`` names: a folder's ``*.jsonl.gz`` files in name order (hidden
    temporary files left out), or ``path`` itself when it is not a folder."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.glob(f"*{SHARD_SUFFIX}") if not p.name.startswith(".") and p.is_file())


def export_shards(cache: ResponseCache, folder: str | os.PathLike, model: str | None = None,
                  contains: str | None = None) -> ExportReport:
    """Write the entries of ``cache`` (only ``model``'s; only those whose request JSON contains
    ``contains``, case-sensitive) that no shard in ``folder`` holds into new shards there
    (module docstring). The folder's shards are checked whole first; one that cannot be trusted
    is a ``CacheTransferError`` and nothing is written."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise CacheTransferError(f"cannot export into {folder}: it is a file; an export is a folder of shards "
                                 "(e.g. eval/caches)")
    held = {row["key"] for shard in (shard_paths(folder) if folder.is_dir() else [])
            for row in _verified_rows(shard)}
    shards: list[Path] = []
    chunk: list[bytes] = []
    exported = already = size = 0
    for row in cache.rows(model=model, contains=contains):
        if row["key"] in held:
            already += 1
            continue
        line = _line(row)
        if chunk and size + len(line) > MAX_SHARD_BYTES:
            shards += _write_shards(folder, chunk, model, contains)
            chunk, size = [], 0
        chunk.append(line)
        size += len(line)
        exported += 1
    if chunk:
        shards += _write_shards(folder, chunk, model, contains)
    return ExportReport(shards=tuple(shards), exported=exported, already_exported=already)


def _write_shards(folder: Path, lines: list[bytes], model: str | None, contains: str | None) -> list[Path]:
    """``lines`` (entry lines in key order) as one shard in ``folder``, or as two halves, each
    split again, where one shard would compress to more than ``MAX_SHARD_GZ_BYTES``."""
    header = _line({"format": FORMAT, "version": FORMAT_VERSION, "schema_version": SCHEMA_VERSION,
                    "entries": len(lines), "filter": {"model": model, "contains": contains},
                    "memlab_version": __version__})
    digest, name = hashlib.sha256(header), hashlib.sha256()
    for line in lines:
        digest.update(line)
        name.update(line)
    trailer = _line({"trailer": FORMAT, "entries": len(lines), "sha256": digest.hexdigest()})
    # no file name or time in the gzip header: the same entries make the same bytes
    data = gzip.compress(header + b"".join(lines) + trailer, compresslevel=6, mtime=0)
    if len(data) > MAX_SHARD_GZ_BYTES and len(lines) > 1:
        half = len(lines) // 2
        return _write_shards(folder, lines[:half], model, contains) + _write_shards(folder, lines[half:], model,
                                                                                       contains)
    path = folder / f"{SHARD_PREFIX}{name.hexdigest()[:16]}{SHARD_SUFFIX}"
    _write_atomic(path, data)
    return [path]


def _write_atomic(path: Path, data: bytes) -> None:
    """``data`` written to a temporary sibling of ``path``, made durable and renamed over it;
    removed on an error. An ``OSError`` becomes a ``CacheTransferError``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    except OSError as e:
        raise CacheTransferError(f"cannot write the cache export {path}: {e.strerror or e} "
                                 f"({e.filename or path.parent})") from None
    try:
        with open(fd, "wb") as raw:
            raw.write(data)
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; an export is meant to be shared
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise CacheTransferError(f"cannot write the cache export {path}: {e.strerror or e}") from None
        raise


def import_cache(cache: ResponseCache, path: str | os.PathLike) -> ImportReport:
    """Add the entries of the shards ``path`` names (a folder of them, or one) to ``cache``:
    every shard is checked whole first, then the entries not yet stored are added in one
    transaction (module docstring). Importing the same shards again adds nothing."""
    shards = shard_paths(path)
    if not shards:
        raise CacheTransferError(f"{path} holds no response-cache shard (*{SHARD_SUFFIX})")
    for shard in shards:  # check them all before the first write
        for _ in _verified_rows(shard):
            pass
    # Read again to insert, checked again as it goes: a file changed meanwhile rolls it back.
    added, same, other = cache.merge_rows(row for shard in shards for row in _verified_rows(shard))
    return ImportReport(added=added, already_present=same, conflicting=other)


def _verified_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of the export file ``path``, each checked as it is read; raises
    ``CacheTransferError`` at the first problem, the trailer's included (after the last row)."""
    with _Lines(path) as lines:
        first = next(lines, None)
        if first is None:
            raise CacheTransferError(f"{path} is empty: not a memlab response-cache export")
        header = _check_header(path, _parse(path, 1, first))
        digest = hashlib.sha256(first)
        count, last_key, trailer = 0, "", None
        for number, line in enumerate(lines, start=2):
            if trailer is not None:
                raise CacheTransferError(f"{path} line {number}: data after the trailer (corrupted file)")
            data = _parse(path, number, line)
            if "trailer" in data:
                trailer = data
                continue
            digest.update(line)
            row = _check_row(path, number, data)
            if row["key"] <= last_key:
                raise CacheTransferError(f"{path} line {number}: entries out of key order or repeated "
                                         "(corrupted or altered file)")
            last_key = row["key"]
            count += 1
            yield row
    if trailer is None:
        raise CacheTransferError(f"{path} is truncated: it ends after {count} of {header['entries']} entries, "
                                 "without its trailer")
    if trailer.get("trailer") != FORMAT or trailer.get("entries") != count or header["entries"] != count:
        raise CacheTransferError(f"{path} is incomplete or altered: it holds {count} entries, its header says "
                                 f"{header['entries']!r} and its trailer {trailer.get('entries')!r}")
    if trailer.get("sha256") != digest.hexdigest():
        raise CacheTransferError(f"{path} is corrupted or altered: its lines do not match the trailer's sha256")


class _Lines:
    """The lines (bytes) of a gzip file; a missing, unreadable, non-gzip or truncated file
    is a ``CacheTransferError`` naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.file: IO[bytes] = gzip.open(path, "rb")
        except OSError as e:
            raise CacheTransferError(f"cannot read the cache export {path}: {e.strerror or e}") from None

    def __enter__(self) -> Iterator[bytes]:
        return self._lines()

    def _lines(self) -> Iterator[bytes]:
        try:
            yield from self.file
        except EOFError:
            raise CacheTransferError(f"{self.path} is truncated: its gzip stream ends early") from None
        except (OSError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
            reason = e.strerror if isinstance(e, OSError) and e.strerror else e
            raise CacheTransferError(f"{self.path} is not a readable gzip file ({reason})") from None

    def __exit__(self, *exc) -> None:
        self.file.close()


def _parse(path: Path, number: int, line: bytes) -> dict[str, Any]:
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        what = "is not a JSON object" if line.endswith(b"\n") else "is cut short (truncated file)"
        raise CacheTransferError(f"{path} line {number} {what}: not a memlab response-cache export, or a "
                                 "corrupted one")
    return data


def _check_header(path: Path, header: dict[str, Any]) -> dict[str, Any]:
    if header.get("format") != FORMAT:
        raise CacheTransferError(f"{path} is not a memlab response-cache export (format {header.get('format')!r})")
    if not _is_count(header.get("version")) or header["version"] != FORMAT_VERSION:  # true == 1 in Python
        raise CacheTransferError(f"{path} is a response-cache export of format version {header.get('version')!r}; "
                                 f"this memlab reads version {FORMAT_VERSION} (written by memlab "
                                 f"{header.get('memlab_version')}): export it again with this memlab's version")
    if not _is_count(header.get("schema_version")) or header["schema_version"] != SCHEMA_VERSION:
        raise CacheTransferError(f"{path} holds entries of response-cache layout version "
                                 f"{header.get('schema_version')!r}; this memlab's cache is version {SCHEMA_VERSION} "
                                 f"(written by memlab {header.get('memlab_version')})")
    if not _is_count(header.get("entries")):
        raise CacheTransferError(f"{path}: malformed header ('entries' is {header.get('entries')!r}, not a count)")
    return header


def _check_row(path: Path, number: int, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` once its columns, their types and its key are right."""
    where = f"{path} line {number}"
    if set(row) != set(COLUMNS):
        raise CacheTransferError(f"{where}: an entry must have exactly the columns {', '.join(COLUMNS)}")
    for column in ("model", "request", "text", "completion_model"):
        if not isinstance(row[column], str):
            raise CacheTransferError(f"{where}: {column!r} is not a string")
    if row["finish_reason"] is not None and not isinstance(row["finish_reason"], str):
        raise CacheTransferError(f"{where}: 'finish_reason' is neither a string nor null")
    for column in ("prompt_tokens", "completion_tokens"):
        if not _is_count(row[column]):
            raise CacheTransferError(f"{where}: {column!r} is not a count")
    for column in ("latency_s", "created_at"):
        value = row[column]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise CacheTransferError(f"{where}: {column!r} is {value!r}, not a finite number >= 0")
    if row["latency_s"] > MAX_LATENCY_S:  # it feeds the cold-cache timings of metrics.json
        raise CacheTransferError(f"{where}: 'latency_s' is {row['latency_s']!r}: a call longer than "
                                 f"{MAX_LATENCY_S:.0f} s is not a measured latency")
    if not (isinstance(row["key"], str) and _KEY.fullmatch(row["key"])):
        raise CacheTransferError(f"{where}: 'key' is not a sha256")
    if row["key"] != payload_key(row["model"], row["request"]):
        raise CacheTransferError(f"{where}: the entry's key does not match its model and request "
                                 "(corrupted or altered entry)")
    try:  # a request the cache could not read back (``ResponseCache.entries``) is refused too
        request_from_payload(row["request"])
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        raise CacheTransferError(f"{where}: the entry's request is not a chat request") from None
    return row


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
