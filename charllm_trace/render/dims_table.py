"""Terminal tables of the headline figures by parallel dimension (``analysis/dims.py``) for
``charllm-trace analyze``: per dimension the exposed communication and its overlap with compute,
the bus bandwidth over whole ops and over transfer alone, the waiting and the pipeline bubbles;
then each dimension's messages by size. Formatting only: every number comes from
:class:`charllm_trace.analysis.dims_results.DimsResult`."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.fit import FitTable
from charllm_trace.render.table_style import dim_line, simulated_label


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v / 1e6:,.3f}"


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _table(title: str, cols: list[tuple[str, str]]) -> FitTable:
    t = FitTable(title, keys=1)
    for name, just in cols:
        t.add_column(name, just)
    return t


def render_dims(res: RunAnalysis, console: Console) -> None:
    dm = res.dims
    assert dm is not None
    t = _table(
        "By parallel dimension (whole trace, all ranks)" + simulated_label(res),
        [("dim", "left"), ("comm ms", "right"), ("exposed ms", "right"), ("overlap %", "right"),
         ("ops", "right"), ("MB", "right"), ("busbw", "right"), ("matched", "right"), ("wait ms", "right"),
         ("wait %", "right"), ("xfer busbw", "right"), ("bubble ms", "right"), ("bubble %", "right")],
    )  # fmt: skip
    for r in dm.dims.iter_rows(named=True):
        t.add_row(
            r["dim"] or "-", _ms(r["comm_ns"]), _ms(r["exposed_comm_ns"]), _f(r["overlap_pct"], "{:.1f}"),
            _f(r["n_ops"], "{:,}"), _f(r["bytes_total"] and r["bytes_total"] / 1e6, "{:,.2f}"),
            _f(r["busbw_gbps"], "{:.3g}"), _f(r["n_matched"], "{:,}"), _ms(r["wait_ns"]),
            _f(r["wait_pct"], "{:.1f}"), _f(r["transfer_busbw_gbps"], "{:.3g}"), _ms(r["bubble_ns"]),
            _f(r["bubble_pct"], "{:.1f}"),
        )  # fmt: skip
    console.print(t)
    if dm.sizes.height:
        s = _table(
            "Messages by size, per dimension",
            [("dim", "left"), ("size", "left"), ("count", "right"), ("MB", "right"), ("bytes %", "right"),
             ("busbw", "right"), ("max busbw", "right"), ("peak", "right"), ("util %", "right")],
        )  # fmt: skip
        for r in dm.sizes.iter_rows(named=True):
            s.add_row(
                r["dim"] or "-", r["size_bucket"], f"{r['count']:,}", _f(r["bytes_total"] / 1e6, "{:,.3f}"),
                _f(r["bytes_pct"], "{:.1f}"), _f(r["busbw_gbps"], "{:.3g}"), _f(r["busbw_max_gbps"], "{:.3g}"),
                _f(r["peak_gbps"], "{:.4g}"), _f(r["util_pct"], "{:.1f}"),
            )  # fmt: skip
        console.print(s)
    dim_line(
        console,
        "  comm/exposed/overlap: the overlap analysis' rows of the dimension's process groups; ops, MB, busbw "
        "(GB/s, time-weighted): the bandwidth analysis' instances; matched, wait, xfer busbw (over transfer "
        "time alone): the waiting/transfer split; bubble: the pipeline's stages (pp); '-' = no dimension named",
    )
    for n in dm.notes:
        dim_line(console, f"  note: {n}")


def dims_table(res: RunAnalysis, console: Console) -> None:
    """The tables and a blank line, only where a parallel dimension is named (the analysis
    registry's terminal renderer of ``dims``)."""
    if res.dims is not None:
        render_dims(res, console)
        console.print()
