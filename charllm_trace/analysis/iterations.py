"""Iterations, their phases and request latency (issue 24; docs/analyses.md, "Iterations without an
optimizer"). Pure functions of one rank's trace; results in ``analysis.iterations_results``.

- **iterations**: the trace's steps (``ProfilerStep`` ranges, or ``--step-marker`` ranges:
  analysis/marker_steps.py) with their CPU range and their GPU-time window (step_windows);
- **phases**: CPU ranges named after a phase (``PHASES``: prefill, decode, forward, backward,
  tokenize, detokenize; outermost per phase), each in the iteration holding its start: their count
  and CPU time, and the GPU activity launched from inside them (by launch time, as steps are);
- **requests**: ``request#ID`` (its start: arrival) and ``token#ID`` (its end: a token reached the
  host) ranges give time to first token (first token - arrival) and time per output token
  ((last token - first token) / (tokens - 1)).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.analysis.iterations_results import (
    ITERATION_SCHEMA,
    PHASE_SCHEMA,
    PHASES,
    REQUEST_MARKER,
    REQUEST_SCHEMA,
    TOKEN_MARKER,
    IterationsResult,
)
from charllm_trace.analysis.marker_steps import named_ranges
from charllm_trace.analysis.step_windows import GPU_ACTIVITY, StepWindows, launch_step_index, launch_times_of
from charllm_trace.core.model import Trace

_PHASE_RE = rf"(?i)^({'|'.join(PHASES)})(?:$|[#_:.\s(])"


def rank_iterations(
    rank: int, trace: Trace, classified: pl.DataFrame, windows: StepWindows | None, marked: bool = False
) -> IterationsResult | None:
    """One rank's iterations, phases and requests; None when the trace marks no phase and no request
    and its steps are not from a marker (``marked``: ``--step-marker``)."""
    steps = trace.steps()
    phases = phase_ranges(trace.nodes)
    req = _requests(trace.nodes)
    if not marked and phases.height == 0 and req.height == 0:
        return None
    it = steps.select("step", "start_ns", cpu_ns=pl.col("end_ns") - pl.col("start_ns"))
    if windows is not None and windows.n:
        w = windows.frame().select(
            "step", window_start_ns="start_ns", window_ns=pl.col("end_ns") - pl.col("start_ns")
        )
        it = it.join(w, on="step", how="left")
    rk = pl.lit(rank, pl.Int64)
    notes = []
    if req.height and req["arrival_ns"].is_null().any():
        notes.append(
            f"{int(req['arrival_ns'].is_null().sum())} requests have tokens but no request#ID range: no TTFT"
        )
    return IterationsResult(
        iterations=_cast(it.with_columns(rank=rk), ITERATION_SCHEMA),
        phases=_cast(_phase_rows(phases, steps, classified).with_columns(rank=rk), PHASE_SCHEMA),
        requests=_cast(req.with_columns(rank=rk), REQUEST_SCHEMA),
        notes=notes,
    )


def _cast(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return df.select(
        [(pl.col(c) if c in df.columns else pl.lit(None)).cast(t).alias(c) for c, t in schema.items()]
    )


def phase_ranges(nodes: pl.DataFrame) -> pl.DataFrame:
    """Outermost ranges of each phase (marker_steps.outermost, per phase): phase, start_ns, end_ns."""
    r = named_ranges(nodes, pl.col("name").str.contains(_PHASE_RE))
    reach = pl.col("end_ns").cum_max().shift(1).over("phase")  # the end of the earlier ranges
    return (
        r.with_columns(phase=pl.col("name").str.extract(_PHASE_RE, 1).str.to_lowercase())
        .sort("phase", "start_ns", "end_ns")
        .filter(reach.is_null() | (pl.col("start_ns") >= reach))
        .select("phase", "start_ns", "end_ns")
    )


def _phase_rows(phases: pl.DataFrame, steps: pl.DataFrame, classified: pl.DataFrame) -> pl.DataFrame:
    """Per (step, phase) and per phase over the trace (step null): n, cpu_ns, n_gpu_ops, gpu_ns."""
    if phases.height == 0:
        return pl.DataFrame(schema={k: v for k, v in PHASE_SCHEMA.items() if k != "rank"})
    s, e = phases["start_ns"].to_numpy(), phases["end_ns"].to_numpy()
    k = launch_step_index(steps, s)
    step = np.where(k >= 0, steps["step"].to_numpy()[np.maximum(k, 0)] if steps.height else 0, -1)
    n_ops, gpu = _gpu_per_range(phases, classified)
    per = phases.with_columns(
        step=pl.Series(step, dtype=pl.Int64),
        cpu_ns=pl.Series(e - s),
        n_gpu_ops=pl.Series(n_ops),
        gpu_ns=pl.Series(gpu),
    )
    agg = dict(
        n=pl.len(),
        cpu_ns=pl.col("cpu_ns").sum(),
        n_gpu_ops=pl.col("n_gpu_ops").sum(),
        gpu_ns=pl.col("gpu_ns").sum(),
    )
    by_step = per.filter(pl.col("step") >= 0).group_by("step", "phase").agg(**agg)
    whole = per.group_by("phase").agg(**agg).with_columns(step=pl.lit(None, pl.Int64))
    out = pl.concat([by_step, whole.select(by_step.columns)])
    order = {p: i for i, p in enumerate(PHASES)}
    return out.sort(
        pl.col("step").is_null(), "step", pl.col("phase").replace_strict(order, return_dtype=pl.Int64)
    )


def _gpu_per_range(phases: pl.DataFrame, classified: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """GPU operators (and their summed durations) launched from inside each phase range (ranges
    of one phase are disjoint: one searchsorted per phase)."""
    act = classified.filter(
        pl.col("on_gpu").fill_null(False)
        & pl.col("cls").is_in(list(GPU_ACTIVITY))
        & pl.col("dur_ns").is_not_null()
    ).with_columns(correlation=pl.when(pl.col("correlation") != 0).then(pl.col("correlation")))
    n_ops = np.zeros(phases.height, dtype=np.int64)
    gpu = np.zeros(phases.height, dtype=np.int64)
    if act.height == 0:
        return n_ops, gpu
    lt = launch_times_of(classified, act)
    ok = lt.is_not_null().to_numpy()
    t, d = lt.fill_null(0).to_numpy().astype(np.int64)[ok], act["dur_ns"].to_numpy().astype(np.int64)[ok]
    ph = phases["phase"].to_numpy()
    for name in np.unique(ph):
        rows = np.flatnonzero(ph == name)
        s, e = phases["start_ns"].to_numpy()[rows], phases["end_ns"].to_numpy()[rows]
        i = np.searchsorted(s, t, side="right") - 1
        hit = (i >= 0) & (t < e[np.maximum(i, 0)])
        n_ops[rows] = np.bincount(i[hit], minlength=rows.size)
        gpu[rows] = np.bincount(i[hit], weights=d[hit], minlength=rows.size).astype(np.int64)
    return n_ops, gpu


def _requests(nodes: pl.DataFrame) -> pl.DataFrame:
    """request, arrival_ns, first_token_ns, last_token_ns, n_tokens, ttft_ns, tpot_ns."""
    r = named_ranges(
        nodes, pl.col("name").str.starts_with(REQUEST_MARKER) | pl.col("name").str.starts_with(TOKEN_MARKER)
    )
    if r.height == 0:
        return pl.DataFrame(schema={k: v for k, v in REQUEST_SCHEMA.items() if k != "rank"})
    r = r.with_columns(request=pl.col("name").str.splitn("#", 2).struct.field("field_1"))
    arr = (
        r.filter(pl.col("name").str.starts_with(REQUEST_MARKER))
        .group_by("request")
        .agg(arrival_ns=pl.col("start_ns").min())
    )
    tok = (
        r.filter(pl.col("name").str.starts_with(TOKEN_MARKER))
        .group_by("request")
        .agg(first_token_ns=pl.col("end_ns").min(), last_token_ns=pl.col("end_ns").max(), n_tokens=pl.len())
    )
    return (
        arr.join(tok, on="request", how="full", coalesce=True)
        .with_columns(
            n_tokens=pl.col("n_tokens").fill_null(0),
            ttft_ns=pl.col("first_token_ns") - pl.col("arrival_ns"),
            tpot_ns=pl.when(pl.col("n_tokens") > 1).then(
                (pl.col("last_token_ns") - pl.col("first_token_ns")) / (pl.col("n_tokens") - 1)
            ),
        )
        .sort("arrival_ns", "request", nulls_last=True)
    )


def iterations_from(parts: list[tuple[int, IterationsResult]], notes: list[str]) -> IterationsResult | None:
    """The run's result from every rank's (in rank order) and the merged notes; None when no rank has one."""
    if not parts:
        return None
    return IterationsResult(
        iterations=pl.concat([p.iterations for _, p in parts]),
        phases=pl.concat([p.phases for _, p in parts]),
        requests=pl.concat([p.requests for _, p in parts]),
        notes=notes,
    )
