"""Waiting vs transferring of every matched communication op: a send matched with its recv on the
peer rank (the k-th send from a to b with the k-th recv on b from a), a collective with its
instance on every rank of its group (by group and sequence, as ``bandwidth.match_ranks``). The part
of each op before its last participant arrived is waiting, the rest transfer; the bus bandwidth
over the transfer time alone stands next to the usual one. Sums per parallel dimension, and per
rank the waiting it did and the waiting it caused by arriving last. docs/analyses.md, "Waiting and
transferring". Pure and vectorised (one frame of all ranks' communication ops)."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from charllm_trace.analysis.bandwidth import bus_factor
from charllm_trace.analysis.comm_wait_results import (
    COMM_WAIT_DIM_SCHEMA,
    COMM_WAIT_RANK_SCHEMA,
    COMM_WAIT_SCHEMA,
    CommWaitResult,
)
from charllm_trace.analysis.pipeline import profiler_steps, stage_of
from charllm_trace.analysis.results import frame
from charllm_trace.core.model import COMM_NODE_TYPES, Trace

P2P = ("send", "recv")
#: The columns of one rank's communication ops handed to :func:`comm_wait_from`.
OPS_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64, "id": pl.Int64, "coll_type": pl.String, "pg_name": pl.String, "dim": pl.String,
    "coll_seq": pl.Int64, "peer": pl.Int64, "group_size": pl.Int64, "bytes": pl.Int64,
    "start_ns": pl.Int64, "dur_ns": pl.Int64, "step": pl.Int64, "match_group": pl.String,
}  # fmt: skip
#: The group a collective without a process group is matched in when the trace names no group at all.
WORLD = "(world)"
NO_MATCH = (
    "no communication op matched across ranks (one rank, no timed communication, or no op's peers "
    "present): waiting and transfer not split"
)
PEER_VIA_PP = (
    "point-to-point ops without a process group (gloo records none): their peer, a rank of the group "
    "used, was taken in the rank's pipeline-parallel group"
)


def _peers(
    ops: pl.DataFrame, rank: int, trace: Trace, dims: Mapping[str, str | None]
) -> tuple[pl.DataFrame, list[str]]:
    """A p2p op without a group names its peer in the (unknown) group used: read it in the rank's
    pipeline group when it has one (pipeline send/recv), else as a global rank."""
    pipe, _, _ = stage_of(rank, trace.meta.process_groups, dims)
    bare = pl.col("pg_name").is_null() & pl.col("coll_type").is_in(P2P) & pl.col("peer").is_not_null()
    if not pipe or not ops.select(bare.any()).item():
        return ops, []
    ranks = sorted(next(pg.ranks for pg in trace.meta.process_groups if pg.name == pipe))
    local = pl.col("peer").cast(pl.Int64)
    mapped = local.replace_strict(dict(enumerate(ranks)), default=None, return_dtype=pl.Int64)
    return ops.with_columns(
        peer=pl.when(bare).then(mapped).otherwise(local),
        dim=pl.when(bare).then(pl.lit("pp")).otherwise(pl.col("dim")),
    ), [PEER_VIA_PP]


def rank_comm_ops(rank: int, trace: Trace, dims: Mapping[str, str | None]) -> tuple[pl.DataFrame, list[str]]:
    """OPS_SCHEMA rows of one rank (device kernels where the rank has any, else host ops) and notes."""
    n = trace.nodes
    if not trace.meta.has_timestamps or n.height == 0:
        return frame({}, OPS_SCHEMA), []
    c = n.filter(
        pl.col("node_type").is_in(COMM_NODE_TYPES)
        & pl.col("start_ns").is_not_null()
        & pl.col("dur_ns").is_not_null()
    )
    c = c.filter(pl.col("on_gpu")) if c.height and c["on_gpu"].any() else c.filter(~pl.col("on_gpu"))
    if c.height == 0:
        return frame({}, OPS_SCHEMA), []
    size = {pg.name: len(pg.ranks) or trace.meta.world_size for pg in trace.meta.process_groups}
    many = [pg.name for pg in trace.meta.process_groups if len(pg.ranks) != 1]
    bare = pl.col("pg_name").is_null() & ~pl.col("node_type").is_in(["COMM_SEND", "COMM_RECV"])
    if len(many) == 1:  # a collective without a group: the rank's only group of several ranks
        c = c.with_columns(pg_name=pl.when(bare).then(pl.lit(many[0])).otherwise("pg_name"))
    # no group known at all: the world (the trace of a one-group job); several: unknown
    world = pl.lit(WORLD if not trace.meta.process_groups else None, pl.String)
    c = c.with_columns(match_group=pl.when(bare).then(world).otherwise("pg_name"))
    c = c.with_columns(
        rank=pl.lit(rank, pl.Int64),
        coll_type=pl.coalesce(
            "coll_type",
            pl.col("node_type").replace_strict({"COMM_SEND": "send", "COMM_RECV": "recv"}, default=None),
        ),
        dim=pl.col("pg_name").replace_strict(dict(dims), default=None, return_dtype=pl.String),
        group_size=pl.coalesce(
            pl.col("pg_name").replace_strict(size, default=None, return_dtype=pl.Int64),
            pl.lit(trace.meta.world_size, pl.Int64),
        ),
        bytes=pl.col("comm_bytes"),
    ).sort("start_ns")
    steps = profiler_steps(n)  # it keeps the host ranges itself (a filtered copy of every column: +125 MB)
    if steps.height:
        c = c.join_asof(steps, left_on="start_ns", right_on="_s0", strategy="backward").with_columns(
            step=pl.when(pl.col("start_ns") < pl.col("_s1")).then(pl.col("step"))
        )
    c, notes = _peers(frame(c, OPS_SCHEMA), rank, trace, dims)
    return frame(c, OPS_SCHEMA), notes


def _ms(df: pl.DataFrame) -> str:
    return f"{df['dur_ns'].sum() / 1e6:,.3f} ms"


def _p2p(ops: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """Both sides of every matched send/recv, with arrive_ns, late_rank, match_key, _inst."""
    p = ops.filter(pl.col("coll_type").is_in(P2P))
    no_peer = p.filter(pl.col("peer").is_null())
    if no_peer.height:
        notes.append(f"{no_peer.height} sends/recvs without a peer rank ({_ms(no_peer)}): not matched")
    p = p.filter(pl.col("peer").is_not_null()).sort("start_ns")
    send = pl.col("coll_type") == "send"
    p = p.with_columns(
        _src=pl.when(send).then("rank").otherwise("peer"),
        _dst=pl.when(send).then("peer").otherwise("rank"),
        match_key=pl.int_range(pl.len()).over("rank", "peer", "coll_type"),
    )
    keys = ["_src", "_dst", "match_key"]
    s, r = p.filter(send), p.filter(~send)
    pair = s.select(*keys, "start_ns", "rank", "bytes").join(
        r.select(
            *keys, pl.col("start_ns").alias("_rs"), pl.col("rank").alias("_rr"), pl.col("bytes").alias("_rb")
        ),
        on=keys,
    )
    pair = pair.select(
        *keys,
        arrive_ns=pl.max_horizontal("start_ns", "_rs"),
        late_rank=pl.when(pl.col("start_ns") >= pl.col("_rs")).then("rank").otherwise("_rr"),
        _bad=pl.col("bytes") != pl.col("_rb"),
    )
    out = p.join(pair, on=keys).with_columns(
        n_ranks=pl.lit(2, pl.Int64), _inst=pl.format("p2p:{}:{}:{}", *keys)
    )
    lost = p.join(pair, on=keys, how="anti")
    if lost.height:
        notes.append(
            f"{lost.height} sends/recvs without their peer's matching op (a rank missing, a profile cut "
            f"short, or more sends than recvs) ({_ms(lost)}): waiting not split"
        )
    bad = int(pair["_bad"].fill_null(False).sum())
    if bad:
        notes.append(
            f"{bad} matched send/recv pairs whose sizes differ between the peers: each side keeps its own size"
        )
    return out.drop("_src", "_dst", "_bad")


def _collectives(ops: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    c = ops.filter(~pl.col("coll_type").is_in(P2P) | pl.col("coll_type").is_null())
    no_pg = c.filter(pl.col("match_group").is_null())
    if no_pg.height:
        notes.append(
            f"{no_pg.height} collectives without a process group on ranks of several groups (gloo records "
            f"none) ({_ms(no_pg)}): their participants cannot be known, waiting not split"
        )
    c = (
        c.filter(pl.col("match_group").is_not_null())
        .sort("start_ns")
        .with_columns(_order=pl.int_range(pl.len()).over("rank", "match_group"))
        .with_columns(match_key=pl.coalesce("coll_seq", "_order"))
    )
    inst = ["match_group", "match_key"]
    c = c.with_columns(
        n_ranks=pl.col("rank").n_unique().over(inst),
        arrive_ns=pl.col("start_ns").max().over(inst),
        late_rank=pl.col("rank").sort_by("start_ns").last().over(inst),
        _inst=pl.format("coll:{}:{}", *inst),
    )
    whole = pl.col("n_ranks") >= pl.coalesce("group_size", pl.lit(2))
    part = c.filter(~whole)
    if part.height:
        notes.append(
            f"{part.height} collectives not seen on every rank of their group ({_ms(part)}): the last "
            "arrival is unknown, waiting not split"
        )
    return c.filter(whole).drop("_order")


def _split(m: pl.DataFrame) -> pl.DataFrame:
    pairs = m.select("coll_type", "group_size").unique()
    fac = pairs.with_columns(
        _f=pl.Series([bus_factor(t, n) for t, n in pairs.iter_rows()], dtype=pl.Float64)
    )  # few distinct (type, size) pairs
    m = m.join(fac, on=["coll_type", "group_size"], how="left", nulls_equal=True)
    wait = (pl.col("arrive_ns") - pl.col("start_ns")).clip(0, None)
    m = m.with_columns(wait_ns=pl.min_horizontal(wait, "dur_ns")).with_columns(
        transfer_ns=pl.col("dur_ns") - pl.col("wait_ns"), _bf=pl.col("bytes") * pl.col("_f")
    )
    return m.with_columns(
        busbw_gbps=pl.when(pl.col("dur_ns") > 0).then(pl.col("_bf") / pl.col("dur_ns")),
        transfer_busbw_gbps=pl.when(pl.col("transfer_ns") > 0).then(pl.col("_bf") / pl.col("transfer_ns")),
        peer=pl.when(pl.col("coll_type").is_in(P2P)).then("peer"),
    )


def _by_dim(m: pl.DataFrame) -> pl.DataFrame:
    return (
        m.group_by("dim", "coll_type")
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("bytes").sum().alias("bytes_total"),
            pl.col("dur_ns").sum(),
            pl.col("wait_ns").sum(),
            pl.col("transfer_ns").sum(),
            pl.col("_bf").sum(),
        )
        .with_columns(
            wait_pct=pl.when(pl.col("dur_ns") > 0).then(100.0 * pl.col("wait_ns") / pl.col("dur_ns")),
            busbw_gbps=pl.when(pl.col("dur_ns") > 0).then(pl.col("_bf") / pl.col("dur_ns")),
            transfer_busbw_gbps=pl.when(pl.col("transfer_ns") > 0).then(
                pl.col("_bf") / pl.col("transfer_ns")
            ),
        )
        .sort("dim", "coll_type", nulls_last=True)
    )


def _by_rank(m: pl.DataFrame) -> pl.DataFrame:
    last = pl.col("late_rank") == pl.col("rank")
    m = m.with_columns(
        _caused=pl.when(last).then(pl.col("wait_ns").sum().over("_inst") - pl.col("wait_ns")).otherwise(0)
    )
    return (
        m.group_by("dim", "rank")
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("wait_ns").sum(),
            last.sum().cast(pl.Int64).alias("n_last"),
            pl.col("_caused").sum().alias("caused_wait_ns"),
        )
        .sort(["dim", "caused_wait_ns", "rank"], descending=[False, True, False], nulls_last=True)
    )


def comm_wait_from(
    frames: list[pl.DataFrame], notes: list[str] | None = None, *, simulated: bool = False
) -> CommWaitResult | None:
    """The run's split from every rank's :func:`rank_comm_ops`; None when nothing could be matched
    (fewer than two ranks, or no communication), the reason in the notes."""
    frames = [f for f in frames if f.height]
    out_notes = list(notes or [])
    if not frames:
        return None
    ops = pl.concat(frames, how="vertical")
    m = pl.concat([_p2p(ops, out_notes), _collectives(ops, out_notes)], how="diagonal_relaxed")
    if m.height == 0:
        return None
    m = _split(m)
    return CommWaitResult(
        ops=frame(m.sort("rank", "start_ns"), COMM_WAIT_SCHEMA),
        by_dim=frame(_by_dim(m), COMM_WAIT_DIM_SCHEMA),
        by_rank=frame(_by_rank(m), COMM_WAIT_RANK_SCHEMA),
        simulated=simulated,
        notes=out_notes,
    )
