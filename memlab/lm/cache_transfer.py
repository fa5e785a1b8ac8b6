"""Moving response-cache entries between machines: a portable, self-checking export file.

An export is gzip-compressed JSON lines (UTF-8)::

    {"format": "memlab.response-cache", "version": 1, "schema_version": 1, "entries": N,
     "filter": {"model": M or null, "contains": TEXT or null}, "memlab_version": "..."}
    {"key": ..., "model": ..., "request": ..., "text": ..., ...every column of the row}    N lines
    {"trailer": "memlab.response-cache", "entries": N, "sha256": digest of every line above}

* Entries are in key order and the gzip header carries no time or name, so two exports of the
  same entries are the same bytes.
* The file is written to a temporary sibling and renamed over ``path``: an interrupted or
  failed export leaves the previous file (or none), never half of one.
* ``import_cache`` reads the whole file and checks it before it writes anything: the header's
  format, export version and cache layout version (``SCHEMA_VERSION``); every row's columns and
  its key, recomputed from its model and request (an altered row does not match); keys strictly
  increasing (no row twice); the trailer's count and digest (a truncated or shortened file has
  no trailer or the wrong one). It then adds the rows in one transaction that rolls back if the
  file changed in between. A row already stored is never replaced: one with another text is
  counted as conflicting and the stored one kept.
* Every problem with the file is a ``CacheTransferError`` (a ``CacheError``) naming it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
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
_SPOOL_BYTES = 64 << 20  # entry lines kept in memory before the spool goes to a temporary file


class CacheTransferError(CacheError):
    """An export file that cannot be written, or read back and trusted; names the file."""


@dataclass(frozen=True)
class ImportReport:
    """What ``import_cache`` did with the file's entries."""

    added: int
    already_present: int  # stored already, with the same text
    conflicting: int  # stored already with another text: the stored row was kept

    def __str__(self) -> str:
        line = f"{self.added} added, {self.already_present} already present, {self.conflicting} conflicting"
        return line + (" (kept the text already cached)" if self.conflicting else "")


def _line(payload: dict[str, Any]) -> bytes:
    # keys in the order given (the header's format first; a row's in table order): deterministic
    return (json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def export_cache(cache: ResponseCache, path: str | os.PathLike, model: str | None = None,
                 contains: str | None = None) -> int:
    """Write the entries of ``cache`` (only ``model``'s; only those whose request JSON contains
    ``contains``, case-sensitive) to ``path`` (module docstring); returns how many. No match
    still writes a valid file, of 0 entries."""
    path = Path(path)
    digest, count = hashlib.sha256(), 0
    # The header states the count, so the entries go to a spool first: counting them with a
    # query beforehand would race with a run adding entries meanwhile.
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as spool:
        for row in cache.rows(model=model, contains=contains):
            spool.write(_line(row))
            count += 1
        first = _line({"format": FORMAT, "version": FORMAT_VERSION, "schema_version": SCHEMA_VERSION,
                       "entries": count, "filter": {"model": model, "contains": contains},
                       "memlab_version": __version__})
        digest.update(first)
        spool.seek(0)
        for block in iter(lambda: spool.read(1 << 20), b""):
            digest.update(block)
        spool.seek(0)
        trailer = _line({"trailer": FORMAT, "entries": count, "sha256": digest.hexdigest()})
        with _atomic_gzip(path) as out:
            out.write(first)
            shutil.copyfileobj(spool, out)
            out.write(trailer)
    return count


@contextmanager
def _atomic_gzip(path: Path) -> Iterator[IO[bytes]]:
    """A gzip stream into a temporary sibling of ``path``, made durable and renamed over ``path``
    on a clean exit, removed on an error; an ``OSError`` becomes a ``CacheTransferError``."""
    if path.is_dir():
        raise CacheTransferError(f"cannot write the cache export {path}: it is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    except OSError as e:
        raise CacheTransferError(f"cannot write the cache export {path}: {e.strerror or e} "
                                 f"({e.filename or path.parent})") from None
    try:
        with open(fd, "wb") as raw:
            # no file name or time in the gzip header: the same entries make the same bytes
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as out:
                yield out
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
    """Add the entries of the export file ``path`` to ``cache``: the file is checked whole
    first, then the entries not yet stored are added in one transaction (module docstring).
    Importing the same file again adds nothing."""
    path = Path(path)
    for _ in _verified_rows(path):  # check it all before the first write
        pass
    # Read again to insert, checked again as it goes: a file changed meanwhile rolls it back.
    added, same, other = cache.merge_rows(_verified_rows(path))
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
