"""The file formats :mod:`charllm_trace.sanitize` reads and writes, and what it cleans in each.

JSON (``.json``, ``.json.gz``: manifests, host execution traces, Kineto profiles), line-delimited
JSON (``.jsonl``, ``.ndjson``), CSV (every line scrubbed as text, id columns remapped: ``csv_ids``), Parquet and Arrow IPC tables;
Chakra ET files are in :mod:`charllm_trace.sanitize.chakra_et`. Each format has a ``collect``
step (learn host and user names from its headers) and a ``clean`` step (the cleaned bytes), both
through :func:`collect` and :func:`clean`; the rules themselves are in
:mod:`charllm_trace.sanitize.rules`.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any

import orjson

from charllm_trace.core.alloc import gc_paused
from charllm_trace.core.errors import InputError
from charllm_trace.core.files import GZIP_MAGIC, gunzip, read_regular
from charllm_trace.sanitize import chakra_et
from charllm_trace.sanitize.csv_ids import csv_clean, csv_collect
from charllm_trace.sanitize.rules import (
    DROP_KEYS,
    HOST_KEYS,
    ID_KEYS,
    KINETO_DROP,
    USER_KEYS,
    USER_TOKEN,
    Scrubber,
    collect_json,
)


def kind_of(name: str) -> str | None:
    n = name.lower()
    if n.endswith(".gz"):
        n = n[:-3]
    for ext, kind in (
        (".json", "json"),
        (".jsonl", "jsonl"),
        (".ndjson", "jsonl"),
        (".csv", "csv"),
        (".parquet", "parquet"),
        (".arrow", "ipc"),
        (".ipc", "ipc"),
        (".feather", "ipc"),
        (".et", "et"),
    ):
        if n.endswith(ext):
            return kind
    return None


def _first_byte_ok(path: Path, head: bytes) -> None:
    """The decompressed start must be what the name says (JSON text, not zeros), checked before the rest."""
    kind = kind_of(path.name.removesuffix(".gz").removesuffix(".GZ"))
    first = head.lstrip()[:1]
    if kind in ("json", "jsonl") and head.strip() and first not in (b"{", b"["):
        raise InputError(path, f"not {kind.upper()} (decompressed data starts with {head[:8]!r})")


def read(path: Path) -> bytes:
    """The bytes of ``path`` (a regular file), gzip decompressed within
    :func:`charllm_trace.core.limits.gzip_out_limit`; JSON names must start with JSON text."""
    raw = read_regular(path)
    if raw[:2] != GZIP_MAGIC:
        return raw
    return gunzip(raw, path, check_head=lambda head: _first_byte_ok(path, head))


def write(path: Path, data: bytes, gz: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, compresslevel=6, mtime=0) if gz else data)


def load_json(path: Path, data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc})") from exc


def clean_json_doc(sc: Scrubber, doc: Any) -> Any:
    if isinstance(doc, dict) and "traceEvents" in doc:
        for k in KINETO_DROP:
            if k in doc:
                doc = {kk: vv for kk, vv in doc.items() if kk != k}
                sc.report.keys_dropped += 1
    return sc.clean(doc)


# ---- tables ---------------------------------------------------------------


def _table_read(kind: str, data: bytes):  # -> pl.DataFrame
    import polars as pl

    from charllm_trace.core.ipc_bounds import decoded_bytes
    from charllm_trace.core.limits import gzip_out_limit
    from charllm_trace.core.parquet_bounds import decoded_bytes as parquet_bytes

    # NotIpc / NotParquet (ValueErrors) when the file is not what its name says
    size = (parquet_bytes if kind == "parquet" else decoded_bytes)(data)
    limit = gzip_out_limit(len(data))
    if size > limit:  # a zstd frame of zeros: bounded like gzip, read from the frame's own metadata
        raise _Bomb(f"decodes to {size:,} bytes, past the limit of {limit:,} for this file")
    return pl.read_parquet(io.BytesIO(data)) if kind == "parquet" else pl.read_ipc(io.BytesIO(data))


class _Bomb(Exception):
    """A table whose decoded size is past the limit (the message says how far)."""


def table_clean(sc: Scrubber, kind: str, path: Path, data: bytes) -> bytes:
    import polars as pl

    try:
        df = _table_read(kind, data)
    except _Bomb as exc:
        raise InputError(path, str(exc)) from None
    except Exception as exc:
        raise InputError(path, f"cannot read as {kind} ({type(exc).__name__})") from exc
    drop = [c for c in df.columns if c.lower() in DROP_KEYS]
    if drop:
        sc.report.keys_dropped += len(drop)
        df = df.drop(drop)
    exprs = []
    for c, dt in df.schema.items():
        if c.lower() in ID_KEYS and dt.is_integer():
            for v in df[c].drop_nulls().unique().to_list():
                sc.add_id(v)
            exprs.append(pl.col(c).map_elements(sc.id_of, return_dtype=dt))
        elif dt == pl.String:
            if c.lower() in HOST_KEYS:
                for v in df[c].drop_nulls().unique().to_list():
                    sc.add_host(v)
                exprs.append(pl.col(c).map_elements(sc.host_value, return_dtype=pl.String))
            elif c.lower() in USER_KEYS:
                exprs.append(pl.when(pl.col(c).is_not_null()).then(pl.lit(USER_TOKEN)).alias(c))
            else:
                exprs.append(pl.col(c).map_elements(sc.text, return_dtype=pl.String))
    if exprs:
        df = df.with_columns(exprs)
    df = df.rename({c: sc.text(c) for c in df.columns})
    buf = io.BytesIO()
    if kind == "parquet":
        df.write_parquet(buf)
    else:
        df.write_ipc(buf)
    return buf.getvalue()


def table_collect(sc: Scrubber, kind: str, data: bytes) -> None:
    import polars as pl

    try:
        df = _table_read(kind, data)
    except Exception:
        return  # reported when cleaned
    for c in df.columns:
        if c.lower() in HOST_KEYS and df.schema[c] == pl.String:
            for v in df[c].drop_nulls().unique().to_list():
                sc.add_host(v)
        elif c.lower() in ID_KEYS and df.schema[c].is_integer():
            for v in df[c].drop_nulls().unique().to_list():
                sc.add_id(v)


# ---- dispatch -------------------------------------------------------------


def collect(sc: Scrubber, kind: str, path: Path, data: bytes) -> None:
    """Pass 1: learn host and user names from a file of ``kind`` (CSV teaches none)."""
    try:
        with gc_paused():  # a decoded document's containers hold no cycle (core/alloc.py)
            _collect(sc, kind, path, data)
    except RecursionError:
        raise InputError(path, "nested too deeply to sanitize (more than ~900 levels)") from None


def clean(sc: Scrubber, kind: str, path: Path, data: bytes) -> bytes:
    """Pass 2: the cleaned bytes of a file of ``kind`` (uncompressed)."""
    try:
        with gc_paused():
            return _clean(sc, kind, path, data)
    except RecursionError:
        raise InputError(path, "nested too deeply to sanitize (more than ~900 levels)") from None
    except orjson.JSONEncodeError as exc:  # orjson writes at most 254 levels
        raise InputError(path, f"cannot be written back as JSON ({exc}): nested too deeply?") from None


def _collect(sc: Scrubber, kind: str, path: Path, data: bytes) -> None:
    if kind == "json":
        collect_json(sc, load_json(path, data))
    elif kind == "jsonl":
        for line in data.splitlines():
            if line.strip():
                sc.collect(load_json(path, line))
    elif kind == "et":
        chakra_et.collect(sc, path, data)
    elif kind == "csv":
        csv_collect(sc, data)
    else:
        table_collect(sc, kind, data)


def _clean(sc: Scrubber, kind: str, path: Path, data: bytes) -> bytes:
    if kind == "json":
        doc = load_json(path, data)
        collect_json(sc, doc)
        out = orjson.dumps(clean_json_doc(sc, doc))
        del doc
        return out
    if kind == "jsonl":
        lines = [orjson.dumps(sc.clean(load_json(path, ln))) for ln in data.splitlines() if ln.strip()]
        return b"\n".join(lines) + (b"\n" if lines else b"")
    if kind == "et":
        return chakra_et.clean(sc, path, data)
    if kind == "csv":
        return csv_clean(sc, data)
    return table_clean(sc, kind, path, data)
