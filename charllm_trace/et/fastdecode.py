"""Decoding the Node messages of a Chakra ET into the node and dependency tables.

One pass of the C scanner (``et/nodescan.py``) per part (files over ``SPLIT_BYTES`` are decoded
in two parts on two threads); attributes become columns (``et/attrs.py``, ``et/attrcols.py``,
``et/attrs_json.py``); strings never leave the file buffer (``et/_arrow.py``). With
``CHARLLM_TRACE_NATIVE=0`` (the tests' switch) the numpy oracle (``et/oracle.py``) scans instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.core.model import DEP_SCHEMA, NODE_SCHEMA, conform
from charllm_trace.et import conventions as cv
from charllm_trace.et._arrow import enum_column, view_column
from charllm_trace.et.attrcols import assign_attrs
from charllm_trace.et.attrs import K_STR, decode_attrs
from charllm_trace.et.attrs_json import null_column
from charllm_trace.et.nodescan import (
    PAD,
    TEXT_FIELDS,
    Corrupt,
    NodeScan,
    as_int64,
    check_text,
    scan_native,
    scanner,
    split_point,
    strings,
)

__all__ = ["PAD", "SPLIT_BYTES", "Corrupt", "NodeColumns", "decode_nodes"]


@dataclass
class NodeColumns:
    frame: pl.DataFrame
    deps: pl.DataFrame
    any_start: bool


def _kind_column(kind: np.ndarray) -> pl.Series:
    """The deps ``kind`` column (``DEP_SCHEMA``'s Enum) from 0 (ctrl) / 1 (data) codes."""
    return enum_column(kind, DEP_SCHEMA["kind"], "kind")


#: files with more node bytes than this are decoded in parallel parts (threads: the C scanner,
#: numpy and polars release the GIL for the heavy work)
SPLIT_BYTES = 64 << 20


def _caught(fn: Any, *args: Any) -> Any:
    """fn(*args), or the exception it raised (returned, not raised)."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the caller decides whether it counts
        return exc


def decode_nodes(data: np.ndarray, begin: int, size: int, *, ours: bool, path: Any = None) -> NodeColumns:
    """Decode the Node messages in ``data[begin:size]`` (the part after the GlobalMetadata)."""
    so = scanner()
    threads = min(2, os.cpu_count() or 1, int(os.environ.get("CHARLLM_TRACE_THREADS", "2")))
    mid = (
        split_point(so, data, begin, size)
        if so is not None and threads > 1 and size - begin > SPLIT_BYTES
        else -1
    )
    if mid < 0:
        parts = [_decode_part(data, begin, size, 1, ours, path)]
    else:
        from concurrent.futures import ThreadPoolExecutor

        # the first part ends before the first message that starts at or after mid; the second
        # starts at mid, numbering its messages from 1 until the first part's count is known
        with ThreadPoolExecutor(2) as ex:
            first = ex.submit(_decode_part, data, begin, size, 1, ours, path, mid)
            second = ex.submit(_caught, _decode_part, data, mid, size, 1, ours, path)
            p1 = first.result()  # the first part's errors come first, as in one pass
            p2 = second.result()
        n1, end1 = p1[0].height, p1[4]
        if end1 != mid:  # the guess was not a message boundary: decode the rest from the true one
            p2 = _decode_part(data, end1, size, 1 + n1, ours, path) if end1 < size else None
        elif isinstance(p2, Exception):
            if isinstance(p2, Corrupt) and p2.where > 0:
                p2.where += n1
            raise p2
        parts = [p1] if p2 is None else [p1, p2]
    any_start = any(bool((p[2] != 0).any()) for p in parts)
    if not ours:
        # Chakra's own times (µs), one chunk per part like every other column: a column chunked
        # differently would make polars copy the whole table into single chunks later
        for k, p in enumerate(parts):
            start = (
                pl.Series("start_ns", as_int64(p[2]) * 1000)
                if any_start
                else null_column("start_ns", len(p[2]), pl.Int64)
            )
            parts[k] = (p[0].with_columns(start, pl.Series("dur_ns", as_int64(p[3]) * 1000)), *p[1:])
    frame = pl.concat([conform(p[0], NODE_SCHEMA) for p in parts], rechunk=False)
    deps = pl.concat([p[1] for p in parts], rechunk=False)
    return NodeColumns(frame=frame, deps=deps, any_start=any_start)


def _decode_part(
    data: np.ndarray, begin: int, size: int, first_index: int, ours: bool, path: Any, stop: int | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, np.ndarray, np.ndarray, int]:
    """Decode the messages from ``begin`` up to the first one that starts at or after ``stop``.

    Returns (nodes, deps, start_us, dur_us, the position where the decoded messages end).
    """
    so = scanner()  # None only with CHARLLM_TRACE_NATIVE=0 (the tests' oracle); raises when missing
    if so is not None:
        sc = scan_native(so, data, begin, size, first_index, stop)
    else:
        sc = _scan_oracle(data, begin, size, first_index, path)  # one part: no split without C
    n = len(sc.id)
    end = sc.end
    # Everything that can find the input corrupt runs before any column is built.
    if sc.views is not None:  # the C scanner checked every text field as it passed
        for k, where in enumerate(TEXT_FIELDS):
            if sc.bad_text >> k & 1:
                raise Corrupt(-1, f"{where} is not valid UTF-8 text")
    else:
        assert sc.name_off is not None and sc.name_len is not None
        assert sc.io_off is not None and sc.io_len is not None
        check_text(data, sc.name_off, sc.name_len, TEXT_FIELDS[0])
        for k in range(6):
            check_text(data, sc.io_off[:, k], sc.io_len[:, k], TEXT_FIELDS[1 + k])
    at = decode_attrs(
        data, sc.attr_node, sc.names, sc.attr_code, sc.vfield, sc.vwt, sc.vval, sc.voff,
        first_index, sc.kind, sc.ival,
    )  # fmt: skip
    if sc.views is None:
        text_rows = np.flatnonzero(at.kind == K_STR)
        check_text(data, at.soff[text_rows], at.slen[text_rows], TEXT_FIELDS[7])

    def text(k: int, name: str) -> pl.Series:
        """Text field k (0 the name, 1-6 inputs/outputs values/shapes/types) of every node."""
        if sc.views is not None:
            return view_column(sc.views[k], data, name)
        assert sc.name_off is not None and sc.name_len is not None
        assert sc.io_off is not None and sc.io_len is not None
        off, ln = (sc.name_off, sc.name_len) if k == 0 else (sc.io_off[:, k - 1], sc.io_len[:, k - 1])
        return strings(data, off, ln, name, TEXT_FIELDS[k], validated=True)

    ids = as_int64(sc.id)
    cols: dict[str, Any] = {}
    cols["id"] = pl.Series("id", ids)
    cols["name"] = text(0, "name")
    tcode = np.where(sc.type < np.uint64(8), sc.type, 0).astype(np.int64)
    type_names = pl.Series("node_type", [cv.PB_TO_NODE_TYPE.get(i, "INVALID") for i in range(8)])
    cols["node_type"] = type_names.gather(tcode).alias("node_type")

    # --- dependencies ---------------------------------------------------------
    deps = pl.DataFrame({"node": sc.dep_node, "dep": sc.dep_val, "kind": _kind_column(sc.dep_kind)})

    # --- inputs / outputs ---------------------------------------------------------
    for w, col in enumerate(("inputs", "outputs")):
        parts = {sub: text(1 + w * 3 + k, sub) for k, sub in enumerate(("values", "shapes", "types"))}
        present = sc.io_present[:, w]
        s = pl.DataFrame(parts).select(pl.struct("values", "shapes", "types").alias(col)).to_series()
        if not present.all():
            s = pl.select(pl.when(pl.Series(present)).then(s).otherwise(None).alias(col)).to_series()
        cols[col] = s

    # --- attributes -----------------------------------------------------------------
    assign_attrs(at, cols, data, n, tcode, ours)

    frame = pl.DataFrame({k: v for k, v in cols.items() if v is not None})
    return frame, deps, sc.start_us, sc.dur_us, end


def _scan_oracle(data: np.ndarray, begin: int, size: int, first_index: int, path: Any) -> NodeScan:
    """The numpy oracle's scan of the same messages (``CHARLLM_TRACE_NATIVE=0``: the tests' switch)."""
    from charllm_trace.et.framing import message_bounds
    from charllm_trace.et.oracle import scan_numpy

    starts, lens = message_bounds(memoryview(data)[:size], path, start=begin)
    where = np.arange(first_index, first_index + len(starts), dtype=np.int64)
    sc = scan_numpy(data, starts, lens, where)
    sc.end = size
    return sc
