"""A cache of decoded ET files: memory-mapped copies of the tables, keyed by the file's content.

Where: ``$CHARLLM_TRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/charllm-trace``, else
``~/.cache/charllm-trace`` (never beside the user's files). Layout::

    et/<content-key>/nodes.bin + nodes.json, deps.*, telemetry.*, meta.json  (see _colcache.py)
    et-index/<stat-key>            -> the content key of the file that had this stat

The *content key* is the SHA-256 of the file's (uncompressed) bytes plus the
cache format and model versions, so two copies of one file share an entry and
a changed file never hits a stale one. Hashing a large file costs about as much
as reading it, so a re-load first looks the file up by its *stat key* (path,
device, inode, size, modification and change times in ns); only when that
matches an index entry is the content key taken from the index. Any change to
the file changes its stat key (the change time cannot be set back by users).

The cache never makes a read fail: a missing, unwritable or corrupt cache just
means decoding the file. It is capped at ``$CHARLLM_TRACE_CACHE_MAX_GB``
(default 20) GB; the least recently used entries go first.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from charllm_trace.et._colcache import read_frame, write_frame
from charllm_trace.model import MODEL_VERSION, Trace, TraceMeta

CACHE_FORMAT = "3"


def cache_root() -> Path:
    env = os.environ.get("CHARLLM_TRACE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "charllm-trace"


def _entries() -> Path:
    return cache_root() / "et"


def _index() -> Path:
    return cache_root() / "et-index"


def stat_key(path: str | os.PathLike[str]) -> str:
    p = Path(path).resolve()
    st = p.stat()
    raw = f"{p}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{CACHE_FORMAT}|{MODEL_VERSION}"
    return hashlib.sha256(raw.encode()).hexdigest()


def content_key(data: Any) -> str:
    """Key of a decoded file from its uncompressed bytes (any buffer)."""
    h = hashlib.sha256(memoryview(data).cast("B"))
    h.update(f"|{CACHE_FORMAT}|{MODEL_VERSION}".encode())
    return h.hexdigest()


def lookup(path: str | os.PathLike[str]) -> tuple[Trace, dict | None] | None:
    """The cached decode of ``path``, or None."""
    try:
        idx = _index() / stat_key(path)
        if not idx.is_file():
            return None
        ck = idx.read_text().strip()
        entry = _entries() / ck
        if not (entry / "meta.json").is_file():
            return None
        info = orjson.loads((entry / "meta.json").read_bytes())
        trace = Trace(
            nodes=read_frame(entry / "nodes.bin", entry / "nodes.json"),
            deps=read_frame(entry / "deps.bin", entry / "deps.json"),
            telemetry=read_frame(entry / "telemetry.bin", entry / "telemetry.json"),
            meta=TraceMeta.from_dict(info["meta"]),
        )
        now = time.time()
        os.utime(entry / "meta.json", (now, now))
        return trace, info.get("manifest")
    except Exception:  # noqa: BLE001 - a broken cache entry is a miss, never an error
        return None


def store(path: str | os.PathLike[str], key: str, trace: Trace, manifest: dict | None) -> None:
    """Remember ``trace`` as the decode of ``path`` (content key ``key``); errors are ignored."""
    try:
        entries = _entries()
        entries.mkdir(parents=True, exist_ok=True)
        entry = entries / key
        if not (entry / "meta.json").is_file():
            tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=entries))
            try:
                for name, df in (
                    ("nodes", trace.nodes),
                    ("deps", trace.deps),
                    ("telemetry", trace.telemetry),
                ):
                    write_frame(df, tmp / f"{name}.bin", tmp / f"{name}.json")
                info = {"meta": trace.meta.to_dict(), "manifest": manifest, "source": str(path)}
                (tmp / "meta.json").write_bytes(orjson.dumps(info, default=str))
                try:
                    os.replace(tmp, entry)
                except OSError:
                    pass  # another process stored the same content first
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        idx_dir = _index()
        idx_dir.mkdir(parents=True, exist_ok=True)
        sk = stat_key(path)
        fd, tmpname = tempfile.mkstemp(prefix=f".{sk[:16]}-", dir=idx_dir)
        with os.fdopen(fd, "w") as f:
            f.write(key)
        os.replace(tmpname, idx_dir / sk)
        _prune()
    except Exception:  # noqa: BLE001 - caching is best effort
        return


def _prune() -> None:
    limit = float(os.environ.get("CHARLLM_TRACE_CACHE_MAX_GB", "20")) * 1e9
    entries = []
    total = 0
    for e in _entries().iterdir():
        if e.name.startswith(".") or not e.is_dir():
            continue
        size = sum(f.stat().st_size for f in e.iterdir())
        meta = e / "meta.json"
        used = meta.stat().st_mtime if meta.exists() else 0.0
        entries.append((used, size, e))
        total += size
    for _, size, e in sorted(entries):
        if total <= limit:
            break
        shutil.rmtree(e, ignore_errors=True)
        total -= size


def clear() -> None:
    """Delete every cached decode (and the compiled scanner)."""
    shutil.rmtree(cache_root(), ignore_errors=True)
