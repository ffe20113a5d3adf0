"""Reading trace JSON files (``.json`` / ``.json.gz``) with one-line errors for bad input."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from charllm_trace.core.errors import InputError
from charllm_trace.core.files import read_maybe_gzipped


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The decompressed bytes of ``path`` (gzip is detected by its magic number, not the name),
    a regular file; gzip expansion bounded (:func:`charllm_trace.core.files.gunzip`)."""
    p = Path(path)
    return read_maybe_gzipped(p, "a file", lambda head: _json_head(p, head), "gzip file holds no data")


def _json_head(p: Path, head: bytes) -> None:
    first = head.lstrip()[:1]
    if head.strip() and first not in (b"{", b"["):
        raise InputError(p, f"not JSON (decompressed data starts with {head[:8]!r})")


def load_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse ``path`` as one JSON object. Raises :class:`InputError` for anything else."""
    raw = read_bytes(path)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        msg = str(exc).split("\n")[0]
        raise InputError(path, f"not valid JSON (truncated or corrupt?): {msg}") from None
    if not isinstance(doc, dict):
        raise InputError(
            path, f"JSON is a {type(doc).__name__}, expected an object (a Kineto profile or host ET)"
        )
    return doc


def is_kineto(doc: dict[str, Any]) -> bool:
    return isinstance(doc.get("traceEvents"), list)


def is_host_et(doc: dict[str, Any]) -> bool:
    return isinstance(doc.get("nodes"), list) and ("schema" in doc or "pid" in doc)


def kind_of(doc: dict[str, Any]) -> str:
    """ "kineto", "host_et" or "unknown"."""
    if is_kineto(doc):
        return "kineto"
    if is_host_et(doc):
        return "host_et"
    return "unknown"
