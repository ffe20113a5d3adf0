"""Terminal tables of the headline figures by parallel dimension (``analysis/dims.py``) for
``charllm-trace analyze``: per dimension the exposed communication and its overlap with compute,
the bus bandwidth over whole ops and over transfer alone, the waiting and the pipeline bubbles;
then each dimension's messages by size. Formatting only: every number comes from
:class:`charllm_trace.analysis.dims_results.DimsResult`."""

from __future__ import annotations

from functools import partial

from rich.console import Console

from charllm_trace.analysis.dims_results import DIM_SIZES_SCHEMA, DIMS_SCHEMA
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.coltable import Layout, Show, fit_table
from charllm_trace.render.table_style import legend, simulated_label, when_present
from charllm_trace.render.units import ms

_time = partial(ms, grouped=True)
DIMS = Layout(
    DIMS_SCHEMA,
    ["dim", "comm_ns", Show("exposed_comm_ns", "exposed ms"), "overlap_pct", Show("n_ops", "ops", "{:,}"),
     Show("bytes_total", "MB", "{:,.2f}", div=1e6), "busbw_gbps", Show("n_matched", "matched", "{:,}"), "wait_ns",
     "wait_pct", Show("transfer_busbw_gbps", "xfer busbw"), "bubble_ns", "bubble_pct"],
    time=_time,
)  # fmt: skip
SIZES = Layout(
    DIM_SIZES_SCHEMA,
    ["dim", Show("size_bucket", "size"), Show("count", fmt="{:,}"), Show("bytes_total", "MB", "{:,.3f}", div=1e6),
     Show("bytes_pct", "bytes %", "{:.1f}"), "busbw_gbps", Show("busbw_max_gbps", "max busbw"),
     Show("peak_gbps", fmt="{:.4g}"), "util_pct"],
    time=_time,
)  # fmt: skip


def render_dims(res: RunAnalysis, console: Console) -> None:
    dm = res.dims
    assert dm is not None
    console.print(
        fit_table("By parallel dimension (whole trace, all ranks)" + simulated_label(res), DIMS, dm.dims)
    )
    if dm.sizes.height:
        console.print(fit_table("Messages by size, per dimension", SIZES, dm.sizes))
    legend(
        console,
        "  comm/exposed/overlap: the overlap analysis' rows of the dimension's process groups; ops, MB, busbw "
        "(GB/s, time-weighted): the bandwidth analysis' instances; matched, wait, xfer busbw (over transfer "
        "time alone): the waiting/transfer split; bubble: the pipeline's stages (pp); '-' = no dimension named",
        dm.notes,
    )


dims_table = when_present("dims", render_dims)
