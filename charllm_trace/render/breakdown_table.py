"""Terminal tables of the time breakdown (``charllm-trace analyze``): the share of GPU time by
kernel category, the top kernels and the top launching ops. Formatting only: every number comes
from :class:`charllm_trace.analysis.results_breakdown.BreakdownResult`. At most 80 columns wide."""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console

from charllm_trace.analysis.results_breakdown import BREAKDOWN_SCHEMA, BREAKDOWN_TOTAL_SCHEMA, BreakdownResult
from charllm_trace.core.kernel_category import CATEGORIES
from charllm_trace.render.coltable import Layout, Show, new_table
from charllm_trace.render.table_style import dim_line
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


_ms, _us = ms, us


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def _dim(console: Console, text: str) -> None:
    dim_line(console, f"  {text}")


def _key(r: dict[str, Any]) -> str:
    key = r["key"] if r["key"] is not None else "(unknown)"
    return key[5:] if key.startswith("void ") else key


_ALL = {"missing": "all"}
#: the category table's first columns (the categories' shares follow, as many as are shown)
TOTALS = Layout(
    BREAKDOWN_TOTAL_SCHEMA, [Show("rank", **_ALL), Show("step", **_ALL), Show("gpu_time_ns", "GPU ms")]
)


def _top(what: str) -> Layout:
    """The top kernels' (``what`` = kernel, with their category) or launching ops' table."""
    cat = [Show("category", "cat", lambda c: SHORT[c][0] if c in SHORT else "-")] if what == "kernel" else []
    return Layout(
        BREAKDOWN_SCHEMA,
        [Show("rank", **_ALL), Show("key", what, cell=_key), *cat, Show("count", "n"), Show("total_ns", "total ms"),
         Show("mean_ns", "mean us", _us), Show("max_ns", "max us", _us), Show("pct", "%", "{:.1f}")],
    )  # fmt: skip


def render_breakdown(bd: BreakdownResult, console: Console, *, per_step: bool, label: str = "") -> None:
    """Print the category table (per step with ``per_step``), then the top kernels and top
    launching ops of the whole trace; ``label`` is appended to each title (e.g. ``[SIMULATED]``)."""
    totals = bd.totals if per_step else bd.totals.filter(pl.col("step").is_null())
    cats = bd.group("category")
    shown = [c for c in CATEGORIES if (cats["key"] == c).any()]
    heads = TOTALS.heads + [(SHORT[c][0], "right") for c in shown]
    t = new_table("GPU time by kernel category (% of GPU time)" + label, heads)
    for r in totals.iter_rows(named=True):
        pct = dict(
            cats.filter(pl.col("rank").eq_missing(r["rank"]) & pl.col("step").eq_missing(r["step"]))
            .select("key", "pct")
            .iter_rows()
        )
        t.add_row(*TOTALS.row(r), *[_pct(pct.get(c)) for c in shown])
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
        lay = _top(what[:-1])
        title = f"Top {what} by GPU time (whole trace" + (", all ranks" if many else "") + ")" + label
        k = new_table(title, lay.heads, shrink=1, max_width=29 if group == "kernel" else 31)
        last = None
        for r in df.iter_rows(named=True):
            who = lay.row(r)
            if last is not None and who[0] != last:
                k.add_section()
            last = who[0]
            k.add_row(*who)
        console.print(k)
    _dim(console, "all kernels and ops: --format json (frames breakdown, breakdown_totals)")
    for note in bd.notes:
        _dim(console, f"note: {note}")
