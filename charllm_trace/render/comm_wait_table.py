"""Terminal tables of the waiting/transfer split (``analysis/comm_wait.py``) for ``charllm-trace
analyze``: per parallel dimension the time spent waiting for the last participant and the time
transferring, with the bus bandwidth over both and over transfer alone; then the ranks by the
waiting they caused. Formatting only: every number comes from
:class:`charllm_trace.analysis.comm_wait_results.CommWaitResult`."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.fit import FitTable
from charllm_trace.render.table_style import dim_line, simulated_label

TOP_RANKS = 8


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v / 1e6:,.3f}"


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _table(title: str, cols: list[tuple[str, str]], keys: int) -> FitTable:
    t = FitTable(title, keys=keys)
    for name, just in cols:
        t.add_column(name, just)
    return t


def render_comm_wait(res: RunAnalysis, console: Console) -> None:
    cw = res.comm_wait
    assert cw is not None
    t = _table(
        "Matched communication: waiting vs transferring, by dimension" + simulated_label(res),
        [("dim", "left"), ("type", "left"), ("ops", "right"), ("MB", "right"), ("time ms", "right"),
         ("wait ms", "right"), ("wait %", "right"), ("xfer ms", "right"), ("busbw", "right"),
         ("xfer busbw", "right")],
        keys=2,
    )  # fmt: skip
    for r in cw.by_dim.iter_rows(named=True):
        t.add_row(
            r["dim"] or "-", r["coll_type"] or "-", str(r["count"]), _f(r["bytes_total"] / 1e6, "{:,.2f}"), _ms(r["dur_ns"]),
            _ms(r["wait_ns"]), _f(r["wait_pct"], "{:.1f}"), _ms(r["transfer_ns"]),
            _f(r["busbw_gbps"], "{:.3g}"), _f(r["transfer_busbw_gbps"], "{:.3g}"),
        )  # fmt: skip
    console.print(t)
    t = _table(
        f"Stragglers by the waiting they caused (top {TOP_RANKS} per dimension)",
        [("dim", "left"), ("rank", "right"), ("ops", "right"), ("last", "right"), ("caused ms", "right"),
         ("own wait ms", "right")],
        keys=2,
    )  # fmt: skip
    for r in cw.by_rank.group_by("dim", maintain_order=True).head(TOP_RANKS).iter_rows(named=True):
        t.add_row(
            r["dim"] or "-", str(r["rank"]), str(r["count"]), str(r["n_last"]), _ms(r["caused_wait_ns"]),
            _ms(r["wait_ns"]),
        )  # fmt: skip
    console.print(t)
    dim_line(
        console,
        "  wait = the part of each op before its last participant started (the peer of a send/recv, "
        "every rank of a collective's group); xfer = transfer, the rest; busbw in GB/s over the whole op "
        "and over transfer alone; caused = the other participants' waiting at ops this rank started last; "
        "every op: --format json (frame comm_wait)",
    )
    for n in cw.notes:
        dim_line(console, f"  note: {n}")


def comm_wait_table(res: RunAnalysis, console: Console) -> None:
    """The tables, only where communication was matched across ranks (the registry's renderer)."""
    if res.comm_wait is not None:
        render_comm_wait(res, console)
