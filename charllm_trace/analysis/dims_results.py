"""Typed result of the headline figures by parallel dimension (``analysis/dims.py``): one row per
dimension gathered from the overlap, bandwidth, waiting/transfer and pipeline analyses, and the
message-size histogram of each dimension. Definitions in docs/analyses.md, "By dimension"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

#: One row per parallel dimension, whole trace, summed over ranks; "all" is the whole run.
DIMS_SCHEMA: dict[str, pl.DataType] = {
    "dim": pl.String,  # "tp" | "cp" | "dp" | "pp" | "ep" | "ep+dp" ...; "all": the run; null: not named
    "comm_ns": pl.Int64,  # Σ over ranks of |union of the dimension's communication| (overlap)
    "overlap_ns": pl.Int64,  # Σ over ranks of |that communication ∩ all compute of the rank|
    "exposed_comm_ns": pl.Int64,  # comm_ns - overlap_ns
    "overlap_pct": pl.Float64,  # 100 * overlap_ns / comm_ns
    "n_ops": pl.Int64,  # communication instances of the bandwidth analysis, all ranks
    "bytes_total": pl.Int64,  # their message sizes summed
    "busbw_gbps": pl.Float64,  # Σ(busbw * dur) / Σ dur over the instances with a busbw
    "n_matched": pl.Int64,  # ops matched with their peers (waiting vs transferring)
    "wait_ns": pl.Int64,  # Σ of their waiting for the last participant
    "transfer_ns": pl.Int64,  # Σ of the rest of their durations
    "wait_pct": pl.Float64,  # 100 * wait_ns / (wait_ns + transfer_ns)
    "transfer_busbw_gbps": pl.Float64,  # Σ(bytes * bus factor) / Σ transfer over the matched ops
    "bubble_ns": pl.Int64,  # pp (and all): Σ over stages and steps of the pipeline's bubble_ns
    "window_ns": pl.Int64,  # Σ of the same rows' window_ns
    "bubble_pct": pl.Float64,  # 100 * bubble_ns / window_ns
}

#: Message sizes of one dimension: one row per (dimension, size bucket) of the bandwidth analysis'
#: instances; with the link's peak where known, the bandwidth-vs-size curve.
DIM_SIZES_SCHEMA: dict[str, pl.DataType] = {
    "dim": pl.String,  # as in DIMS_SCHEMA (null: not named)
    "size_bucket": pl.String,  # [4^k, 4^(k+1)) bytes, binary units
    "bucket_low_bytes": pl.Int64,  # 4^k, the bucket's lower bound (the rows' order)
    "count": pl.Int64,  # instances, all ranks
    "bytes_total": pl.Int64,
    "bytes_pct": pl.Float64,  # 100 * bytes_total / the dimension's bytes
    "busbw_gbps": pl.Float64,  # Σ(busbw * dur) / Σ dur over the bucket's instances with a busbw
    "busbw_max_gbps": pl.Float64,  # the fastest instance
    "peak_gbps": pl.Float64,  # the link peak (per direction) of the dimension's groups; null: unknown
    "util_pct": pl.Float64,  # 100 * busbw_gbps / peak_gbps
}


@dataclass
class DimsResult:
    """Every headline figure by parallel dimension (docs/analyses.md, "By dimension")."""

    dims: pl.DataFrame  # DIMS_SCHEMA
    sizes: pl.DataFrame  # DIM_SIZES_SCHEMA
    simulated: bool = False
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"dims": self.dims, "dim_msg_sizes": self.sizes}
