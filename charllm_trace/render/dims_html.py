"""The HTML report's "By parallel dimension" section: one table of the headline figures per
dimension (exposed communication, overlap, busbw whole and over transfer, waiting, bubbles), the
message sizes of each dimension, and per dimension a bar chart of the bus bandwidth by message size
(with the link's peak beside each bucket where it is known). Drawing only: every number comes from
:class:`charllm_trace.analysis.dims_results.DimsResult`."""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.analysis.dims_results import DIM_SIZES_SCHEMA, DIMS_SCHEMA, DimsResult
from charllm_trace.render import html as H
from charllm_trace.render.coltable import Show
from charllm_trace.render.report_sections import html_layout, html_rows, notes_list, pct

DIMS_NOTE = (
    "whole trace, summed over ranks; comm/exposed/overlap from the overlap analysis, ops/busbw from the "
    "bandwidth analysis, waiting and transfer-only busbw from the matched ops, bubbles from the pipeline "
    "view; '-' = communication of no named dimension (docs/analyses.md, By dimension)"
)


_DASH = {"missing": "-"}
DIMS = html_layout(
    DIMS_SCHEMA,
    [Show("dim", **_DASH), "comm_ns", Show("exposed_comm_ns", "exposed ms"), "overlap_pct", Show("n_ops", "ops", "{:,}"),
     Show("bytes_total", "MB", "{:,.3f}", div=1e6), "busbw_gbps", Show("n_matched", "matched", "{:,}"), "wait_ns",
     "wait_pct", Show("transfer_busbw_gbps", "transfer-only busbw GB/s"), "bubble_ns", "bubble_pct"],
)  # fmt: skip
SIZES = html_layout(
    DIM_SIZES_SCHEMA,
    [Show("dim", **_DASH), Show("size_bucket", "size"), "count", Show("bytes_total", "MB", "{:,.3f}", div=1e6),
     Show("bytes_pct", "bytes %", pct), "busbw_gbps", Show("busbw_max_gbps", "max busbw GB/s"), "peak_gbps",
     "util_pct"],
)  # fmt: skip


def _curves(sizes: pl.DataFrame) -> list[str]:
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
    if dm is None or dm.dims.height == 0:
        return []
    parts = [html_rows(DIMS, dm.dims)]
    if dm.sizes.height:
        parts.append(html_rows(SIZES, dm.sizes))
    return [*parts, *_curves(dm.sizes), notes_list(dm.notes)]


def dims_section(data: Any, rep: Any) -> None:
    """The report's section, only where a parallel dimension is named (the analysis registry's
    HTML renderer of ``dims``)."""
    if parts := dims_parts(data.results.get("dims")):
        rep.add("By parallel dimension", *parts, note=DIMS_NOTE, sid="dims")
