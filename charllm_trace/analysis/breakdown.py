"""Time breakdown: where the GPU time goes, by kernel category, kernel name, launching CPU op and
top-level op, per rank and step (docs/analyses.md, "Time breakdown").

- The operators are the GPU kernels, memcpys and memsets with a duration (classes ``compute``,
  ``comm``, ``memcpy``, ``memset`` of :mod:`charllm_trace.core.classify`).
- GPU time of a scope = the sum of its operators' durations (operators on concurrent streams both
  count, as in HTA's kernel breakdown; the union is the overlap analysis' ``busy_ns``).
- Per key: count, total, mean and maximum duration, and ``pct`` = 100 · total / GPU time.
- Category: :mod:`charllm_trace.core.kernel_category`. Launching op and top-level op:
  :func:`charllm_trace.core.classify.launching_ops`; null when the launcher is not in the trace.
- A step holds the operators whose GPU start falls in its GPU-time step window
  (:mod:`~charllm_trace.analysis.step_windows`, as the overlap and energy analyses assign them;
  an orphan without a launching call goes to the window holding it); under ``hta_compat``, HTA's
  rule: the operators launched during its ``ProfilerStep#N`` (the launching call's start; an
  operator without one: its own start).
- With several ranks, rows with a null rank add up every rank.
- ``top_n``: per (rank, step, group), the N keys with the most time are kept and the rest summed
  in one ``(K others)`` row (``(1 other)``), so that every group still adds up to the GPU time (categories: all).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from charllm_trace.analysis.context import RankContext, context_of
from charllm_trace.analysis.overlap import hta_filter, launch_times_of
from charllm_trace.analysis.results_breakdown import (
    BREAKDOWN_GROUPS,
    BREAKDOWN_SCHEMA,
    BREAKDOWN_TOTAL_SCHEMA,
    NO_GPU_OPS,
    BreakdownResult,
)
from charllm_trace.analysis.step_windows import launch_step_index
from charllm_trace.core.classify import launching_ops
from charllm_trace.core.intervals import round_inward_us
from charllm_trace.core.kernel_category import categorize
from charllm_trace.core.model import Trace, rank_ranges

#: the node classes whose operators the breakdown counts
OPERATOR_CLASSES = ("compute", "comm", "memcpy", "memset")
_KEY_COLUMN = {"category": "category", "kernel": "name", "op": "op", "top_op": "top_op"}


def _operators(ctx: RankContext, per_step: bool, hta: tuple[bool, bool]) -> tuple[pl.DataFrame, list[str]]:
    """One row per GPU operator: step (null outside steps or without per_step), category, name,
    op, top_op, dur_ns. ``hta``: (hta_compat, hta_keep_last_step)."""
    notes: list[str] = []
    trace, df = ctx.trace, ctx.classified
    steps = trace.steps()
    is_op = pl.col("on_gpu").fill_null(False) & pl.col("cls").is_in(list(OPERATOR_CLASSES))
    if hta[0] and steps.height >= 2:
        before = df.select(is_op.sum()).item()
        df = hta_filter(df, steps, hta[1])
        which = "ended" if hta[1] else "began"
        notes.append(
            f"HTA convention: {before - df.select(is_op.sum()).item()} GPU operators launched after the last ProfilerStep {which} "
            "(or never launched) dropped; timed durations rounded inward to whole µs"
        )
    elif hta[0]:
        notes.append(
            "HTA convention: timed durations rounded inward to whole µs (fewer than two ProfilerSteps: no kernel dropped)"
        )
    mask = (
        df["on_gpu"].fill_null(False) & df["cls"].is_in(list(OPERATOR_CLASSES)) & df["dur_ns"].is_not_null()
    )
    rows = mask.arg_true()
    cat = categorize(df.select("cls", "name").gather(rows))  # never null for these classes
    r = rows.to_numpy()
    op_pos, top_pos = launching_ops(df, trace.deps, r)
    names = df["name"]

    def name_at(pos: np.ndarray) -> pl.Series:
        got = names.gather(np.maximum(pos, 0))
        return pl.select(pl.when(pl.Series(pos >= 0)).then(got)).to_series()

    ops = pl.DataFrame(
        {
            "category": cat,
            "name": names.gather(rows),
            "op": name_at(op_pos),
            "top_op": name_at(top_pos),
            "dur_ns": df["dur_ns"].gather(rows).cast(pl.Int64),
        }
    )
    if hta[0]:  # operators without a start (no timestamps) keep their duration
        start = df["start_ns"].gather(rows)
        timed = start.is_not_null().to_numpy()
        t0 = start.fill_null(0).to_numpy()
        s0, s1 = round_inward_us(t0, t0 + ops["dur_ns"].to_numpy())
        dur = np.where(timed, s1 - s0, ops["dur_ns"].to_numpy())
        ops = ops.with_columns(pl.Series("dur_ns", dur, dtype=pl.Int64))
    step = pl.repeat(None, ops.height, dtype=pl.Int64, eager=True).alias("step")
    if per_step and steps.height and ops.height:
        gpu_rows = df.select("correlation", "launch_id", "start_ns").gather(rows)
        if hta[0]:  # HTA: the ProfilerStep of the launch
            lt = launch_times_of(df, gpu_rows).fill_null(gpu_rows["start_ns"])
            idx = launch_step_index(steps, lt.fill_null(np.iinfo(np.int64).min).to_numpy())
            sv = steps["step"].to_numpy()
        else:  # the GPU-time window holding the operator's start (none without a start)
            win = ctx.windows
            notes.extend(win.notes)
            t = gpu_rows["start_ns"]
            idx = np.where(t.is_null().to_numpy(), -1, win.index_of(t.fill_null(0).to_numpy()))
            sv = win.step
        ok = idx >= 0
        step = (
            pl.select(
                pl.when(pl.Series(ok)).then(
                    pl.Series(sv[np.maximum(idx, 0)] if sv.size else idx, dtype=pl.Int64)
                )
            )
            .to_series()
            .alias("step")
        )
    elif per_step and not trace.meta.has_timestamps:
        notes.append("no timestamps: no breakdown per step")
    missing = int(ops.filter(pl.col("op").is_null())["dur_ns"].sum()) if ops.height else 0
    if missing:
        n = int(ops["op"].null_count())
        total = int(ops["dur_ns"].sum())
        notes.append(
            f"{n} GPU operators ({missing / 1e6:.3f} ms, {100.0 * missing / total:.1f} % of GPU time) have no "
            "launching CPU op in the trace: their op and top-level op are unknown (null)"
        )
    return ops.with_columns(step), notes


_COLS = ["category", "name", "op", "top_op"]


def _fine(ops: pl.DataFrame) -> pl.DataFrame:
    """The operators summed once per distinct (rank, step, category, kernel, op, top-level op): a
    few hundred rows per rank (what a rank sends for the run's breakdown). The names are
    categoricals (polars' categories are process-wide, sorted as strings; :func:`breakdown_from`
    gives strings back): the same kernel names repeat on every rank, so 1,024 ranks' rows hold
    each name once (docs/scale.md)."""
    ops = ops.with_columns(pl.col(_COLS).cast(pl.Categorical))
    return ops.group_by(["rank", "step", *_COLS]).agg(
        pl.len().cast(pl.Int64).alias("count"),
        pl.col("dur_ns").sum().alias("total_ns"),
        pl.col("dur_ns").max().alias("max_ns"),
    )


def sum_ranks(fines: list[pl.DataFrame]) -> pl.DataFrame:
    """Several ranks' :func:`_fine` rows (or earlier sums of them) as one part without a rank
    (``rank`` null), summed per (step, category, kernel, op, top-level op): the all-ranks rows
    of :func:`breakdown_from` are sums of these, so a part of them summed batch by batch gives
    the same rows (the Dask engine's driver: ``analysis/rank_rows.py``)."""
    no_rank = pl.lit(None, dtype=pl.Int64).alias("rank")
    both = pl.concat([f.with_columns(no_rank) for f in fines], how="vertical")
    return both.group_by(["rank", "step", *_COLS], maintain_order=True).agg(
        pl.col("count").sum(), pl.col("total_ns").sum(), pl.col("max_ns").max()
    )


def _aggregate(fine: pl.DataFrame, all_ranks: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Unfolded rows of every group and the totals, per (rank, step), from the :func:`_fine` rows
    of every rank: the scopes and groups are sums of those."""
    cols = _COLS
    sums = [pl.col("count").sum(), pl.col("total_ns").sum(), pl.col("max_ns").max()]
    whole = fine.group_by(["rank", *cols]).agg(*sums).with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    scoped = pl.concat([whole, fine.filter(pl.col("step").is_not_null())], how="diagonal")
    if all_ranks:
        every = (
            scoped.group_by(["step", *cols])
            .agg(*sums)
            .with_columns(pl.lit(None, dtype=pl.Int64).alias("rank"))
        )
        scoped = pl.concat([scoped, every], how="diagonal")
    keys = ["rank", "step"]
    totals = scoped.group_by(keys).agg(
        pl.col("count").sum(),
        pl.col("total_ns").sum().alias("gpu_time_ns"),
        pl.col("total_ns").filter(pl.col("op").is_null()).sum().alias("no_launcher_ns"),
    )
    parts = []
    for group in BREAKDOWN_GROUPS:
        col = _KEY_COLUMN[group]
        agg = scoped.group_by([*keys, pl.col(col).alias("key")]).agg(*sums)
        if group == "category":
            agg = agg.with_columns(pl.col("key").alias("category"))
        elif group == "kernel":
            # a name can fall in two categories (a Memcpy DtoD that is a one-rank collective's
            # copy, another that is a plain copy): the category of most of its time, ties by name
            dominant = (
                scoped.group_by([*keys, pl.col(col).alias("key"), "category"])
                .agg(pl.col("total_ns").sum().alias("_t"))
                .sort(["_t", "category"], descending=[True, False], nulls_last=True)
                .group_by([*keys, "key"], maintain_order=True)
                .agg(pl.col("category").first())
            )
            agg = agg.join(dominant, on=[*keys, "key"], how="left", nulls_equal=True)
        else:
            agg = agg.with_columns(pl.lit(None, pl.String).alias("category"))
        parts.append(agg.with_columns(pl.lit(group).alias("group")))
    return pl.concat(parts, how="vertical_relaxed"), totals


def _fold(by: pl.DataFrame, top_n: int | None) -> pl.DataFrame:
    """Keep the ``top_n`` largest keys per (rank, step, group) other than categories; sum the rest."""
    by = by.sort(["total_ns", "key"], descending=[True, False], nulls_last=True)
    if top_n is None:
        return by.with_columns(pl.lit(None, dtype=pl.Int64).alias("other_rows"))
    within = pl.int_range(pl.len()).over("rank", "step", "group")
    by = by.with_columns(within.alias("_i"))
    keep = (pl.col("_i") < top_n) | (pl.col("group") == "category")
    kept = by.filter(keep).with_columns(pl.lit(None, dtype=pl.Int64).alias("other_rows"))
    rest = (
        by.filter(~keep)
        .group_by("rank", "step", "group")
        .agg(
            pl.len().cast(pl.Int64).alias("other_rows"),
            pl.col("count").sum(),
            pl.col("total_ns").sum(),
            pl.col("max_ns").max(),
        )
        .with_columns(
            pl.format(
                "({} {})",
                pl.col("other_rows"),
                pl.when(pl.col("other_rows") == 1).then(pl.lit("other")).otherwise(pl.lit("others")),
            ).alias("key"),
            pl.lit(None, pl.String).alias("category"),
        )
    )
    return pl.concat([kept.drop("_i"), rest], how="diagonal_relaxed")


def run_breakdown(
    traces: Mapping[int, Trace | RankContext],
    *,
    per_step: bool = True,
    top_n: int | None = None,
    hta_compat: bool = False,
    hta_keep_last_step: bool = False,
) -> BreakdownResult | None:
    """The time breakdown of every rank of ``traces`` ({rank: a Trace, or its
    :class:`RankContext` when the caller has one}); None when no rank has a GPU operator with a
    duration (the reason: ``results_breakdown.NO_GPU_OPS``). ``hta_compat``: Holistic Trace
    Analysis' conventions, as the overlap analysis applies them (GPU operators launched after the
    last ProfilerStep begins dropped, or after it ends with ``hta_keep_last_step``; durations
    rounded inward to whole µs): the per-kernel sums of HTA's ``get_gpu_kernel_breakdown``."""
    if top_n is not None and top_n < 1:
        raise ValueError(f"top_n must be at least 1 (got {top_n})")
    parts = [
        rank_breakdown(r, tr, per_step=per_step, hta_compat=hta_compat, hta_keep_last_step=hta_keep_last_step)
        for r, tr in traces.items()
    ]
    return breakdown_from(parts, top_n=top_n)


#: One rank's part of the breakdown: (rank, its summed operators or None, its notes, simulated)
RankBreakdown = tuple[int, pl.DataFrame | None, list[str], bool]


def rank_breakdown(
    rank: int,
    source: Trace | RankContext,
    *,
    per_step: bool = True,
    hta_compat: bool = False,
    hta_keep_last_step: bool = False,
) -> RankBreakdown:
    """One rank's part of :func:`run_breakdown` (small: a few hundred rows; what a worker sends):
    ``source`` is its trace, or its :class:`RankContext`."""
    ctx = context_of(source)
    trace = ctx.trace
    ops, notes = _operators(ctx, per_step, (hta_compat, hta_keep_last_step))
    fine = _fine(ops.with_columns(pl.lit(rank, dtype=pl.Int64).alias("rank"))) if ops.height else None
    return rank, fine, notes, bool(trace.meta.extra.get("simulated"))


def breakdown_from(parts: list[RankBreakdown], *, top_n: int | None = None) -> BreakdownResult | None:
    """:func:`run_breakdown` from every rank's :func:`rank_breakdown` (in rank order): the rows of
    all ranks, folded to the top ``top_n``, and the notes merged across ranks."""
    if top_n is not None and top_n < 1:
        raise ValueError(f"top_n must be at least 1 (got {top_n})")
    frames = [f for _, f, _, _ in parts if f is not None]
    simulated = any(s for _, _, _, s in parts)
    notes_of: dict[str, list[int]] = {}
    for r, _, ns, _ in parts:
        for n in ns:
            notes_of.setdefault(n, []).append(r)
    if not frames:
        return None
    by, totals = _aggregate(pl.concat(frames, how="vertical"), len(frames) > 1)
    by = _fold(by, top_n).join(
        totals.select("rank", "step", "gpu_time_ns"), on=["rank", "step"], how="left", nulls_equal=True
    )
    by = by.with_columns(
        (pl.col("total_ns") / pl.col("count")).alias("mean_ns"),
        pl.when(pl.col("gpu_time_ns") > 0)
        .then(100.0 * pl.col("total_ns") / pl.col("gpu_time_ns"))
        .alias("pct"),
        pl.col("group").replace_strict({g: i for i, g in enumerate(BREAKDOWN_GROUPS)}).alias("_g"),
        pl.col("other_rows").is_not_null().alias("_rest"),
    ).sort(
        ["rank", "step", "_g", "_rest", "total_ns", "key"],
        descending=[False, False, False, False, True, False],
        nulls_last=[True, False, False, False, False, True],
    )
    multi = len(parts) > 1
    notes = [
        n if not multi else f"rank{'s' if len(rs) > 1 else ''} {rank_ranges(rs)}: {n}"
        for n, rs in notes_of.items()
    ]
    return BreakdownResult(
        by=by.select(list(BREAKDOWN_SCHEMA)).cast(BREAKDOWN_SCHEMA),
        totals=totals.sort(["rank", "step"], nulls_last=[True, False])
        .select(list(BREAKDOWN_TOTAL_SCHEMA))
        .cast(BREAKDOWN_TOTAL_SCHEMA),
        top_n=top_n,
        simulated=simulated,
        notes=notes,
    )


def time_breakdown(
    source: Trace | RankContext, *, per_step: bool = True, top_n: int | None = None
) -> BreakdownResult:
    """The time breakdown of one rank (a trace, or its :class:`RankContext`); an empty result
    with a note when it has no GPU operator."""
    ctx = context_of(source)
    rank = ctx.trace.meta.rank if ctx.trace.meta.rank is not None else 0
    res = run_breakdown({rank: ctx}, per_step=per_step, top_n=top_n)
    if res is None:
        return BreakdownResult(
            pl.DataFrame(schema=BREAKDOWN_SCHEMA),
            pl.DataFrame(schema=BREAKDOWN_TOTAL_SCHEMA),
            top_n,
            notes=[NO_GPU_OPS],
        )
    return res
