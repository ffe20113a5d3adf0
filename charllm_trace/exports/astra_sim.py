"""``export astra-sim``: Chakra ETs in the form ASTRA-sim (astra-sim 518bd51) simulates.

One ``<prefix>.<rank>.et`` per rank (the file name ASTRA-sim's workload layer opens)
and ``<prefix>.comm_group.json`` for its ``--comm-group-configuration``. What goes into
a rank's file and in what order: :mod:`charllm_trace.exports.astra_sim_plan`; the
attributes each node carries: ``docs/et-conventions.md`` (*The ASTRA-sim flavour*).
The native ``convert`` ET is unchanged by this; this is a second, lossy flavour.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import polars as pl

from charllm_trace.analysis.roofline_cost import roofline_columns
from charllm_trace.core.classify import classify
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import Run, Trace
from charllm_trace.et import schema as pb
from charllm_trace.et.framing import encode_varint, frame
from charllm_trace.exports import astra_sim_plan as plan
from charllm_trace.exports.astra_sim_mem import io_lists

#: collectives ASTRA-sim simulates on its network model; any other is written as BROADCAST,
#: which it replays with ``duration_micros`` (``Workload::issue_coll_comm``)
SIMULATED = {
    "all_reduce": "ALL_REDUCE",
    "all_gather": "ALL_GATHER",
    "reduce_scatter": "REDUCE_SCATTER",
    "all_to_all": "ALL_TO_ALL",
}
INVOLVED_DIM = [True, True, True, True]  # every dimension (ASTRA-sim's own default when absent)
#: send/recv tags: TAG_BASE + TAG_GROUP * group id + ordinal of the message between the pair (mod
#: TAG_GROUP); ASTRA-sim matches tags modulo 500,000,000
TAG_BASE, TAG_GROUP = 300_000_000, 100_000
#: ASTRA-sim splits an all-gather into ``preferred-dataset-splits`` chunks with no lower bound
#: (``Sys::determine_chunk_size``): below that many bytes it never finishes
MIN_ALL_GATHER = 64
ET_VERSION = "0.0.4"


@dataclass
class AstraExport:
    """What ``export_astra_sim`` wrote."""

    out_dir: Path
    prefix: str
    files: list[Path]
    comm_group_file: Path
    comm_groups: dict[str, list[int]]
    plans: dict[int, plan.RankPlan]
    notes: list[str] = field(default_factory=list)


def _timed(run: Run, where: str) -> tuple[dict[int, Trace], list[str]]:
    """Each rank with timestamps: a rank recorded without them is re-timed from its recorded
    order, durations and dependencies (``analysis.simulate``, as ``--simulate`` does), with
    its notes; dependency cycles it cannot break are bad input."""
    from charllm_trace.analysis import simulate
    from charllm_trace.core.dag import CycleError

    out, notes = {}, []
    for r, t in run.traces.items():
        if not t.meta.has_timestamps:
            try:
                t = simulate(t)
            except CycleError as exc:
                raise InputError(where, f"rank {r}: the dependencies form cycles ({exc.problem})") from None
            notes.append(f"rank {r} has no timestamps: re-timed from its dependencies")
            if t.meta.extra.get("simulated_note"):
                notes.append(f"rank {r}: {t.meta.extra['simulated_note']}")
        out[r] = t
    return out, notes


def _check_run(run: Run, where: str) -> None:
    ranks = run.ranks
    if len(ranks) < 2:
        raise InputError(
            where, f"a single rank ({ranks[0] if ranks else 'none'}): ASTRA-sim needs at least 2 NPUs"
        )
    if ranks != list(range(len(ranks))):
        raise InputError(
            where, f"ranks {ranks} are not 0..{len(ranks) - 1}: ASTRA-sim numbers its NPUs from 0"
        )
    ws = {t.meta.world_size for t in run.traces.values() if t.meta.world_size is not None}
    if ws and max(ws) != len(ranks):
        raise InputError(
            where,
            f"{len(ranks)} ranks of a world of {max(ws)}: the collectives would wait for the missing ranks",
        )


def plan_run(
    run: Run, where: str | None = None, *, host_gaps: bool = True, align_starts: bool = False
) -> tuple[dict[int, plan.RankPlan], dict[str, list[int]], list[str]]:
    """Every rank's plan, with communication attributes matched across ranks; the
    communicator groups (ASTRA-sim id -> global ranks); notes on what was changed or left out.

    ``host_gaps``: also the intervals in which no exported op ran (GPU runs: the GPU; CPU
    runs: any traced op), as compute (``astra_sim_plan.host_gaps``). Unless ``align_starts`` (or a rank had no timestamps),
    a rank that started after the first one begins with a compute node
    ``charllm.start_offset`` as long as the difference: ASTRA-sim starts every NPU at 0."""
    where = where or run.source or "run"
    _check_run(run, where)
    traces, notes = _timed(run, where)
    picked = {}
    for r in run.ranks:
        classified = classify(traces[r].nodes)
        sel, mode = plan.select(classified)
        if sel.height == 0:
            raise InputError(where, f"rank {r}: no node has both a start time and a duration")
        if host_gaps:  # GPU and CPU runs alike: the time no exported op covers
            sel = pl.concat(
                [sel, plan.host_gaps(sel, _next_id(traces[r], sel), mode)], how="diagonal_relaxed"
            )
        picked[r] = (classified, sel, mode)
    skew = not align_starts and all(t.meta.clock == "unix_ns" for t in traces.values())
    first = min(int(sel["start_ns"].min()) for _, sel, _ in picked.values())
    plans: dict[int, plan.RankPlan] = {}
    for r, (classified, sel, mode) in picked.items():
        t = traces[r]
        if skew and int(sel["start_ns"].min()) - first >= 1000:
            sel = pl.concat(
                [sel, plan.start_offset(first, int(sel["start_ns"].min()), _next_id(t, sel))],
                how="diagonal_relaxed",
            )
        sel = sel.sort(pl.col("start_ns"), pl.col("end_ns"), pl.col("id"), descending=[False, True, False])
        sel = sel.with_columns(pos=pl.int_range(pl.len(), dtype=pl.Int64))
        if mode == "gpu":
            dur, waiting = sel["dur_ns"].to_numpy().astype(np.int64), 0
        else:
            dur, waiting = plan.cpu_durations(t, sel)
        e, back = plan.edges(t, classified, sel, mode)
        ops, size = roofline_columns(classified, sel, mode)
        sel = sel.with_columns(
            x_dur=pl.Series(dur, dtype=pl.Int64), num_ops=pl.Series(ops), tensor_size=pl.Series(size)
        )
        # durations in µs, rounded along each lane (communication: its own)
        lane_sorted = sel.select("pos", "lane", "x_dur").sort("lane", "pos")
        us = plan.lane_micros(lane_sorted["lane"].to_numpy(), lane_sorted["x_dur"].to_numpy())
        sel = sel.join(lane_sorted.select("pos", dur_us=pl.Series(us)), on="pos").sort("pos")
        ids = sel["id"].to_numpy()
        deps = pl.DataFrame({"node": ids[e["pos"].to_numpy()], "dep": ids[e["dep_pos"].to_numpy()]})
        lanes = {int(k): _lane_label(sel, int(k), mode) for k in sel["lane"].unique().to_list()}
        plans[r] = plan.RankPlan(r, mode, sel, deps, lanes, back, waiting)
    if not any(p.nodes["is_comm"].any() for p in plans.values()):
        raise InputError(
            where,
            f"{len(plans)} ranks but no collective or send/recv in any: nothing for ASTRA-sim's network to do",
        )
    groups = _comm_attrs(plans, traces, where)
    back = sum(p.dropped_backward for p in plans.values())
    if back:
        notes.append(f"{back} dependencies that ran against the measured order were left out")
    return plans, groups, notes


def _next_id(t: Trace, sel: pl.DataFrame) -> int:
    """An id above every node's of the trace and every row's already added."""
    return max(int(t.nodes["id"].max()), int(sel["id"].max())) + 1


def _lane_label(sel: pl.DataFrame, lane: int, mode: str) -> str:
    if lane == plan.COMM_LANE:
        return "communication"
    if lane == plan.HOST_LANE:
        return "host"
    row = sel.filter(pl.col("lane") == lane).row(0, named=True)
    if mode == "cpu":
        return f"thread {row['tid']}"
    return "GPU" if row["stream"] is None else f"stream {row['device']}:{row['stream']}"


def _comm_attrs(
    plans: dict[int, plan.RankPlan], traces: dict[int, Trace], where: str
) -> dict[str, list[int]]:
    """Fill ``a_*`` columns of the communication rows of every plan; returns the groups."""
    ranks = sorted(plans)
    frames = []
    for r, p in plans.items():
        c = p.nodes.filter("is_comm").select(
            "pos", "coll_type", "comm_bytes", "coll_seq", "peer", "dur_ns", "node_type",
            rank=pl.lit(r, pl.Int64), pg=pl.col("pg_name").fill_null(""),
        )  # fmt: skip
        c = c.with_columns(
            seq=pl.coalesce("coll_seq", (pl.int_range(pl.len()).over("pg") + (1 << 40)).cast(pl.Int64)),
            p2p=pl.col("coll_type").is_in(["send", "recv"]) & pl.col("peer").is_not_null(),
        )
        frames.append(c)
    comm = pl.concat(frames)
    # groups: the run's process groups, else who took part
    known: dict[str, list[int]] = {}
    for t in traces.values():
        for g in t.meta.process_groups:
            known.setdefault(g.name, sorted(g.ranks))
    part = comm.group_by("pg").agg(pl.col("rank").unique().sort())
    ids: dict[str, str] = {}
    groups: dict[str, list[int]] = {}
    members_of: dict[str, list[int]] = {}
    for pg, who in sorted(part.iter_rows()):
        members = members_of[pg] = known.get(pg) or (ranks if pg == "" else list(who))
        if pg == "" or members == ranks or len(members) < 2:
            ids[pg] = "0"  # the default group; a one-rank group's collectives are replayed (below)
        else:
            ids[pg] = str(len(groups) + 1)
            groups[ids[pg]] = members
    gsize = {pg: len(m) for pg, m in members_of.items()}
    coll = comm.filter(~pl.col("p2p"))
    inst = coll.group_by("pg", "seq").agg(
        t_ns=pl.col("dur_ns").min(), size=pl.col("comm_bytes").max(), who=pl.col("rank").unique().sort(),
        types=pl.col("coll_type").fill_null("?").unique().sort(),
    )  # fmt: skip
    _check_instances(inst, members_of, where)
    _check_order(coll, where)
    a = coll.join(inst.select("pg", "seq", "t_ns", "size"), on=["pg", "seq"])
    a = a.with_columns(
        a_type=pl.when(pl.col("pg").replace_strict(gsize, return_dtype=pl.Int64) > 1)
        .then(pl.col("coll_type").replace_strict(SIMULATED, default="BROADCAST"))
        .otherwise(pl.lit("BROADCAST")),
        a_pg=pl.col("pg").replace_strict(ids),
        a_dur=pl.col("t_ns"),
        a_size=pl.col("size").fill_null(0),
    )
    n = pl.col("pg").replace_strict(gsize, return_dtype=pl.Int64)
    a = a.with_columns(
        a_size=pl.when(pl.col("a_type") == "ALL_GATHER")  # ASTRA-sim: one rank's part, >= the dataset splits
        .then(((pl.col("a_size") + n - 1) // n).clip(lower_bound=MIN_ALL_GATHER))
        .otherwise(pl.col("a_size").clip(lower_bound=1)),
        a_src=pl.lit(None, pl.Int64), a_dst=pl.lit(None, pl.Int64), a_tag=pl.lit(None, pl.Int64),
    ).select("rank", "pos", "a_type", "a_pg", "a_dur", "a_size", "a_src", "a_dst", "a_tag")  # fmt: skip
    p2p = _p2p(comm.filter("p2p"), ids, where)
    attrs = pl.concat([a, p2p]) if p2p.height else a
    for r, p in plans.items():
        mine = attrs.filter(pl.col("rank") == r).drop("rank")
        p.nodes = p.nodes.join(mine, on="pos", how="left").sort("pos")
    return groups


def _check_instances(inst: pl.DataFrame, members_of: dict[str, list[int]], where: str) -> None:
    for pg, seq, who, types in inst.select("pg", "seq", "who", "types").iter_rows():
        members = members_of[pg]
        if list(who) != list(members):
            missing = sorted(set(members) - set(who))
            raise InputError(
                where,
                f"collective {'/'.join(types)} (group {pg or 'default'}, sequence {seq}) is on ranks {list(who)} but "
                f"not on {missing}: ASTRA-sim would wait for it forever",
            )
        if len(types) > 1:
            raise InputError(
                where,
                f"collective (group {pg or 'default'}, sequence {seq}) has different types on different ranks: {types}",
            )


def _check_order(coll: pl.DataFrame, where: str) -> None:
    """Every rank must issue the collectives it shares with another in the same order."""
    import graphlib

    ts: graphlib.TopologicalSorter = graphlib.TopologicalSorter()
    for _r, sub in coll.sort("rank", "pos").group_by("rank", maintain_order=True):
        keys = list(zip(sub["pg"].to_list(), sub["seq"].to_list(), strict=True))
        for a, b in zip(keys, keys[1:], strict=False):
            ts.add(b, a)
    try:
        ts.prepare()
    except graphlib.CycleError as exc:
        cyc = exc.args[1][:3]
        raise InputError(
            where,
            f"ranks issue collectives in different orders (e.g. group/sequence {cyc}): ASTRA-sim, which runs one "
            "collective at a time per NPU, would deadlock",
        ) from None


def _p2p(p: pl.DataFrame, ids: dict[str, str], where: str) -> pl.DataFrame:
    """Send/recv attributes: src, dst and a tag both peers compute (group, pair, ordinal)."""
    cols = ["rank", "pos", "a_type", "a_pg", "a_dur", "a_size", "a_src", "a_dst", "a_tag"]
    if p.height == 0:
        return pl.DataFrame(schema=dict.fromkeys(cols, pl.Int64)).with_columns(
            pl.col("a_type", "a_pg").cast(pl.String)
        )
    send = pl.col("coll_type") == "send"
    p = p.sort("rank", "pos").with_columns(
        a_src=pl.when(send).then("rank").otherwise(pl.col("peer").cast(pl.Int64)),
        a_dst=pl.when(send).then(pl.col("peer").cast(pl.Int64)).otherwise("rank"),
    )
    p = p.with_columns(k=pl.int_range(pl.len()).over("pg", "coll_type", "a_src", "a_dst"))
    s = p.filter(send).select("pg", "a_src", "a_dst", "k", s_size="comm_bytes")
    rv = p.filter(~send).select("pg", "a_src", "a_dst", "k", "rank")
    lone = rv.join(s, on=["pg", "a_src", "a_dst", "k"], how="anti")
    if lone.height:
        x = lone.row(0, named=True)
        raise InputError(
            where,
            f"rank {x['a_dst']} receives from rank {x['a_src']} a message that rank {x['a_src']} never sends",
        )
    gid = pl.col("pg").replace_strict(ids).cast(pl.Int64)
    p = p.join(s, on=["pg", "a_src", "a_dst", "k"], how="left").with_columns(
        a_type=pl.col("node_type"),
        a_pg=pl.col("pg").replace_strict(ids),
        a_dur=pl.col("dur_ns"),
        a_size=pl.coalesce("s_size", "comm_bytes").fill_null(0).clip(lower_bound=1),
        a_tag=TAG_BASE + gid * TAG_GROUP + pl.col("k") % TAG_GROUP,
    )
    return p.select(cols)


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

_COMM_PB = {"COMM_SEND": pb.COMM_SEND_NODE, "COMM_RECV": pb.COMM_RECV_NODE}


def _node_messages(p: plan.RankPlan):
    n = p.nodes
    deps = p.deps.group_by("node").agg(pl.col("dep").sort())
    dmap = dict(zip(deps["node"].to_list(), deps["dep"].to_list(), strict=True))
    cols = n.select(
        "id", "name", "start_ns", "dur_us", "x_dur", "is_comm", "lane", "num_ops", "tensor_size", "coll_type", "coll_seq",
        "a_type", "a_pg", "a_dur", "a_size", "a_src", "a_dst", "a_tag",
    ).to_dict(as_series=False)  # fmt: skip
    rows = zip(*cols.values(), io_lists(n), strict=True)
    for (
        nid, name, start, dur_us, x_dur, is_comm, lane, ops, size, ctype, cseq, atype, apg, adur, asize, asrc, adst, atag,
        (reads, writes),
    ) in rows:  # fmt: skip
        m = pb.Node(id=nid & ((1 << 64) - 1), name=name or "")
        if nid in dmap:
            m.data_deps.extend(x & ((1 << 64) - 1) for x in dmap[nid])
        if start is not None and start > 0:
            m.start_time_micros = start // 1000
        add = m.attr.add
        add(name="is_cpu_op", bool_val=False)
        add(name="charllm.lane", string_val=p.lanes.get(lane, ""))
        add(name="inputs").string_list.values.extend(reads)  # ASTRA-sim's local memory model
        add(name="outputs").string_list.values.extend(writes)
        if is_comm:
            m.duration_micros = max(int(adur or 0) + 500, 0) // 1000
            add(name="charllm.dur_ns", int64_val=int(adur or 0))
            add(name="comm_size", int64_val=int(asize))
            add(name="pg_name", string_val=apg)
            if atype in _COMM_PB:
                m.type = _COMM_PB[atype]
                add(name="comm_src", int32_val=int(asrc))
                add(name="comm_dst", int32_val=int(adst))
                add(name="comm_tag", int32_val=int(atag))
            else:
                m.type = pb.COMM_COLL_NODE
                add(name="comm_type", int64_val=pb.CollectiveCommType.Value(atype))
                add(name="involved_dim").bool_list.values.extend(INVOLVED_DIM)
            if ctype is not None:
                add(name="charllm.coll_type", string_val=ctype)
            if cseq is not None:
                add(name="charllm.coll_seq", int64_val=cseq)
        else:
            m.type = pb.COMP_NODE
            m.duration_micros = dur_us
            add(name="charllm.dur_ns", int64_val=int(x_dur))
            add(name="num_ops", int64_val=int(ops))
            add(name="tensor_size", int64_val=int(size))
        yield m


def encode_rank(p: plan.RankPlan, world: int, source: str | None) -> bytes:
    gm = pb.GlobalMetadata(version=ET_VERSION)
    gm.attr.add(name="charllm.flavour", string_val="astra-sim")
    gm.attr.add(name="charllm.rank", int64_val=p.rank)
    gm.attr.add(name="charllm.world_size", int64_val=world)
    gm.attr.add(name="charllm.mode", string_val=p.mode)
    if source:
        gm.attr.add(name="charllm.source", string_val=source)
    out = [frame(gm.SerializeToString())]
    for m in _node_messages(p):
        b = m.SerializeToString()
        out += [encode_varint(len(b)), b]
    return b"".join(out)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


#: the longest file name most file systems take (bytes)
NAME_MAX = 255


def export_astra_sim(
    run: Run,
    out_dir: str | os.PathLike[str],
    prefix: str = "trace",
    *,
    force: bool = False,
    host_gaps: bool = True,
    align_starts: bool = False,
) -> AstraExport:
    """Write ``<prefix>.<rank>.et`` per rank and ``<prefix>.comm_group.json`` into ``out_dir``."""
    if not prefix or "/" in prefix or prefix.startswith("."):
        raise InputError(None, f"--prefix {prefix!r} must be a plain file name")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(out, "is not a directory")
    plans, groups, notes = plan_run(run, host_gaps=host_gaps, align_starts=align_starts)
    files = [out / f"{prefix}.{r}.et" for r in sorted(plans)]
    cg = out / f"{prefix}.comm_group.json"
    for f in [*files, cg]:
        if len(f.name.encode()) > NAME_MAX:
            raise InputError(out, f"--prefix {prefix[:40]!r}...: file names longer than {NAME_MAX} bytes")
        if os.path.isdir(f) and not os.path.islink(f):
            raise InputError(
                f, "is a directory; --force replaces files only: move it away or give another -o/--prefix"
            )
        if os.path.lexists(f) and not force:  # a dangling link too: it is the user's
            raise InputError(f, "already exists; pass --force to overwrite it")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(out, f"cannot create the directory: {exc.strerror or exc}") from None
    for r, f in zip(sorted(plans), files, strict=True):
        _write_atomic(f, encode_rank(plans[r], len(plans), run.source))
    _write_atomic(cg, orjson.dumps(groups, option=orjson.OPT_INDENT_2) + b"\n")
    if "empty" in str(cg.resolve()):
        notes.append("ASTRA-sim ignores a --comm-group-configuration path that contains 'empty'")
    return AstraExport(out, prefix, files, cg, groups, plans, notes)
