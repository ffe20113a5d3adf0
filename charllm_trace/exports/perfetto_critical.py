"""The critical-path track of a rank in the Perfetto export (:mod:`charllm_trace.exports.perfetto`):
one B/E pair per segment of the rank's whole-trace critical path, on a track of its own."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import polars as pl

from charllm_trace.analysis.results import CriticalPathResult

#: Name of the critical-path track of a rank (its thread name in the file).
CRITICAL_TRACK = "critical path (rank {rank})"


def critical_track(
    cp: CriticalPathResult, rank: int, pid: int, tid: int, origin: int, us: Callable[[pl.Expr], pl.Expr]
) -> tuple[list[str], int]:
    """The lines of ``rank``'s critical-path track on thread ``tid`` (its metadata, then the
    segments; none when the rank has no segment) and the number of segments. ``us``: the
    export's ns -> µs text expression."""
    seg = _rank_segments(cp, rank)
    if not seg.height:
        return [], 0
    lines = [
        orjson.dumps({"name": meta_name, "ph": "M", "pid": pid, "tid": tid, "args": meta_args}).decode()
        for meta_name, meta_args in (
            ("thread_name", {"name": CRITICAL_TRACK.format(rank=pid)}),
            ("thread_sort_index", {"sort_index": tid}),
        )
    ]
    lines.append(_critical_lines(seg, pid, tid, origin, us).str.join(",\n").item())
    return lines, seg.height


def _critical_lines(
    seg: pl.DataFrame, pid: int, tid: int, origin: int, us: Callable[[pl.Expr], pl.Expr]
) -> pl.Series:
    """A B/E pair per critical-path segment (``CRITICAL_SEGMENT_SCHEMA`` rows, in time order)."""
    name = pl.coalesce(pl.col("name"), pl.col("category"), pl.lit("?")) + pl.when(
        pl.col("seg_rank").is_not_null() & (pl.col("seg_rank") != pl.lit(pid))
    ).then(pl.concat_str([pl.lit(" [rank "), pl.col("seg_rank").cast(pl.String), pl.lit("]")])).otherwise(
        pl.lit("")
    )
    args = pl.struct(pl.col("category"), pl.col("node_id"), pl.col("seg_rank")).struct.json_encode()
    head = pl.struct(name.alias("name")).struct.json_encode().str.strip_suffix("}")
    b = pl.concat_str(
        [
            head,
            pl.lit(f',"cat":"critical_path","ph":"B","pid":{pid},"tid":{tid},"ts":'),
            us(pl.col("start_ns") - origin),
            pl.lit(',"args":'),
            args,
            pl.lit("}"),
        ]
    )
    e = pl.concat_str(
        [
            head,  # the end names its slice too (the format lets it be left out; readers differ)
            pl.lit(f',"cat":"critical_path","ph":"E","pid":{pid},"tid":{tid},"ts":'),
            us(pl.col("end_ns") - origin),
            pl.lit("}"),
        ]
    )
    # B0, E0, B1, E1, ...: each end before the next begin (they share a timestamp)
    return seg.select(pl.concat_list(b, e).alias("line")).explode("line")["line"]


def _rank_segments(cp: CriticalPathResult, rank: int) -> pl.DataFrame:
    """The segments of ``rank``'s whole-trace critical path, in time order."""
    return cp.segments.filter(
        (pl.col("scope") == "rank")
        & (pl.col("rank") == rank)
        & pl.col("step").is_null()
        & pl.col("start_ns").is_not_null()
        & pl.col("end_ns").is_not_null()
    ).sort("start_ns", "end_ns", maintain_order=True)
