"""A run's conversation tasks on a Ray cluster (``memlab run --ray ADDRESS``; the ``ray`` extra).

The tasks and their results are those of the local worker pool (``memlab.eval.workers``): Ray
only places them. ``address``: ``auto`` joins the cluster this machine belongs to (``ray
start``), ``local`` starts a private single-machine instance for this run, anything else is a
cluster address (``ray://head:10001``, ``head:6379``). ``workers``: tasks in flight at once, each
reserving ``cpus_per_task`` CPUs (the cluster's scheduler places them).

Each Ray worker must have memlab, the models the config names and the files it refers to
(checkpoints, a config's relative paths resolve against the worker's working folder, which Ray
sets to the driver's on the same machine). Its response cache writes stay on its machine; the
rows come back with the result and are merged on the driver.
"""

from __future__ import annotations

from concurrent.futures import Future

from memlab.eval.executors import Executor


class RayUnavailableError(ValueError):
    """Ray is not installed or the cluster cannot be reached; names what to do."""


class RayExecutor(Executor):
    def __init__(self, address: str, workers: int, cpus_per_task: float = 1.0) -> None:
        super().__init__(workers)
        try:
            import ray
        except ImportError:
            raise RayUnavailableError("--ray needs Ray: pip install 'memlab[ray]'") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            try:
                ray.init(address=None if address == "local" else address, include_dashboard=False,
                         log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise RayUnavailableError(f"--ray {address}: cannot reach a Ray cluster ({e})") from None
        self._cpus = cpus_per_task
        self._remote = {}

    def _submit(self, fn, task) -> Future:
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = self._ray.remote(num_cpus=self._cpus, max_retries=0)(fn)
        return remote.remote(task).future()

    def shutdown(self) -> None:
        if self._started:
            self._ray.shutdown()
