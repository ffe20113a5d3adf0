"""The ``attrs`` column: the JSON text of each node's attributes that did not become columns.

Built by the C scanner (``et_json``) in one pass into string views; with
``CHARLLM_TRACE_NATIVE=0`` (the tests' oracle), or when a node repeats an attribute name, by
polars expressions (the last value wins, at the first key's place, like a dict).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import polars as pl

from charllm_trace.et import conventions as cv
from charllm_trace.et._arrow import STEP, alloc, view_column
from charllm_trace.et.attrs import K_BOOL, K_INT, K_NONE, K_PY, K_STR, Attrs
from charllm_trace.et.nodescan import PAD, Corrupt, ptr, scanner, strings


def null_column(name: str, n: int, dtype: pl.DataType) -> pl.Series:
    """A column of ``n`` nulls (built without a Python list)."""
    return pl.Series(name, dtype=dtype).extend_constant(None, n)


def _attrs_json_native(
    so: Any,
    at: Attrs,
    consumed: np.ndarray,
    is_json_name: np.ndarray,
    keys: list[str],
    data: np.ndarray,
    n: int,
) -> pl.Series | None:
    """The attrs column built by the C scanner; None when a node repeats a key."""
    keyb = [k.encode() for k in keys]
    keyoff = np.zeros(len(keyb) + 1, np.int64)
    keyoff[1:] = np.cumsum([len(k) for k in keyb])
    keybuf = np.frombuffer(b"".join(keyb) + b"\0", np.uint8)
    # values only Python can render (floats, lists, bytes, huge ints), in attribute order
    pyparts = [orjson.dumps(at.pyval[r]) for r in sorted(at.pyval) if not consumed[r]]
    pyoff = np.zeros(len(pyparts) + 1, np.int64)
    np.cumsum([len(b) for b in pyparts], out=pyoff[1:])
    pybuf = np.frombuffer(b"".join(pyparts) + b"\0", np.uint8)
    skip = np.ascontiguousarray(consumed).view(np.uint8)
    node32 = np.ascontiguousarray(at.node, np.int32)
    json_code = np.ascontiguousarray(is_json_name, dtype=np.uint8)
    args = [
        ptr(data), len(at.node), ptr(skip), ptr(node32), ptr(at.kind), ptr(at.ival), ptr(at.soff),
        ptr(at.slen), ptr(at.code), ptr(json_code), ptr(keybuf), ptr(keyoff), ptr(pybuf), ptr(pyoff),
    ]  # fmt: skip
    # one pass into a buffer sized by an upper bound (untouched pages cost nothing)
    bound = so.et_json(*args, None, None, None, STEP)
    out = alloc(bound + PAD, np.uint8)
    views = np.zeros((n, 16), np.uint8)
    valid = np.zeros((n + 7) // 8, np.uint8)
    size = so.et_json(*args, ptr(out), ptr(views), ptr(valid), STEP)
    if size == -12:
        raise Corrupt(-1, "the attributes of one node make 1 GiB of JSON or more")
    if size < 0:
        return None
    out[size : size + PAD] = 0
    present = np.unpackbits(valid, count=n, bitorder="little").view(bool)
    # built from checked text, ASCII and orjson output: valid UTF-8 by construction
    return view_column(views, out[: size + PAD], "attrs", present)


def attrs_json(
    at: Attrs, consumed: np.ndarray, data: np.ndarray, n: int, raw: dict[int, str], ours: bool
) -> pl.Series:
    """The attrs JSON text of every node from its attributes that did not become columns."""
    out = null_column("attrs", n, pl.String)
    # the JSON key of every attribute name, and whether its value is JSON text already
    keys: list[str] = []
    is_json_name = np.zeros(len(at.names), dtype=bool)
    for c, name in enumerate(at.names):
        key = name
        if ours and name.startswith(cv.A_JSON):
            key = name[len(cv.A_JSON) :]
            is_json_name[c] = True
        elif ours and name.startswith(cv.A_ESCAPED):
            key = name[len(cv.A_ESCAPED) :]
        keys.append(orjson.dumps(key).decode())
    so = scanner()
    native = _attrs_json_native(so, at, consumed, is_json_name, keys, data, n) if so is not None else None
    rows = np.flatnonzero(~consumed) if native is None else np.empty(0, np.int64)
    if native is not None:
        out = native
    if rows.size:
        code = at.code[rows]
        kind = at.kind[rows]
        rawjson = is_json_name[code] & (kind == K_STR)
        kind = np.where(rawjson, 5, kind)
    if rows.size:
        svals = strings(
            data,
            np.where((kind == K_STR) | (kind == 5), at.soff[rows], 0),
            np.where((kind == K_STR) | (kind == 5), at.slen[rows], 0),
            "s",
            "an attribute value",
            validated=True,
        )
        py = [None] * len(rows)
        prow = np.flatnonzero(kind == K_PY)
        for j in prow.tolist():
            py[j] = orjson.dumps(at.pyval[int(rows[j])]).decode()
        df = pl.DataFrame(
            {
                "node": at.node[rows],
                "key": pl.Series(keys).gather(pl.Series(code)),
                "kind": kind,
                "ival": at.ival[rows],
                "s": svals,
                "py": pl.Series(py, dtype=pl.String),
            }
        )
        esc = pl.struct("s").struct.json_encode().str.strip_prefix('{"s":').str.strip_suffix("}")
        val = (
            pl.when(pl.col("kind") == K_INT)
            .then(pl.col("ival").cast(pl.String))
            .when(pl.col("kind") == K_BOOL)
            .then(pl.when(pl.col("ival") != 0).then(pl.lit("true")).otherwise(pl.lit("false")))
            .when(pl.col("kind") == K_STR)
            .then(esc)
            .when(pl.col("kind") == 5)
            .then(pl.col("s"))
            .when(pl.col("kind") == K_NONE)
            .then(pl.lit("null"))
            .otherwise(pl.col("py"))
        )
        frag = df.select(
            pl.col("node"), pl.col("key"), pl.concat_str(pl.col("key"), pl.lit(":"), val).alias("f")
        )
        if frag.select(pl.struct("node", "key").is_duplicated().any()).item():
            # a key twice in one node: the last value wins, at the first key's place (like a dict)
            frag = (
                frag.with_row_index("_i")
                .group_by("node", "key", maintain_order=True)
                .agg(pl.col("_i").first(), pl.col("f").last())
                .sort("_i")
                .drop("_i")
            )
        g = frag.group_by("node", maintain_order=True).agg(pl.col("f").str.join(","))
        texts = g.select(pl.concat_str(pl.lit("{"), pl.col("f"), pl.lit("}"))).to_series()
        out = out.scatter(g["node"], texts)
    if raw:
        idx = list(raw)
        out = out.scatter(idx, pl.Series([raw[i] for i in idx], dtype=pl.String))
    return out
