"""Typed result of the headline figures by parallel dimension (``analysis/dims.py``): one row per
dimension gathered from the overlap, bandwidth, waiting/transfer and pipeline analyses, and the
message-size histogram of each dimension. Definitions in docs/analyses.md, "By dimension"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: One row per parallel dimension, whole trace, summed over ranks; "all" is the whole run.
DIMS_SCHEMA: Columns = columns(
    Col(
        "dim",
        pl.String,
        "",
        '"tp" | "cp" | "dp" | "pp" | "ep" | "ep+dp" ...; "all": the run; null: not named',
    ),
    Col("comm_ns", pl.Int64, "ns", "Σ over ranks of |union of the dimension's communication| (overlap)"),
    Col("overlap_ns", pl.Int64, "ns", "Σ over ranks of |that communication ∩ all compute of the rank|"),
    Col("exposed_comm_ns", pl.Int64, "ns", "comm_ns - overlap_ns"),
    Col("overlap_pct", pl.Float64, "%", "100 * overlap_ns / comm_ns"),
    Col("n_ops", pl.Int64, "", "communication instances of the bandwidth analysis, all ranks"),
    Col("bytes_total", pl.Int64, "B", "their message sizes summed"),
    Col("busbw_gbps", pl.Float64, "GB/s", "Σ(busbw * dur) / Σ dur over the instances with a busbw"),
    Col("n_matched", pl.Int64, "", "ops matched with their peers (waiting vs transferring)"),
    Col("wait_ns", pl.Int64, "ns", "Σ of their waiting for the last participant"),
    Col("transfer_ns", pl.Int64, "ns", "Σ of the rest of their durations"),
    Col("wait_pct", pl.Float64, "%", "100 * wait_ns / (wait_ns + transfer_ns)"),
    Col("transfer_busbw_gbps", pl.Float64, "GB/s", "Σ(bytes * bus factor) / Σ transfer over the matched ops"),
    Col("bubble_ns", pl.Int64, "ns", "pp (and all): Σ over stages and steps of the pipeline's bubble_ns"),
    Col("window_ns", pl.Int64, "ns", "Σ of the same rows' window_ns"),
    Col("bubble_pct", pl.Float64, "%", "100 * bubble_ns / window_ns"),
)

#: Message sizes of one dimension: one row per (dimension, size bucket) of the bandwidth analysis'
#: instances; with the link's peak where known, the bandwidth-vs-size curve.
DIM_SIZES_SCHEMA: Columns = columns(
    Col("dim", pl.String, "", "as in DIMS_SCHEMA (null: not named)"),
    Col("size_bucket", pl.String, "", "[4^k, 4^(k+1)) bytes, binary units"),
    Col("bucket_low_bytes", pl.Int64, "B", "4^k, the bucket's lower bound (the rows' order)"),
    Col("count", pl.Int64, "", "instances, all ranks"),
    Col("bytes_total", pl.Int64, "B"),
    Col("bytes_pct", pl.Float64, "B", "100 * bytes_total / the dimension's bytes"),
    Col("busbw_gbps", pl.Float64, "GB/s", "Σ(busbw * dur) / Σ dur over the bucket's instances with a busbw"),
    Col("busbw_max_gbps", pl.Float64, "GB/s", "the fastest instance"),
    Col(
        "peak_gbps",
        pl.Float64,
        "GB/s",
        "the link peak (per direction) of the dimension's groups; null: unknown",
    ),
    Col("util_pct", pl.Float64, "%", "100 * busbw_gbps / peak_gbps"),
)


@dataclass
class DimsResult:
    """Every headline figure by parallel dimension (docs/analyses.md, "By dimension")."""

    dims: pl.DataFrame  # DIMS_SCHEMA
    sizes: pl.DataFrame  # DIM_SIZES_SCHEMA
    simulated: bool = False
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"dims": self.dims, "dim_msg_sizes": self.sizes}
