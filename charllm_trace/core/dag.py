"""The compiled longest-path kernel, and the one place that calls it.

``_dag`` is a C extension built when the package is installed (``setup.py``); nothing is
compiled at run time. Without it the graph analyses stop with one clear message.
"""

from __future__ import annotations

import numpy as np

from charllm_trace.core.errors import InputError
from charllm_trace.core.native_libs import NativeModuleMissing

NONE = np.iinfo(np.int64).min  # "no time" for a vertex (no root bound / not reached)


def _kernel():
    try:
        from charllm_trace.core import _dag
    except ImportError as exc:  # pragma: no cover - a broken install
        raise NativeModuleMissing(
            "charllm_trace.core._dag is not built: reinstall the package (pip install .) with a C compiler"
        ) from exc
    return _dag


def longest_path(
    n: int,
    src: np.ndarray,
    dst: np.ndarray,
    lag: np.ndarray,
    prio: np.ndarray,
    root: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Earliest times of ``n`` vertices under ``time[dst] >= time[src] + lag`` and ``time >= root``.

    Returns (time, binding edge per vertex (int32; -1: root or none), vertices reached). Fewer
    vertices reached than ``n`` means a cycle; those vertices have time ``NONE``."""
    dag = _kernel()
    src = np.ascontiguousarray(src, dtype=np.int32)  # no copy: the graph keeps indexes as int32
    dst = np.ascontiguousarray(dst, dtype=np.int32)
    lag = np.ascontiguousarray(lag, dtype=np.int64)
    prio = np.ascontiguousarray(prio, dtype=np.int8)
    root = np.ascontiguousarray(root, dtype=np.int64)
    if len(root) != n:
        raise ValueError("root must have one entry per vertex")
    time = np.empty(n, dtype=np.int64)
    bind = np.empty(n, dtype=np.int32)
    done = dag.longest_path(src, dst, lag, prio, root, time, bind)
    return time, bind, int(done)


def topo_order(n: int, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, int]:
    """A topological order of ``n`` vertices that takes, among the ready ones, the smallest ``key``
    (ties: the smaller index): ``key``'s own order wherever the edges allow it. Returns (order,
    vertices placed); fewer than ``n`` placed means a cycle (the rest are not in the order)."""
    dag = _kernel()
    out = np.empty(n, dtype=np.int32)
    k = dag.topo_order(
        np.ascontiguousarray(src, dtype=np.int32),
        np.ascontiguousarray(dst, dtype=np.int32),
        np.ascontiguousarray(key, dtype=np.int64),
        out,
    )
    return out[:k], int(k)


def walk_back(src: np.ndarray, bind: np.ndarray, time: np.ndarray, start: int, stop_time: int) -> np.ndarray:
    """Vertices from ``start`` back along binding edges while their time is >= ``stop_time``
    (``start`` first)."""
    dag = _kernel()
    out = np.empty(len(bind), dtype=np.int32)
    k = dag.walk_back(
        np.ascontiguousarray(src, dtype=np.int32),
        np.ascontiguousarray(bind, dtype=np.int32),
        np.ascontiguousarray(time, dtype=np.int64),
        int(start),
        int(stop_time),
        out,
    )
    return out[:k]


class CycleError(InputError):
    """The dependencies of a trace form a cycle."""


def cycle_error(what: str, n_left: int) -> CycleError:
    return CycleError(None, f"{what}: {n_left} time points are on or after dependency cycles")
