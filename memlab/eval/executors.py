"""Where a parallel run's tasks run: an ``Executor`` with a number of slots (``memlab.eval.workers``).

``LocalExecutor`` is a pool of spawned processes on this machine; ``memlab.eval.ray_executor``
places the same tasks on a Ray cluster (``memlab.eval.workers.make_executor`` picks one).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context


def _limit_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


class Executor:
    """Runs tasks somewhere with at most ``slots`` in flight. ``submit(fn, task)`` returns a
    ``concurrent.futures.Future`` and blocks while every slot is taken; ``has_free_slot`` says
    whether it would not block. One executor may serve several runs at once (a sweep: each
    run's ``ParallelRunner`` in its own thread); its owner calls ``shutdown``. Subclasses
    implement ``_submit``."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"workers must be >= 1, got {slots}")
        self.slots = slots
        self._free = threading.BoundedSemaphore(slots)
        self._in_flight = 0
        self._lock = threading.Lock()

    def has_free_slot(self) -> bool:
        with self._lock:
            return self._in_flight < self.slots

    def submit(self, fn, task) -> Future:
        self._free.acquire()
        with self._lock:
            self._in_flight += 1
        try:
            future = self._submit(fn, task)
        except BaseException:
            self._release(None)
            raise
        future.add_done_callback(self._release)
        return future

    def _release(self, _future) -> None:
        with self._lock:
            self._in_flight -= 1
        self._free.release()

    def _submit(self, fn, task) -> Future:  # pragma: no cover - abstract
        raise NotImplementedError

    def shutdown(self) -> None:
        """Stop the workers (running tasks end first; queued ones are cancelled)."""


class LocalExecutor(Executor):
    """``workers`` spawned processes on this machine (module docstring)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        threads = max(1, (os.cpu_count() or 1) // workers)
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                         initializer=_limit_threads, initargs=(threads,))

    def _submit(self, fn, task) -> Future:
        return self._pool.submit(fn, task)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
