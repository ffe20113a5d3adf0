"""Terminal tables of the waiting/transfer split (``analysis/comm_wait.py``) for ``charllm-trace
analyze``: per parallel dimension the time spent waiting for the last participant and the time
transferring, with the bus bandwidth over both and over transfer alone; then the ranks by the
waiting they caused. Formatting only: every number comes from
:class:`charllm_trace.analysis.comm_wait_results.CommWaitResult`."""

from __future__ import annotations

from functools import partial

from rich.console import Console

from charllm_trace.analysis.comm_wait_results import COMM_WAIT_DIM_SCHEMA, COMM_WAIT_RANK_SCHEMA
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.coltable import Layout, Show, fit_table
from charllm_trace.render.table_style import legend, simulated_label, when_present
from charllm_trace.render.units import ms

TOP_RANKS = 8

_time = partial(ms, grouped=True)
BY_DIM = Layout(
    COMM_WAIT_DIM_SCHEMA,
    ["dim", Show("coll_type", "type"), Show("count", "ops"), Show("bytes_total", "MB", "{:,.2f}", div=1e6),
     Show("dur_ns", "time ms"), "wait_ns", "wait_pct", Show("transfer_ns", "xfer ms"), "busbw_gbps",
     Show("transfer_busbw_gbps", "xfer busbw")],
    time=_time,
)  # fmt: skip
BY_RANK = Layout(
    COMM_WAIT_RANK_SCHEMA,
    ["dim", "rank", Show("count", "ops"), Show("n_last", "last"), Show("caused_wait_ns", "caused ms"),
     Show("wait_ns", "own wait ms")],
    time=_time,
)  # fmt: skip


def render_comm_wait(res: RunAnalysis, console: Console) -> None:
    cw = res.comm_wait
    assert cw is not None
    title = "Matched communication: waiting vs transferring, by dimension" + simulated_label(res)
    console.print(fit_table(title, BY_DIM, cw.by_dim, keys=2))
    top = cw.by_rank.group_by("dim", maintain_order=True).head(TOP_RANKS)
    title = f"Stragglers by the waiting they caused (top {TOP_RANKS} per dimension)"
    console.print(fit_table(title, BY_RANK, top, keys=2))
    legend(
        console,
        "  wait = the part of each op before its last participant started (the peer of a send/recv, "
        "every rank of a collective's group); xfer = transfer, the rest; busbw in GB/s over the whole op "
        "and over transfer alone; caused = the other participants' waiting at ops this rank started last; "
        "every op: --format json (frame comm_wait)",
        cw.notes,
    )


comm_wait_table = when_present("comm_wait", render_comm_wait, blank=False)
