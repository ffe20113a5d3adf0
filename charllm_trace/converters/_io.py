"""Reading trace JSON files (``.json`` / ``.json.gz``) with one-line errors for bad input."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any

import orjson

from charllm_trace.errors import InputError


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The decompressed bytes of ``path`` (gzip is detected by its magic number, not the name)."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise InputError(p, "no such file") from None
    except IsADirectoryError:
        raise InputError(p, "is a directory, expected a file") from None
    except PermissionError:
        raise InputError(p, "file is not readable (permission denied)") from None
    if not raw:
        raise InputError(p, "file is empty")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise InputError(p, f"corrupt or truncated gzip file ({exc})") from None
        if not raw:
            raise InputError(p, "gzip file holds no data")
    return raw


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
