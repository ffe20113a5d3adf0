"""What ``charllm-trace info`` reports about a run: a pure function of the model."""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.analysis.launch_gap import lost_device_activity
from charllm_trace.model import COMM_NODE_TYPES, NODE_TYPES, Run, rank_ranges

#: node types whose coll_type counts as a collective/point-to-point operation


def run_summary(run: Run) -> dict[str, Any]:
    """Ranks, node counts by type, time span, collectives with bytes, process groups,
    devices and telemetry of ``run`` as a JSON-ready dict (times in ns, bytes in bytes).

    Collectives are the communication nodes (Chakra ``COMM_COLL``/``COMM_SEND``/``COMM_RECV``)
    by ``coll_type``; a ``coll_type`` of None counts those whose type the trace does not say.
    """
    per_rank: list[dict[str, Any]] = []
    by_type: dict[str, int] = {}
    coll_frames = []
    pgs: dict[str, dict[str, Any]] = {}
    devices: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    all_timestamped = True
    tel_samples = 0
    tel_cols: set[str] = set()
    warnings: dict[str, list[int]] = {}  # warning -> the ranks it holds for
    for rank in run.ranks:
        t = run.traces[rank]
        n = t.nodes
        counts = dict(n.group_by("node_type").len().iter_rows()) if n.height else {}
        for k, v in counts.items():
            by_type[k] = by_type.get(k, 0) + int(v)
        span = None
        if t.meta.has_timestamps and n.height:
            s = n.select(
                pl.col("start_ns").min().alias("start"),
                (pl.col("start_ns") + pl.col("dur_ns")).max().alias("end"),
            ).row(0)
            if s[0] is not None:
                span = (int(s[0]), int(s[1] if s[1] is not None else s[0]))
                starts.append(span[0])
                ends.append(span[1])
        if not t.meta.has_timestamps:
            all_timestamped = False
        lost = lost_device_activity(n)
        if lost is not None:
            warnings.setdefault(lost, []).append(rank)
        c = n.filter(pl.col("node_type").is_in(COMM_NODE_TYPES))
        if c.height:
            coll_frames.append(c.select("coll_type", "comm_bytes"))
        for pg in t.meta.process_groups:
            pgs.setdefault(pg.name, {"name": pg.name, "desc": pg.desc, "ranks": list(pg.ranks)})
        # the model, else the profile's label of the device (another accelerator's "NPU 0")
        dev = t.meta.device_model or (
            f"{t.meta.extra['device_label']} (model unknown)"
            if isinstance(t.meta.extra.get("device_label"), str)
            else None
        )
        if dev and dev not in devices:
            devices.append(dev)
        tel = t.telemetry
        tel_samples += tel.height
        if tel.height:
            tel_cols.update(col for col in tel.columns if tel[col].null_count() < tel.height)
        per_rank.append(
            {
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
        )
    collectives: list[dict[str, Any]] = []
    if coll_frames:
        g = (
            pl.concat(coll_frames)
            .group_by("coll_type")
            .agg(
                pl.len().alias("count"),
                pl.col("comm_bytes").sum().alias("total_bytes"),
                pl.col("comm_bytes").null_count().alias("unknown_bytes"),
            )
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
    world = {t.meta.world_size for t in run.traces.values() if t.meta.world_size is not None}
    has_ts = all_timestamped and bool(starts)
    return {
        "source": run.source,
        "ranks": run.ranks,
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
            n if len(run.ranks) == 1 else f"{'ranks' if len(rs) > 1 else 'rank'} {rank_ranges(rs)}: {n}"
            for n, rs in warnings.items()
        ],
    }
