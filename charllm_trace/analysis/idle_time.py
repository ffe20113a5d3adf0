"""GPU idle time per stream, broken down as Holistic Trace Analysis 0.5.0 does
(``BreakdownAnalysis._analyze_idle_time_for_stream``; docs/analyses.md, "Idle time per GPU stream").

On each stream, the GPU operators (``stream_ops``) in start order; the gap before operator k is
its start minus the end of the operators before it. A gap is

- **host wait** when k's launch call started after that end: the stream had run dry and waited
  for the CPU to launch the next operator;
- else **kernel wait** when it is shorter than ``kernel_wait_ns`` (HTA's
  ``consecutive_kernel_delay``: 30 in the trace's unit, µs): the overhead of back-to-back launches;
- else **other**: the operator was launched in time but started later, e.g. waiting on an event
  recorded by another stream or on a synchronisation.

The gap belongs to the step of operator k (``stream_ops``: the GPU-time step window holding its
start; under ``hta_compat`` its launch step, as HTA). Default: exact ns, every operator,
"the end before k" is the latest end of the operators before it on the stream, and a negative gap
(operators overlapping on one stream) is no idle time. ``hta_compat``: HTA's kernel filter and µs
rounding (``stream_ops``), and its own reading: the end of the previous operator in start order,
negative gaps counted as they are.
"""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.graph_launches import GRAPH_LAUNCH_RE
from charllm_trace.analysis.idle_results import IDLE_CATEGORIES, IDLE_TIME_SCHEMA, IdleTimeResult
from charllm_trace.analysis.results import frame
from charllm_trace.analysis.stream_ops import rank_stream_ops
from charllm_trace.core.model import Trace

#: HTA's default ``consecutive_kernel_delay`` (30, in µs: the unit of HTA's times).
KERNEL_WAIT_NS = 30_000

_KEYS = ["device", "stream"]


def classify_gaps(
    ops: pl.DataFrame, *, kernel_wait_ns: int = KERNEL_WAIT_NS, hta_compat: bool = False
) -> pl.DataFrame:
    """``ops`` (``STREAM_OPS_SCHEMA``, sorted) with ``gap_ns`` (the idle time before each op; null
    for a stream's first), ``category`` (``IDLE_CATEGORIES``; null for a stream's first) and
    ``from_ns`` (where the gap begins: the end before the op, or its start when there is no gap)."""
    end = pl.col("end_ns")
    prev_end = (end.shift(1) if hta_compat else end.cum_max().shift(1)).over(_KEYS)
    gap = pl.col("start_ns") - pl.col("_prev_end")
    host = (pl.col("call_start_ns") > pl.col("_prev_end")).fill_null(False)
    return (
        ops.with_columns(_prev_end=prev_end)
        .with_columns(
            gap_ns=gap if hta_compat else pl.max_horizontal(gap, pl.lit(0)),
            category=pl.when(pl.col("_prev_end").is_null())
            .then(None)
            .when(host)
            .then(pl.lit("host_wait"))
            .when(gap < kernel_wait_ns)
            .then(pl.lit("kernel_wait"))
            .otherwise(pl.lit("other")),
        )
        .with_columns(
            pl.when(pl.col("_prev_end").is_not_null()).then(pl.col("gap_ns")).alias("gap_ns"),
            from_ns=pl.min_horizontal(pl.col("_prev_end").fill_null(pl.col("start_ns")), pl.col("start_ns")),
        )
        .drop("_prev_end")
    )


def _graph_note(g: pl.DataFrame) -> list[str]:
    """The idle time between the operators of one graph launch (``cudaGraphLaunch`` ...): counted
    apart in a note (its gaps are kernel wait or other: the launch call came before them)."""
    graph = pl.col("call_name").str.contains(GRAPH_LAUNCH_RE).fill_null(False)
    n_ops = int(g.select(graph.sum()).item())
    if n_ops == 0:  # before the ranking over every stream op (0.05 s on 850 k events)
        return []
    later = pl.col("start_ns").rank("ordinal").over([*_KEYS, "call_start_ns", "call_name"]) > 1
    inner = g.filter(graph & later & (pl.col("gap_ns").fill_null(0) > 0))
    return [
        f"{n_ops} GPU operators were started by graph launches; {inner.height} idle gaps, "
        f"{int(inner['gap_ns'].sum()):,} ns, lie between the operators of one graph launch on a stream "
        "(kernel wait or other: the launch call came before them; per launch: the graph_launches frame)"
    ]


def _aggregate(g: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    cat, gap = pl.col("category"), pl.col("gap_ns")
    positive = gap.fill_null(0) > 0
    aggs = [
        pl.len().alias("n_ops"),
        (pl.col("end_ns").max() - pl.col("from_ns").min()).alias("span_ns"),
        gap.sum().alias("idle_ns"),
        *[gap.filter(cat == c).sum().alias(f"{c}_ns") for c in IDLE_CATEGORIES],
        *[(positive & (cat == c)).sum().alias(f"n_{c}") for c in IDLE_CATEGORIES],
        (positive & pl.col("call_start_ns").is_null()).sum().alias("n_unlaunched"),
    ]
    out = g.group_by(keys, maintain_order=True).agg(aggs)
    idle = pl.col("idle_ns")
    return out.with_columns(
        [pl.when(idle != 0).then(100.0 * pl.col(f"{c}_ns") / idle).alias(f"{c}_pct") for c in IDLE_CATEGORIES]
    )


def idle_time(
    source: Trace | RankContext,
    *,
    per_step: bool = True,
    hta_compat: bool = False,
    hta_keep_last_step: bool = False,
    kernel_wait_ns: int = KERNEL_WAIT_NS,
    ops: tuple[pl.DataFrame, list[str]] | None = None,
) -> IdleTimeResult:
    """Idle time per GPU stream of one rank (a trace, or its :class:`RankContext`), by category
    (module docstring). ``ops`` may pass ``stream_ops(...)`` made with the same ``hta_compat``
    options."""
    rank, simulated, got, notes = rank_stream_ops(source, ops, hta_compat, hta_keep_last_step)
    if got.height == 0:
        return IdleTimeResult(
            frame({}, IDLE_TIME_SCHEMA), kernel_wait_ns, hta_compat, simulated=simulated, notes=notes
        )
    g = classify_gaps(got, kernel_wait_ns=kernel_wait_ns, hta_compat=hta_compat)
    parts = [_aggregate(g, _KEYS).with_columns(step=pl.lit(None, pl.Int64))]
    if per_step and g["step"].is_not_null().any():
        parts.append(_aggregate(g.filter(pl.col("step").is_not_null()), ["step", *_KEYS]))
    out = frame(pl.concat(parts, how="diagonal_relaxed").with_columns(rank=pl.lit(rank)), IDLE_TIME_SCHEMA)
    notes.extend(_graph_note(g))
    unl = int(out.filter(pl.col("step").is_null())["n_unlaunched"].sum())
    if unl:
        notes.append(
            f"{unl} idle gaps end at a GPU operator whose launch call is not in the trace: "
            "counted as kernel wait or other, never host wait (as HTA)"
        )
    return IdleTimeResult(out, kernel_wait_ns, hta_compat, simulated=simulated, notes=notes)
