"""Rebuild a timeline for a trace without timestamps (``analyze --simulate``).

Chakra's own converter writes ``start_time_micros = 0`` on every node: the order and
the durations are known, the times are not. The simulated timeline is a list
schedule:

- nodes are visited in a topological order of the dependencies (control and data
  edges: a node starts only after every node it depends on has ended); among nodes
  that are ready at once, the lowest node id goes first (Chakra ids follow issue
  order);
- each resource runs one node at a time: a CPU thread (``tid``) for CPU nodes, a GPU
  stream (``stream``, else the ``tid`` Chakra gives GPU nodes) for GPU nodes;
- start = max(end of its dependencies, when its resource becomes free); end = start
  + duration (a missing duration counts as 0);
- time 0 is the start of the simulation, not a wall-clock time.

What it leaves out: a GPU kernel is not started before its launching CPU op ends
(the ET records the launch as a plain dependency), there is no launch latency, no
cross-rank waiting for collectives, and no contention between streams. Every figure
computed on a simulated trace says so (``simulated`` in every result).
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np
import polars as pl

from charllm_trace.analysis.classify import _positions
from charllm_trace.model import Trace


def simulate(trace: Trace) -> Trace:
    """A copy of ``trace`` with ``start_ns`` filled by the list schedule above.

    ``meta.extra["simulated"]`` is True and ``meta.clock`` is ``"none"``."""
    nodes = trace.nodes
    n = nodes.height
    ids = nodes["id"].to_numpy()
    dur = nodes["dur_ns"].fill_null(0).to_numpy().astype(np.int64)
    dur = np.maximum(dur, 0)
    gpu = nodes["on_gpu"].fill_null(False).to_numpy()
    lane = np.where(
        gpu,
        nodes["stream"].fill_null(nodes["tid"]).fill_null(-1).to_numpy(),
        nodes["tid"].fill_null(-1).to_numpy(),
    )
    res_key = pl.DataFrame({"g": gpu, "l": lane}).select(pl.struct("g", "l").rank("dense")).to_series()
    res = res_key.to_numpy().astype(np.int64) - 1
    # edges as row positions: dep -> node
    d = trace.deps.unique(subset=["node", "dep"])
    src = _positions(ids, d["dep"].to_numpy())
    dst = _positions(ids, d["node"].to_numpy())
    ok = (src >= 0) & (dst >= 0) & (src != dst)
    src, dst = src[ok], dst[ok]
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    out_ptr = np.searchsorted(src, np.arange(n + 1))
    indeg = np.bincount(dst, minlength=n)
    ready = np.zeros(n, dtype=np.int64)
    start = np.full(n, -1, dtype=np.int64)
    free = np.zeros(int(res.max()) + 1 if n else 0, dtype=np.int64)
    ids_l = ids.tolist()
    heap = [(ids_l[i], i) for i in np.flatnonzero(indeg == 0).tolist()]
    heapq.heapify(heap)
    indeg_l = indeg.tolist()
    dst_l = dst.tolist()
    ptr = out_ptr.tolist()
    res_l = res.tolist()
    dur_l = dur.tolist()
    ready_l = ready.tolist()
    free_l = free.tolist()
    start_l = start.tolist()
    done = 0
    cycles = False
    remaining = set(range(n)) if n and len(heap) < n else None
    while done < n:
        if not heap:  # a cycle: release the lowest-id node not yet scheduled
            cycles = True
            assert remaining is not None
            i = min(remaining, key=lambda j: ids_l[j])
            heap.append((ids_l[i], i))
        _, i = heapq.heappop(heap)
        if start_l[i] >= 0:
            continue
        r = res_l[i]
        s = max(ready_l[i], free_l[r])
        e = s + dur_l[i]
        start_l[i] = s
        free_l[r] = e
        done += 1
        if remaining is not None:
            remaining.discard(i)
        for k in range(ptr[i], ptr[i + 1]):
            j = dst_l[k]
            if e > ready_l[j]:
                ready_l[j] = e
            indeg_l[j] -= 1
            if indeg_l[j] == 0 and start_l[j] < 0:
                heapq.heappush(heap, (ids_l[j], j))
    new_nodes = nodes.with_columns(
        start_ns=pl.Series(start_l, dtype=pl.Int64), dur_ns=pl.Series(dur, dtype=pl.Int64)
    )
    extra = dict(trace.meta.extra)
    extra["simulated"] = True
    if cycles:
        extra["simulated_note"] = "dependency cycles were broken by node id"
    meta = dataclasses.replace(trace.meta, has_timestamps=True, clock="none", extra=extra)
    return Trace(nodes=new_nodes, deps=trace.deps, telemetry=trace.telemetry.clear(), meta=meta)
