"""Compute / communication overlap per rank, step, process group and dimension.

Definitions (docs/analyses.md has the full text):

- comm = union of communication intervals (``cls == "comm"``) across all streams;
- compute = union of compute-kernel intervals (``cls == "compute"``); memcpy, memset
  and sync are neither;
- overlap = |comm ∩ compute|; overlap % = 100·overlap/|comm|; exposed = |comm| − overlap;
- busy = |compute ∪ comm ∪ memcpy ∪ memset|; idle = span − busy, span = first start to
  last end of that activity.

A step's figures are those of the GPU time inside its **GPU window**
(:mod:`~charllm_trace.analysis.step_windows`: disjoint windows from the first GPU activity each
step launched to the next step's; intervals clipped to the window, operators counted in the
window holding their start). With ``hta_compat`` a step holds instead the GPU operators
*launched* during it (the launching CPU call began inside ``ProfilerStep#N``), as HTA assigns
iterations.

CPU mode (a trace without GPU kernels, e.g. gloo): comm = CPU collective ops and the
ops nested in them (``cpu_comm``), compute = leaf CPU ops (``cpu_compute``), busy =
union of all CPU ops; a step holds the ops that started inside it.

``hta_compat=True`` applies Holistic Trace Analysis 0.5.0's conventions: keep only GPU
operators whose launching CPU event (matched by correlation id) started before the
last ``ProfilerStep`` begins (or, with ``hta_keep_last_step``, before it ends), and
round each interval inwards to whole microseconds (start up, end down).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.analysis.context import RankContext, context_of
from charllm_trace.analysis.results import (
    OVERLAP_GROUP_SCHEMA,
    OVERLAP_SCHEMA,
    OverlapResult,
    frame,
)
from charllm_trace.analysis.step_cuts import cut_note, cut_steps
from charllm_trace.analysis.step_windows import (  # launch_times*: re-exported (energy, bandwidth)
    launch_step_index,
    launch_times,
    launch_times_of,
)
from charllm_trace.core import intervals as iv
from charllm_trace.core.classify import is_gpu_trace
from charllm_trace.core.model import Trace

__all__ = ["GPU_BUSY", "OVERLAP_COLUMNS", "hta_filter", "launch_times", "launch_times_of", "overlap"]

GPU_BUSY = ("compute", "comm", "memcpy", "memset")
#: The node columns overlap reads (selected first: filtering a narrow frame is cheap).
OVERLAP_COLUMNS = (
    "id",
    "name",
    "kind",
    "on_gpu",
    "start_ns",
    "dur_ns",
    "correlation",
    "launch_id",
    "pg_name",
    "cls",
)


def hta_filter(nodes: pl.DataFrame, steps: pl.DataFrame, keep_last_step: bool = False) -> pl.DataFrame:
    """HTA 0.5.0's ``_filter_irrelevant_gpu_kernels`` on the model: keep GPU nodes whose
    correlated CPU event started before the last ProfilerStep began (``keep_last_step``:
    at or before it ended). GPU nodes with no correlated CPU event are dropped, as HTA's
    inner join does. Applies only with at least two steps (as HTA)."""
    if steps.height < 2:
        return nodes
    keep_corr = _hta_kept_correlations(nodes, steps, keep_last_step)
    gpu = pl.col("on_gpu").fill_null(False)
    return nodes.filter(~gpu | pl.col("correlation").is_in(keep_corr).fill_null(False))


def _hta_kept_correlations(nodes: pl.DataFrame, steps: pl.DataFrame, keep_last_step: bool) -> pl.Series:
    """The correlation ids of the CPU events ``hta_filter`` keeps GPU nodes for (imploded)."""
    last_start = int(steps["start_ns"].max())
    last_end = int(steps["end_ns"].max())
    t = pl.col("start_ns")
    return (
        nodes.lazy()
        .filter(
            ~pl.col("on_gpu").fill_null(False)
            & pl.col("correlation").is_not_null()
            & ((t <= last_end) if keep_last_step else (t < last_start))
        )
        .select(pl.col("correlation").unique().implode())
        .collect()
        .to_series()
    )


def _slot_measures(
    a: tuple[np.ndarray, np.ndarray, np.ndarray],
    b: tuple[np.ndarray, np.ndarray, np.ndarray],
    nslots: int,
    big: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """|A_k|, |B_k|, |A_k ∩ B_k| for each slot k; intervals are (start, end, slot) with
    times relative to an origin and shorter than ``big``: slot k is shifted by k·big so
    that one merge handles every slot."""
    if nslots * big >= 2**62:  # absurd spans (bogus timestamps): one slot at a time
        la, lb, ov = (np.zeros(nslots, np.int64) for _ in range(3))
        for k in np.unique(np.concatenate([a[2], b[2]])).tolist():
            ma, mb = a[2] == k, b[2] == k
            A = iv.merge(a[0][ma], a[1][ma])
            B = iv.merge(b[0][mb], b[1][mb])
            la[k], lb[k] = int((A[1] - A[0]).sum()), int((B[1] - B[0]).sum())
            U = iv.union(A, B)
            ov[k] = la[k] + lb[k] - int((U[1] - U[0]).sum())
        return la, lb, ov
    A = iv.merge(a[0] + a[2] * big, a[1] + a[2] * big)
    B = iv.merge(b[0] + b[2] * big, b[1] + b[2] * big)
    w0 = np.arange(nslots, dtype=np.int64) * big
    w1 = w0 + big
    la = iv.measure_in(*A, w0, w1)
    lb = iv.measure_in(*B, w0, w1)
    lab = iv.measure_in(*iv.union(A, B), w0, w1)
    return la, lb, la + lb - lab


def _hta_kept(
    df: pl.DataFrame, steps: pl.DataFrame, mode: str, hta_keep_last_step: bool, notes: list[str]
) -> pl.Expr | None:
    """HTA's kernel filter (hta_compat): the rows kept, None where it does not apply (noted)."""
    if mode != "gpu":
        notes.append("the HTA-compatible mode (hta_compat) has no effect on a CPU-only trace")
        return None
    if steps.height < 2:
        notes.append("fewer than two ProfilerSteps: HTA's kernel filter not applied (as HTA)")
        return None
    gpu = pl.col("on_gpu").fill_null(False)
    launched = gpu.not_() | pl.col("correlation").is_in(
        _hta_kept_correlations(df, steps, hta_keep_last_step)
    ).fill_null(False)
    dropped = int(df.select((gpu & launched.not_()).sum()).item())
    which = "after the last ProfilerStep ended" if hta_keep_last_step else "after the last ProfilerStep began"
    notes.append(f"HTA convention: {dropped} GPU operators launched {which} (or never launched) dropped")
    return launched


def _classes(mode: str, notes: list[str]) -> tuple[pl.Expr, list[str], list[str], list[str]]:
    """(busy rows, communication classes, compute classes, memory classes) of the mode."""
    if mode == "gpu":
        busy = pl.col("on_gpu").fill_null(False) & pl.col("cls").is_in(list(GPU_BUSY))
        return busy, ["comm"], ["compute"], ["memcpy", "memset"]
    busy = pl.col("cls").is_in(["cpu_comm", "cpu_compute"]) | (pl.col("kind") == "cpu_op")
    notes.append("no GPU kernels: CPU mode (communication = CPU collective ops, compute = leaf CPU ops)")
    return busy, ["cpu_comm"], ["cpu_compute"], []


def _times(act: pl.DataFrame, hta_compat: bool, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of each interval (HTA's µs rounding under hta_compat on a GPU trace)."""
    start = act["start_ns"].to_numpy().astype(np.int64)
    end = start + act["dur_ns"].to_numpy().astype(np.int64)
    if hta_compat and mode == "gpu":
        start = -((-start) // 1000) * 1000  # ceil to µs
        end = (end // 1000) * 1000  # floor to µs
        end = np.maximum(end, start)
    return start, end


def _slots(
    rule: str | None,
    ctx: RankContext,
    steps: pl.DataFrame,
    act: pl.DataFrame,
    mode: str,
    se: tuple[np.ndarray, np.ndarray],
    notes: list[str],
) -> dict[str, Any]:
    """Slots: 0 = whole trace, 1 + i = step i; each interval is in slot 0 and (as pieces) in
    steps. Returns the pieces (src: the interval, k: the slot, ps/pe: start/end, counted: the
    piece counts the interval), slot_step, nslots and the GPU windows (win_lo/win_hi)."""
    start, end = se
    z = np.zeros(0, dtype=np.int64)
    out: dict[str, Any] = {
        "slot_step": [None], "nslots": 1, "src": z, "k": z, "ps": start[:0], "pe": end[:0],
        "counted": np.zeros(0, dtype=bool), "win_lo": None, "win_hi": None,
    }  # fmt: skip
    if rule == "launch":
        t = act["launch_ns"].fill_null(act["start_ns"]).to_numpy() if mode == "gpu" else start
        idx = launch_step_index(steps, t)
        src = np.flatnonzero(idx >= 0)
        out.update(src=src, k=idx[src] + 1, ps=start[src], pe=end[src], counted=np.ones(src.size, dtype=bool))
        out["slot_step"] += [int(x) for x in steps["step"].to_list()]
        out["nslots"] = 1 + steps.height
    elif rule == "gpu":
        win = ctx.windows
        notes.extend(win.notes)
        src, kw, ps, pe = win.pieces(start, end)
        # the piece holding the start counts
        out.update(src=src, k=kw + 1, ps=ps, pe=pe, counted=win.index_of(start)[src] == kw)
        out["slot_step"] += [int(x) for x in win.step.tolist()]
        out["nslots"] = 1 + win.n
        out["win_lo"], out["win_hi"] = win.start, win.end
    return out


def overlap(
    source: Trace | RankContext,
    *,
    per_step: bool = True,
    hta_compat: bool = False,
    hta_keep_last_step: bool = False,
    group_dims: Mapping[str, str | None] | None = None,
) -> OverlapResult:
    """Overlap of one rank (a trace, or its :class:`RankContext`: classified nodes and step
    windows computed once). ``group_dims`` maps pg_name -> dimension (see
    :mod:`charllm_trace.analysis.parallel`)."""
    ctx = context_of(source)
    trace = ctx.trace
    rank = trace.meta.rank if trace.meta.rank is not None else 0
    notes: list[str] = []
    simulated = bool(trace.meta.extra.get("simulated"))
    df = ctx.classified
    steps = trace.steps()
    mode = "gpu" if is_gpu_trace(df) else "cpu"
    # One boolean mask, then one gather of the few columns the intervals need: filtering the
    # node table step by step would copy its columns several times over (millions of rows).
    keep = pl.col("start_ns").is_not_null() & pl.col("dur_ns").is_not_null()
    launched = _hta_kept(df, steps, mode, hta_keep_last_step, notes) if hta_compat else None
    if launched is not None:
        keep = keep & launched
    busy, comm_cls, comp_cls, mem_cls = _classes(mode, notes)
    act = (
        df.lazy()
        .filter(keep & busy)
        .select("start_ns", "dur_ns", "cls", "pg_name", "correlation", "launch_id", "on_gpu")
        .collect()
    )
    # per-step rule: GPU windows; HTA's launch-time steps under hta_compat; CPU ops by their start
    rule = None
    if per_step and steps.height:
        rule = "gpu" if mode == "gpu" and not hta_compat else "launch"
    if rule == "launch" and mode == "gpu":
        act = act.with_columns(launch_ns=launch_times_of(df, act))
    start, end = _times(act, hta_compat, mode)
    sl = _slots(rule, ctx, steps, act, mode, (start, end), notes)
    if act.height == 0:
        notes.append("no GPU activity with timestamps" if mode == "gpu" else "no CPU ops with timestamps")
        empty = frame({}, OVERLAP_GROUP_SCHEMA)
        return OverlapResult(
            frame({}, OVERLAP_SCHEMA), empty, empty, mode, hta_compat, simulated=simulated, notes=notes
        )
    src, slot_step, nslots, win_lo, win_hi = (
        sl[n] for n in ("src", "slot_step", "nslots", "win_lo", "win_hi")
    )
    origin = int(start.min())
    if win_lo is not None and win_lo.size:
        origin = min(origin, int(win_lo.min()))
    rs, re_ = start - origin, end - origin
    big = max(int(re_.max()), int(win_hi.max()) - origin if win_hi is not None and win_hi.size else 0) + 1
    s_all = np.concatenate([rs, sl["ps"] - origin])
    e_all = np.concatenate([re_, sl["pe"] - origin])
    k_all = np.concatenate([np.zeros(rs.size, np.int64), sl["k"]])
    # the classes matched in polars, only boolean masks to numpy (no object array of every op's
    # class: 300 k CPU ops of the cpu-only profile)
    cls = act["cls"]

    def of(classes: Any) -> np.ndarray:
        m = cls.is_in(list(classes)).fill_null(False).to_numpy()
        return np.concatenate([m, m[src]])

    cnt_all = np.concatenate([np.ones(rs.size, dtype=bool), sl["counted"]])
    is_comm = of(comm_cls)
    is_comp = of(comp_cls)
    is_mem = of(mem_cls) if mem_cls else np.zeros(rs.size + len(src), bool)
    spans = (s_all, e_all, k_all)
    per_rank = _rank_rows(rank, sl, spans, (is_comm, is_comp, is_mem, cnt_all), (origin, big), trace, notes)

    # per process group and per dimension: that group's comm against all compute
    pg = act["pg_name"].to_numpy()
    pg_all = np.concatenate([pg, pg[src]])
    group_args = (
        rank,
        slot_step,
        nslots,
        big,
        s_all,
        e_all,
        k_all,
        is_comm,
        is_comp,
        cnt_all,
        pg_all,
        group_dims,
        trace,
    )
    per_group = _group_rows(*group_args, by_dim=False)
    per_dim = _group_rows(*group_args, by_dim=True)
    if mode == "gpu" and is_comm.any() and not any(p is not None for p in pg_all[is_comm]):
        notes.append("communication kernels carry no process group: per-group overlap not computed")
    return OverlapResult(per_rank, per_group, per_dim, mode, hta_compat, simulated=simulated, notes=notes)


def _rank_rows(
    rank: int,
    sl: dict[str, Any],
    spans: tuple[np.ndarray, np.ndarray, np.ndarray],
    masks: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    origin_big: tuple[int, int],
    trace: Trace,
    notes: list[str],
) -> pl.DataFrame:
    """The rank's rows, one per slot with intervals (the whole trace, then each step)."""
    s_all, e_all, k_all = spans
    is_comm, is_comp, is_mem, cnt_all = masks
    origin, big = origin_big
    slot_step, nslots, win_lo, win_hi = sl["slot_step"], sl["nslots"], sl["win_lo"], sl["win_hi"]

    def sel(m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return s_all[m], e_all[m], k_all[m]

    none = np.zeros(s_all.size, bool)
    comm_len, comp_len, ov = _slot_measures(sel(is_comm), sel(is_comp), nslots, big)
    mem_len, _, _ = _slot_measures(sel(is_mem), sel(none), nslots, big)
    busy_len, _, _ = _slot_measures(sel(np.ones(s_all.size, bool)), sel(none), nslots, big)
    lo = np.full(nslots, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(nslots, -1, dtype=np.int64)
    np.minimum.at(lo, k_all, s_all)
    np.maximum.at(hi, k_all, e_all)
    if win_lo is not None:  # a GPU window is the step's span: its idle is GPU idle in it
        lo[1:], hi[1:] = win_lo - origin, win_hi - origin
    present = hi >= 0
    span = np.where(present, hi - lo, 0)
    rows = {
        "rank": [rank] * nslots,
        "step": slot_step,
        "start_ns": np.where(present, lo + origin, 0),
        "end_ns": np.where(present, hi + origin, 0),
        "span_ns": span,
        "compute_ns": comp_len,
        "comm_ns": comm_len,
        "overlap_ns": ov,
        "exposed_comm_ns": comm_len - ov,
        "memory_ns": mem_len,
        "busy_ns": busy_len,
        "idle_ns": span - busy_len,
        "overlap_pct": [
            100.0 * o / c if c else None for o, c in zip(ov.tolist(), comm_len.tolist(), strict=False)
        ],
        "n_compute": np.bincount(k_all[is_comp & cnt_all], minlength=nslots),
        "n_comm": np.bincount(k_all[is_comm & cnt_all], minlength=nslots),
    }
    cut = cut_steps(trace) if nslots > 1 else []
    rows["cut"] = [None] + [s in cut for s in slot_step[1:]]
    per_rank = frame(rows, OVERLAP_SCHEMA).filter(pl.Series(present))
    note = cut_note(cut, nslots - 1)
    if note:
        notes.append(note)
    return per_rank


def _group_rows(
    rank: int,
    slot_step: list[int | None],
    nslots: int,
    big: int,
    s_all: np.ndarray,
    e_all: np.ndarray,
    k_all: np.ndarray,
    is_comm: np.ndarray,
    is_comp: np.ndarray,
    counted: np.ndarray,
    pg_all: np.ndarray,
    group_dims: Mapping[str, str | None] | None,
    trace: Trace,
    by_dim: bool,
) -> pl.DataFrame:
    dims = dict(group_dims or {})
    comm_idx = np.flatnonzero(is_comm)
    pgs = pg_all[comm_idx]
    has = np.array([p is not None for p in pgs], dtype=bool)
    comm_idx, pgs = comm_idx[has], pgs[has]
    if comm_idx.size == 0:
        return frame({}, OVERLAP_GROUP_SCHEMA)
    labels = np.array([dims.get(p) for p in pgs], dtype=object) if by_dim else pgs
    keep = np.array([lab is not None for lab in labels], dtype=bool)
    comm_idx, labels, pgs = comm_idx[keep], labels[keep], pgs[keep]
    if comm_idx.size == 0:
        return frame({}, OVERLAP_GROUP_SCHEMA)
    names, g = np.unique(labels.astype(str), return_inverse=True)
    ng = names.size
    # slot (k, g) -> k * ng + g; compute replicated into every group slot
    comp_idx = np.flatnonzero(is_comp)
    a = (s_all[comm_idx], e_all[comm_idx], k_all[comm_idx] * ng + g)
    rep = np.repeat(comp_idx, ng)
    gg = np.tile(np.arange(ng), comp_idx.size)
    b = (s_all[rep], e_all[rep], k_all[rep] * ng + gg)
    comm_len, _, ov = _slot_measures(a, b, nslots * ng, big)
    n_comm = np.bincount(a[2][counted[comm_idx]], minlength=nslots * ng)
    present = np.bincount(a[2], minlength=nslots * ng) > 0
    slots = np.flatnonzero(present)
    k, gi = slots // ng, slots % ng
    rows: dict[str, list] = {
        "rank": [rank] * slots.size,
        "step": [slot_step[int(x)] for x in k],
        "comm_ns": comm_len[slots],
        "overlap_ns": ov[slots],
        "exposed_comm_ns": comm_len[slots] - ov[slots],
        "overlap_pct": [
            100.0 * o / c if c else None
            for o, c in zip(ov[slots].tolist(), comm_len[slots].tolist(), strict=False)
        ],
        "n_comm": n_comm[slots],
    }
    if by_dim:
        rows["dim"] = [str(names[i]) for i in gi]
        rows["pg_name"] = [None] * slots.size
        rows["pg_desc"] = [None] * slots.size
    else:
        pg_names = [str(names[i]) for i in gi]
        rows["pg_name"] = pg_names
        rows["pg_desc"] = [(trace.meta.group(p).desc if trace.meta.group(p) else None) for p in pg_names]
        rows["dim"] = [dims.get(p) for p in pg_names]
    return frame(rows, OVERLAP_GROUP_SCHEMA)
