"""The response cache: every completion an LM produced, keyed by model identity + request.

A hit makes a rerun bit-identical and free. The store is one SQLite file:

* key = sha256 of the model name (``LM.name``) and ``ChatRequest.cache_key_payload()``;
  the model name and the request JSON are stored next to the completion so the cache can
  be read back as a data set (``ResponseCache.entries``, e.g. to distil a prompted stage).
* Safe across threads (one connection behind a lock: MAGMA calls its LM from a background
  thread while queries run) and across processes (WAL journal, busy timeout). A file another
  process keeps locked longer than ``_BUSY_TIMEOUT_MS`` is reported as busy (``CacheError``),
  never as broken: nothing is wrong with it.
* Only completions are stored: ``put`` refuses a text that is not a string, and a row whose
  text is not one (written by something else) reads as a miss, so a botched reply is asked
  again rather than replayed.
* ``ResponseCache.open(path)`` returns one shared instance per file and process.
* ``rows`` and ``merge_rows`` read and add raw rows (every column), for moving entries between
  caches (``memlab.lm.cache_transfer``); a merge never replaces a stored row. ``copy_model``
  stores a model's entries again under a new name (``memlab cache copy-model``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlab.lm.errors import LMError
from memlab.lm.types import ChatRequest, Completion

#: Bumped when the table layout changes; an older file is refused with a clear message.
SCHEMA_VERSION = 1
_BUSY_TIMEOUT_MS = 60_000
_SETUP_ATTEMPTS = 5
#: The columns of a stored row, in table order (``rows`` yields them, ``merge_rows`` takes them).
COLUMNS = ("key", "model", "request", "text", "prompt_tokens", "completion_tokens", "latency_s",
           "completion_model", "finish_reason", "created_at")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    latency_s REAL NOT NULL,
    completion_model TEXT NOT NULL,
    finish_reason TEXT,
    created_at REAL NOT NULL
)
"""


class CacheError(LMError):
    """The cache file cannot be used (busy, corrupt, not SQLite, newer layout); names the file."""


def _is_busy(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(exc) or "busy" in str(exc)


def _problem(path: Path, exc: sqlite3.DatabaseError) -> CacheError:
    """The ``CacheError`` for an SQLite error on the cache file: busy (another process holds the
    lock past the busy timeout) and broken files are told apart, as their remedies differ."""
    code = getattr(exc, "sqlite_errorcode", None)
    if _is_busy(exc):
        return CacheError(
            f"response cache {path} is busy: another process (another memlab run?) has held its write lock "
            f"for over {_BUSY_TIMEOUT_MS / 1000:g} s. Nothing is wrong with the file: run again when that "
            "process is done, or point MEMLAB_CACHE (or the LM's cache=) to another file for this run"
        )
    if code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
        return CacheError(
            f"response cache {path} is not a usable SQLite database ({exc}); move it aside "
            "or point MEMLAB_CACHE (or the LM's cache=) to another path"
        )
    return CacheError(f"response cache {path}: {exc}")


def default_cache_path() -> Path:
    """``$MEMLAB_CACHE`` or ``~/.cache/memlab/responses.sqlite``."""
    env = os.environ.get("MEMLAB_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "memlab" / "responses.sqlite"


def cache_key(model: str, request: ChatRequest) -> str:
    return payload_key(model, request.cache_key_payload())


def payload_key(model: str, payload: str) -> str:
    """The key of a row from its stored model and request columns (``cache_key`` of the request)."""
    # The NUL separator keeps ("ab", "c...") and ("a", "bc...") apart.
    return hashlib.sha256(f"{model}\0{payload}".encode("utf-8")).hexdigest()


def request_from_payload(payload: str) -> ChatRequest:
    """Inverse of ``ChatRequest.cache_key_payload``."""
    data: dict[str, Any] = json.loads(payload)
    data["messages"] = tuple(dict(m) for m in data["messages"])
    data["stop"] = tuple(data.get("stop") or ())
    return ChatRequest(**data)


@dataclass(frozen=True)
class CacheEntry:
    model: str
    request: ChatRequest
    completion: Completion


class ResponseCache:
    """SQLite store of completions (see the module docstring)."""

    _instances: dict[tuple[int, Path], "ResponseCache"] = {}
    _instances_lock = threading.Lock()

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser().resolve()
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheError(f"response cache {self.path}: cannot create its folder ({exc})") from None
        self._conn = self._connect()

    @classmethod
    def open(cls, path: str | Path = "default") -> "ResponseCache":
        """The shared cache of ``path`` (``"default"``: see ``default_cache_path``)."""
        resolved = default_cache_path() if str(path) == "default" else Path(path).expanduser()
        key = (os.getpid(), resolved.resolve())  # a forked child must not reuse the parent's connection
        with cls._instances_lock:
            cache = cls._instances.get(key)
            if cache is None or cache._conn is None:
                cache = cls(resolved)
                cls._instances[key] = cache
            return cache

    def _connect(self) -> sqlite3.Connection:
        # Two processes opening a new file at once can meet in SQLite's lock upgrade, where it answers
        # busy at once instead of waiting (the busy timeout does not apply): try the setup again.
        attempt = 0
        while True:
            attempt += 1
            started = time.monotonic()
            try:
                return self._connect_once()
            except sqlite3.DatabaseError as exc:
                waited_out = time.monotonic() - started >= _BUSY_TIMEOUT_MS / 1000  # a real hold: no retry
                if attempt == _SETUP_ATTEMPTS or not _is_busy(exc) or waited_out:
                    raise _problem(self.path, exc) from None
                time.sleep(0.1 * attempt)

    def _connect_once(self) -> sqlite3.Connection:
        conn = None
        try:
            conn = sqlite3.connect(
                str(self.path), timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; a crash loses at most the last writes
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                conn.close()
                raise CacheError(
                    f"response cache {self.path} has layout version {version}, newer than this memlab "
                    f"understands ({SCHEMA_VERSION}); upgrade memlab or use another cache file"
                )
            conn.execute(_SCHEMA)
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("SELECT count(*) FROM responses LIMIT 1").fetchone()
        except sqlite3.DatabaseError:
            if conn is not None:
                conn.close()
            raise
        return conn

    def _execute(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            if self._conn is None:
                raise CacheError(f"response cache {self.path} is closed")
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                raise _problem(self.path, exc) from None

    def get(self, model: str, request: ChatRequest) -> Completion | None:
        """The stored completion (with ``cached=True``), or None."""
        rows = self._execute(
            "SELECT text, prompt_tokens, completion_tokens, latency_s, completion_model, finish_reason "
            "FROM responses WHERE key = ?",
            (cache_key(model, request),),
        )
        if not rows or not isinstance(rows[0][0], str):
            return None
        return _cached_completion(*rows[0])

    def put(self, model: str, request: ChatRequest, completion: Completion) -> None:
        """Store (or replace) the completion of ``request`` under ``model``."""
        if not isinstance(completion, Completion) or not isinstance(completion.text, str):
            raise CacheError(f"response cache {self.path}: refusing to store a reply that is not a completion "
                             f"with text: {completion!r:.120}")
        self._execute(
            "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                cache_key(model, request),
                model,
                request.cache_key_payload(),
                completion.text,
                int(completion.prompt_tokens),
                int(completion.completion_tokens),
                float(completion.latency_s),
                completion.model,
                completion.finish_reason,
                time.time(),
            ),
        )

    def set_latency(self, model: str, request: ChatRequest, latency_s: float) -> bool:
        """Replace only the recorded latency of a stored completion (``eval/retime_cache.py``).
        False when nothing is stored for the request."""
        rows = self._execute(
            "UPDATE responses SET latency_s = ? WHERE key = ? RETURNING key",
            (float(latency_s), cache_key(model, request)),
        )
        return bool(rows)

    def entries(self, model: str | None = None, page_size: int = 1000) -> Iterator[CacheEntry]:
        """Every stored (model, request, completion), in insertion order; only ``model``'s if given."""
        where, params = ("AND model = ?", (model,)) if model is not None else ("", ())
        last_rowid = -1
        while True:
            # Paged by rowid, each page read under the lock: a cursor left open across yields
            # would pin a read snapshot (blocking WAL checkpoints) while the caller works.
            rows = self._execute(
                "SELECT rowid, model, request, text, prompt_tokens, completion_tokens, latency_s, "
                f"completion_model, finish_reason FROM responses WHERE rowid > ? {where} ORDER BY rowid LIMIT ?",
                (last_rowid, *params, page_size),
            )
            if not rows:
                return
            for row in rows:
                last_rowid, name, payload, *completion = row
                yield CacheEntry(model=name, request=request_from_payload(payload),
                                 completion=_cached_completion(*completion))

    def rows(self, model: str | None = None, contains: str | None = None,
             page_size: int = 1000) -> Iterator[dict[str, Any]]:
        """Every stored completion row as {column: value} (``COLUMNS``), in key order; only
        ``model``'s if given, only those whose request JSON contains ``contains`` (case-sensitive
        substring) if given. A row whose text is not a string (a miss for ``get``) is left out."""
        where, params = "", ()
        if model is not None:
            where, params = where + " AND model = ?", params + (model,)
        if contains is not None:
            where, params = where + " AND instr(request, ?) > 0", params + (contains,)
        last_key = ""
        while True:
            # Paged by key, each page read under the lock (see ``entries``).
            page = self._execute(
                f"SELECT {', '.join(COLUMNS)} FROM responses WHERE key > ? AND typeof(text) = 'text'{where} "
                "ORDER BY key LIMIT ?",
                (last_key, *params, page_size),
            )
            if not page:
                return
            for row in page:
                last_key = row[0]
                yield dict(zip(COLUMNS, row))

    def merge_rows(self, rows: Iterable[Mapping[str, Any]]) -> tuple[int, int, int]:
        """Add the ``rows`` ({column: value}, as ``rows`` yields them) whose key is not stored, in
        one transaction: all or nothing (an error raised by ``rows`` itself, or a row whose key
        is not that of its model and request, rolls it back). A stored row is never replaced.
        Returns (added, already present with the same text, present with another text)."""
        added = same = other = 0
        with self._lock:
            if self._conn is None:
                raise CacheError(f"response cache {self.path} is closed")
            try:
                self._conn.execute("BEGIN IMMEDIATE")  # the write lock up front: no upgrade deadlock
                try:
                    for row in rows:
                        values = tuple(row[column] for column in COLUMNS)
                        if values[0] != payload_key(row["model"], row["request"]):
                            raise CacheError(f"response cache {self.path}: refusing a row whose key does not "
                                             f"match its model and request ({values[0]!r:.20})")
                        stored = self._conn.execute("SELECT text FROM responses WHERE key = ?",
                                                    (values[0],)).fetchone()
                        if stored is None:
                            self._conn.execute(f"INSERT INTO responses ({', '.join(COLUMNS)}) "
                                               f"VALUES ({', '.join('?' * len(COLUMNS))})", values)
                            added += 1
                        elif stored[0] == row["text"]:
                            same += 1
                        else:
                            other += 1
                    self._conn.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:  # SQLite may have rolled back already (disk full)
                        self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as exc:
                raise _problem(self.path, exc) from None
        return added, same, other

    def copy_model(self, source: str, target: str) -> tuple[int, int, int]:
        """Store every entry of model ``source`` again under model ``target`` (keys recomputed; the
        ``source`` entries stay): for an LM whose name changed while its outputs did not, so its
        runs still replay. Returns ``merge_rows``' counts; no entry of ``source`` is a ``CacheError``
        (a mistyped name must not pass for a copy of nothing)."""
        copies = [{**row, "model": target, "key": payload_key(target, row["request"])}
                  for row in self.rows(model=source)]  # read whole first: merge_rows takes the lock
        if not copies:
            raise CacheError(f"response cache {self.path}: no entry of model {source!r} to copy")
        return self.merge_rows(copies)

    def models(self) -> list[str]:
        """Model names present in the cache."""
        return [row[0] for row in self._execute("SELECT DISTINCT model FROM responses ORDER BY model")]

    def __len__(self) -> int:
        return int(self._execute("SELECT count(*) FROM responses")[0][0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        with self._instances_lock:
            for key, cache in list(self._instances.items()):
                if cache is self:
                    del self._instances[key]

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"


def _cached_completion(text, prompt_tokens, completion_tokens, latency_s, model, finish_reason) -> Completion:
    """A stored row (columns text .. finish_reason) as the completion a cache hit returns."""
    return Completion(
        text=text,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        latency_s=latency_s,
        model=model,
        cached=True,
        finish_reason=finish_reason,
    )
