"""The report's section on GPU idle time per stream and launch statistics (``render/report.py`` adds
it). Drawing only: every figure comes from ``RunAnalysis.idle_time`` / ``RunAnalysis.launch``."""

from __future__ import annotations

from functools import partial

import numpy as np
import polars as pl

from charllm_trace.analysis.idle_results import IDLE_CATEGORIES, IdleTimeResult, LaunchResult
from charllm_trace.render import html as H
from charllm_trace.render.units import ms, us

#: Label and colour of each idle category.
IDLE_STYLE = {
    "host_wait": ("host wait (CPU launching)", "#e45756"),
    "kernel_wait": ("kernel wait (back-to-back launch gap)", "#f58518"),
    "other": ("other (launched in time, started later)", "#bab0ac"),
}
assert tuple(IDLE_STYLE) == IDLE_CATEGORIES
MAX_QUEUE_RANKS = 8  # queue series drawn (the rank-wide series of the first ranks)


_ms = partial(ms, grouped=True)
_us = partial(us, grouped=True)


def _pct(v: object) -> str:
    return "-" if v is None else f"{float(v):.1f}"  # type: ignore[arg-type]


def _stream(r: dict) -> str:
    if r["stream"] is None:
        return "all streams"
    return str(r["stream"]) if r["device"] is None else f"{r['device']}:{r['stream']}"


def _idle_table(it: IdleTimeResult) -> list[str]:
    rows = []
    df = it.streams.filter(pl.col("step").is_null()).sort("rank", "device", "stream")
    for r in df.iter_rows(named=True):
        rows.append(
            [r["rank"], _stream(r), r["n_ops"], _ms(r["span_ns"]), _ms(r["idle_ns"])]
            + [f"{_ms(r[f'{c}_ns'])} / {_pct(r[f'{c}_pct'])}" for c in IDLE_CATEGORIES]
            + [
                H.stack_bar(
                    [
                        (f"{IDLE_STYLE[c][0]}: {_ms(r[f'{c}_ns'])} ms", r[f"{c}_ns"], IDLE_STYLE[c][1])
                        for c in IDLE_CATEGORIES
                    ],
                    total=r["idle_ns"] or None,
                )
            ]
        )
    header = ["rank", "stream", "ops", "span (ms)", "idle (ms)"]
    header += [f"{IDLE_STYLE[c][0]} (ms / %)" for c in IDLE_CATEGORIES] + ["breakdown"]
    return [H.table(header, rows, scroll=True), H.legend([IDLE_STYLE[c] for c in IDLE_CATEGORIES])]


def _launch_table(ls: LaunchResult) -> str:
    df = ls.stats.filter(pl.col("step").is_null()).sort("rank", "device", "stream", nulls_last=True)
    header = ["rank", "stream", "ops launched", "delay p50 (µs)", "p90", "p99", "max", "shorter than launch",
              "queue max", "queue mean"]  # fmt: skip
    rows = [
        [r["rank"], _stream(r), r["n_launched"], _us(r["delay_p50_ns"]), _us(r["delay_p90_ns"]),
         _us(r["delay_p99_ns"]), _us(r["delay_max_ns"]), f"{r['n_shorter_than_launch']} ({_pct(r['shorter_pct'])} %)",
         "-" if r["queue_max"] is None else r["queue_max"],
         "-" if r["queue_mean"] is None else f"{r['queue_mean']:.2f}"]
        for r in df.iter_rows(named=True)
    ]  # fmt: skip
    return H.table(header, rows, scroll=True)


def _queue_chart(ls: LaunchResult, origin_ns: int) -> str:
    q = ls.queue.filter(pl.col("stream").is_null())
    ranks = q["rank"].unique().sort().to_list()[:MAX_QUEUE_RANKS]
    series = []
    for r in ranks:
        sub = q.filter(pl.col("rank") == r).sort("bin")
        mid = ((sub["start_ns"] + sub["end_ns"]) // 2 - origin_ns).to_numpy().astype(np.float64)
        mean = sub["queue_mean"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        peak = sub["queue_max"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        series.append(H.Series(f"rank {r} mean", mid, mean))
        series.append(H.Series(f"rank {r} max", mid, peak))
    return H.line_chart(
        series,
        title="Launch queue over time: GPU ops launched and not finished (all streams of a rank)",
        y_label="ops in the queue",
        note=f"per bin ({q['bin'].n_unique()} bins over each rank's GPU window): time-weighted mean and maximum",
    )


def stream_parts(
    idle: IdleTimeResult | None,
    launch: LaunchResult | None,
    skipped: dict[str, str],
    origin_ns: int | None,
    simulated: bool = False,
) -> list[str]:
    """The section's parts: the idle breakdown, the launch table, the queue chart, the notes."""
    if idle is None and launch is None:
        return [f'<p class="empty">{H.esc(skipped.get("idle_time", "not computed"))}</p>']
    parts = [
        '<p class="note">'
        + H.esc(
            "Idle time on each GPU stream between consecutive operators, split as Holistic Trace "
            "Analysis does: host wait = the launch call came after the stream ran dry (the GPU waits "
            "for the CPU); kernel wait = a gap under the threshold after an operator launched in time; "
            "other = launched in time but started later (events, synchronisation). Launch delay = "
            "GPU start - launch call start."
            + (" SIMULATED: times rebuilt from dependencies and durations." if simulated else "")
        )
        + "</p>"
    ]
    notes: list[str] = []
    if idle is not None:
        parts += _idle_table(idle)
        notes += idle.notes
    if launch is not None:
        parts.append("<h3>Launch statistics (whole trace)</h3>")
        parts.append(_launch_table(launch))
        if launch.queue.height:
            parts.append(_queue_chart(launch, origin_ns or 0))
        notes += [n for n in launch.notes if n not in notes]
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{H.esc(n)}</li>" for n in notes) + "</ul>")
    return parts
