"""A clock for latency figures that leaves out the time the process was suspended.

Model seconds, build seconds and query latencies are wall-clock intervals. A benchmark run
paused with SIGSTOP or Ctrl-Z (to free the cores for something else), or a suspended VM,
would count the whole pause into the call that was running, and the response cache would
keep that figure for every later run. ``active_seconds()`` is ``time.monotonic()`` minus the
suspensions seen so far: a daemon thread wakes every ``TICK_S`` and counts a gap longer than
``SUSPENDED_AFTER_S`` as suspension. A stopped process runs none of its threads; a busy one
still wakes this thread within milliseconds, because llama.cpp, torch and sockets release
the GIL while they work, so only a real suspension leaves a gap of seconds.
"""

from __future__ import annotations

import os
import threading
import time

TICK_S = 0.5
SUSPENDED_AFTER_S = 5.0

_lock = threading.Lock()
_suspended_s = 0.0
_last_tick = time.monotonic()
_watcher: threading.Thread | None = None


def _gap_suspended(gap: float) -> float:
    """The part of a gap between two ticks that the process spent suspended."""
    return gap - TICK_S if gap > SUSPENDED_AFTER_S else 0.0


def _tick(now: float) -> None:
    global _suspended_s, _last_tick
    with _lock:
        _suspended_s += _gap_suspended(now - _last_tick)
        _last_tick = now


def _watch() -> None:
    while True:
        time.sleep(TICK_S)
        _tick(time.monotonic())


def _start_watcher() -> None:
    global _watcher, _last_tick
    with _lock:
        if _watcher is not None and _watcher.is_alive():
            return
        _last_tick = time.monotonic()
        _watcher = threading.Thread(target=_watch, name="memlab-suspension-watcher", daemon=True)
        _watcher.start()


def _forget_watcher_after_fork() -> None:
    # A forked child has no copy of the watcher thread; the next call starts its own.
    global _watcher, _lock
    _lock = threading.Lock()
    _watcher = None


os.register_at_fork(after_in_child=_forget_watcher_after_fork)


def active_seconds() -> float:
    """Monotonic seconds, less every suspension of this process since the first call.

    Only differences are meaningful, like ``time.perf_counter()``. A suspension that ended
    before the watcher's next tick is already left out.
    """
    _start_watcher()
    with _lock:
        now = time.monotonic()
        return now - _suspended_s - _gap_suspended(now - _last_tick)

