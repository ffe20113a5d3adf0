"""The HTML report's "Waiting and transfer" section: per parallel dimension and communication type,
the time waiting for the last participant and the time transferring, with the bus bandwidth over
both and over transfer alone; then the ranks by the waiting they caused. Drawing only: every number
comes from :class:`charllm_trace.analysis.comm_wait_results.CommWaitResult`."""

from __future__ import annotations

from typing import Any

from charllm_trace.analysis.comm_wait_results import (
    COMM_WAIT_DIM_SCHEMA,
    COMM_WAIT_RANK_SCHEMA,
    CommWaitResult,
)
from charllm_trace.render.coltable import Show
from charllm_trace.render.report_sections import html_layout, html_rows, notes_list

COMM_WAIT_NOTE = (
    "wait = the part of each matched op before its last participant started (the peer of a send/recv, "
    "every rank of a collective's group); transfer = the rest (docs/analyses.md, Waiting and transferring)"
)
TOP_RANKS = 16


_DASH = {"missing": "-"}
BY_DIM = html_layout(
    COMM_WAIT_DIM_SCHEMA,
    [Show("dim", **_DASH), Show("coll_type", "type", **_DASH), Show("count", "ops"), Show("dur_ns", "time ms"),
     "wait_ns", "wait_pct", "transfer_ns", "busbw_gbps", Show("transfer_busbw_gbps", "transfer-only busbw GB/s")],
)  # fmt: skip
BY_RANK = html_layout(
    COMM_WAIT_RANK_SCHEMA,
    [Show("dim", **_DASH), "rank", Show("count", "ops"), Show("n_last", "arrived last"),
     Show("caused_wait_ns", "others' waiting caused ms"), Show("wait_ns", "own waiting ms")],
)  # fmt: skip


def comm_wait_parts(cw: CommWaitResult | None) -> list[str]:
    """The section's tables (nothing when no communication was matched across ranks)."""
    if cw is None or cw.ops.height == 0:
        return []
    return [
        html_rows(BY_DIM, cw.by_dim),
        html_rows(BY_RANK, cw.by_rank.head(TOP_RANKS)),
        notes_list(cw.notes),
    ]


def comm_wait_section(data: Any, rep: Any) -> None:
    """The report's section, only where communication was matched across ranks (the registry's
    HTML renderer of ``comm_wait``)."""
    if parts := comm_wait_parts(data.results.get("comm_wait")):
        rep.add("Waiting and transfer", *parts, note=COMM_WAIT_NOTE, sid="comm-wait")
