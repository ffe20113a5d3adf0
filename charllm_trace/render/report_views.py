"""What the HTML report draws from the trace itself rather than from the analyses: each rank's
compute / communication / idle lanes (the analyses' own classification and interval algebra),
the telemetry series per device with throttle periods, and the time origin (pure: no I/O).

:class:`ReportViews` is saved with analysis results (``charllm_trace.store.results``), so a report
can be redrawn without the trace; :mod:`charllm_trace.render.report` joins it with the analyses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from charllm_trace.analysis.energy import trace_devices
from charllm_trace.analysis.overlap import GPU_BUSY
from charllm_trace.analysis.power import SLOWDOWN_MASK, THROTTLE_REASONS, is_amd
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.core import intervals as iv
from charllm_trace.core.classify import classify
from charllm_trace.core.model import Run, Trace

MAX_LANES = 16  # ranks drawn in the timeline
MAX_DEVICE_CHARTS = 8  # (rank, device) telemetry charts


@dataclass
class RankLanes:
    rank: int
    mode: str  # "gpu" or "cpu"
    compute: tuple[np.ndarray, np.ndarray]  # merged [start, end) ns
    comm: tuple[np.ndarray, np.ndarray]
    idle: tuple[np.ndarray, np.ndarray]
    window: tuple[int, int]


@dataclass
class DeviceSeries:
    rank: int
    device: int
    t: np.ndarray  # ns
    power_w: np.ndarray
    temp_c: np.ndarray
    sm_clock_mhz: np.ndarray
    throttle: list[tuple[int, int, str]]  # (start_ns, end_ns, reason names)


def _classified(trace: Trace, cn: pl.DataFrame | None) -> pl.DataFrame:
    """``trace.nodes`` with the ``cls`` column of ``cn`` (the analysis' classification of this
    rank: the classes do not depend on times, so a simulated copy shares them); classified here
    only when no classification of these rows is given."""
    if cn is None or "cls" not in cn.columns or cn.height != trace.nodes.height:
        return classify(trace.nodes)
    return trace.nodes.with_columns(cn["cls"])


def _lanes(trace: Trace, rank: int, cn: pl.DataFrame | None = None) -> RankLanes | None:
    df = _classified(trace, cn).filter(pl.col("start_ns").is_not_null() & pl.col("dur_ns").is_not_null())
    gpu = df.filter(pl.col("on_gpu").fill_null(False) & pl.col("cls").is_in(list(GPU_BUSY)))
    if gpu.height:
        mode, act = "gpu", gpu
        comm_cls, comp_cls = ["comm"], ["compute"]
    else:
        mode = "cpu"
        act = df.filter(pl.col("cls").is_in(["cpu_comm", "cpu_compute"]) | (pl.col("kind") == "cpu_op"))
        comm_cls, comp_cls = ["cpu_comm"], ["cpu_compute"]
    if act.height == 0:
        return None
    s = act["start_ns"].to_numpy().astype(np.int64)
    e = s + act["dur_ns"].to_numpy().astype(np.int64)
    cls = act["cls"].to_numpy()
    comm = iv.merge(s[np.isin(cls, comm_cls)], e[np.isin(cls, comm_cls)])
    comp = iv.merge(s[np.isin(cls, comp_cls)], e[np.isin(cls, comp_cls)])
    busy_s, busy_e = iv.merge(s, e)
    if busy_s.size == 0:  # every activity lasts 0 ns (a trace of zero durations): nothing to draw
        return None
    w0, w1 = int(busy_s[0]), int(busy_e[-1])
    idle = (busy_e[:-1].copy(), busy_s[1:].copy())  # the gaps between busy intervals
    return RankLanes(rank, mode, comp, comm, idle, (w0, w1))


def _throttle_spans(t: np.ndarray, mask: np.ndarray, amd: bool) -> list[tuple[int, int, str]]:
    """Runs of samples with a slowdown reason, each held until the next sample."""
    if t.size < 2:
        return []
    flag = (mask & (~0 if amd else SLOWDOWN_MASK)) != 0
    if not flag.any():
        return []
    d = np.diff(np.r_[0, flag.astype(np.int8), 0])
    starts, stops = np.flatnonzero(d == 1), np.flatnonzero(d == -1)  # stops: first unflagged index
    out = []
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):  # one per throttle period
        end = int(t[b]) if b < t.size else int(t[-1])
        bits = int(np.bitwise_or.reduce(mask[a:b]))
        names = (
            [f"bit {k}" for k in range(32) if bits >> k & 1]
            if amd
            else [n for bit, n in THROTTLE_REASONS.items() if bits & bit & SLOWDOWN_MASK]
        )
        out.append((int(t[a]), end, ", ".join(names)))
    return out


@dataclass
class ReportViews:
    """What the report draws from the trace itself rather than from the analyses: the activity
    lanes, the telemetry series and the time origin. Saved with analysis results
    (``charllm_trace.store.results``), so a report can be redrawn without the trace."""

    source: str | None
    ranks: list[int]
    lanes: list[RankLanes] = field(default_factory=list)
    overlay: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # rank -> (t, W)
    devices: list[DeviceSeries] = field(default_factory=list)
    origin_ns: int | None = None
    notes: list[str] = field(default_factory=list)


def drawn_run(run: Run, an: RunAnalysis) -> Run:
    """The run as the report draws it: with a simulated analysis, ranks without timestamps on their
    simulated timeline (the one the analyses measured)."""
    if not an.simulated or all(t.meta.has_timestamps for t in run.traces.values()):
        return run
    from charllm_trace.analysis.whatif import simulate

    return Run(
        traces={k: (t if t.meta.has_timestamps else simulate(t)) for k, t in run.traces.items()},
        manifest=run.manifest,
        source=run.source,
    )


def report_views(run: Run, classified: dict[int, pl.DataFrame] | None = None) -> ReportViews:
    """The lanes, telemetry series and time origin of ``run`` (the run as drawn: see
    :func:`drawn_run`). The lanes use the nodes' classification ``classified`` (rank -> the
    analyses' classified nodes, ``RunAnalysis.classified``); a rank without one is classified here."""
    cls_by_rank = classified or {}
    views = ReportViews(source=run.source, ranks=run.ranks)
    lows: list[int] = []
    for r in run.ranks[:MAX_LANES]:
        tr = run.traces[r]
        if not tr.meta.has_timestamps:
            continue
        lane = _lanes(tr, r, cls_by_rank.get(r))
        if lane is not None:
            views.lanes.append(lane)
            lows.append(lane.window[0])
    if len(run.ranks) > MAX_LANES:
        views.notes.append(f"timeline: the first {MAX_LANES} of {len(run.ranks)} ranks are drawn")
    # telemetry: power over each rank's lane, and per-device charts
    for r in run.ranks:
        tr = run.traces[r]
        for dev in trace_devices(tr):
            smp = tr.telemetry.filter(pl.col("device") == dev).sort("time_ns")
            t = smp["time_ns"].to_numpy().astype(np.int64)
            pw = smp["power_w"].cast(pl.Float64).fill_null(np.nan).to_numpy()
            if r not in views.overlay:
                views.overlay[r] = (t, pw)
            if len(views.devices) < MAX_DEVICE_CHARTS:
                th = smp.filter(pl.col("throttle_reasons").is_not_null())
                spans = _throttle_spans(
                    th["time_ns"].to_numpy().astype(np.int64),
                    th["throttle_reasons"].to_numpy().astype(np.int64),
                    is_amd(tr),
                )
                views.devices.append(
                    DeviceSeries(
                        r,
                        dev,
                        t,
                        pw,
                        smp["temp_c"].cast(pl.Float64).fill_null(np.nan).to_numpy(),
                        smp["sm_clock_mhz"].cast(pl.Float64).fill_null(np.nan).to_numpy(),
                        spans,
                    )
                )
            if t.size:
                lows.append(int(t[0]))
    views.origin_ns = min(lows) if lows else None
    return views
