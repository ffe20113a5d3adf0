"""What ``charllm-trace info`` reports about a run: a pure function of the model."""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.core.launch_gap import lost_device_activity
from charllm_trace.core.model import COMM_NODE_TYPES, NODE_TYPES, Run, Trace, rank_ranges

#: node types whose coll_type counts as a collective/point-to-point operation


def run_summary(run: Run) -> dict[str, Any]:
    """Ranks, node counts by type, time span, collectives with bytes, process groups,
    devices and telemetry of ``run`` as a JSON-ready dict (times in ns, bytes in bytes).

    Collectives are the communication nodes (Chakra ``COMM_COLL``/``COMM_SEND``/``COMM_RECV``)
    by ``coll_type``; a ``coll_type`` of None counts those whose type the trace does not say.
    """
    return merge_rank_infos(run.source, [rank_info(r, run.traces[r]) for r in run.ranks])


def rank_info(rank: int, t: Trace) -> dict[str, Any]:
    """One rank's part of :func:`run_summary` (small: what a Dask worker sends to the driver)."""
    n = t.nodes
    counts = {k: int(v) for k, v in n.group_by("node_type").len().iter_rows()} if n.height else {}
    span = None
    if t.meta.has_timestamps and n.height:
        s = n.select(
            pl.col("start_ns").min().alias("start"),
            (pl.col("start_ns") + pl.col("dur_ns")).max().alias("end"),
        ).row(0)
        if s[0] is not None:
            span = (int(s[0]), int(s[1] if s[1] is not None else s[0]))
    c = n.filter(pl.col("node_type").is_in(COMM_NODE_TYPES))
    coll = (
        c.group_by("coll_type").agg(
            pl.len().alias("count"),
            pl.col("comm_bytes").sum().alias("total_bytes"),
            pl.col("comm_bytes").null_count().alias("unknown_bytes"),
        )
        if c.height
        else None
    )
    tel = t.telemetry
    row = {
        "rank": rank,
        "nodes": n.height,
        "nodes_by_type": {k: int(counts[k]) for k in NODE_TYPES if k in counts},
        "dependencies": t.deps.height,
        "has_timestamps": bool(t.meta.has_timestamps),
        "start_ns": span[0] if span else None,
        "end_ns": span[1] if span else None,
        "device_model": t.meta.device_model,
        "device_index": t.meta.device_index,
        "hostname": t.meta.hostname,
        "source": t.meta.source,
        "telemetry_samples": tel.height,
        # dependencies a foreign ET held that were dropped when read (et/validate.py)
        "dropped_dependencies": {
            k: int(t.meta.extra[k])
            for k in ("deps_on_absent_nodes", "deps_on_themselves")
            if isinstance(t.meta.extra.get(k), int)
        },
    }
    # the model, else the profile's label of the device (another accelerator's "NPU 0")
    dev = t.meta.device_model or (
        f"{t.meta.extra['device_label']} (model unknown)"
        if isinstance(t.meta.extra.get("device_label"), str)
        else None
    )
    return {
        "row": row,
        "device": dev,
        "lost": lost_device_activity(n),
        "counts": counts,
        "span": span,
        "coll": coll,
        "groups": [
            {"name": pg.name, "desc": pg.desc, "ranks": list(pg.ranks)} for pg in t.meta.process_groups
        ],
        "world_size": t.meta.world_size,
        "tel_cols": sorted(col for col in tel.columns if tel[col].null_count() < tel.height)
        if tel.height
        else [],
    }


def merge_rank_infos(source: str | None, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`run_summary` from every rank's :func:`rank_info` (in rank order)."""
    by_type: dict[str, int] = {}
    pgs: dict[str, dict[str, Any]] = {}
    devices: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    tel_cols: set[str] = set()
    warnings: dict[str, list[int]] = {}  # warning -> the ranks it holds for
    for part in parts:
        if part["lost"] is not None:
            warnings.setdefault(part["lost"], []).append(part["row"]["rank"])
        for k, v in part["counts"].items():
            by_type[k] = by_type.get(k, 0) + v
        if part["span"] is not None:
            starts.append(part["span"][0])
            ends.append(part["span"][1])
        for pg in part["groups"]:
            pgs.setdefault(pg["name"], pg)
        dev = part["device"]
        if dev and dev not in devices:
            devices.append(dev)
        tel_cols.update(part["tel_cols"])
    per_rank = [p["row"] for p in parts]
    all_timestamped = all(r["has_timestamps"] for r in per_rank)
    collectives: list[dict[str, Any]] = []
    coll_frames = [p["coll"] for p in parts if p["coll"] is not None]
    if coll_frames:
        g = (
            pl.concat(coll_frames)
            .group_by("coll_type")
            .agg(pl.col("count").sum(), pl.col("total_bytes").sum(), pl.col("unknown_bytes").sum())
            .sort("coll_type", nulls_last=True)
        )
        collectives = [
            {
                "coll_type": r["coll_type"],
                "count": int(r["count"]),
                "total_bytes": int(r["total_bytes"]) if r["unknown_bytes"] < r["count"] else None,
                "ops_without_bytes": int(r["unknown_bytes"]),
            }
            for r in g.iter_rows(named=True)
        ]
    world = {p["world_size"] for p in parts if p["world_size"] is not None}
    has_ts = all_timestamped and bool(starts)
    tel_samples = sum(r["telemetry_samples"] for r in per_rank)
    return {
        "source": source,
        "ranks": [r["rank"] for r in per_rank],
        "world_size": world.pop() if len(world) == 1 else None,
        "nodes": sum(r["nodes"] for r in per_rank),
        "nodes_by_type": {k: by_type[k] for k in NODE_TYPES if k in by_type},
        "has_timestamps": has_ts,
        "start_ns": min(starts) if has_ts else None,
        "end_ns": max(ends) if has_ts else None,
        "duration_s": (max(ends) - min(starts)) / 1e9 if has_ts else None,
        "collectives": collectives,
        "process_groups": sorted(pgs.values(), key=lambda p: p["name"]),
        "devices": devices,
        "telemetry": {"present": tel_samples > 0, "samples": tel_samples, "columns": sorted(tel_cols)},
        "per_rank": per_rank,
        "notes": [
            n if len(parts) == 1 else f"{'ranks' if len(rs) > 1 else 'rank'} {rank_ranges(rs)}: {n}"
            for n, rs in warnings.items()
        ],
    }
