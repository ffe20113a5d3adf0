"""``charllm-trace info`` output: rich tables for people, JSON for machines. Formatting only:
every number comes from :func:`charllm_trace.et.summary.run_summary`."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
from rich.console import Console

from charllm_trace.render.contract import stamp
from charllm_trace.render.fit import FitTable


def info_json(summary: dict[str, Any]) -> str:
    """The ``info --json`` document (docs/schema/info.schema.json)."""
    return orjson.dumps(stamp("info", summary), option=orjson.OPT_INDENT_2).decode()


def _bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,} B"


def _time(ns: int | None) -> str:
    if ns is None:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def _table(title: str, *cols: tuple[str, str]) -> FitTable:
    t = FitTable(title, keys=1)
    for name, just in cols:
        t.add_column(name, just, wrap=name in ("", "description", "ranks", "host"))
    return t


def render_info(s: dict[str, Any], console: Console) -> None:
    head = _table("Trace", ("", "left"), ("", "left"))
    head.show_header = False
    head.add_row("source", str(s["source"] or "-"))
    ranks = s["ranks"]
    head.add_row(
        "ranks", f"{len(ranks)} ({', '.join(map(str, ranks[:16]))}{' ...' if len(ranks) > 16 else ''})"
    )
    head.add_row("world size", "-" if s["world_size"] is None else str(s["world_size"]))
    head.add_row("nodes", f"{s['nodes']:,}")
    if s["has_timestamps"]:
        head.add_row("time span", f"{s['duration_s']:.6f} s")
        head.add_row("from", _time(s["start_ns"]))  # each date whole on a row of its own
        head.add_row("to", _time(s["end_ns"]))
    else:
        head.add_row("time span", "no timestamps")
    head.add_row("devices", ", ".join(s["devices"]) or "unknown")
    tel = s["telemetry"]
    head.add_row(
        "telemetry",
        f"present: {tel['samples']:,} samples ({', '.join(tel['columns'])})" if tel["present"] else "none",
    )
    console.print(head)

    types = _table("Nodes by type", ("type", "left"), ("count", "right"))
    for k, v in s["nodes_by_type"].items():
        types.add_row(k, f"{v:,}")
    console.print(types)

    if s["collectives"]:
        coll = _table("Collectives", ("type", "left"), ("count", "right"), ("total bytes", "right"))
        for c in s["collectives"]:
            note = f" ({c['ops_without_bytes']} without size)" if c["ops_without_bytes"] else ""
            coll.add_row(c["coll_type"] or "unknown", f"{c['count']:,}", _bytes(c["total_bytes"]) + note)
        console.print(coll)
    else:
        console.print("Collectives: none", style="bold")

    if s["process_groups"]:
        pg = _table(
            "Process groups", ("name", "left"), ("description", "left"), ("size", "right"), ("ranks", "left")
        )
        for p in s["process_groups"]:
            r = p["ranks"]
            pg.add_row(
                p["name"],
                p["desc"] or "-",
                str(len(r)),
                ", ".join(map(str, r[:32])) + (" ..." if len(r) > 32 else ""),
            )
        console.print(pg)
    else:
        console.print("Process groups: none recorded", style="bold")

    for note in s.get("notes") or []:
        console.print(f"warning: {note}", style="bold yellow", markup=False, highlight=False)
    for r in s["per_rank"]:
        dropped = r.get("dropped_dependencies") or {}
        if dropped:
            what = {
                "deps_on_absent_nodes": "on nodes not in the file",
                "deps_on_themselves": "of a node on itself",
            }
            parts = [f"{n:,} {what[k]}" for k, n in dropped.items()]
            console.print(f"note: rank {r['rank']}: dependencies dropped when read: {', '.join(parts)}")
    if len(s["per_rank"]) > 1:
        pr = _table(
            "Per rank",
            ("rank", "right"),
            ("nodes", "right"),
            ("span s", "right"),
            ("device", "left"),
            ("host", "left"),
            ("telemetry", "right"),
        )
        for r in s["per_rank"]:
            span = "-" if r["start_ns"] is None else f"{(r['end_ns'] - r['start_ns']) / 1e9:.6f}"
            dev = r["device_model"] or "-"
            if r["device_index"] is not None:
                dev += f" [{r['device_index']}]"
            pr.add_row(
                str(r["rank"]),
                f"{r['nodes']:,}",
                span,
                dev,
                r["hostname"] or "-",
                f"{r['telemetry_samples']:,}",
            )
        console.print(pr)
