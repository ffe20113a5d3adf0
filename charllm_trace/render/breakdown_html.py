"""The report's "Time breakdown" section: the share of GPU time by kernel category per rank (a
table with a stacked bar per row), the top kernels, launching ops and top-level ops. Formatting
only: every number comes from
:class:`charllm_trace.analysis.results_breakdown.BreakdownResult`."""

from __future__ import annotations

from functools import partial
from typing import Any

import polars as pl

from charllm_trace.analysis.results_breakdown import BreakdownResult
from charllm_trace.core.kernel_category import CATEGORIES, CATEGORY_LABELS
from charllm_trace.render.charts import legend, stack_bar, table
from charllm_trace.render.svg import esc
from charllm_trace.render.units import ms, us

#: Colour of each category (``CATEGORIES`` order).
COLORS = {
    "gemm": "#4c78a8",
    "attention": "#9d755d",
    "convolution": "#72b7b2",
    "elementwise": "#54a24b",
    "reduction_norm": "#eeca3b",
    "communication": "#f58518",
    "memcpy_memset": "#b279a2",
    "other": "#bab0ac",
}
assert tuple(COLORS) == CATEGORIES
TOP_KERNELS = 15  # rows of the kernel table
TOP_OPS = 10  # rows of each op table
MAX_NAME = 90  # characters of a kernel or op name shown (the full name is its tooltip)


_ms = partial(ms, missing="", grouped=True)
_us = partial(us, missing="", grouped=True)


def _pct(v: Any) -> str:
    return "" if v is None else f"{v:.1f}"


def _who(rank: Any) -> str:
    return "all ranks" if rank is None else f"rank {rank}"


def _name(key: Any) -> str:
    if key is None:
        return "(unknown: launcher not in the trace)"
    key = str(key)
    return key if len(key) <= MAX_NAME else key[: MAX_NAME - 1] + "…"


def breakdown_parts(bd: BreakdownResult | None, reason: str | None = None) -> list[str]:
    """The section's HTML parts; one line saying why when there is no breakdown."""
    if bd is None:
        return [f'<p class="empty">{esc(reason or "not computed")}</p>']
    cats = bd.group("category").filter(pl.col("step").is_null())
    shown = [c for c in CATEGORIES if (cats["key"] == c).any()]
    parts = [
        '<p class="note">Where the GPU time goes: the durations of kernels, memcpys and memsets summed '
        "(operators on concurrent streams both count), by kernel category, kernel, the CPU op that "
        "launched it and the top-level op above that. Categories and rules: docs/analyses.md."
        + (" SIMULATED: times rebuilt from dependencies and durations." if bd.simulated else "")
        + "</p>"
    ]
    rows = []
    for r in bd.totals.filter(pl.col("step").is_null()).iter_rows(named=True):
        mine = cats.filter(pl.col("rank").eq_missing(r["rank"]))
        by = {k: (t, p) for k, t, p in mine.select("key", "total_ns", "pct").iter_rows()}
        bar = stack_bar(
            [
                (f"{CATEGORY_LABELS[c]}: {_ms(by[c][0])} ms, {_pct(by[c][1])} %", by[c][0], COLORS[c])
                for c in shown
                if c in by
            ],
            total=r["gpu_time_ns"] or None,
        )
        cells = [f"{_ms(by[c][0])} / {_pct(by[c][1])}" if c in by else "" for c in shown]
        rows.append([_who(r["rank"]), _ms(r["gpu_time_ns"]), *cells, bar])
    header = ["", "GPU time (ms)"] + [f"{CATEGORY_LABELS[c]} (ms / %)" for c in shown] + ["share"]
    parts += [table(header, rows, scroll=True), legend([(CATEGORY_LABELS[c], COLORS[c]) for c in shown])]
    whole = bd.by.filter(pl.col("step").is_null())
    scope = None if whole["rank"].is_null().any() else whole["rank"].min()  # all ranks, else the one
    whole = whole.filter(pl.col("rank").eq_missing(scope))
    for group, title, n in (
        ("kernel", "Top kernels", TOP_KERNELS),
        ("op", "Top launching ops", TOP_OPS),
        ("top_op", "Top top-level ops", TOP_OPS),
    ):
        df = whole.filter(pl.col("group") == group).head(n)
        if df.height == 0:
            continue
        head = [{"kernel": "kernel", "op": "launching op", "top_op": "top-level op"}[group]]
        if group == "kernel":
            head.append("category")
        head += ["count", "total (ms)", "mean (µs)", "max (µs)", "% of GPU time"]
        body = []
        for r in df.iter_rows(named=True):
            row: list[object] = [_name(r["key"])]
            if group == "kernel":
                row.append(CATEGORY_LABELS.get(r["category"] or "", ""))
            row += [r["count"], _ms(r["total_ns"]), _us(r["mean_ns"]), _us(r["max_ns"]), _pct(r["pct"])]
            body.append(row)
        parts.append(f"<h3>{esc(title)} ({esc(_who(scope))}, whole trace)</h3>")
        parts.append(table(head, body, scroll=True))
    return parts
