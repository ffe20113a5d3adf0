"""The terminal table of ``analyze``'s graph launches (formatting only: the figures come from
:class:`charllm_trace.analysis.graph_launch_results.GraphLaunchResult`). Fits 80 columns."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from charllm_trace.analysis.graph_launch_results import GraphLaunchResult
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.table_style import dim_line, plain_table

#: launches listed per rank (the longest spans); the JSON has every one
TOP = 10


def _us(v: Any) -> str:
    return "-" if v is None else f"{v / 1e3:,.1f}"


def render_graph_launches(gl: GraphLaunchResult, console: Console) -> None:
    lf = gl.launches
    t = plain_table(
        f"Graph launches: {lf.height}, {int(lf['n_kernels'].sum()) if lf.height else 0} GPU operators (µs)",
        [("rank", "right"), ("step", "right"), ("kernels", "right"), ("call", "right"), ("to first", "right"),
         ("span", "right"), ("busy", "right"), ("idle", "right")],
    )  # fmt: skip
    top = (
        lf.sort("span_ns", "first_start_ns", descending=[True, False])
        .group_by("rank", maintain_order=True)
        .head(TOP)
    )
    for r in top.sort("rank", "first_start_ns").iter_rows(named=True):
        t.add_row(str(r["rank"]), "-" if r["step"] is None else str(r["step"]), str(r["n_kernels"]),
                  _us(r["call_dur_ns"]), _us(r["launch_to_first_ns"]), _us(r["span_ns"]), _us(r["busy_ns"]),
                  _us(r["idle_ns"]))  # fmt: skip
    console.print(t)
    if lf.height > top.height:
        dim_line(
            console, f"  the {TOP} longest per rank of {lf.height}; every launch and kernel: --format json"
        )
    dim_line(console, "  call = the launch call's duration; to first = call start to its first kernel's start; "
             "idle = span - busy (none of its kernels running)")  # fmt: skip
    for n in gl.notes:
        dim_line(console, f"  note: {n}")


def graph_launch_table(res: RunAnalysis, console: Console) -> None:
    """The tables and a blank line, only for traces with CUDA/HIP graph launches (the analysis
    registry's terminal renderer of ``graph_launches``)."""
    if res.graph_launches is not None:
        render_graph_launches(res.graph_launches, console)
        console.print()
