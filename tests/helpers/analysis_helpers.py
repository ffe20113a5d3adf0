"""Builders of small synthetic traces for the analysis tests (known answers by hand)."""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.core.model import ProcessGroup, Trace, TraceMeta

T0 = 1_700_000_000_000_000_000  # an arbitrary Unix-epoch origin (ns)


def node(id: int, name: str, start: int | None, dur: int | None, **kw: Any) -> dict[str, Any]:
    d = {"id": id, "name": name, "start_ns": None if start is None else T0 + start, "dur_ns": dur}
    d.update(kw)
    return d


def kernel(id: int, name: str, start: int, dur: int, stream: int = 7, **kw: Any) -> dict[str, Any]:
    kw.setdefault("kind", "kernel")
    kw.setdefault("node_type", "COMM_COLL" if kw.get("coll_type") else "COMP")
    return node(id, name, start, dur, on_gpu=True, stream=stream, device=0, pid=0, **kw)


def cpu(id: int, name: str, start: int, dur: int, kind: str = "cpu_op", **kw: Any) -> dict[str, Any]:
    kw.setdefault("tid", 1)
    kw.setdefault("pid", 1)
    return node(id, name, start, dur, on_gpu=False, kind=kind, node_type="COMP", **kw)


def make_trace(
    rows: list[dict[str, Any]], *, rank: int = 0, telemetry: dict | None = None, **meta: Any
) -> Trace:
    cols: dict[str, list] = {}
    keys = sorted({k for r in rows for k in r})
    for k in keys:
        cols[k] = [r.get(k) for r in rows]
    nodes = pl.DataFrame(cols, infer_schema_length=None) if rows else pl.DataFrame({"id": []})
    tm = TraceMeta(rank=rank, **meta)
    tel = pl.DataFrame(telemetry) if telemetry else None
    if tel is not None:
        return Trace(nodes=nodes, telemetry=tel, meta=tm)
    return Trace(nodes=nodes, meta=tm)


PG0 = ProcessGroup(name="0", desc="default_pg", ranks=(0, 1))
