"""Which GPU operations a device or stream synchronize waits for, by launch order.

``cudaDeviceSynchronize`` (``hipDeviceSynchronize``, ``cuCtxSynchronize``) returns once every
operation enqueued on the device before the call has finished; ``cudaStreamSynchronize`` once
every operation enqueued on its stream has. Which ones those are is a fact of launch order,
not of timing: the last operation on each stream whose launching runtime call started before
the synchronize began. Picking "the GPU op that ended last inside the call" instead finds no
operation when the GPU had already caught up (a CPU-bound step: the call returns at once), and
then a what-if that slows the GPU lets the CPU run on as if it never waited.

The stream of a stream synchronize is not in the trace: it is taken as the stream of the last
operation the same CPU thread launched before the call (``.item()`` and ``.cpu()`` enqueue a copy
on the stream they then synchronise). Everything is a ``searchsorted`` per lane (streams and
threads are few); no per-event loop.
"""

from __future__ import annotations

import numpy as np
import polars as pl

#: synchronising calls that wait for every stream of the device
DEVICE_SYNC_RE = r"(?i)(Device|Ctx|Context)_?Synchroni[sz]e$"
#: synchronising calls that wait for one stream
STREAM_SYNC_RE = r"(?i)Stream_?Synchroni[sz]e$"


def sync_kinds(names: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(is a device synchronize, is a stream synchronize) for each name."""
    n = names.fill_null("")
    return n.str.contains(DEVICE_SYNC_RE).to_numpy(), n.str.contains(STREAM_SYNC_RE).to_numpy()


def _last_before(key: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index into sorted ``key`` of the last value < each ``t`` (-1: none)."""
    return np.searchsorted(key, t, side="left") - 1


def _per_lane_last(
    ops: np.ndarray, ls: np.ndarray, op_lane: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each GPU lane, the last op (of ``ops``, launched at ``ls``) launched before each time
    ``t``: (lanes, matrix [lane, t] of op rows, -1 for none)."""
    lanes = np.unique(op_lane)
    out = np.full((len(lanes), len(t)), -1, dtype=np.int64)
    for i, L in enumerate(lanes):  # one pass per stream (a handful), vectorised over the calls
        sel = op_lane == L
        o = np.argsort(ls[sel], kind="stable")
        rows, key = ops[sel][o], ls[sel][o]
        k = _last_before(key, t)
        out[i] = np.where(k >= 0, rows[np.maximum(k, 0)], -1)
    return lanes, out


def _stream_of_calls(
    ops: np.ndarray,
    ls: np.ndarray,
    op_lane: np.ndarray,
    thread: np.ndarray,
    calls: np.ndarray,
    call_thread: np.ndarray,
    t: np.ndarray,
) -> np.ndarray:
    """The GPU lane of the last op each call's own thread launched before it (-1: none)."""
    out = np.full(len(calls), -1, dtype=np.int64)
    for th in np.unique(call_thread):
        sel = thread == th
        if not sel.any():
            continue
        o = np.argsort(ls[sel], kind="stable")
        key, ln = ls[sel][o], op_lane[sel][o]
        c = call_thread == th
        k = _last_before(key, t[c])
        out[c] = np.where(k >= 0, ln[np.maximum(k, 0)], -1)
    return out


def launched_before_edges(
    calls: np.ndarray,
    is_device: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    lane: np.ndarray,
    gl: np.ndarray,
    launcher: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(call row, waited GPU op row) for the device and stream synchronize ``calls``
    (``is_device``: per call); ``gl``: GPU op rows with a launcher, ``launcher``: the launching
    runtime call of every row. Edges whose op ended after the call did (times that contradict
    the match) are left out."""
    z = np.zeros(0, dtype=np.int64)
    if len(calls) == 0 or len(gl) == 0:
        return z, z
    ls = start[launcher[gl]]
    op_lane = lane[gl]
    t = start[calls]
    lanes, last = _per_lane_last(gl, ls, op_lane, t)
    want = np.broadcast_to(is_device[None, :], last.shape).copy()
    stream_calls = np.flatnonzero(~is_device)
    if len(stream_calls):
        sl = _stream_of_calls(
            gl,
            ls,
            op_lane,
            lane[launcher[gl]],
            calls[stream_calls],
            lane[calls[stream_calls]],
            t[stream_calls],
        )
        want[:, stream_calls] = lanes[:, None] == sl[None, :]
    li, ci = np.nonzero(want & (last >= 0))
    srow, grow = calls[ci], last[li, ci]
    ok = end[grow] <= end[srow]
    return srow[ok], grow[ok]


def per_call_min(calls: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Each edge's ``own`` replaced by the least ``own`` among the edges of its call: a call that
    waits for several ops has one own time, after the last of them ended."""
    if len(calls) == 0:
        return own
    u, inv = np.unique(calls, return_inverse=True)
    m = np.full(len(u), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(m, inv, own)
    return m[inv]
