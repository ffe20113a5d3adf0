"""The Dask client behind ``--scheduler`` (the only module that imports Dask).

``ADDRESS`` is a scheduler's address (``tcp://host:8786``, as dask-jobqueue or dask-kubernetes
print it), ``local:N`` (a ``LocalCluster`` of N process workers on this machine, one thread
each) or ``local-threads:N`` (N workers in this process: what ``memory://`` URLs need, since that
filesystem is per process). Tasks are retried ``RETRIES`` times when their worker dies.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from charllm_trace.core.errors import InputError

#: times Dask runs a task again when its worker died (or it raised something else than bad input)
RETRIES = 2
#: results gathered to the driver at a time by :meth:`DaskEngine.gather_batches`
GATHER_BATCH = 64
#: tasks kept waiting per worker thread beyond the batch being gathered (:meth:`DaskEngine.map_gather`)
AHEAD_PER_THREAD = 4
_LOCAL = re.compile(r"local(-threads)?:(\d+)")


class Abandoned(RuntimeError):
    """A task mapping tasks of its own (:func:`worker_engine`) stops: what asked for it is gone."""


class DaskEngine:
    """Maps a function over ranks on the cluster; results stay on workers until gathered.
    ``wanted``: asked before each batch is gathered; false stops the work (:class:`Abandoned`)."""

    def __init__(self, client: Any, wanted: Callable[[], bool] | None = None) -> None:
        self.client = client
        self.wanted = wanted

    def _go_on(self) -> None:
        if self.wanted is not None and not self.wanted():
            raise Abandoned("the task was given up by its client (the command was stopped)")

    def map(self, fn: Callable[..., Any], items: Sequence[Any], *more: Sequence[Any], **kw: Any) -> list[Any]:
        """``fn(item, *each of more's items, **kw)`` for each item (``more``: per-item arguments)."""
        if not items:
            return []
        return self.client.map(fn, list(items), *[list(m) for m in more], retries=RETRIES, pure=False, **kw)

    def gather(self, handles: list[Any]) -> list[Any]:
        return self.client.gather(handles) if handles else []

    def gather_batches(
        self,
        handles: list[Any],
        size: int | None = None,
        each: Callable[[list[Any]], list[Any]] | None = None,
    ) -> list[Any]:
        """:meth:`gather`, ``size`` (default :data:`GATHER_BATCH`) results at a time, each batch's
        handles released once gathered: the driver holds the serialized results of one batch at a
        time, not of every rank at once, and the workers forget what was gathered. ``each``: what
        becomes of a batch once gathered (``engine/compact.py``)."""
        out: list[Any] = []
        size = size or GATHER_BATCH
        for i in range(0, len(handles), size):
            self._go_on()
            batch = handles[i : i + size]
            got = self.client.gather(batch)
            self.release(batch)
            out.extend(each(got) if each is not None else got)
        return out

    def map_gather(
        self,
        fn: Callable[..., Any],
        items: Sequence[Any],
        *more: Sequence[Any],
        each: Callable[[list[Any]], list[Any]] | None = None,
        **kw: Any,
    ) -> list[Any]:
        """:meth:`map` then :meth:`gather_batches`, the tasks submitted a window at a time: at most
        :func:`window` tasks wait on the cluster beyond the batch being gathered, so the
        scheduler (in this process with ``local:N``) holds the state of those, not of a task per
        rank. The results come back in ``items``' order."""
        out: list[Any] = []
        size, ahead = GATHER_BATCH, window(self.threads())
        n, sent = len(items), 0
        futs: dict[int, Any] = {}
        for i in range(0, n, size):
            self._go_on()
            hi = min(n, i + size + ahead)
            if hi > sent:
                new = self.map(fn, items[sent:hi], *[m[sent:hi] for m in more], **kw)
                futs.update(zip(range(sent, hi), new, strict=True))
                sent = hi
            batch = [futs.pop(j) for j in range(i, min(n, i + size))]
            got = self.client.gather(batch)
            self.release(batch)
            out.extend(each(got) if each is not None else got)
        return out

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` as one task on a worker, its result brought here; ``fn`` may map tasks of
        its own through :func:`worker_engine` (the reduction of a many-rank analysis runs there,
        not in this process: ``engine/driver.py``). While it runs, this process empties Dask's
        memo of task names every :data:`FORGET_EVERY_S` seconds: with ``local:N`` the scheduler
        is here and splits the name of every task ``fn`` submits (:func:`forget_keys`)."""
        fut = self.client.submit(fn, *args, retries=RETRIES, pure=False)
        try:
            while True:
                try:
                    return fut.result(timeout=FORGET_EVERY_S)
                except TimeoutError:  # still running (Dask's timeout is the built-in one)
                    forget_keys()
        finally:
            fut.release()
            forget_keys()

    def threads(self) -> int:
        """The cluster's worker threads now (at least 1)."""
        try:
            return max(1, sum(self.client.nthreads().values()))
        except Exception:  # noqa: BLE001 - a scheduler that does not answer: the smallest window
            return 1

    def release(self, handles: list[Any]) -> None:
        for h in handles:
            if hasattr(h, "release"):  # a future (not what a plan holds: engine/driver.py _read)
                h.release()
        forget_keys()


def forget_keys() -> None:
    """Empty Dask's memo of task names (``dask.utils.key_split``: up to 100,000 keys, each task's
    unique key kept as the scheduler and the client saw it). Every task a job submits has a key of
    its own, so the memo grew with the tasks run, 6 per rank (~300 bytes a key; a probe of 32,768
    tasks through ``local:N``: this process grew 12.3 MiB with the memo, 8.1 with it emptied
    after every 4,096; docs/benchmarks.md, "eighth round"); a key is split again when next needed."""
    from dask.utils import key_split

    clear = getattr(key_split, "cache_clear", None)
    if clear is not None:
        clear()


def window(threads: int) -> int:
    """How many tasks :meth:`DaskEngine.map_gather` keeps submitted beyond the batch it gathers:
    enough to keep every worker thread busy meanwhile (:data:`AHEAD_PER_THREAD` each), and at
    least a batch."""
    return max(GATHER_BATCH, AHEAD_PER_THREAD * threads)


def connect_timeout() -> float:
    try:
        return float(os.environ.get("CHARLLM_TRACE_SCHEDULER_TIMEOUT", "10"))
    except ValueError:
        return 10.0


#: seconds between two emptyings of Dask's memo of task names while :meth:`DaskEngine.run` waits
FORGET_EVERY_S = 1.0

#: Dask settings while the engine is open. ``low-level-log-length``: each comm of Dask keeps its
#: last N batches of messages for debugging (default 1,000), the tasks' pickled arguments
#: included: in the driver that was ~1 kB per task sent and released, the largest part of what it
#: kept per task (docs/benchmarks.md, "sixth round"); none is kept.
DASK_CONFIG = {"distributed.admin.low-level-log-length": 0}


@contextmanager
def open_engine(address: str) -> Iterator[DaskEngine]:
    """A :class:`DaskEngine` on the scheduler at ``address`` (see the module's docstring);
    InputError when it cannot be reached."""
    try:
        import dask
        from distributed import Client  # noqa: F401 - Dask is there
    except ImportError:
        raise InputError(
            None, f"--scheduler {address}: Dask is not installed (pip install 'charllm-trace[scale]')"
        ) from None
    with dask.config.set(DASK_CONFIG):
        with _engine(address) as eng:
            yield eng


@contextmanager
def worker_engine() -> Iterator[DaskEngine]:
    """A :class:`DaskEngine` for a task running on a worker (:meth:`DaskEngine.run`): it maps
    tasks on the same cluster, its own thread having left the worker's pool meanwhile (Dask's
    ``worker_client``), so that the worker runs ranks' tasks too. It stops between two batches
    once the task is no longer wanted (the command that asked for it was stopped: a running
    task is not interrupted by Dask, and would go on mapping every rank)."""
    import dask
    from distributed import worker_client

    wanted = _still_wanted()
    with dask.config.set(DASK_CONFIG), worker_client() as client:
        yield DaskEngine(client, wanted)


def _still_wanted() -> Callable[[], bool]:
    """Whether the task this thread runs is still wanted: its worker still holds it, not
    cancelled (the client that asked for it released it or went away)."""
    from distributed import get_worker
    from distributed.worker import thread_state

    worker, key = get_worker(), thread_state.key

    def wanted() -> bool:
        ts = worker.state.tasks.get(key)
        return ts is not None and ts.state not in ("cancelled", "released", "forgotten")

    return wanted


@contextmanager
def _engine(address: str) -> Iterator[DaskEngine]:
    from distributed import Client, LocalCluster

    m = _LOCAL.fullmatch(address.strip())
    cluster = None
    if m:
        n = int(m.group(2))
        if n < 1:
            raise InputError(None, f"--scheduler {address}: needs at least one worker")
        cluster = LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=m.group(1) is None,
            dashboard_address=":0",  # a free port: never "8787 is already in use"
            silence_logs=logging.ERROR,
        )
        client = Client(cluster)
    else:
        try:
            client = Client(address, timeout=connect_timeout())
        except Exception as exc:  # noqa: BLE001 - OSError, TimeoutError, ValueError for a bad address
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            raise InputError(None, f"cannot reach the Dask scheduler at {address} ({why})") from None
    try:
        yield DaskEngine(client)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
