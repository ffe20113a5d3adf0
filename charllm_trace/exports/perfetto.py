"""Export a :class:`~charllm_trace.core.model.Run` as a Chrome-trace JSON for the Perfetto UI.

Layout of the file:

- one *process* per rank (``pid`` = rank, named ``rank N`` plus the device model);
- one *thread* (track) per CPU thread and per GPU ``(device, stream)``, CPU threads
  first; thread ids are dense small integers and the real thread id / stream is in the
  track name (``CPU thread 4242``, ``GPU 0 stream 7``);
- every timed node is a complete event (``"ph": "X"``); its args carry the node id and,
  where set, the collective fields and the linking keys;
- slices nest on every track: a slice that partially overlaps another (Perfetto would drop it)
  goes, with its exact times, to an overlap track beside its thread or stream,
  ``CPU thread 4242 (overlaps)`` (the rule: :mod:`charllm_trace.exports.perfetto_layout`);
- a flow arrow (``"ph": "s"`` / ``"f"``, category ``launch``) from the begin of each GPU op's
  launch call (its ``runtime`` call, else its launching CPU op) to the begin of the GPU op
  (``kernel``, ``memcpy``, ``memset``), bound to those two slices; an arrow that would run
  backwards or bind to another slice is left out and counted;
- counter tracks (``"ph": "C"``) per GPU of the rank's telemetry: power (W),
  temperature (C), memory temperature (C), SM clock (MHz) and memory clock (MHz);
- with a :class:`~charllm_trace.analysis.results.CriticalPathResult`, one more track per
  rank, ``critical path (rank N)``, after the rank's other tracks: one slice per segment of
  the rank's whole-trace critical path (``segments`` rows of scope ``rank``, step null), named
  after the node whose time it is (or the category, for a wait or an idle gap; `` [rank M]``
  when the time is spent on another rank), category ``critical_path``, args ``category``,
  ``node_id``, ``seg_rank``. The segments are drawn as duration events (``"ph": "B"`` /
  ``"E"``, each end written before the next begin at the same time), so that the complete
  events stay exactly the trace's nodes, one each. The segments follow each other in time:
  they never overlap, so the track nests;
- with a :class:`~charllm_trace.analysis.pipeline_results.PipelineResult`, a track
  ``pipeline (rank N, stage S)`` per rank with labelled microbatches: phases and bubbles
  (:mod:`charllm_trace.exports.perfetto_pipeline`);
- for a run with CPU scheduler telemetry, a track per rank with its launching thread's
  running / runnable / sleeping slices (:mod:`charllm_trace.exports.perfetto_cpu`).

Times: Chrome-trace ``ts``/``dur`` are microseconds. We write them as exact decimal
literals with three fractional digits (nanosecond precision), relative to the run's
earliest timestamp, which is kept as ``otherData.origin_unix_ns``. Absolute Unix
microseconds would not survive a float64 parser at nanosecond precision.

The JSON is built column-wise with polars (no per-event Python loop).
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import polars as pl

from charllm_trace.analysis.pipeline_results import PipelineResult
from charllm_trace.analysis.results import CriticalPathResult
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import Run, Trace
from charllm_trace.exports.perfetto_cpu import state_track
from charllm_trace.exports.perfetto_critical import CRITICAL_TRACK, critical_track  # noqa: F401 - re-exported
from charllm_trace.exports.perfetto_layout import last_at_start, launch_flows, nest_lanes, overlap_label

#: (telemetry column, counter name, unit) written as counter tracks per GPU.
COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("power_w", "power", "W"),
    ("temp_c", "temperature", "C"),
    ("mem_temp_c", "memory temperature", "C"),
    ("sm_clock_mhz", "SM clock", "MHz"),
    ("mem_clock_mhz", "memory clock", "MHz"),
)

#: Node columns copied into each slice's args when not null.
_ARG_COLS = (
    "node_type",
    "coll_type",
    "comm_bytes",
    "dtype",
    "num_elems",
    "pg_name",
    "coll_seq",
    "peer",
    "root",
    "correlation",
    "external_id",
    "rf_id",
    "launch_id",
)


@dataclass(frozen=True)
class ExportStats:
    """What was written: counts a test (or the CLI) can check against the model."""

    ranks: int
    slices: int  # complete events
    counter_samples: int  # counter events (one value each)
    flows: int  # launch arrows (pairs of s/f events)
    tracks: int  # CPU threads + GPU streams (+ their overlap tracks, + critical-path tracks)
    skipped_untimed: int  # nodes without a start time (not placeable)
    origin_unix_ns: int
    critical_path_segments: int = 0  # B/E pairs on the "critical path (rank N)" tracks
    overlap_slices: int = 0  # slices moved to an overlap track (they partially overlap another)
    flows_backwards: int = 0  # arrows left out: the GPU op begins before its launch call
    flows_unbound: int = 0  # arrows left out: another slice begins with the call or the op


def _us(col: pl.Expr) -> pl.Expr:
    """Integer ns -> exact decimal µs literal ('12.345')."""
    return pl.concat_str(
        [(col // 1000).cast(pl.String), pl.lit("."), (col % 1000).cast(pl.String).str.zfill(3)]
    )


def _origin(run: Run) -> int | None:
    lows: list[int] = []
    for t in run:
        if t.meta.has_timestamps:
            v = t.nodes["start_ns"].min()
            if v is not None:
                lows.append(int(v))
        if t.telemetry.height:
            v = t.telemetry["time_ns"].min()
            if v is not None:
                lows.append(int(v))
    return min(lows) if lows else None


def _tracks(nodes: pl.DataFrame) -> pl.DataFrame:
    """One row per track: on_gpu, tid, device, stream -> out_tid (1-based) and label."""
    keys = (
        nodes.select(
            pl.col("on_gpu").fill_null(False),
            pl.when(pl.col("on_gpu")).then(None).otherwise(pl.col("tid")).alias("tid"),
            pl.when(pl.col("on_gpu")).then(pl.col("device")).otherwise(None).alias("device"),
            pl.when(pl.col("on_gpu")).then(pl.col("stream")).otherwise(None).alias("stream"),
        )
        .unique()
        .sort(["on_gpu", "tid", "device", "stream"], nulls_last=True)
    )
    return keys.with_columns(
        pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("out_tid"),
        pl.when(pl.col("on_gpu"))
        .then(
            pl.concat_str(
                [
                    pl.lit("GPU "),
                    pl.col("device").cast(pl.String).fill_null("?"),
                    pl.lit(" stream "),
                    pl.col("stream").cast(pl.String).fill_null("?"),
                ]
            )
        )
        .otherwise(pl.concat_str([pl.lit("CPU thread "), pl.col("tid").cast(pl.String).fill_null("?")]))
        .alias("label"),
    )


def _place(timed: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """The timed nodes of a rank in file order (start, longest first) with their track
    (``out_tid``) and whether each is the last slice of its track to begin at its start time
    (``_last``); the tracks (threads, streams and their overlap lanes: out_tid, label); how many
    slices went to an overlap lane."""
    base = _tracks(timed)
    # each node's track, on the key columns only (the node table is wide: joining or sorting it
    # copies every column), then one sort of the table
    out_tid = timed.select(
        pl.col("on_gpu").fill_null(False),
        pl.when(pl.col("on_gpu")).then(None).otherwise(pl.col("tid")).alias("_tid"),
        pl.when(pl.col("on_gpu")).then(pl.col("device")).otherwise(None).alias("_dev"),
        pl.when(pl.col("on_gpu")).then(pl.col("stream")).otherwise(None).alias("_str"),
    ).join(
        base.select(
            "on_gpu",
            pl.col("tid").alias("_tid"),
            pl.col("device").alias("_dev"),
            pl.col("stream").alias("_str"),
            "out_tid",
        ),
        on=["on_gpu", "_tid", "_dev", "_str"],
        how="left",
        nulls_equal=True,
        maintain_order="left",
    )["out_tid"]
    timed = timed.with_columns(
        pl.col("on_gpu").fill_null(False),
        out_tid,
        pl.col("dur_ns").fill_null(0).clip(lower_bound=0).alias("_dur"),
    ).sort(["start_ns", "_dur"], descending=[False, True])
    start = timed["start_ns"].to_numpy()
    tid = timed["out_tid"].to_numpy()
    lane = nest_lanes(tid, start, start + timed["_dur"].to_numpy())
    moved = int(np.count_nonzero(lane))
    tracks = base.select("out_tid", "label")
    if moved:  # overlap lanes: a track each, after the track they belong to
        key, inv = np.unique(tid * (int(lane.max()) + 1) + lane, return_inverse=True)
        tid = inv.reshape(-1).astype(np.int64) + 1
        labels = dict(zip(base["out_tid"].to_list(), base["label"].to_list(), strict=True))
        width = int(lane.max()) + 1
        rows = [(int(k) // width, int(k) % width) for k in key]  # one per track: tens, not millions
        tracks = pl.DataFrame(
            {
                "out_tid": pl.Series(range(1, len(rows) + 1), dtype=pl.Int64),
                "label": [labels[b] if ln == 0 else overlap_label(labels[b], ln) for b, ln in rows],
            }
        )
    timed = timed.with_columns(
        pl.Series("out_tid", tid, dtype=pl.Int64), pl.Series("_last", last_at_start(tid, start))
    )
    return timed, tracks, moved


def _meta_lines(pid: int, trace: Trace, rank_label: str, tracks: pl.DataFrame) -> list[str]:
    def ev(name: str, tid: int, args: dict) -> str:
        return orjson.dumps({"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}).decode()

    lines = [
        ev("process_name", 0, {"name": rank_label}),
        ev("process_sort_index", 0, {"sort_index": pid}),
    ]
    for row in tracks.iter_rows(named=True):  # one per track: tens, not millions
        lines.append(ev("thread_name", row["out_tid"], {"name": row["label"]}))
        lines.append(ev("thread_sort_index", row["out_tid"], {"sort_index": row["out_tid"]}))
    return lines


def _args_expr(nodes: pl.DataFrame) -> pl.Expr:
    """The args object of each slice: the node id, then every arg column that is set."""
    frags: list[pl.Expr] = [pl.lit('{"id":'), pl.col("id").cast(pl.String).fill_null("null")]
    for c in _ARG_COLS:
        if nodes[c].null_count() == nodes.height:
            continue  # never set in this trace
        if nodes.schema[c] == pl.String:  # '"c":"escaped value"'
            val = pl.struct(pl.col(c)).struct.json_encode().str.strip_prefix("{").str.strip_suffix("}")
            frag = pl.concat_str([pl.lit(","), val])
        else:
            frag = pl.concat_str([pl.lit(f',"{c}":'), pl.col(c).cast(pl.String)])
        frags.append(pl.when(pl.col(c).is_not_null()).then(frag))
    frags.append(pl.lit("}"))
    return pl.concat_str(frags, ignore_nulls=True)


def _slice_lines(nodes: pl.DataFrame, pid: int, origin: int) -> pl.Series:
    args = _args_expr(nodes)
    head = (
        pl.struct(pl.col("name").fill_null(""), pl.col("kind").fill_null("node").alias("cat"))
        .struct.json_encode()
        .str.strip_suffix("}")
    )
    rel = pl.col("start_ns") - origin
    return nodes.select(
        pl.concat_str(
            [
                head,
                pl.lit(f',"ph":"X","pid":{pid},"tid":'),
                pl.col("out_tid").cast(pl.String),
                pl.lit(',"ts":'),
                _us(rel),
                pl.lit(',"dur":'),
                _us(pl.col("dur_ns").fill_null(0).clip(lower_bound=0)),
                pl.lit(',"args":'),
                args,
                pl.lit("}"),
            ]
        ).alias("line")
    )["line"]


def _flow_lines(pairs: pl.DataFrame, pid: int, origin: int, first_id: int) -> pl.Series:
    """s/f pairs (bound to the enclosing slice) of the arrows of :func:`launch_flows`."""
    if pairs.is_empty():
        return pl.Series("line", [], dtype=pl.String)
    pairs = pairs.with_row_index("k")
    fid = (pl.col("k").cast(pl.Int64) + first_id).cast(pl.String)

    def line(head: str, end: str) -> pl.DataFrame:  # the start ("s") or finish ("f") of each arrow
        return pairs.select(
            pl.concat_str(
                [
                    pl.lit(f'{{"name":"launch","cat":"launch",{head},"pid":{pid},"tid":'),
                    pl.col(f"{end}_tid").cast(pl.String),
                    pl.lit(',"ts":'),
                    _us(pl.col(f"{end}_ns") - origin),
                    pl.lit(',"id":'),
                    fid,
                    pl.lit("}"),
                ]
            ).alias("line")
        )

    s = line('"ph":"s"', "s")
    f = line('"ph":"f","bp":"e"', "f")
    return pl.concat([s, f])["line"]


def _counter_lines(tel: pl.DataFrame, pid: int, origin: int) -> tuple[pl.Series, int]:
    parts: list[pl.DataFrame] = []
    for col, what, unit in COUNTERS:
        sub = tel.filter(
            pl.col(col).is_not_null() & pl.col(col).is_finite() & pl.col("time_ns").is_not_null()
        )
        if sub.is_empty():
            continue
        parts.append(
            sub.select(
                pl.concat_str(
                    [
                        pl.lit('{"name":"GPU'),
                        pl.col("device").cast(pl.String).fill_null("?"),
                        pl.lit(f' {what}","cat":"telemetry","ph":"C","pid":{pid},"ts":'),
                        _us(pl.col("time_ns") - origin),
                        pl.lit(f',"args":{{"{unit}":'),
                        pl.col(col).cast(pl.String),
                        pl.lit("}}"),
                    ]
                ).alias("line")
            )
        )
    if not parts:
        return pl.Series("line", [], dtype=pl.String), 0
    out = pl.concat(parts)["line"]
    return out, out.len()


def _pipeline_track(pipe: PipelineResult, rank: int, pid: int, tid: int, origin: int) -> list[str]:
    from charllm_trace.exports.perfetto_pipeline import PIPELINE_TRACK, pipeline_lines

    lines = pipeline_lines(pipe, rank, pid, tid, origin, _us)
    if lines.len() == 0:
        return []
    stage = pipe.stages.filter(pl.col("rank") == rank)["stage"][0]
    meta = [
        {
            "name": "thread_name",
            "ph": "M",
            "pid": pid,
            "tid": tid,
            "args": {"name": PIPELINE_TRACK.format(rank=pid, stage=stage)},
        },
        {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}},
    ]
    return [orjson.dumps(m).decode() for m in meta] + [lines.str.join(",\n").item()]


def write_chrome_trace(
    run: Run,
    path: str | os.PathLike[str],
    *,
    flows: bool = True,
    critical_path: CriticalPathResult | None = None,
    pipeline: PipelineResult | None = None,
    cpu_states: dict[int, pl.DataFrame] | None = None,
) -> ExportStats:
    """Write ``run`` as a Chrome-trace JSON (gzip-compressed when ``path`` ends in ``.gz``).

    ``critical_path`` (from :func:`charllm_trace.analysis.critical.critical_path` of the
    same run): each rank's whole-trace path is drawn on a track ``critical path (rank N)``.
    ``pipeline`` (``RunAnalysis.pipeline``): each stage's phases and bubbles on a track of its own
    (:mod:`charllm_trace.exports.perfetto_pipeline`). ``cpu_states``: per rank, its launching thread's
    states (``analysis.cpu_wait.thread_states``) on a track of their own (``exports/perfetto_cpu.py``).

    Raises :class:`InputError` when no rank has any timestamp (nothing to place on a
    timeline, e.g. a Chakra ET written by Chakra's own converter; pass it through
    :func:`charllm_trace.analysis.simulate` first to draw a simulated timeline).
    """
    origin = _origin(run)
    if origin is None:
        raise InputError(
            run.source,
            "no timestamps in any rank (e.g. a Chakra ET from Chakra's converter): nothing to place on a timeline",
        )
    chunks: list[str] = []
    simulated: list[int] = []
    c = _Counts()
    for idx, rank in enumerate(run.ranks):
        pid = rank if rank is not None else idx
        if run.traces[rank].meta.extra.get("simulated"):
            simulated.append(pid)
        chunks.extend(
            _rank_chunks(run.traces[rank], rank, pid, origin, c, flows, critical_path, pipeline, cpu_states)
        )
    other = orjson.dumps(
        {
            "origin_unix_ns": origin,
            "generator": "charllm-trace",
            "ranks": list(run.ranks),
            "simulated_ranks": simulated,  # times rebuilt from dependencies, not measured
        }
    ).decode()
    body = (
        '{"displayTimeUnit":"ns","otherData":' + other + ',"traceEvents":[\n' + ",\n".join(chunks) + "\n]}\n"
    )
    data = body.encode()
    p = Path(path)
    if p.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6)
    p.write_bytes(data)
    return ExportStats(
        ranks=len(run),
        slices=c.slices,
        counter_samples=c.counters,
        flows=c.flows,
        tracks=c.tracks,
        skipped_untimed=c.skipped,
        origin_unix_ns=origin,
        critical_path_segments=c.segments,
        overlap_slices=c.moved,
        flows_backwards=c.back,
        flows_unbound=c.unbound,
    )


@dataclass
class _Counts:
    """What ``write_chrome_trace`` wrote so far (the fields of :class:`ExportStats`)."""

    slices: int = 0
    counters: int = 0
    flows: int = 0
    tracks: int = 0
    skipped: int = 0
    segments: int = 0
    moved: int = 0
    back: int = 0
    unbound: int = 0


def _rank_chunks(
    trace: Trace,
    rank: int | None,
    pid: int,
    origin: int,
    c: _Counts,
    flows: bool,
    critical_path: CriticalPathResult | None,
    pipeline: PipelineResult | None,
    cpu_states: dict[int, pl.DataFrame] | None,
) -> list[str]:
    """The lines of one rank: its tracks' metadata, the extra tracks asked for, its slices, launch
    arrows and counters (counted in ``c``)."""
    chunks: list[str] = []
    nodes = trace.nodes
    if not trace.meta.has_timestamps:
        c.skipped += nodes.height
        nodes = nodes.clear()
    timed = nodes.with_row_index("orig").filter(pl.col("start_ns").is_not_null())
    c.skipped += nodes.height - timed.height
    timed, tracks, moved = _place(timed)
    c.tracks += tracks.height
    c.moved += moved
    label = f"rank {pid}"
    if trace.meta.device_model:
        label += f" ({trace.meta.device_model})"
    if trace.meta.extra.get("simulated"):
        label += " [simulated timeline]"
    chunks.extend(_meta_lines(pid, trace, label, tracks))
    top = int(tracks["out_tid"].max() or 0)
    if critical_path is not None and rank is not None:
        lines, n_seg = critical_track(critical_path, rank, pid, top + 1, origin, _us)
        if n_seg:
            c.tracks += 1
            c.segments += n_seg
            chunks.extend(lines)
    if pipeline is not None and rank is not None:
        chunks.extend(_pipeline_track(pipeline, rank, pid, top + 2, origin))
    if cpu_states is not None and rank in cpu_states:
        chunks.extend(state_track(cpu_states[rank], pid, top + 3, origin, _us))
    if timed.height:
        chunks.extend(_timed_lines(timed, pid, origin, c, flows))
    if trace.telemetry.height:
        cl, n = _counter_lines(trace.telemetry.sort(["device", "time_ns"]), pid, origin)
        if n:
            c.counters += n
            chunks.append(cl.str.join(",\n").item())
    return chunks


def _timed_lines(timed: pl.DataFrame, pid: int, origin: int, c: _Counts, flows: bool) -> list[str]:
    """The slices of a rank's timed nodes and, with ``flows``, their launch arrows."""
    sl = _slice_lines(timed, pid, origin)
    c.slices += sl.len()
    out = [sl.str.join(",\n").item()]
    if flows:
        pairs, back, unbound = launch_flows(timed)
        c.back += back
        c.unbound += unbound
        fl = _flow_lines(pairs, pid, origin, first_id=c.flows + 1)
        if fl.len():
            c.flows += fl.len() // 2
            out.append(fl.str.join(",\n").item())
    return out
