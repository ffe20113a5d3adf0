"""Exact synchronisation edges from Kineto's ``cuda_sync`` records (nodes of kind ``sync``).

With CUDA sync events enabled, Kineto writes one record per CUPTI synchronisation: name
"Stream Wait Event", "Event Sync", "Stream Sync" or "Context Sync", ``device``, ``stream``
(-1 for event and context syncs), ``correlation`` (the runtime call that synchronised:
``cudaStreamWaitEvent``, ``cudaEventSynchronize``, ``cudaStreamSynchronize``,
``cudaDeviceSynchronize``) and, for the two event kinds, ``wait_on_stream`` and
``wait_on_cuda_event_record_corr_id`` (the stream the event was recorded on and the
correlation id of the ``cudaEventRecord`` call that recorded it; the converter keeps both in
the node's ``attrs``). :func:`cuda_sync_edges` turns them into node-level edges:

- **Stream Wait Event** on stream S: the event captured every operation enqueued on stream Y
  (``wait_on_stream``) before the ``cudaEventRecord`` call; the last of them in stream order
  is the GPU op on Y whose launching runtime call started last before the record call began
  (from any thread: a stream is one queue). Every operation enqueued on S after the
  ``cudaStreamWaitEvent`` call waits for it; the first is the op on S whose launching call
  started first after the wait call began. Edge: that op's end -> the waiting op's start.
  (Launch order, not GPU time, picks the waiting op: an op queued on S before the wait can
  start after the wait call and does not wait. Where the wait call is not in the trace, the
  first op on S starting at or after the record's start is taken.)
- **Event Sync**: the CPU call returns once the recorded op ended: that op (found as above)
  -> the end of the ``cudaEventSynchronize`` call. Where the record call is not in the trace,
  the last op on ``wait_on_stream`` ending at or before the sync record's end.
- **Stream Sync**: the last op on the synced stream ending at or before the sync record's
  end -> the end of the ``cudaStreamSynchronize`` call.
- **Context Sync**: on every stream of the device, the last op ending at or before the
  record's end -> the end of the ``cudaDeviceSynchronize`` call (one edge per stream: any of
  them, made longer, would delay the call).

GPU ops are kernels, memcpys and memsets with timestamps; runtime calls are ``runtime``
nodes, matched by ``correlation`` (the first of each id). Ops and syncs are matched on the
same device. Edges within one stream (stream order says them already), and edges the
measured times contradict (the later point measured before the earlier one: a wrong
match), are left out. Everything is a handful of joins (``join_asof``); no per-event loop.
"""

from __future__ import annotations

import inspect

import polars as pl

#: Names of the cuda_sync records.
STREAM_WAIT_EVENT = "Stream Wait Event"
EVENT_SYNC = "Event Sync"
STREAM_SYNC = "Stream Sync"
CONTEXT_SYNC = "Context Sync"

#: GPU operation kinds that occupy a stream.
GPU_OP_KINDS = ("kernel", "memcpy", "memset")

EDGE_SCHEMA = {"src": pl.Int64, "src_end": pl.Boolean, "dst": pl.Int64, "dst_end": pl.Boolean}

_I64 = pl.Int64
#: the node columns read (a missing one counts as all null)
_COLUMNS = {
    "id": _I64,
    "name": pl.String,
    "kind": pl.String,
    "on_gpu": pl.Boolean,
    "device": pl.Int32,
    "stream": _I64,
    "start_ns": _I64,
    "dur_ns": _I64,
    "correlation": _I64,
    "attrs": pl.String,
}
#: polars >= 1.x warns that it cannot check sortedness of an as-of join with ``by``; ours are sorted
_HAS_CHECK_SORTEDNESS = "check_sortedness" in inspect.signature(pl.DataFrame.join_asof).parameters


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=EDGE_SCHEMA)


def _where_when(prefix: str) -> list[pl.Expr]:
    """A node's device and stream (-1: none) and its start and end as ``{prefix}_start`` and
    ``{prefix}_end``."""
    return [
        pl.col("device").cast(_I64).fill_null(-1).alias("device"),
        pl.col("stream").cast(_I64).fill_null(-1).alias("stream"),
        pl.col("start_ns").alias(f"{prefix}_start"),
        (pl.col("start_ns") + pl.col("dur_ns").fill_null(0)).alias(f"{prefix}_end"),
    ]


def _sync_records(nodes: pl.LazyFrame) -> pl.DataFrame:
    """The timed sync records with their waited-on stream and record correlation (from attrs)."""
    attrs = pl.col("attrs").fill_null("{}")
    return (
        nodes.filter((pl.col("kind") == "sync") & pl.col("start_ns").is_not_null())
        .select(
            pl.col("id").alias("sync_id"),
            pl.col("name").fill_null(""),
            *_where_when("s"),
            pl.col("correlation").alias("corr"),
            attrs.str.json_path_match("$.wait_on_stream").cast(_I64, strict=False).alias("wait_stream"),
            attrs.str.json_path_match("$.wait_on_cuda_event_record_corr_id")
            .cast(_I64, strict=False)
            .alias("rec_corr"),
        )
        .collect()
    )


def _runtime_calls(nodes: pl.LazyFrame) -> pl.DataFrame:
    """Runtime calls with a correlation id and times: the first of each correlation id."""
    return (
        nodes.filter(
            (pl.col("kind") == "runtime")
            & pl.col("correlation").is_not_null()
            & (pl.col("correlation") > 0)
            & pl.col("start_ns").is_not_null()
        )
        .select(
            pl.col("correlation").alias("corr"),
            pl.col("id").alias("rt_id"),
            pl.col("start_ns").alias("rt_start"),
            (pl.col("start_ns") + pl.col("dur_ns").fill_null(0)).alias("rt_end"),
        )
        .unique(subset="corr", keep="first", maintain_order=True)
        .collect()
    )


def _gpu_ops(nodes: pl.LazyFrame, rt: pl.DataFrame) -> pl.DataFrame:
    """Timed GPU ops with the start of their launching runtime call (``launch``; null: none)."""
    return (
        nodes.filter(
            pl.col("on_gpu").fill_null(False)
            & pl.col("kind").is_in(GPU_OP_KINDS)
            & pl.col("start_ns").is_not_null()
        )
        .select(
            pl.col("id").alias("op_id"),
            *_where_when("op"),
            pl.col("correlation").alias("corr"),
        )
        .collect()
        .join(rt.select("corr", pl.col("rt_start").alias("launch")), on="corr", how="left")
        .drop("corr")
    )


def _match(
    left: pl.DataFrame, t: str, stream: str, ops: pl.DataFrame, op_time: str, forward: bool, exact: bool
) -> pl.Series:
    """For each row of ``left``: the op on (its ``device``, its ``stream`` column) whose ``op_time``
    is the last before (``forward`` False) or the first after (True) the row's ``t``, ``exact``
    allowing equal times. Ties in ``op_time`` (a graph launch's ops share one launch call): the
    op that started last (backward) or first (forward)."""
    right = (
        ops.filter(pl.col(op_time).is_not_null())
        .select("device", pl.col("stream").alias("_s"), pl.col(op_time).alias("_t"), "op_id", "op_start")
        .sort("_t", "op_start", "op_id")
    )
    q = (
        left.select(
            pl.int_range(pl.len()).alias("_row"), "device", pl.col(stream).alias("_s"), pl.col(t).alias("_t")
        )
        .filter(pl.col("_t").is_not_null() & pl.col("_s").is_not_null())
        .sort("_t")
    )
    kw = {"check_sortedness": False} if _HAS_CHECK_SORTEDNESS else {}
    got = q.join_asof(
        right,
        on="_t",
        by=["device", "_s"],
        strategy="forward" if forward else "backward",
        allow_exact_matches=exact,
        **kw,
    )
    return _scatter(left.height, got)


def _scatter(n: int, got: pl.DataFrame) -> pl.Series:
    """The matched ``op_id`` of each of ``n`` rows (null where none), from the ``_row`` column."""
    out = pl.Series("op_id", [None] * n, dtype=_I64)
    if got.height:
        return out.scatter(got["_row"], got["op_id"])
    return out


def cuda_sync_edges(nodes: pl.DataFrame, tally: dict[str, int] | None = None) -> pl.DataFrame:
    """Node-level edges implied by the trace's ``cuda_sync`` records (module docstring).

    ``tally`` (if given) counts what was ignored: ``unrecorded`` event waits and syncs whose event
    no op in the trace was recorded for, with ``unrecorded_ns`` the time of those sync records, and
    ``contradicting`` edges the measured times contradict.

    Returns columns ``src``, ``src_end``, ``dst``, ``dst_end`` (node ids; ``*_end``: the edge
    leaves / reaches the node's end point, else its start), one row per distinct edge:
    GPU op end -> GPU op start (stream wait event) and GPU op end -> runtime call end (event,
    stream and context sync). Empty when the trace has no timed ``sync`` nodes.
    """
    if "kind" not in nodes.columns or nodes.height == 0:
        return _empty()
    lf = nodes.lazy().select(
        pl.col(c) if c in nodes.columns else pl.lit(None, dtype=t).alias(c) for c, t in _COLUMNS.items()
    )
    syncs = _sync_records(lf)
    if syncs.height == 0:
        return _empty()
    rt = _runtime_calls(lf)
    ops = _gpu_ops(lf, rt)
    if ops.height == 0:
        return _empty()
    syncs = (
        syncs.join(rt.select("corr", "rt_id", "rt_start", "rt_end"), on="corr", how="left")
        .join(
            rt.select(pl.col("corr").alias("rec_corr"), pl.col("rt_start").alias("rec_start")),
            on="rec_corr",
            how="left",
        )
        .with_columns(pl.when(pl.col("wait_stream") >= 0).then("wait_stream").alias("wait_stream"))
    )
    parts: list[pl.DataFrame] = []

    # the op the waited-on event captured: the last op enqueued on its stream before the record
    ev = syncs.filter(pl.col("name").is_in([STREAM_WAIT_EVENT, EVENT_SYNC]))
    if ev.height:
        ev = ev.with_columns(
            _match(ev, "rec_start", "wait_stream", ops, "launch", forward=False, exact=False).alias("src")
        )

        # (a) stream wait event: recorded op end -> start of the first op enqueued on S after the wait
        w = ev.filter(pl.col("name") == STREAM_WAIT_EVENT)
        if w.height:
            w = w.with_columns(
                pl.when(pl.col("rt_start").is_not_null())
                .then(_match(w, "rt_start", "stream", ops, "launch", forward=True, exact=False))
                .otherwise(_match(w, "s_start", "stream", ops, "op_start", forward=True, exact=True))
                .alias("dst")
            )
            _count_unrecorded(w, tally)
            parts.append(_edge_rows(w, "dst", src_end=True, dst_end=False))

        # (b) event sync: recorded op (else the last op on the event's stream) -> end of the call
        es = ev.filter((pl.col("name") == EVENT_SYNC) & pl.col("rt_id").is_not_null())
        if es.height:
            es = es.with_columns(
                pl.coalesce(
                    "src", _match(es, "s_end", "wait_stream", ops, "op_end", forward=False, exact=True)
                ).alias("src")
            )
            _count_unrecorded(es, tally)
            parts.append(_edge_rows(es, "rt_id", src_end=True, dst_end=True))

    # (b) stream sync: the last op on the stream that ended by the record's end -> end of the call
    ss = syncs.filter(
        (pl.col("name") == STREAM_SYNC) & pl.col("rt_id").is_not_null() & (pl.col("stream") >= 0)
    )
    if ss.height:
        ss = ss.with_columns(
            _match(ss, "s_end", "stream", ops, "op_end", forward=False, exact=True).alias("src")
        )
        parts.append(_edge_rows(ss, "rt_id", src_end=True, dst_end=True))

    # (b) context sync: the same on every stream of the device
    cs = syncs.filter((pl.col("name") == CONTEXT_SYNC) & pl.col("rt_id").is_not_null())
    if cs.height:
        streams = ops.select("device", pl.col("stream").alias("op_stream")).unique()
        cs = cs.join(streams, on="device", how="inner")
        if cs.height:
            cs = cs.with_columns(
                _match(cs, "s_end", "op_stream", ops, "op_end", forward=False, exact=True).alias("src")
            )
            parts.append(_edge_rows(cs, "rt_id", src_end=True, dst_end=True))

    if not parts:
        return _empty()
    edges = pl.concat(parts).drop_nulls(["src", "dst"]).filter(pl.col("src") != pl.col("dst"))
    kept = _consistent(edges, ops, rt)
    if tally is not None:
        tally["contradicting"] = tally.get("contradicting", 0) + kept.filter(~pl.col("_ok")).height
    kept = kept.filter(pl.col("_ok")).select(list(EDGE_SCHEMA))
    return kept.unique(maintain_order=True).cast(EDGE_SCHEMA)  # type: ignore[arg-type]


def _count_unrecorded(df: pl.DataFrame, tally: dict[str, int] | None) -> None:
    """Count the waits whose event was recorded for no op of the trace (``src`` null)."""
    if tally is None:
        return
    miss = df.filter(pl.col("src").is_null())
    tally["unrecorded"] = tally.get("unrecorded", 0) + miss.height
    ns = miss.select((pl.col("s_end") - pl.col("s_start")).sum()).item() if miss.height else 0
    tally["unrecorded_ns"] = tally.get("unrecorded_ns", 0) + int(ns or 0)


def _consistent(edges: pl.DataFrame, ops: pl.DataFrame, rt: pl.DataFrame) -> pl.DataFrame:
    """Edges within one stream left out; ``_ok`` false where the measured times contradict them."""
    ends = pl.concat([edges["src"], edges["dst"]]).unique().implode()
    pt = pl.concat(
        [
            ops.filter(pl.col("op_id").is_in(ends)).select(
                pl.col("op_id").alias("id"),
                "device",
                "stream",
                pl.col("op_start").alias("s"),
                pl.col("op_end").alias("e"),
            ),
            rt.filter(pl.col("rt_id").is_in(ends)).select(
                pl.col("rt_id").alias("id"),
                pl.lit(None, dtype=_I64).alias("device"),
                pl.lit(None, dtype=_I64).alias("stream"),
                pl.col("rt_start").alias("s"),
                pl.col("rt_end").alias("e"),
            ),
        ]
    )
    src = pt.rename({"id": "src", "device": "_sd", "stream": "_ss", "s": "_s0", "e": "_s1"})
    dst = pt.rename({"id": "dst", "device": "_dd", "stream": "_ds", "s": "_d0", "e": "_d1"})
    t_src = pl.when(pl.col("src_end")).then("_s1").otherwise("_s0")
    t_dst = pl.when(pl.col("dst_end")).then("_d1").otherwise("_d0")
    same_stream = (pl.col("_sd") == pl.col("_dd")) & (pl.col("_ss") == pl.col("_ds"))
    return (
        edges.join(src, on="src", how="left", maintain_order="left")
        .join(dst, on="dst", how="left", maintain_order="left")
        .filter(~same_stream.fill_null(False))
        .with_columns(_ok=(t_dst >= t_src).fill_null(True))
        .select([*EDGE_SCHEMA, "_ok"])
    )


def _edge_rows(df: pl.DataFrame, dst: str, *, src_end: bool, dst_end: bool) -> pl.DataFrame:
    """The edge columns (src, src_end, dst, dst_end) of ``df``; ``dst`` names its target column."""
    return df.select(
        "src", pl.lit(src_end).alias("src_end"), pl.col(dst).alias("dst"), pl.lit(dst_end).alias("dst_end")
    )


def sync_notes(tally: dict[str, int]) -> list[str]:
    """The notes of what :func:`cuda_sync_edges` ignored (its ``tally``)."""
    out = []
    if tally.get("unrecorded"):
        out.append(
            f"{tally['unrecorded']} waits on a CUDA event recorded for no op in the trace were ignored "
            f"(their sync records cover {tally.get('unrecorded_ns', 0) / 1e6:.3f} ms)"
        )
    if tally.get("contradicting"):
        out.append(
            f"{tally['contradicting']} synchronisation edges contradict the measured times (the waiting "
            "point measured before what it waited for) and were not used"
        )
    return out
