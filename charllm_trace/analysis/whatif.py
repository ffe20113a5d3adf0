"""What-if replay on the execution graph, and ``--simulate`` for traces without timestamps.

A what-if scales the *scalable* part of every lag by its class's factor, a parallel dimension's
factor or a link bandwidth, or adds a fixed CPU cost per operator (``whatif_keys.parse_what_if``:
``comm=0.5,gemm=2,launch=0,dp=50GB/s,cpu_op+=50us``; ``whatif_edges.edge_lags``), re-times the graph (``critical_path.retime``: every
dependency honoured, one op at a time on each CPU thread and GPU stream, in the measured
order) and reads step times, overlap and exposed communication off the re-timed trace
with the same analyses as the measured one. Every figure is PREDICTED. Unexplained waits
(``points.calibrate``) are kept as they were measured.

``simulate`` is the same engine on a graph built from recorded order and durations.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl

from charllm_trace.analysis.critical import retime, windows
from charllm_trace.analysis.overlap import overlap
from charllm_trace.analysis.results import WHATIF_SCHEMA, WhatIfResult, frame
from charllm_trace.analysis.whatif_edges import edge_lags, factor_array
from charllm_trace.analysis.whatif_keys import parse_what_if
from charllm_trace.analysis.whatif_spread import path_basis, step_spread
from charllm_trace.core import dag as engine
from charllm_trace.core.model import Run, Trace
from charllm_trace.graph import points as P
from charllm_trace.graph.run import RunGraph, build_run_graph

#: the first note of a what-if on a trace without timestamps
SIMULATED_WI = "the trace has no timestamps: the measured side is the simulated timeline"

__all__ = ["factor_array", "parse_what_if", "retimed_traces", "simulate", "what_if"]


def retimed_traces(run: Run, rg: RunGraph, time: np.ndarray) -> dict[int, Trace]:
    """Each rank's trace with the re-timed start and duration of every node in the graph
    (nodes outside it, such as GPU annotation ranges, are left out)."""
    out: dict[int, Trace] = {}
    for r in rg.ranks:
        tr = run.traces[r]
        part = rg.parts[r]
        off = rg.offsets[r]
        n = len(part.rows)
        t = time[off : off + 2 * n]
        nodes = tr.nodes[part.rows] if n < tr.nodes.height else tr.nodes
        nodes = nodes.with_columns(
            start_ns=pl.Series(t[0::2], dtype=pl.Int64),
            dur_ns=pl.Series(np.maximum(t[1::2] - t[0::2], 0), dtype=pl.Int64),
            self_ns=pl.lit(None, dtype=pl.Int64),
        )
        keep = set(nodes["id"].to_list()) if n < tr.nodes.height else None
        deps = tr.deps
        if keep is not None:
            deps = deps.filter(pl.col("node").is_in(list(keep)) & pl.col("dep").is_in(list(keep)))
        out[r] = Trace(nodes=nodes, deps=deps, telemetry=tr.telemetry.clear(), meta=tr.meta)
    return out


def _step_rows(tr: Trace, rank: int, whole_ns: int | None, spans: dict[int, int] | None) -> pl.DataFrame:
    st = tr.steps().select("step", (pl.col("end_ns") - pl.col("start_ns")).alias("ns"))
    if spans:  # the critical path's step windows (they tile the trace), where the graph has them
        got = pl.DataFrame(
            {"step": list(spans), "_w": list(spans.values())}, schema={"step": pl.Int64, "_w": pl.Int64}
        )
        st = st.join(got, on="step", how="left").select("step", pl.coalesce("_w", "ns").alias("ns"))
    total = pl.DataFrame({"step": [None], "ns": [whole_ns]}, schema={"step": pl.Int64, "ns": pl.Int64})
    return pl.concat([st, total]).with_columns(rank=pl.lit(rank, dtype=pl.Int64))


def _overlap_rows(tr: Trace) -> pl.DataFrame:
    ov = overlap(tr, per_step=True).per_rank
    return ov.select("step", pl.col("exposed_comm_ns").alias("exposed"), pl.col("overlap_pct").alias("pct"))


def _whole(t: np.ndarray, win: tuple[int, int] | None) -> int | None:
    return int(t[win[0]] - t[win[1]]) if win is not None else None


def step_spans(wins: list[tuple[int, int | None, int, int]], t: np.ndarray) -> dict[int, dict[int, int]]:
    """Per rank, each step's window length on times ``t`` (``critical.windows``: the steps tile
    the trace, from the start of the first GPU op a step launched to the next step's)."""
    out: dict[int, dict[int, int]] = {}
    for r, s, sink, w0 in wins:
        if s is not None:
            out.setdefault(r, {})[s] = int(t[sink] - t[w0])
    return out


def whatif_rank_rows(
    r: int,
    measured: Trace,
    predicted: Trace,
    m_whole: int | None,
    p_whole: int | None,
    spans: tuple[dict[int, int], dict[int, int]] | None = None,
) -> pl.DataFrame:
    """One rank's rows of a what-if: step times, overlap and exposed communication of its measured
    and predicted traces (``m_whole``, ``p_whole``: its whole-trace windows' lengths; ``spans``:
    the measured and predicted step windows' lengths, :func:`step_spans`; a step without one
    keeps its ``ProfilerStep`` range)."""
    ms, ps = spans if spans is not None else (None, None)
    m = _step_rows(measured, r, m_whole, ms).rename({"ns": "measured_ns"})
    p = _step_rows(predicted, r, p_whole, ps).rename({"ns": "predicted_ns"}).drop("rank")
    mo = _overlap_rows(measured).rename(
        {"exposed": "measured_exposed_comm_ns", "pct": "measured_overlap_pct"}
    )
    po = _overlap_rows(predicted).rename(
        {"exposed": "predicted_exposed_comm_ns", "pct": "predicted_overlap_pct"}
    )
    return (
        m.join(p, on="step", how="left", nulls_equal=True)
        .join(mo, on="step", how="left", nulls_equal=True)
        .join(po, on="step", how="left", nulls_equal=True)
    )


def whatif_steps(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Every rank's :func:`whatif_rank_rows` (in rank order) as one WHATIF_SCHEMA frame."""
    steps = pl.concat(frames, how="diagonal_relaxed").with_columns(
        change_pct=pl.when(pl.col("measured_ns") > 0).then(
            100.0 * (pl.col("predicted_ns") - pl.col("measured_ns")) / pl.col("measured_ns")
        )
    )
    return frame(steps, WHATIF_SCHEMA)


def fixed_wait_pct(fixed: int, length: int, measured: bool) -> float | None:
    """The share of the measured whole-trace critical paths that is unexplained waiting."""
    return 100.0 * fixed / length if length > 0 and measured else None


def _replay(rg: RunGraph, lags: np.ndarray) -> np.ndarray:
    g = rg.g
    time, _, done = engine.longest_path(g.n_points, g.src, g.dst, lags, g.prio, g.root)
    if done < g.n_points:
        raise engine.cycle_error("execution graph", g.n_points - done)
    return time


def what_if(
    run: Run,
    factors: dict[str, float],
    *,
    graph: RunGraph | None = None,
    classified: dict[int, pl.DataFrame] | None = None,
    dims: dict[str, str | None] | None = None,
) -> WhatIfResult:
    """Predicted step times, overlap and exposed communication under ``factors``
    (``parse_what_if``; ``dims``: process group -> parallel dimension, for ``dp=`` ... keys)."""
    rg = graph or build_run_graph(run, classified)
    lags, lag_notes = edge_lags(rg, run, factors, dims, classified)
    notes = list(rg.notes) + lag_notes
    if not rg.g.measured:
        notes.insert(0, SIMULATED_WI)
    base_t, base_bind = retime(rg)
    new_t = _replay(rg, lags)
    measured = retimed_traces(run, rg, base_t) if not rg.g.measured else {r: run.traces[r] for r in rg.ranks}
    predicted = retimed_traces(run, rg, new_t)
    # the whole trace: the critical path's window (first step start -> last step or GPU op end)
    # (each side's own last point: what ends last may change under the factors)
    m_all, p_all = windows(rg, run, base_t), windows(rg, run, new_t)
    m_win = {r: (sink, w0) for r, s, sink, w0 in m_all if s is None}
    p_win = {r: (sink, w0) for r, s, sink, w0 in p_all if s is None}
    m_sp, p_sp = step_spans(m_all, base_t), step_spans(p_all, new_t)
    frames = [
        whatif_rank_rows(
            r,
            measured[r],
            predicted[r],
            _whole(base_t, m_win.get(r)),
            _whole(new_t, p_win.get(r)),
            (m_sp.get(r, {}), p_sp.get(r, {})),
        )
        for r in rg.ranks
    ]
    steps = whatif_steps(frames)
    # what the prediction rests on: waits kept as measured, inferred edges, spread over steps
    basis = path_basis(rg.g, base_t, base_bind, list(m_win.values()))
    sp = step_spread(steps)
    return WhatIfResult(
        steps=steps,
        factors=dict(factors),
        fixed_wait_pct=fixed_wait_pct(basis.fixed_ns, basis.length_ns, rg.g.measured),
        simulated=not rg.g.measured,
        notes=notes,
        inferred_pct=basis.pct(basis.inferred_ns) if rg.g.measured else None,
        **dataclasses.asdict(sp),
    )


def simulate(trace: Trace) -> Trace:
    """A copy of ``trace`` with ``start_ns`` filled by re-timing its graph built from recorded
    order and durations (``points`` module docstring). ``meta.extra["simulated"]`` is True and
    ``meta.clock`` is ``"none"``; durations stay as recorded. Dependencies that close a cycle
    are ignored, with a note in ``meta.extra["simulated_note"]``."""
    run = Run.single(trace)
    rank = run.ranks[0]
    rg = build_run_graph(run)
    g = rg.g
    notes: list[str] = [n.removeprefix(f"rank {rank}: ") for n in rg.notes]
    try:
        time, _ = retime(rg)
    except Exception:  # noqa: BLE001 - a cycle: drop recorded deps that run backwards in id order
        data = g.kind == P.EK["data"]
        ids = rg.parts[rank].ids
        back = data & (ids[g.src // 2] >= ids[g.dst // 2])
        keep = ~back
        notes.append(
            f"{int(back.sum())} recorded dependencies on a node issued later closed cycles and were ignored"
        )
        _drop_edges(g, keep)
        try:
            time, _ = retime(rg)
        except Exception:  # noqa: BLE001 - still cyclic: recorded deps ignored altogether
            _drop_edges(g, g.kind != P.EK["data"])
            notes.append("the recorded dependencies still formed cycles: all of them were ignored")
            time, _ = retime(rg)
    part = rg.parts[rank]
    n = len(part.rows)
    starts = np.full(trace.nodes.height, None, dtype=object)
    starts[part.rows] = time[0 : 2 * n : 2]
    new_nodes = trace.nodes.with_columns(
        start_ns=pl.Series(starts.tolist(), dtype=pl.Int64),
        dur_ns=pl.col("dur_ns").fill_null(0).clip(lower_bound=0),
    )
    extra = dict(trace.meta.extra)
    extra["simulated"] = True
    if notes:
        extra["simulated_note"] = "; ".join(notes)
    meta = dataclasses.replace(trace.meta, has_timestamps=True, clock="none", extra=extra)
    return Trace(nodes=new_nodes, deps=trace.deps, telemetry=trace.telemetry.clear(), meta=meta)


def _drop_edges(g: P.PointGraph, keep: np.ndarray) -> None:
    for name in ("src", "dst", "base", "fixed", "wclass", "kind", "cat", "owner", "prio"):
        setattr(g, name, getattr(g, name)[keep])
