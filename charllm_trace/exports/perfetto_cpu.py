"""The thread-state track of a rank in the Perfetto export (``exports/perfetto.py``): the launching
thread's time cut into ``running`` / ``runnable`` (waiting for a core) / ``sleeping`` slices from
its scheduler samples (``collect --cpu-hz``). Drawing only: the slices come from
:func:`charllm_trace.analysis.cpu_wait.thread_states` (per sampling period the counters' increases,
drawn in that order: the order inside a period is not recorded). Drawn as duration events
(``"ph": "B"`` / ``"E"``) so that the complete events stay exactly the trace's nodes."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import polars as pl

#: Name of the thread-state track of a rank (its thread name in the file).
STATE_TRACK = "CPU thread {tid} state (rank {rank}; schedstat samples)"


def state_track(
    states: pl.DataFrame, pid: int, tid: int, origin: int, us: Callable[[pl.Expr], pl.Expr]
) -> list[str]:
    """The metadata and B/E lines of the track (nothing without slices). ``us``: the exporter's
    ns -> exact microseconds text expression builder."""
    if states.height == 0:
        return []
    name = STATE_TRACK.format(tid=int(states["tid"][0]), rank=pid)
    meta = [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}},
            {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]  # fmt: skip
    head = pl.concat_str([pl.lit('{"name":"'), pl.col("state"), pl.lit('","cat":"cpu_state","ph":"')])
    tail = pl.lit(f'","pid":{pid},"tid":{tid},"ts":')
    b = states.select(
        pl.col("start_ns").alias("t"), pl.lit(1).alias("o"),
        pl.concat_str([head, pl.lit("B"), tail, us(pl.col("start_ns") - origin), pl.lit("}")]).alias("line"),
    )  # fmt: skip
    e = states.select(
        pl.col("end_ns").alias("t"), pl.lit(0).alias("o"),
        pl.concat_str([head, pl.lit("E"), tail, us(pl.col("end_ns") - origin), pl.lit("}")]).alias("line"),
    )  # fmt: skip
    lines = pl.concat([b, e]).sort("t", "o")["line"]  # at one time: the end before the next begin
    return [orjson.dumps(m).decode() for m in meta] + [lines.str.join(",\n").item()]
