"""The HTML report's "Waiting and transfer" section: per parallel dimension and communication type,
the time waiting for the last participant and the time transferring, with the bus bandwidth over
both and over transfer alone; then the ranks by the waiting they caused. Drawing only: every number
comes from :class:`charllm_trace.analysis.comm_wait_results.CommWaitResult`."""

from __future__ import annotations

from typing import Any

from charllm_trace.analysis.comm_wait_results import CommWaitResult

COMM_WAIT_NOTE = (
    "wait = the part of each matched op before its last participant started (the peer of a send/recv, "
    "every rank of a collective's group); transfer = the rest (docs/analyses.md, Waiting and transferring)"
)
TOP_RANKS = 16


def _gb(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"


def comm_wait_parts(cw: CommWaitResult | None) -> list[str]:
    """The section's tables (nothing when no communication was matched across ranks)."""
    from charllm_trace.render import html as H
    from charllm_trace.render.report_sections import ms, notes_list, pct

    if cw is None or cw.ops.height == 0:
        return []
    dims = [
        [r["dim"] or "-", r["coll_type"] or "-", r["count"], ms(r["dur_ns"]), ms(r["wait_ns"]), pct(r["wait_pct"]),
         ms(r["transfer_ns"]), _gb(r["busbw_gbps"]), _gb(r["transfer_busbw_gbps"])]
        for r in cw.by_dim.iter_rows(named=True)
    ]  # fmt: skip
    head = ["dim", "type", "ops", "time ms", "wait ms", "wait %", "transfer ms", "busbw GB/s",
            "transfer-only busbw GB/s"]  # fmt: skip
    ranks = [
        [r["dim"] or "-", r["rank"], r["count"], r["n_last"], ms(r["caused_wait_ns"]), ms(r["wait_ns"])]
        for r in cw.by_rank.head(TOP_RANKS).iter_rows(named=True)
    ]
    rank_head = ["dim", "rank", "ops", "arrived last", "others' waiting caused ms", "own waiting ms"]
    return [H.table(head, dims, scroll=True), H.table(rank_head, ranks, scroll=True), notes_list(cw.notes)]


def comm_wait_section(data: Any, rep: Any) -> None:
    """The report's section, only where communication was matched across ranks (the registry's
    HTML renderer of ``comm_wait``)."""
    if parts := comm_wait_parts(data.results.get("comm_wait")):
        rep.add("Waiting and transfer", *parts, note=COMM_WAIT_NOTE, sid="comm-wait")
