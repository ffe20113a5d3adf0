"""Typed result of the waiting/transfer split of matched communication (``analysis/comm_wait.py``).
Definitions in docs/analyses.md, "Waiting and transferring"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

#: One row per communication op matched with its peers: a send with its recv on the peer rank, a
#: collective with its instance on every rank of its group.
COMM_WAIT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "id": pl.Int64,  # node id within the rank
    "coll_type": pl.String,
    "pg_name": pl.String,
    "dim": pl.String,  # "tp" | "pp" | "dp" | "ep" | "cp" | null
    "step": pl.Int64,
    "peer": pl.Int64,  # global rank of a send's receiver / a recv's sender; null for collectives
    "match_key": pl.Int64,  # collective: its sequence in the group; p2p: its order on (sender, receiver)
    "n_ranks": pl.Int64,  # participants matched (2 for p2p)
    "bytes": pl.Int64,
    "start_ns": pl.Int64,
    "dur_ns": pl.Int64,
    "arrive_ns": pl.Int64,  # the last participant's start
    "wait_ns": pl.Int64,  # min(max(arrive - start, 0), dur): before the last participant arrived
    "transfer_ns": pl.Int64,  # dur - wait
    "late_rank": pl.Int64,  # the participant that started last
    "busbw_gbps": pl.Float64,  # bytes * bus factor / dur (bandwidth's busbw)
    "transfer_busbw_gbps": pl.Float64,  # bytes * bus factor / transfer_ns
}

#: Sums per parallel dimension and communication type; dim null: no dimension known.
COMM_WAIT_DIM_SCHEMA: dict[str, pl.DataType] = {
    "dim": pl.String,
    "coll_type": pl.String,  # "send", "recv", "all_reduce", ...
    "count": pl.Int64,
    "bytes_total": pl.Int64,
    "dur_ns": pl.Int64,
    "wait_ns": pl.Int64,
    "transfer_ns": pl.Int64,
    "wait_pct": pl.Float64,  # 100 * wait / dur
    "busbw_gbps": pl.Float64,  # sum(bytes * factor) / sum(dur)
    "transfer_busbw_gbps": pl.Float64,  # sum(bytes * factor) / sum(transfer)
}

#: Per (dimension, rank): its own waiting, and the waiting it caused by arriving last.
COMM_WAIT_RANK_SCHEMA: dict[str, pl.DataType] = {
    "dim": pl.String,
    "rank": pl.Int64,
    "count": pl.Int64,  # matched ops of the rank in this dimension
    "wait_ns": pl.Int64,  # the rank's own waiting
    "n_last": pl.Int64,  # ops where the rank arrived last
    "caused_wait_ns": pl.Int64,  # the other participants' waiting at those ops
}


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
