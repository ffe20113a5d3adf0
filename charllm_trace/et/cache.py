"""The cache of converted inputs: memory-mapped copies of the tables, keyed by content: the
``et``, ``kineto`` and ``run`` namespaces of the one store (``core/cas.py``: where, keys, the stat
index, atomic writes, ownership, housekeeping). Layout (docs/cache.md)::

    et/<key>/       a decoded Chakra ET: nodes.bin + nodes.json, deps.*, telemetry.*, meta.json
    kineto/<key>/   a converted Kineto profile / host-ET JSON file: 0.nodes.bin ... meta.json
    run/<key>/      a converted run directory: <rank>.nodes.bin ... meta.json
    et-index/<stat-key>    -> the ET key of the file that had this stat
    file-index/<stat-key>  -> the SHA-256 of the bytes of the file that had this stat

An ET's key is the SHA-256 of its uncompressed bytes; a JSON file's is the SHA-256 of its
bytes; a run directory's is the SHA-256 over the names and SHA-256s of its files. Each key
also covers the store's format, the model version and a fingerprint of the source code that
produced the tables (the ET reader's or the converters'), so an upgrade or an edit of the
code never hits an entry written by the old code. A re-load looks the file up by its stat key
first (``cas.file_digest``): hashing costs about a read of the file.

Nothing read from the cache is trusted: ``meta.json`` and each table description carry
their own CRC-32, each data file its size and XXH3-64 hash, and every buffer is bounds-checked
(``_colcache.py``). An entry that fails is deleted, a one-line note goes to stderr, and
the input is converted again. The cache never makes a read fail: a missing, unwritable or
corrupt cache only means converting the file.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from charllm_trace.core import cas
from charllm_trace.core.cas import INDEXES, KINDS, STALE_S, clear, enabled, info, max_gb, prune, set_enabled
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import MODEL_VERSION, Trace, TraceMeta

__all__ = [
    "INDEXES", "KINDS", "STALE_S", "cache_root", "clear", "code_fingerprint", "content_key", "enabled",
    "file_digest", "info", "json_key", "lookup", "lookup_run", "max_gb", "prune", "run_key", "set_enabled",
    "stat_key", "store", "store_run",
]  # fmt: skip

#: the format of the store (``core/cas.py``): in every key
CACHE_FORMAT = cas.FORMAT
_TABLES = ("nodes", "deps", "telemetry")
#: the sources that make each scope's tables (relative to the package)
_CODE = {"et": ("core", "et"), "convert": ("core", "inputs/loader.py", "converters", "collectors")}
_NAMESPACES = {"et": cas.ET, "kineto": cas.KINETO, "run": cas.RUN}


def cache_root() -> Path:
    return cas.root()


# ---------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------


def stat_key(path: str | os.PathLike[str]) -> str:
    return cas.stat_key(path, MODEL_VERSION)


def code_fingerprint(scope: str) -> str:
    """SHA-256 of the source files that produce a kind's tables ("et" or "convert")."""
    return cas.fingerprint(scope, _CODE["et" if scope == "et" else "convert"])


def content_key(data: Any) -> str:
    """Key of a decoded ET from its uncompressed bytes (any buffer)."""
    digest = hashlib.sha256(memoryview(data).cast("B")).hexdigest()
    return cas.key(cas.ET, digest, MODEL_VERSION, code_fingerprint("et"))


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, remembered by stat key (a re-load does not hash again)."""
    return cas.file_digest(path, MODEL_VERSION)


def json_key(path: str | os.PathLike[str]) -> str:
    """Key of a converted JSON file (Kineto profile or host ET)."""
    return cas.key(cas.KINETO, file_digest(path), MODEL_VERSION, code_fingerprint("convert"))


def run_key(path: str | os.PathLike[str]) -> str:
    """Key of a converted run directory: the names and contents of all its (non-hidden) files."""
    d = Path(path)
    parts = [MODEL_VERSION, code_fingerprint("convert")]
    for f in sorted(d.iterdir()):
        if f.name.startswith(".") or not f.is_file():
            continue
        parts.append(f"{f.name}\0{file_digest(f)}")
    return cas.key(cas.RUN, *parts)


# ---------------------------------------------------------------------------
# entries
# ---------------------------------------------------------------------------


def _write_entry(ns: cas.Namespace, key: str, traces: dict[str, Trace], info_: dict[str, Any]) -> None:
    """Write ``traces`` (by file prefix) and ``info_`` as the entry ``key`` of ``ns`` (atomically)."""
    # the table files' code (numpy, the native helper) is imported where an entry is read or written:
    # the keys alone (the results cache's hit path) need neither
    from charllm_trace.et._colcache import seal, write_frame

    def fill(tmp: Path) -> None:
        for prefix, trace in traces.items():
            for name in _TABLES:
                write_frame(getattr(trace, name), tmp / f"{prefix}{name}.bin", tmp / f"{prefix}{name}.json")
        body = {
            "format": CACHE_FORMAT,
            "kind": ns.name,
            "traces": [{"prefix": p, "meta": t.meta.to_dict()} for p, t in traces.items()],
            **info_,
        }
        (tmp / "meta.json").write_bytes(seal(body))

    cas.write_dir(ns, key, fill, "meta.json")


def _read_entry(entry: Path) -> tuple[list[Trace], dict[str, Any]]:
    """The traces and info of an entry; any failure raises (the caller calls it corrupt)."""
    from charllm_trace.et._colcache import check_frame, unseal

    info_ = unseal((entry / "meta.json").read_bytes(), "meta.json")
    if not isinstance(info_, dict) or info_.get("format") != CACHE_FORMAT:
        raise ValueError("meta.json: another cache format")
    # every table of every trace is checked before any is built (see check_frame)
    checked = [
        (
            {
                n: check_frame(entry / f"{t['prefix']}{n}.bin", entry / f"{t['prefix']}{n}.json")
                for n in _TABLES
            },
            TraceMeta.from_dict(t["meta"]),
        )
        for t in info_["traces"]
    ]
    traces = [Trace(**{n: c.frame() for n, c in frames.items()}, meta=meta) for frames, meta in checked]
    cas.touch(entry / "meta.json")
    return traces, info_


def _discard(ns: cas.Namespace, key: str, what: str, why: str) -> None:
    """Delete a corrupt entry and say so; an entry without the store's marker is someone else's:
    left alone."""
    if not cas.discard(ns, key):
        cas.note(f"{ns.path(key)} is not a cache entry of charllm-trace; left alone, converting {what} again")
        return
    why = " ".join(str(why).split())[:120]
    cas.note(f"the cache entry for {what} was corrupt ({why}); deleted, converting again")


def _get(ns: cas.Namespace, key: str, what: str) -> tuple[list[Trace], dict[str, Any]] | None:
    entry = ns.path(key)
    try:
        if not entry.is_dir():
            return None
    except OSError:
        return None
    try:
        return _read_entry(entry)
    except Exception as exc:  # noqa: BLE001 - a broken entry is deleted and rebuilt, never trusted
        _discard(ns, key, what, str(exc) or type(exc).__name__)
        return None


def _put(
    ns: cas.Namespace, key: str, traces: dict[str, Trace], info_: dict[str, Any], index: str = ""
) -> None:
    """Store an entry (and, with ``index``, record it in the ET index under that stat key); best effort."""
    try:
        _write_entry(ns, key, traces, info_)
        if index:
            cas.write_index(cas.ET_INDEX, index, key)
        cas.stored(cas.entry_size(ns.path(key)))
    except InputError:
        raise  # a bad CHARLLM_TRACE_CACHE_MAX_GB
    except Exception:  # noqa: BLE001 - caching is best effort
        return


# --- decoded ETs (the reader's API) ----------------------------------------------------


def lookup(path: str | os.PathLike[str]) -> tuple[Trace, dict | None] | None:
    """The cached decode of the ET ``path``, or None."""
    ck = cas.read_index(cas.ET_INDEX, stat_key(path))
    if ck is None:
        return None
    hit = _get(cas.ET, ck, str(path))
    if hit is None:
        return None
    traces, info_ = hit
    return traces[0], info_.get("manifest")


def store(path: str | os.PathLike[str], key: str, trace: Trace, manifest: dict | None) -> None:
    """Remember ``trace`` as the decode of ``path`` (content key ``key``); errors are ignored."""
    _put(cas.ET, key, {"": trace}, {"manifest": manifest, "source": str(path)}, index=stat_key(path))


# --- converted JSON files and run directories ------------------------------------------


def lookup_run(kind: str, key: str, what: str) -> tuple[dict[int, Trace], dict[str, Any]] | None:
    """A cached converted input (``kind`` "kineto" or "run"): (traces by rank, manifest)."""
    ns = _NAMESPACES[kind]
    hit = _get(ns, key, what)
    if hit is None:
        return None
    traces, info_ = hit
    ranks = info_.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != len(traces):
        _discard(ns, key, what, "meta.json: ranks do not match the tables")
        return None
    return dict(zip(ranks, traces, strict=True)), info_.get("manifest") or {}


def store_run(kind: str, key: str, traces: dict[int, Trace], manifest: dict[str, Any], source: str) -> None:
    """Remember a converted input (best effort)."""
    ranks = list(traces)
    _put(
        _NAMESPACES[kind],
        key,
        {f"{r}.": traces[r] for r in ranks},
        {"ranks": ranks, "manifest": manifest, "source": source},
    )
