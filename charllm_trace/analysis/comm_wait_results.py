"""Typed result of the waiting/transfer split of matched communication (``analysis/comm_wait.py``).
Definitions in docs/analyses.md, "Waiting and transferring"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: One row per communication op matched with its peers: a send with its recv on the peer rank, a
#: collective with its instance on every rank of its group.
COMM_WAIT_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("id", pl.Int64, "", "node id within the rank"),
    Col("coll_type", pl.String),
    Col("pg_name", pl.String),
    Col("dim", pl.String, "", '"tp" | "pp" | "dp" | "ep" | "cp" | null'),
    Col("step", pl.Int64),
    Col("peer", pl.Int64, "", "global rank of a send's receiver / a recv's sender; null for collectives"),
    Col(
        "match_key",
        pl.Int64,
        "",
        "collective: its sequence in the group; p2p: its order on (sender, receiver)",
    ),
    Col("n_ranks", pl.Int64, "", "participants matched (2 for p2p)"),
    Col("bytes", pl.Int64, "B"),
    Col("start_ns", pl.Int64, "ns"),
    Col("dur_ns", pl.Int64, "ns"),
    Col("arrive_ns", pl.Int64, "ns", "the last participant's start"),
    Col("wait_ns", pl.Int64, "ns", "min(max(arrive - start, 0), dur): before the last participant arrived"),
    Col("transfer_ns", pl.Int64, "ns", "dur - wait"),
    Col("late_rank", pl.Int64, "", "the participant that started last"),
    Col("busbw_gbps", pl.Float64, "GB/s", "bytes * bus factor / dur (bandwidth's busbw)"),
    Col("transfer_busbw_gbps", pl.Float64, "GB/s", "bytes * bus factor / transfer_ns"),
)

#: Sums per parallel dimension and communication type; dim null: no dimension known.
COMM_WAIT_DIM_SCHEMA: Columns = columns(
    Col("dim", pl.String),
    Col("coll_type", pl.String, "", '"send", "recv", "all_reduce", ...'),
    Col("count", pl.Int64),
    Col("bytes_total", pl.Int64, "B"),
    Col("dur_ns", pl.Int64, "ns"),
    Col("wait_ns", pl.Int64, "ns"),
    Col("transfer_ns", pl.Int64, "ns"),
    Col("wait_pct", pl.Float64, "%", "100 * wait / dur"),
    Col("busbw_gbps", pl.Float64, "GB/s", "sum(bytes * factor) / sum(dur)"),
    Col("transfer_busbw_gbps", pl.Float64, "GB/s", "sum(bytes * factor) / sum(transfer)"),
)

#: Per (dimension, rank): its own waiting, and the waiting it caused by arriving last.
COMM_WAIT_RANK_SCHEMA: Columns = columns(
    Col("dim", pl.String),
    Col("rank", pl.Int64),
    Col("count", pl.Int64, "", "matched ops of the rank in this dimension"),
    Col("wait_ns", pl.Int64, "ns", "the rank's own waiting"),
    Col("n_last", pl.Int64, "", "ops where the rank arrived last"),
    Col("caused_wait_ns", pl.Int64, "ns", "the other participants' waiting at those ops"),
)


@dataclass
class CommWaitResult:
    """Waiting vs transferring of every matched communication op (docs/analyses.md)."""

    ops: pl.DataFrame  # COMM_WAIT_SCHEMA
    by_dim: pl.DataFrame  # COMM_WAIT_DIM_SCHEMA
    by_rank: pl.DataFrame  # COMM_WAIT_RANK_SCHEMA, the stragglers by the waiting they caused
    simulated: bool = False
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"comm_wait": self.ops, "comm_wait_by_dim": self.by_dim, "comm_wait_by_rank": self.by_rank}
