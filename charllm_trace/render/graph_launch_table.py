"""The terminal table of ``analyze``'s graph launches (formatting only: the figures come from
:class:`charllm_trace.analysis.graph_launch_results.GraphLaunchResult`). Fits 80 columns."""

from __future__ import annotations

from functools import partial

from rich.console import Console

from charllm_trace.analysis.graph_launch_results import GRAPH_LAUNCH_SCHEMA, GraphLaunchResult
from charllm_trace.render.coltable import Layout, Show, fit_table
from charllm_trace.render.table_style import dim_line, legend, when_present
from charllm_trace.render.units import us

#: launches listed per rank (the longest spans); the JSON has every one
TOP = 10

#: the title says µs: no unit in the headers
LAUNCHES = Layout(
    GRAPH_LAUNCH_SCHEMA,
    ["rank", "step", Show("n_kernels", "kernels"), Show("call_dur_ns", "call"), Show("launch_to_first_ns", "to first"),
     "span_ns", "busy_ns", "idle_ns"],
    units={},
    time=partial(us, grouped=True),
)  # fmt: skip


def render_graph_launches(gl: GraphLaunchResult, console: Console) -> None:
    lf = gl.launches
    top = (
        lf.sort("span_ns", "first_start_ns", descending=[True, False])
        .group_by("rank", maintain_order=True)
        .head(TOP)
    )
    title = (
        f"Graph launches: {lf.height}, {int(lf['n_kernels'].sum()) if lf.height else 0} GPU operators (µs)"
    )
    console.print(fit_table(title, LAUNCHES, top.sort("rank", "first_start_ns")))
    if lf.height > top.height:
        dim_line(
            console, f"  the {TOP} longest per rank of {lf.height}; every launch and kernel: --format json"
        )
    legend(console, "  call = the launch call's duration; to first = call start to its first kernel's start; "
           "idle = span - busy (none of its kernels running)", gl.notes)  # fmt: skip


graph_launch_table = when_present(
    "graph_launches", lambda res, console: render_graph_launches(res.graph_launches, console)
)
