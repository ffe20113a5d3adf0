"""The HTML report's "By parallel dimension" section: one table of the headline figures per
dimension (exposed communication, overlap, busbw whole and over transfer, waiting, bubbles), the
message sizes of each dimension, and per dimension a bar chart of the bus bandwidth by message size
(with the link's peak beside each bucket where it is known). Drawing only: every number comes from
:class:`charllm_trace.analysis.dims_results.DimsResult`."""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.analysis.dims_results import DimsResult

DIMS_NOTE = (
    "whole trace, summed over ranks; comm/exposed/overlap from the overlap analysis, ops/busbw from the "
    "bandwidth analysis, waiting and transfer-only busbw from the matched ops, bubbles from the pipeline "
    "view; '-' = communication of no named dimension (docs/analyses.md, By dimension)"
)


def _g(v: float | None, fmt: str = "{:.4g}") -> str:
    return "" if v is None else fmt.format(v)


def _curves(sizes: pl.DataFrame) -> list[str]:
    from charllm_trace.render import html as H

    out = []
    for (dim,), g in sizes.filter(pl.col("busbw_gbps").is_not_null()).group_by("dim", maintain_order=True):
        vals = {"busbw (GB/s)": g["busbw_gbps"].to_list()}
        if g["peak_gbps"].is_not_null().any():
            vals["link peak (GB/s)"] = g["peak_gbps"].to_list()
        out.append(
            H.bar_chart(
                g["size_bucket"].to_list(),
                vals,
                title=f"Bus bandwidth by message size: {dim or '-'}",
                x_label="GB/s",
            )
        )
    return out


def dims_parts(dm: DimsResult | None) -> list[str]:
    """The section's tables and charts (nothing when no dimension is named)."""
    from charllm_trace.render import html as H
    from charllm_trace.render.report_sections import ms, notes_list, pct

    if dm is None or dm.dims.height == 0:
        return []
    head = ["dim", "comm ms", "exposed ms", "overlap %", "ops", "MB", "busbw GB/s", "matched", "wait ms",
            "wait %", "transfer-only busbw GB/s", "bubble ms", "bubble %"]  # fmt: skip
    rows = [
        [r["dim"] or "-", ms(r["comm_ns"]), ms(r["exposed_comm_ns"]), pct(r["overlap_pct"]), _g(r["n_ops"], "{:,}"),
         _g(r["bytes_total"] and r["bytes_total"] / 1e6, "{:,.3f}"), _g(r["busbw_gbps"]), _g(r["n_matched"], "{:,}"),
         ms(r["wait_ns"]), pct(r["wait_pct"]), _g(r["transfer_busbw_gbps"]), ms(r["bubble_ns"]), pct(r["bubble_pct"])]
        for r in dm.dims.iter_rows(named=True)
    ]  # fmt: skip
    size_head = ["dim", "size", "count", "MB", "bytes %", "busbw GB/s", "max busbw GB/s", "peak GB/s", "util %"]  # fmt: skip
    sizes = [
        [r["dim"] or "-", r["size_bucket"], r["count"], _g(r["bytes_total"] / 1e6, "{:,.3f}"), pct(r["bytes_pct"]),
         _g(r["busbw_gbps"]), _g(r["busbw_max_gbps"]), _g(r["peak_gbps"]), pct(r["util_pct"])]
        for r in dm.sizes.iter_rows(named=True)
    ]  # fmt: skip
    parts = [H.table(head, rows, scroll=True)]
    if sizes:
        parts.append(H.table(size_head, sizes, scroll=True))
    return [*parts, *_curves(dm.sizes), notes_list(dm.notes)]


def dims_section(data: Any, rep: Any) -> None:
    """The report's section, only where a parallel dimension is named (the analysis registry's
    HTML renderer of ``dims``)."""
    if parts := dims_parts(data.results.get("dims")):
        rep.add("By parallel dimension", *parts, note=DIMS_NOTE, sid="dims")
