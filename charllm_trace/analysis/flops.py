"""Achieved FLOP/s and MFU of GEMM, attention and convolution operators (estimates).

For one rank (docs/analyses.md, "FLOP/s and MFU"):

1. the CPU operators this analysis counts (``flops_formulas.FLOP_OP_RE``) get their FLOPs from
   their recorded input shapes, types and values: the host execution trace's ``inputs`` (and
   ``outputs``) where linked, else the Kineto ``Input Dims`` / ``Input type`` / ``Concrete Inputs``
   args kept in ``attrs`` (profiles recorded with ``record_shapes=True``). One formula call per
   distinct signature, not per event;
2. nested counted ops are counted once, at the **outermost** op whose FLOPs are known
   (``aten::linear`` rather than the ``aten::addmm`` inside it); ops of a nest with no known FLOPs
   at all are counted as *without shapes* (null FLOPs, a note says how many);
3. the time of an op is the summed duration of the GPU compute kernels it launched, itself or
   through the ops nested in it (the launching CPU call, by correlation or ``launch_id``, and its
   ancestors, as ``classify.launcher_positions`` links them); in CPU mode (no GPU kernels) the op's own duration;
4. **achieved TFLOP/s** = FLOPs / that time; **MFU** = (time the FLOPs would take at the device's
   dense peak for their data type, ``analysis.peaks``) / that time, so that ops of different data
   types add up; **wall MFU** = the same over the step's window (the whole trace: the span of GPU
   activity), the usual "model FLOPs utilisation". fp32 GEMMs and attention are compared with the
   fp32 peak (PyTorch's default: no TF32 for matmuls) unless one ran faster than it (then the
   tf32 peak: ``analysis.flops_peaks``), fp32 convolutions with the tf32 peak where the device
   has one (cuDNN's default); an MFU above 100 % always carries its ``mfu_why``;
5. per op class and for all classes, for the whole trace and (``per_step``) per step: the
   GPU-time step windows of :mod:`~charllm_trace.analysis.step_windows` (the windows every
   per-step figure uses), an op belonging to the window holding the GPU start of its first
   kernel (an op that launched none: to no step, whole trace only); in CPU mode the windows are
   the ``ProfilerStep`` ranges and an op belongs to the one holding its start. A step's wall time
   is its window.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import orjson
import polars as pl

from charllm_trace.analysis.context import RankContext, context_of
from charllm_trace.analysis.flops_formulas import FLOP_OP_RE, OP_CLASSES, op_flops
from charllm_trace.analysis.flops_peaks import OVER_PEAK, op_peaks, peak_notes
from charllm_trace.analysis.flops_results import (
    FLOPS_DEVICE_SCHEMA,
    FLOPS_OP_SCHEMA,
    FLOPS_SCHEMA,
    NO_FLOP_OPS,
    FlopsResult,
)
from charllm_trace.analysis.peaks import device_peaks
from charllm_trace.analysis.registry import Merge, merge_notes
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.core.classify import is_gpu_trace, positions
from charllm_trace.core.model import STEP_SCHEMA, Trace, empty_frame

_KINETO_IO = ("Input Dims", "Input type", "Concrete Inputs")


def _propagate(ppos: np.ndarray, label: np.ndarray) -> np.ndarray:
    """For each row, the label of its **outermost** ancestor-or-self that has one (-1: none). Pointer
    doubling over the parent positions: log2(depth) vector steps, each over the rows whose jump has
    not yet passed the root; cycles end after 64 steps."""
    lab, p = label.copy(), ppos.copy()
    idx = np.flatnonzero(p >= 0)
    for _ in range(64):
        if not idx.size:
            break
        pp = p[idx]
        up = lab[pp]
        hit = up >= 0
        lab[idx[hit]] = up[hit]
        nxt = p[pp]
        p[idx] = nxt
        idx = idx[nxt >= 0]
    return lab


def kernel_launchers(df: pl.DataFrame, kern: np.ndarray) -> np.ndarray:
    """``classify.launcher_positions`` of the rows ``kern`` only: the ``launch_id`` node, else the first
    CPU node with the kernel's correlation id (-1: none). Looks up only those correlations."""
    k = df.filter(pl.Series(kern)).select("correlation", "launch_id")
    lp = positions(df["id"].to_numpy(), k["launch_id"].to_numpy())
    corr = (
        df.lazy()
        .select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_c"), "correlation", "on_gpu")
        .filter(
            ~pl.col("on_gpu").fill_null(False)
            & pl.col("correlation").is_in(k["correlation"].drop_nulls().implode())
        )
        .group_by("correlation")
        .agg(pl.col("_c").min())
    )
    cp = (
        k.lazy()
        .select("correlation")
        .join(corr, on="correlation", how="left", maintain_order="left")
        .select(pl.col("_c").fill_null(-1))
        .collect()
        .to_series()
        .to_numpy()
    )
    return np.where(lp >= 0, lp, cp)


def _kineto_io(attrs: str | None) -> tuple[object, object, object]:
    if not attrs or '"Input Dims"' not in attrs:
        return None, None, None
    try:
        d = orjson.loads(attrs)
    except orjson.JSONDecodeError:
        return None, None, None
    return tuple(d.get(k) if isinstance(d, dict) else None for k in _KINETO_IO)  # type: ignore[return-value]


def _count(cand: pl.DataFrame) -> pl.DataFrame:
    """FLOPs, class, dtype and reason of each candidate row (one formula call per distinct signature)."""
    ins, outs = pl.col("inputs"), pl.col("outputs")
    gemm = pl.col("name").str.contains(r"mm$|matmul$|linear$|_addmm_activation$")
    sig = cand.select(
        "name",
        _s=ins.struct.field("shapes"),
        _t=ins.struct.field("types"),
        # values only where a formula reads them: host-ET values hold per-instance tensor ids
        _v=pl.when(gemm).then(None).otherwise(ins.struct.field("values")),
        _o=pl.when(gemm).then(None).otherwise(outs.struct.field("shapes")),
        _a=pl.when(ins.struct.field("shapes").is_null()).then(pl.col("attrs")),
    )
    keys = ["name", "_s", "_t", "_v", "_o", "_a"]
    uniq = sig.unique(maintain_order=True)
    out = []
    for name, s, t, v, o, a in uniq.iter_rows():
        if s is None:
            s, t, v = _kineto_io(a)
        out.append(op_flops(name, s, t, v, o))
    counted = uniq.with_columns(
        op_class=pl.Series([c.op_class for c in out], dtype=pl.String),
        flop=pl.Series(
            [c.flops if c.flops is None or c.flops < 2**63 else None for c in out], dtype=pl.Int64
        ),
        dtype=pl.Series([c.dtype for c in out], dtype=pl.String),
        why=pl.Series([c.why for c in out], dtype=pl.String),
        causal=pl.Series([c.causal for c in out], dtype=pl.Boolean),
    )
    return sig.join(counted, on=keys, how="left", nulls_equal=True, maintain_order="left").select(
        "op_class", "flop", "dtype", "why", "causal"
    )


def flops(source: Trace | RankContext, *, per_step: bool = False) -> FlopsResult:
    """Achieved FLOP/s and MFU of one rank (module docstring): a trace, or its
    :class:`RankContext` (classified nodes and step windows computed once). Empty frames when the
    trace has no op this analysis counts."""
    ctx = context_of(source)
    trace = ctx.trace
    df = ctx.classified
    rank = trace.meta.rank
    model = trace.meta.device_model
    dp = device_peaks(model)
    devices = pl.DataFrame(
        {"rank": [rank], "device_model": [model], "peak_device": [dp.device if dp else None],
         "peak_source": [dp.source if dp else None]},
        schema=FLOPS_DEVICE_SCHEMA,
    )  # fmt: skip
    names = df["name"].fill_null("")
    u = names.unique()
    hit = u.filter(u.str.contains(FLOP_OP_RE))
    mask = (names.is_in(hit.implode()) & ~df["on_gpu"].fill_null(False)).to_numpy() if hit.len() else None
    if mask is None or not mask.any():
        return FlopsResult(pl.DataFrame(schema=FLOPS_SCHEMA), pl.DataFrame(schema=FLOPS_OP_SCHEMA), devices)
    pos = np.flatnonzero(mask)
    cand = df[pos].select("name", "inputs", "outputs", "attrs", "start_ns", "dur_ns")
    cnt = _count(cand)
    n = df.height
    ppos = positions(df["id"].to_numpy(), df["parent"].to_numpy())
    known_c = cnt["flop"].is_not_null().to_numpy()
    label = np.full(n, -1, np.int64)
    label[pos[known_c]] = pos[known_c]
    outer_known = _propagate(ppos, label)  # the outermost op with known FLOPs: the counted one
    label[pos] = pos
    outer_rec = _propagate(ppos, label)  # the outermost op of the classes counted
    counted = known_c & (outer_known[pos] == pos)
    covered = np.zeros(n, bool)
    covered[outer_rec[pos[known_c]]] = True
    missing = ~known_c & (outer_rec[pos] == pos) & ~covered[pos]

    gpu_mode = is_gpu_trace(df)
    if gpu_mode:
        k_ns, k_n, t_op = _kernel_times(df, pos, pos[counted], (outer_known, outer_rec))
    else:
        k_n = np.zeros(int(counted.sum()), np.int64)
        t_op = cand["start_ns"].fill_null(-1).to_numpy()  # when an op runs: CPU mode, its start
        k_ns = cand["dur_ns"].fill_null(0).to_numpy()[counted].astype(np.int64)

    steps = empty_frame(STEP_SCHEMA)
    sidx = np.full(len(pos), -1)
    if per_step and trace.steps().height:
        win = ctx.windows
        steps = win.frame()
        sidx = np.where(t_op >= 0, win.index_of(t_op), -1)
    step_no = steps["step"].to_numpy() if steps.height else np.zeros(1, np.int64)
    ops = cnt.filter(pl.Series(counted)).with_columns(
        name=cand["name"].filter(pl.Series(counted)),
        kernel_ns=pl.Series(k_ns, dtype=pl.Int64),
        n_kernels=pl.Series(k_n, dtype=pl.Int64) if gpu_mode else pl.lit(None, pl.Int64),
        step=pl.Series(
            np.where(sidx[counted] >= 0, step_no[np.maximum(sidx[counted], 0)], 0), dtype=pl.Int64
        ),
        _in_step=pl.Series(sidx[counted] >= 0),
        t_ns=pl.Series(t_op[counted], dtype=pl.Int64),
    )
    ops = op_peaks(ops, model, dp)  # the peak each op is compared with, and why
    ops = ops.with_columns(ideal_ns=pl.col("flop") / (pl.col("peak") * 1e3))
    miss = pl.DataFrame(
        {
            "op_class": cnt["op_class"].filter(pl.Series(missing)),
            "step": pl.Series(
                np.where(sidx[missing] >= 0, step_no[np.maximum(sidx[missing], 0)], 0), dtype=pl.Int64
            ),
            "_in_step": pl.Series(sidx[missing] >= 0),
        }
    )
    per = _per_class(ops, miss, _walls(df, steps, gpu_mode), rank, per_step and steps.height > 0)
    by_op = _by_op(ops, rank, gpu_mode)
    notes = _notes(cnt, counted, missing, ops, model, gpu_mode)
    if per_step and steps.height and not per["step"].is_not_null().any():
        notes.append("no GEMM/attention/convolution op in any step window: FLOP/s for the whole trace only")
    res = FlopsResult(per, by_op, devices, mode="gpu" if gpu_mode else "cpu", notes=notes)
    res.op_times = ops.select("t_ns", "flop")
    return res


def _kernel_times(
    df: pl.DataFrame, pos: np.ndarray, cpos: np.ndarray, outer: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU mode: (kernel time, kernel count) of each counted op (at node positions ``cpos``) from
    the compute kernels it launched, and when each op of ``pos`` ran: the GPU start of its first
    kernel (counted ops, and ops without FLOPs; -1: none)."""
    outer_known, outer_rec = outer
    n = df.height
    row_of = np.full(n, -1, np.int64)  # node position -> index among the counted ops
    row_of[cpos] = np.arange(len(cpos))
    kern = (df["on_gpu"].fill_null(False) & (df["cls"] == "compute")).to_numpy()
    lp = kernel_launchers(df, kern)
    op = np.where(lp >= 0, outer_known[np.maximum(lp, 0)], -1)
    own = np.where(op >= 0, row_of[np.maximum(op, 0)], -1)
    dur = df["dur_ns"].fill_null(0).to_numpy()[kern]
    ok = own >= 0
    k_ns = np.bincount(own[ok], weights=dur[ok], minlength=len(cpos)).astype(np.int64)
    k_n = np.bincount(own[ok], minlength=len(cpos)).astype(np.int64)
    ks = df["start_ns"].filter(pl.Series(kern)).fill_null(np.iinfo(np.int64).max).to_numpy()
    first = np.full(n, np.iinfo(np.int64).max, np.int64)
    for a in (op, np.where(lp >= 0, outer_rec[np.maximum(lp, 0)], -1)):
        np.minimum.at(first, a[a >= 0], ks[a >= 0].astype(np.int64))
    f = first[pos]
    return k_ns, k_n, np.where(f < np.iinfo(np.int64).max, f, -1)


def _per_class(
    ops: pl.DataFrame, miss: pl.DataFrame, wall: dict[int | None, int | None], rank: int | None, by_step: bool
) -> pl.DataFrame:
    """FLOP/s and MFU by op class for the whole trace and (``by_step``) each step window."""
    frames = [_aggregate(ops, miss, None, wall)]
    if by_step:
        frames.append(_aggregate(ops.filter("_in_step"), miss.filter("_in_step"), "step", wall))
    per = pl.concat(frames, how="diagonal_relaxed").with_columns(rank=pl.lit(rank, pl.Int64))
    order = {c: i for i, c in enumerate((*OP_CLASSES, "all"))}
    return (
        per.sort(
            pl.col("step").is_null(), "step", pl.col("op_class").replace_strict(order, return_dtype=pl.Int64)
        )
        .select(list(FLOPS_SCHEMA))
        .cast(FLOPS_SCHEMA)
    )


def _by_op(ops: pl.DataFrame, rank: int | None, gpu_mode: bool) -> pl.DataFrame:
    """FLOP/s and MFU by (op name, class, dtype)."""
    return (
        ops.group_by("name", "op_class", "dtype")
        .agg(
            count=pl.len(),
            flop=pl.col("flop").sum(),
            n_kernels=pl.col("n_kernels").sum(),
            kernel_ns=pl.col("kernel_ns").sum(),
            ideal_ns=pl.col("ideal_ns").sum(),
            peak=pl.col("peak").first(),
            no_peak=pl.col("peak").is_null().any(),
        )  # fmt: skip
        .with_columns(
            rank=pl.lit(rank, pl.Int64),
            n_kernels=pl.col("n_kernels") if gpu_mode else pl.lit(None, pl.Int64),
            tflops=_ratio(pl.col("flop"), pl.col("kernel_ns")) / 1e3,
            peak_tflops=pl.col("peak"),
            mfu_pct=pl.when(~pl.col("no_peak")).then(100.0 * _ratio(pl.col("ideal_ns"), pl.col("kernel_ns"))),
        )
        .sort("flop", "name", descending=[True, False])
        .select(list(FLOPS_OP_SCHEMA))
        .cast(FLOPS_OP_SCHEMA)
    )


def _ratio(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    return pl.when(b > 0).then(a / b)


def _walls(df: pl.DataFrame, steps: pl.DataFrame, gpu_mode: bool) -> dict[int | None, int | None]:
    """Wall time per step (its window) and for the whole trace (the span of GPU activity; of the
    CPU ops in CPU mode); None without timestamps."""
    out: dict[int | None, int | None] = {
        int(s): int(b - a) for s, a, b in steps.select("step", "start_ns", "end_ns").iter_rows()
    }
    act = (
        df.lazy().filter(
            pl.col("on_gpu").fill_null(False) & pl.col("cls").is_in(["compute", "comm", "memcpy", "memset"])
        )
        if gpu_mode
        else df.lazy().filter(~pl.col("on_gpu").fill_null(False))
    )
    span = (
        act.select((pl.col("start_ns") + pl.col("dur_ns")).max() - pl.col("start_ns").min()).collect().item()
    )
    out[None] = None if span is None else int(span)
    return out


def _op_sums() -> dict[str, pl.Expr]:
    """Counts and sums of a set of counted ops (by key or over all)."""
    return {
        "n_ops": pl.len(),
        "flop": pl.col("flop").sum(),
        "n_kernels": pl.col("n_kernels").sum(),
        "kernel_ns": pl.col("kernel_ns").sum(),
        "ideal_ns": pl.col("ideal_ns").sum(),
        "no_peak": pl.col("peak").is_null().any(),
    }


def _op_whys() -> dict[str, pl.Expr]:
    """Why a set of ops has no MFU (the reason of an op without a peak first), and whether none
    of them has a kernel count."""
    return {
        "mfu_why": pl.col("mfu_why").sort_by(pl.col("peak").is_not_null()).drop_nulls().first(),
        "nk_null": pl.col("n_kernels").is_null().all(),
    }


def _aggregate(
    ops: pl.DataFrame, miss: pl.DataFrame, by: str | None, wall: dict[int | None, int | None]
) -> pl.DataFrame:
    """Rows per op class and for all classes, for the whole trace (``by`` None) or per step."""
    keys = [by] if by else []
    parts = []
    for cls_key in (["op_class"], []):
        k = keys + cls_key
        # the same sums by key, or over all ops (the lists then imploded into one row)
        dtypes, peaks = pl.col("dtype").drop_nulls().unique(), pl.col("peak").drop_nulls().unique()
        a = (
            ops.group_by(k).agg(**_op_sums(), dtypes=dtypes, peaks=peaks, **_op_whys())
            if k
            else ops.select(**_op_sums(), dtypes=dtypes.implode(), peaks=peaks.implode(), **_op_whys())
        )
        m = miss.group_by(k).agg(n_no_shapes=pl.len()) if k else miss.select(n_no_shapes=pl.len())
        if not k:
            a = a.filter(pl.col("n_ops") > 0)
            m = m.filter(pl.col("n_no_shapes") > 0)
            j = pl.concat([a, m], how="horizontal") if a.height and m.height else (a if a.height else m)
        else:
            j = a.join(m, on=k, how="full", coalesce=True)
        if j.height == 0:
            continue
        if "op_class" not in j.columns:
            j = j.with_columns(op_class=pl.lit("all"))
        parts.append(j)
    if not parts:  # the rows' columns: FLOPS_SCHEMA less "rank" (added by the caller)
        return pl.DataFrame(schema={c: t for c, t in FLOPS_SCHEMA.items() if c != "rank"})
    cols = ["n_ops", "flop", "n_kernels", "kernel_ns", "ideal_ns", "no_peak", "dtypes", "peaks", "mfu_why",
            "nk_null", "n_no_shapes"]  # fmt: skip
    parts = [
        p.select([c for c in [by, "op_class"] if c] + [c for c in cols if c in p.columns]) for p in parts
    ]
    j = pl.concat(parts, how="diagonal_relaxed")
    step = pl.col(by) if by else pl.lit(None, pl.Int64)
    wall_of = pl.DataFrame(
        {"_k": [k for k in wall if k is not None] if by else [0], "wall_ns": [wall[k] for k in wall if k is not None] if by else [wall[None]]},
        schema={"_k": pl.Int64, "wall_ns": pl.Int64},
    )  # fmt: skip
    j = j.with_columns(_k=pl.col(by) if by else pl.lit(0, pl.Int64)).join(wall_of, on="_k", how="left")
    has = pl.col("n_ops").fill_null(0) > 0
    mfu_ok = has & ~pl.col("no_peak").fill_null(True)
    return j.select(
        step.alias("step"),
        "op_class",
        dtype=pl.when(pl.col("dtypes").list.len() == 1).then(pl.col("dtypes").list.first())
        .when(pl.col("dtypes").list.len() > 1).then(pl.lit("mixed")),
        n_ops=pl.col("n_ops").fill_null(0),
        n_no_shapes=pl.col("n_no_shapes").fill_null(0),
        flop=pl.when(has).then(pl.col("flop")),
        n_kernels=pl.when(has & ~pl.col("nk_null")).then(pl.col("n_kernels")),
        kernel_ns=pl.when(has).then(pl.col("kernel_ns")),
        tflops=pl.when(has).then(_ratio(pl.col("flop"), pl.col("kernel_ns")) / 1e3),
        peak_tflops=pl.when(has & (pl.col("peaks").list.len() == 1) & (pl.col("dtypes").list.len() == 1))
        .then(pl.col("peaks").list.first()),
        mfu_pct=pl.when(mfu_ok).then(100.0 * _ratio(pl.col("ideal_ns"), pl.col("kernel_ns"))),
        wall_ns="wall_ns",
        wall_tflops=pl.when(has).then(_ratio(pl.col("flop"), pl.col("wall_ns")) / 1e3),
        wall_mfu_pct=pl.when(mfu_ok).then(100.0 * _ratio(pl.col("ideal_ns"), pl.col("wall_ns"))),
        mfu_why=pl.when(~mfu_ok & has).then(pl.col("mfu_why"))
        .when(~has).then(pl.lit("no op with known FLOPs"))
        .when(pl.col("ideal_ns") > pl.col("kernel_ns"))  # MFU above 100 %: never a plain figure
        .then(pl.concat_str(pl.lit(OVER_PEAK), pl.lit("; ") + pl.col("mfu_why"), ignore_nulls=True))
        .otherwise(pl.col("mfu_why")),  # the peak's reason where it is not the dtype's (TF32)
    )  # fmt: skip


def _notes(
    cnt: pl.DataFrame,
    counted: np.ndarray,
    missing: np.ndarray,
    ops: pl.DataFrame,
    model: str | None,
    gpu: bool,
) -> list[str]:
    notes = [
        "FLOPs are estimates from the ops' recorded shapes (GEMM 2·M·N·K; attention 4·B·H·S_q·S_k·D forward, "
        "halved when causal, 2.5x backward; convolution 2·N·K·C·R·S·P·Q/groups, 2x backward): docs/analyses.md"
    ]
    n_miss = int(missing.sum())
    if n_miss:
        whys = cnt.filter(pl.Series(missing))["why"].value_counts(sort=True)
        top = ", ".join(f"{w} ({c})" for w, c in whys.head(3).iter_rows())
        notes.append(
            f"{n_miss} of {n_miss + int(counted.sum())} GEMM/attention/convolution ops have no FLOP count "
            f"(their FLOPs are null, not counted): {top}; record shapes (record_shapes=True) or link the host "
            "execution trace"
        )
    att = cnt.filter(pl.Series(counted) & (pl.col("op_class") == "attention"))
    if att.height and att["causal"].is_null().any():
        notes.append(
            f"{int(att['causal'].is_null().sum())} attention ops have no recorded causal flag: counted as not causal"
        )
    if gpu and ops.height and (ops["n_kernels"] == 0).any():
        notes.append(
            f"{int((ops['n_kernels'] == 0).sum())} counted ops launched no GPU compute kernel the trace "
            "links to them: their FLOPs have no time"
        )
    if not gpu:
        notes.append("CPU mode (no GPU kernels): an op's time is its own duration on the CPU")
    whys = ops.filter(pl.col("peak").is_null())["mfu_why"].drop_nulls().unique(maintain_order=True).to_list()
    if whys:
        notes.append("MFU not computed where: " + "; ".join(whys))
    tf32 = ops.filter(pl.col("peak").is_not_null())["mfu_why"].drop_nulls()
    if ops.height and (ops["dtype"] == "fp32").any() and tf32.len() == 0:
        notes.append(
            "fp32 GEMM/attention is compared with the fp32 peak (TF32 use is not recorded; PyTorch's default is "
            "no TF32 for matmuls), fp32 convolution with the tf32 peak where the device has one"
        )
    return notes + peak_notes(ops)


def run_flops(
    contexts: Mapping[int, RankContext], *, per_step: bool, simulated: bool, skipped: dict[str, str]
) -> tuple[FlopsResult | None, list[tuple[int, list[str]]]]:
    """``flops`` of every rank (its :class:`RankContext`), stacked, and each rank's notes (for
    ``analyze_run`` to merge); None with ``skipped["flops"]`` set when no rank has an op this
    analysis counts."""
    parts = [rank_flops(r, ctx, per_step=per_step) for r, ctx in contexts.items()]
    return flops_from(parts, simulated=simulated, skipped=skipped)


def rank_flops(rank: int, ctx: RankContext, *, per_step: bool) -> tuple[int, FlopsResult]:
    """One rank's part of :func:`run_flops`: its ``flops``, every row's rank set to ``rank``."""
    return rank, _ranked(flops(ctx, per_step=per_step), rank)


def flops_from(
    parts: list[tuple[int, FlopsResult]],
    *,
    simulated: bool,
    skipped: dict[str, str],
    frames: Callable[[str, set[int] | None], list[pl.DataFrame]] | None = None,
) -> tuple[FlopsResult | None, list[tuple[int, list[str]]]]:
    """:func:`run_flops` from every rank's :func:`rank_flops` (in rank order). ``frames(field,
    ranks)``: the parts' frames of ``field`` stacked in rank order (``Merge.frames``), where the
    parts' own are not to be read one by one."""
    have = [(r, f) for r, f in parts if f.per_step.height]
    if not have:
        skipped["flops"] = NO_FLOP_OPS
        return None, []
    if frames is None:
        stacked = [[f.per_step for _, f in have], [f.by_op for _, f in have], [f.devices for _, f in parts]]
    else:
        timed = {r for r, _ in have}
        stacked = [frames("per_step", timed), frames("by_op", timed), frames("devices", None)]
    modes = {f.mode for _, f in have}
    res = FlopsResult(
        per_step=pl.concat(stacked[0]),
        by_op=pl.concat(stacked[1]),
        devices=pl.concat(stacked[2]),
        mode=modes.pop() if len(modes) == 1 else "mixed",
        simulated=simulated,
    )
    notes = [(r, f.notes) for r, f in have]
    if simulated:
        notes.insert(0, (have[0][0], ["durations are recorded ones; steps are of the simulated timeline"]))
    return res, notes


def _ranked(res: FlopsResult, rank: int) -> FlopsResult:
    """``res`` with every row's rank set to the run's key for the trace (a lone profile without one is 0)."""
    r = pl.lit(rank, pl.Int64)
    res.per_step, res.by_op, res.devices = (
        df.with_columns(rank=r) for df in (res.per_step, res.by_op, res.devices)
    )
    return res


def rank_part(ctx: RankContext, options: AnalyzeOptions) -> tuple[int, FlopsResult]:
    """The registry's per-rank function of ``flops`` (``analysis/registry.py``)."""
    return rank_flops(ctx.rank, ctx, per_step=options.per_step)


def merge(m: Merge) -> FlopsResult | None:
    """The registry's merge of ``flops``: every rank's part stacked, its notes merged across ranks."""
    fl, notes = flops_from(
        [e for _, e in m.entries("flops") if e],
        simulated=m.simulated,
        skipped=m.skipped,
        frames=lambda field, ranks: m.frames("flops", (1, field), ranks),
    )
    if fl is not None:
        fl.notes = merge_notes(notes, m.multi)
    return fl
