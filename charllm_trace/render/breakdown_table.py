"""Terminal tables of the time breakdown (``charllm-trace analyze``): the share of GPU time by
kernel category, the top kernels and the top launching ops. Formatting only: every number comes
from :class:`charllm_trace.analysis.results_breakdown.BreakdownResult`. At most 80 columns wide."""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console

from charllm_trace.analysis.results_breakdown import BreakdownResult
from charllm_trace.core.kernel_category import CATEGORIES
from charllm_trace.render.fit import FitTable
from charllm_trace.render.table_style import dim_line, plain_table
from charllm_trace.render.units import ms, us

#: Rows of the kernel and op tables (per rank) unless ``analyze --breakdown-top`` says otherwise.
TOP = 10
#: With more ranks than this, the kernel and op tables show all ranks together only.
MAX_RANKS = 4
#: Column heads of the categories (``CATEGORIES`` order) and what they stand for.
SHORT = {
    "gemm": ("gemm", "GEMM"),
    "attention": ("attn", "attention"),
    "convolution": ("conv", "convolution"),
    "elementwise": ("elem", "elementwise"),
    "reduction_norm": ("red", "reduction/norm"),
    "communication": ("comm", "communication"),
    "memcpy_memset": ("mem", "memcpy/memset"),
    "other": ("other", "other"),
}
assert tuple(SHORT) == CATEGORIES


def _table(title: str, cols: list[tuple[str, str]], names: int | None = None) -> FitTable:
    """A table; with ``names`` its second column (kernel or op names) at most that wide, shortened
    from the middle (so the table keeps within 80 columns)."""
    return plain_table(title, cols, shrink=1 if names else None, max_width=names)


_ms, _us = ms, us


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def _who(rank: Any) -> str:
    return "all" if rank is None else str(rank)


def _step(step: Any) -> str:
    return "all" if step is None else str(step)


def _dim(console: Console, text: str) -> None:
    dim_line(console, f"  {text}")


def render_breakdown(bd: BreakdownResult, console: Console, *, per_step: bool, label: str = "") -> None:
    """Print the category table (per step with ``per_step``), then the top kernels and top
    launching ops of the whole trace; ``label`` is appended to each title (e.g. ``[SIMULATED]``)."""
    totals = bd.totals if per_step else bd.totals.filter(pl.col("step").is_null())
    cats = bd.group("category")
    shown = [c for c in CATEGORIES if (cats["key"] == c).any()]
    t = _table(
        "GPU time by kernel category (% of GPU time)" + label,
        [("rank", "right"), ("step", "right"), ("GPU ms", "right")] + [(SHORT[c][0], "right") for c in shown],
    )
    for r in totals.iter_rows(named=True):
        pct = dict(
            cats.filter(pl.col("rank").eq_missing(r["rank"]) & pl.col("step").eq_missing(r["step"]))
            .select("key", "pct")
            .iter_rows()
        )
        t.add_row(
            _who(r["rank"]), _step(r["step"]), _ms(r["gpu_time_ns"]), *[_pct(pct.get(c)) for c in shown]
        )
    console.print(t)
    legend = [f"{SHORT[c][0]} = {SHORT[c][1]}" for c in shown if SHORT[c][0] != SHORT[c][1]]
    for i in range(0, len(legend), 4):
        _dim(console, ", ".join(legend[i : i + 4]))
    _dim(console, "GPU time = sum of the durations of kernels, memcpys and memsets")
    whole = pl.col("step").is_null()
    many = bd.totals["rank"].drop_nulls().n_unique() > MAX_RANKS and bd.totals["rank"].is_null().any()
    if many:
        whole = whole & pl.col("rank").is_null()
    n = bd.top_n + 1 if bd.top_n else TOP  # with top_n, its '(K others)' row too
    for group, what in (("kernel", "kernels"), ("op", "launching ops")):
        df = bd.group(group).filter(whole)
        if df.height == 0:
            continue
        df = df.filter(pl.int_range(pl.len()).over("rank") < n)  # the frame is sorted by total, desc
        cols = [("rank", "right"), (what[:-1], "left")]
        if group == "kernel":
            cols.append(("cat", "left"))
        cols += [
            ("n", "right"),
            ("total ms", "right"),
            ("mean us", "right"),
            ("max us", "right"),
            ("%", "right"),
        ]
        k = _table(
            f"Top {what} by GPU time (whole trace" + (", all ranks" if many else "") + ")" + label,
            cols,
            29 if group == "kernel" else 31,
        )
        last = None
        for r in df.iter_rows(named=True):
            who = _who(r["rank"])
            if last is not None and who != last:
                k.add_section()
            last = who
            key = r["key"] if r["key"] is not None else "(unknown)"
            key = key[5:] if key.startswith("void ") else key
            row = [who, key]
            if group == "kernel":
                row.append(SHORT[r["category"]][0] if r["category"] in SHORT else "-")
            row += [str(r["count"]), _ms(r["total_ns"]), _us(r["mean_ns"]), _us(r["max_ns"]), _pct(r["pct"])]
            k.add_row(*row)
        console.print(k)
    _dim(console, "all kernels and ops: --format json (frames breakdown, breakdown_totals)")
    for note in bd.notes:
        _dim(console, f"note: {note}")
