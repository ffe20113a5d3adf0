"""Attribute rows into the node table's columns (``tid``, ``stream``, ``coll_type`` ...) and the
``attrs`` JSON text of the rest; ``charllm.null`` markers applied last."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import polars as pl

from charllm_trace.et import conventions as cv
from charllm_trace.et._arrow import primitive_column
from charllm_trace.et.attrs import K_BOOL, K_INT, K_STR, Attrs
from charllm_trace.et.attrs_json import attrs_json, null_column
from charllm_trace.et.nodescan import ptr, scanner, strings


def int_series(name: str, values: np.ndarray, present: np.ndarray | None, dtype: pl.DataType) -> pl.Series:
    """An Int64 or Boolean column of ``values``, null where ``present`` is False (no copy)."""
    want = np.bool_ if dtype == pl.Boolean else np.int64
    return primitive_column(name, values.astype(want, copy=False), present)


def _rows_by_code(at: Attrs, codes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(rows, starts): the attribute rows whose name code is in ``codes``, grouped by code.

    The rows of code c are ``rows[starts[c] : starts[c + 1]]``, in ascending order.
    """
    ncodes = len(at.names)
    want = np.zeros(max(1, ncodes), np.uint8)
    want[codes] = 1
    code = np.ascontiguousarray(at.code, np.int32)
    so = scanner()
    if so is not None:
        starts = np.zeros(ncodes + 1, np.int64)
        so.et_group(ptr(code), len(code), ptr(want), ncodes, ptr(starts), None)
        rows = np.empty(int(starts[-1]), np.int64)
        so.et_group(ptr(code), len(code), ptr(want), ncodes, ptr(starts), ptr(rows))
        return rows, starts
    counts = np.bincount(code, minlength=ncodes) if len(code) else np.zeros(ncodes, np.int64)
    sel = np.flatnonzero(want[code]) if len(code) else np.empty(0, np.int64)
    rows = sel[np.argsort(code[sel], kind="stable")]
    starts = np.zeros(ncodes + 1, np.int64)
    np.cumsum(np.where(want[:ncodes] != 0, counts, 0), out=starts[1:])
    return rows, starts


def assign_attrs(
    at: Attrs, cols: dict[str, Any], data: np.ndarray, n: int, ntype: np.ndarray, ours: bool
) -> None:
    """Turn attribute rows into model columns; unmapped ones into the ``attrs`` JSON text."""
    int_targets, str_targets = _targets(ours)
    rd = _AttrRows(at, cols, n, _names_read(int_targets, str_targets, ours))
    _read_ints(rd, int_targets, ntype)
    str_cols = _read_strings(rd, str_targets)
    # our list/null/raw markers: rare, handled with Python values
    nulls: list[tuple[int, str]] = []
    raw: dict[int, str] = {}
    lists: dict[str, dict[int, Any]] = {"in_split": {}, "out_split": {}}
    if ours:
        _read_markers(rd, data, lists, nulls, raw)
    # --- build the columns ---------------------------------------------------------
    _int_columns(cols, n, ours)
    _string_columns(cols, str_cols, data, n)
    if not ours:
        _chakra_kinds(cols, ntype)
    for col in ("in_split", "out_split"):
        if lists[col]:
            vals: list[Any] = [None] * n
            for i, v in lists[col].items():
                vals[i] = v
            cols[col] = pl.Series(col, vals, dtype=pl.List(pl.Int64))
    # --- the attrs JSON text ------------------------------------------------------------
    cols["attrs"] = attrs_json(at, rd.consumed, data, n, raw, ours)
    apply_nulls(cols, nulls, n)


def _targets(ours: bool) -> tuple[dict[str, str], dict[str, str]]:
    """Attribute name -> column, for the integer and the string columns."""
    int_targets: dict[str, str] = {
        cv.A_TID: "tid",
        cv.A_STREAM: "stream",
        cv.A_RF_ID: "rf_id",
        cv.A_COMM_SIZE: "comm_bytes",
    }
    str_targets: dict[str, str] = {cv.A_PG_NAME: "pg_name"}
    if ours:
        int_targets.update({name: col for col, (name, _) in cv.NODE_INT_ATTRS.items()})
        int_targets[cv.A_PEER] = "peer"
        str_targets.update({name: col for col, name in cv.NODE_STR_ATTRS.items()})
        str_targets[cv.A_COLL_TYPE] = "coll_type"
    return int_targets, str_targets


def _names_read(int_targets: dict[str, str], str_targets: dict[str, str], ours: bool) -> list[str]:
    """Every attribute name read by ``assign_attrs``."""
    used = [*int_targets, *str_targets, cv.A_IS_CPU_OP, cv.A_COMM_TYPE, cv.A_COMM_SRC, cv.A_COMM_DST]
    if ours:
        used += [cv.A_IN_SPLIT, cv.A_OUT_SPLIT, cv.A_IN_SPLIT + ".json", cv.A_OUT_SPLIT + ".json"]
        used += [cv.A_NULLS, cv.A_ATTRS_RAW, cv.A_PRESENT]
    return used


class _AttrRows:
    """The attribute rows of the names read, grouped in one pass; which rows became columns."""

    def __init__(self, at: Attrs, cols: dict[str, Any], n: int, used: list[str]) -> None:
        self.at, self.cols, self.n = at, cols, n
        self.consumed = np.zeros(len(at.node), dtype=bool)
        self.code_of = {name: c for c, name in enumerate(at.names)}
        self.grouped, self.starts = _rows_by_code(at, [self.code_of[u] for u in used if u in self.code_of])

    def named(self, name: str) -> np.ndarray:
        c = self.code_of.get(name)
        if c is None:
            return np.empty(0, np.int64)
        return self.grouped[self.starts[c] : self.starts[c + 1]]

    def put_int(self, col: str, rows: np.ndarray, values: np.ndarray) -> None:
        n, at = self.n, self.at
        arr, present = self.cols.get("__int_" + col, (np.zeros(n, np.int64), np.zeros(n, bool)))
        arr[at.node[rows]] = values
        present[at.node[rows]] = True
        self.cols["__int_" + col] = (arr, present)
        self.consumed[rows] = True


def _read_ints(rd: _AttrRows, int_targets: dict[str, str], ntype: np.ndarray) -> None:
    at = rd.at
    send = cv.NODE_TYPE_TO_PB["COMM_SEND"]
    recv = cv.NODE_TYPE_TO_PB["COMM_RECV"]
    for name, col in int_targets.items():
        r = rd.named(name)
        r = r[at.kind[r] == K_INT]
        if r.size:
            rd.put_int(col, r, at.ival[r])
    # is_cpu_op: bool (or an int, as Chakra's feeder accepts)
    r = rd.named(cv.A_IS_CPU_OP)
    r = r[(at.kind[r] == K_BOOL) | (at.kind[r] == K_INT)]
    if r.size:
        rd.put_int("__cpu", r, (at.ival[r] != 0).astype(np.int64))
    # comm_type enum -> coll_type (unknown enum values stay in attrs)
    r = rd.named(cv.A_COMM_TYPE)
    r = r[(at.kind[r] == K_INT) & np.isin(at.ival[r], list(cv.COMM_TYPE_TO_COLL))]
    if r.size:
        rd.put_int("__comm_type", r, at.ival[r])
    # comm_src / comm_dst carry the peer on send/recv nodes
    for name, ntp in ((cv.A_COMM_DST, send), (cv.A_COMM_SRC, recv)):
        r = rd.named(name)
        r = r[(at.kind[r] == K_INT) & (ntype[at.node[r]] == ntp)]
        if r.size:
            rd.put_int("peer", r, at.ival[r])
    for name, ntp in ((cv.A_COMM_SRC, send), (cv.A_COMM_DST, recv)):
        r = rd.named(name)
        r = r[(at.kind[r] == K_INT) & (ntype[at.node[r]] == ntp)]
        rd.consumed[r] = True  # our own rank: known from the metadata


def _read_strings(
    rd: _AttrRows, str_targets: dict[str, str]
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Column -> (offsets, lengths, present) of its string values in the file's bytes."""
    at, n = rd.at, rd.n
    str_cols: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, col in str_targets.items():
        r = rd.named(name)
        r = r[at.kind[r] == K_STR]
        if r.size:
            off = np.zeros(n, np.int64)
            ln = np.zeros(n, np.int64)
            present = np.zeros(n, bool)
            off[at.node[r]] = at.soff[r]
            ln[at.node[r]] = at.slen[r]
            present[at.node[r]] = True
            str_cols[col] = (off, ln, present)
            rd.consumed[r] = True
    return str_cols


def _read_markers(
    rd: _AttrRows,
    data: np.ndarray,
    lists: dict[str, dict[int, Any]],
    nulls: list[tuple[int, str]],
    raw: dict[int, str],
) -> None:
    """Our writer's list, ``charllm.null`` and raw-attrs markers (into ``lists``, ``nulls``, ``raw``)."""
    at = rd.at
    for name, col, is_json in (
        (cv.A_IN_SPLIT, "in_split", False),
        (cv.A_OUT_SPLIT, "out_split", False),
        (cv.A_IN_SPLIT + ".json", "in_split", True),
        (cv.A_OUT_SPLIT + ".json", "out_split", True),
    ):
        for r in rd.named(name).tolist():
            if is_json and at.kind[r] == K_STR:
                try:
                    lists[col][int(at.node[r])] = orjson.loads(_str_at(data, at, r))
                except orjson.JSONDecodeError:
                    continue  # not ours after all: kept verbatim in attrs
                rd.consumed[r] = True
            elif not is_json and isinstance(at.pyval.get(r), list):
                lists[col][int(at.node[r])] = at.pyval[r]
                rd.consumed[r] = True
    for r in rd.named(cv.A_NULLS).tolist():
        v = at.pyval.get(r)
        if isinstance(v, list):
            nulls.extend((int(at.node[r]), c) for c in v)
            rd.consumed[r] = True
    for r in rd.named(cv.A_ATTRS_RAW).tolist():
        if at.kind[r] == K_STR:
            raw[int(at.node[r])] = _str_at(data, at, r)
            rd.consumed[r] = True
    rd.consumed[rd.named(cv.A_PRESENT)] = True


def _int_columns(cols: dict[str, Any], n: int, ours: bool) -> None:
    """The integer columns and ``on_gpu`` from the values put by ``_read_ints``."""

    def int_col(col: str, dtype: pl.DataType) -> pl.Series:
        v = cols.pop("__int_" + col, None)
        if v is None:
            return null_column(col, n, dtype)
        return int_series(col, v[0], v[1], dtype)

    for col in ("tid", "stream", "rf_id", "comm_bytes", "peer", *cv.NODE_INT_ATTRS):
        if col in ("start_ns", "dur_ns") and not ours:
            cols.pop("__int_" + col, None)
            continue
        cols[col] = int_col(col, pl.Int64)
    cpu = cols.pop("__int___cpu", None)
    if cpu is None:
        cols["on_gpu"] = null_column("on_gpu", n, pl.Boolean)
    else:
        cols["on_gpu"] = int_series("on_gpu", cpu[0] == 0, cpu[1], pl.Boolean)


def _string_columns(
    cols: dict[str, Any],
    str_cols: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    data: np.ndarray,
    n: int,
) -> None:
    """The string columns; ``coll_type`` falls back on the ``comm_type`` enum."""
    ct = cols.pop("__int___comm_type", None)
    coll_names = pl.Series([cv.COMM_TYPE_TO_COLL.get(i) for i in range(max(cv.COMM_TYPE_TO_COLL) + 1)])
    if ct is None:
        coll = null_column("coll_type", n, pl.String)
    else:
        coll = pl.select(
            pl.when(pl.Series(ct[1]))
            .then(coll_names.gather(pl.Series(ct[0])))
            .otherwise(None)
            .alias("coll_type")
        ).to_series()
    for col in ("pg_name", "kind", "dtype", "coll_type"):
        if col in str_cols:
            off, ln, present = str_cols[col]
            s = strings(data, off, ln, col, col, validated=True)  # checked with the attribute values
            s = pl.select(pl.when(pl.Series(present)).then(s).otherwise(None).alias(col)).to_series()
        else:
            s = null_column(col, n, pl.String)
        if col == "coll_type":
            s = pl.select(pl.coalesce(s, coll).alias(col)).to_series()
        cols[col] = s


def _chakra_kinds(cols: dict[str, Any], ntype: np.ndarray) -> None:
    """Chakra writes no collective type on send/recv nodes (the node type says it) and no kind."""
    send = cv.NODE_TYPE_TO_PB["COMM_SEND"]
    recv = cv.NODE_TYPE_TO_PB["COMM_RECV"]
    nt = pl.Series(ntype)
    cols["coll_type"] = pl.select(
        pl.when(cols["coll_type"].is_not_null())
        .then(cols["coll_type"])
        .when(nt == send)
        .then(pl.lit("send"))
        .when(nt == recv)
        .then(pl.lit("recv"))
        .alias("coll_type")
    ).to_series()
    cols["kind"] = pl.select(
        pl.when(cols["on_gpu"])
        .then(pl.lit("kernel"))
        .when(~cols["on_gpu"])
        .then(pl.lit("cpu_op"))
        .alias("kind")
    ).to_series()


def apply_nulls(cols: dict[str, Any], nulls: list[tuple[int, str]], n: int) -> None:
    """Null out the cells our writer listed in ``charllm.null`` (columns and struct fields)."""
    by_col: dict[str, list[int]] = {}
    for i, c in nulls:
        by_col.setdefault(c, []).append(i)
    for c, idx in by_col.items():
        mask = np.zeros(n, dtype=bool)
        mask[idx] = True
        m = pl.Series(mask)
        if "." in c:
            fld, sub = c.split(".", 1)
            s = cols.get(fld)
            if s is None or s.dtype != pl.Struct or sub not in ("values", "shapes", "types"):
                continue
            parts = s.struct.unnest().with_columns(
                pl.when(m).then(None).otherwise(pl.col(sub)).cast(pl.String).alias(sub)
            )
            rebuilt = parts.select(pl.struct("values", "shapes", "types").alias(fld)).to_series()
            cols[fld] = pl.select(
                pl.when(s.is_not_null()).then(rebuilt).otherwise(None).alias(fld)
            ).to_series()
        elif c in cols and isinstance(cols[c], pl.Series):
            s = cols[c]
            cols[c] = pl.select(pl.when(m).then(None).otherwise(s).alias(c)).to_series()


def _str_at(data: np.ndarray, at: Attrs, r: int) -> str:
    return data[at.soff[r] : at.soff[r] + at.slen[r]].tobytes().decode("utf-8")
