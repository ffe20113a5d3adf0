"""The cache of converted inputs: memory-mapped copies of the tables, keyed by content.

Where: ``$CHARLLM_TRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/charllm-trace``, else
``~/.cache/charllm-trace`` (never beside the user's files). Layout (docs/cache.md)::

    et/<key>/       a decoded Chakra ET: nodes.bin + nodes.json, deps.*, telemetry.*, meta.json
    kineto/<key>/   a converted Kineto profile / host-ET JSON file: 0.nodes.bin ... meta.json
    run/<key>/      a converted run directory: <rank>.nodes.bin ... meta.json
    et-index/<stat-key>    -> the ET key of the file that had this stat
    file-index/<stat-key>  -> the SHA-256 of the bytes of the file that had this stat

An ET's key is the SHA-256 of its uncompressed bytes; a JSON file's is the SHA-256 of its
bytes; a run directory's is the SHA-256 over the names and SHA-256s of its files. Each key
also covers the cache format, the model version and a fingerprint of the source code that
produced the tables (the ET reader's or the converters'), so an upgrade or an edit of the
code never hits an entry written by the old code. Hashing costs about a read of the file
(SHA-256 at ~1.4 GB/s here), so a re-load looks the file up by its *stat key* first (path,
device, inode, size, modification and change times in ns): any write to the file changes
its change time, which users cannot set back.

Nothing read from the cache is trusted: ``meta.json`` and each table description carry
their own CRC-32, each data file its size and XXH3-64 hash, and every buffer is bounds-checked
(``_colcache.py``). An entry that fails is deleted, a one-line note goes to stderr, and
the input is converted again. The cache never makes a read fail: a missing, unwritable or
corrupt cache only means converting the file. It is capped at
``$CHARLLM_TRACE_CACHE_MAX_GB`` (default 20) GB, least recently used first; temporaries
left by interrupted stores are removed after an hour. ``CHARLLM_TRACE_NO_CACHE=1`` or
:func:`set_enabled` turns it off for the process.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from charllm_trace.core.errors import InputError, UsageError
from charllm_trace.core.model import MODEL_VERSION, Trace, TraceMeta
from charllm_trace.et.cache_owner import index_text, mark_dir, owned, read_index

CACHE_FORMAT = "6"
#: kinds of entries: directory name -> what they hold
KINDS = {
    "et": "decoded Chakra ET files",
    "kineto": "converted Kineto profiles / host-ET JSON files",
    "run": "converted run directories",
    # one file per entry, written and read by charllm_trace/store/results_cache.py (not by this module)
    "results": "saved analysis results (analyze, report)",
    # one file per entry, written and read by charllm_trace/store/sweep_cache.py
    "compare": "per-run summaries of compare",
    # one file per entry, written and read by charllm_trace/store/output_cache.py
    "outputs": "printed outputs of analyze --format json",
}
INDEXES = ("et-index", "file-index")
#: temporaries of interrupted stores older than this are removed
STALE_S = 3600.0
_KEY = re.compile(r"^[0-9a-f]{64}$")
_TEMP = re.compile(r"^\.(?:[0-9a-f]{16}-|dead-)")
_TABLES = ("nodes", "deps", "telemetry")

_enabled: bool | None = None
_noted: set[str] = set()
_fingerprints: dict[str, str] = {}


# ---------------------------------------------------------------------------
# where, on/off, notes
# ---------------------------------------------------------------------------


def cache_root() -> Path:
    env = os.environ.get("CHARLLM_TRACE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "charllm-trace"


def enabled() -> bool:
    """Whether readers use the cache by default (``--no-cache`` / ``CHARLLM_TRACE_NO_CACHE=1``: no)."""
    if _enabled is not None:
        return _enabled
    return os.environ.get("CHARLLM_TRACE_NO_CACHE", "") in ("", "0")


def set_enabled(on: bool | None) -> None:
    """Turn the cache on or off for this process (None: back to the environment's choice)."""
    global _enabled
    _enabled = on


def _note(text: str) -> None:
    if text not in _noted:
        _noted.add(text)
        print(f"note: {text}", file=sys.stderr, flush=True)


def _entries(kind: str = "et") -> Path:
    return cache_root() / kind


def _index() -> Path:
    return cache_root() / "et-index"


# ---------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------


def _stat_raw(path: str | os.PathLike[str]) -> str:
    from charllm_trace.core.files import path_kind

    path_kind(path)  # a missing path, a dangling link or a loop: InputError naming it
    p = Path(path).resolve()
    st = p.stat()
    return f"{p}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{CACHE_FORMAT}"


def stat_key(path: str | os.PathLike[str]) -> str:
    raw = f"{_stat_raw(path)}|{MODEL_VERSION}"
    return hashlib.sha256(raw.encode()).hexdigest()


def code_fingerprint(scope: str) -> str:
    """SHA-256 of the source files that produce a kind's tables ("et" or "convert")."""
    if scope in _fingerprints:
        return _fingerprints[scope]
    pkg = Path(__file__).resolve().parent.parent
    parts = ["core", "et"] if scope == "et" else ["core", "inputs/loader.py", "converters", "collectors"]
    h = hashlib.sha256(scope.encode())
    for part in parts:
        p = pkg / part
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.suffix in (".py", ".c") and f.is_file():
                h.update(f"{f.relative_to(pkg)}\0".encode())
                h.update(f.read_bytes())
    _fingerprints[scope] = h.hexdigest()
    return _fingerprints[scope]


def content_key(data: Any) -> str:
    """Key of a decoded ET from its uncompressed bytes (any buffer)."""
    h = hashlib.sha256(memoryview(data).cast("B"))
    h.update(f"|{CACHE_FORMAT}|{MODEL_VERSION}|{code_fingerprint('et')}".encode())
    return h.hexdigest()


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, remembered by stat key (a re-load does not hash again)."""
    sk = stat_key(path)
    idx = cache_root() / "file-index" / sk
    got = read_index(idx)
    if got is not None:
        return got
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    _write_small(idx, index_text(digest))
    return digest


def json_key(path: str | os.PathLike[str]) -> str:
    """Key of a converted JSON file (Kineto profile or host ET)."""
    raw = f"kineto|{file_digest(path)}|{CACHE_FORMAT}|{MODEL_VERSION}|{code_fingerprint('convert')}"
    return hashlib.sha256(raw.encode()).hexdigest()


def run_key(path: str | os.PathLike[str]) -> str:
    """Key of a converted run directory: the names and contents of all its (non-hidden) files."""
    d = Path(path)
    parts = [f"run|{CACHE_FORMAT}|{MODEL_VERSION}|{code_fingerprint('convert')}"]
    for f in sorted(d.iterdir()):
        if f.name.startswith(".") or not f.is_file():
            continue
        parts.append(f"{f.name}\0{file_digest(f)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _write_small(target: Path, text: str) -> None:
    """Write an index record (never over a file without this tool's marker)."""
    try:
        if os.path.lexists(target) and not owned(target, target.parent.name):
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmpname = tempfile.mkstemp(prefix=f".{target.name[:16]}-", dir=target.parent)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmpname, target)
    except OSError:
        pass


# ---------------------------------------------------------------------------
# entries
# ---------------------------------------------------------------------------


def _write_entry(entry: Path, traces: dict[str, Trace], info: dict[str, Any]) -> None:
    """Write ``traces`` (by file prefix) and ``info`` as the entry ``entry`` (atomically)."""
    # the table files' code (numpy, the native helper) is imported where an entry is read or written:
    # the keys alone (the results cache's hit path) need neither
    from charllm_trace.et._colcache import seal, write_frame

    entry.parent.mkdir(parents=True, exist_ok=True)
    if (entry / "meta.json").is_file():
        return
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name[:16]}-", dir=entry.parent))
    try:
        mark_dir(tmp)  # first: what the clean-ups look for before deleting (cache_owner)
        for prefix, trace in traces.items():
            for name in _TABLES:
                write_frame(getattr(trace, name), tmp / f"{prefix}{name}.bin", tmp / f"{prefix}{name}.json")
        body = {
            "format": CACHE_FORMAT,
            "kind": entry.parent.name,
            "traces": [{"prefix": p, "meta": t.meta.to_dict()} for p, t in traces.items()],
            **info,
        }
        (tmp / "meta.json").write_bytes(seal(body))
        try:
            os.replace(tmp, entry)
        except OSError:
            pass  # another process stored the same content first
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _read_entry(entry: Path) -> tuple[list[Trace], dict[str, Any]]:
    """The traces and info of an entry; any failure raises (the caller calls it corrupt)."""
    from charllm_trace.et._colcache import check_frame, unseal

    info = unseal((entry / "meta.json").read_bytes(), "meta.json")
    if not isinstance(info, dict) or info.get("format") != CACHE_FORMAT:
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
        for t in info["traces"]
    ]
    traces = [Trace(**{n: c.frame() for n, c in frames.items()}, meta=meta) for frames, meta in checked]
    now = time.time()
    os.utime(entry / "meta.json", (now, now))
    return traces, info


def _discard(entry: Path, what: str, why: str) -> None:
    """Delete a corrupt entry (rename first, so no reader sees it half-deleted) and say so; an
    entry without this tool's marker is someone else's: left alone."""
    if not owned(entry, entry.parent.name):
        _note(f"{entry} is not a cache entry of charllm-trace; left alone, converting {what} again")
        return
    dead = entry.parent / f".dead-{entry.name[:16]}-{os.getpid()}"
    try:
        os.replace(entry, dead)
    except OSError:
        dead = entry
    shutil.rmtree(dead, ignore_errors=True)
    why = " ".join(str(why).split())[:120]
    _note(f"the cache entry for {what} was corrupt ({why}); deleted, converting again")


def _get(kind: str, key: str, what: str) -> tuple[list[Trace], dict[str, Any]] | None:
    entry = _entries(kind) / key
    try:
        if not entry.is_dir():
            return None
    except OSError:
        return None
    try:
        return _read_entry(entry)
    except Exception as exc:  # noqa: BLE001 - a broken entry is deleted and rebuilt, never trusted
        _discard(entry, what, str(exc) or type(exc).__name__)
        return None


def _put(kind: str, key: str, traces: dict[str, Trace], info: dict[str, Any]) -> None:
    try:
        _write_entry(_entries(kind) / key, traces, info)
        prune()
    except InputError:
        raise  # a bad CHARLLM_TRACE_CACHE_MAX_GB
    except Exception:  # noqa: BLE001 - caching is best effort
        return


# --- decoded ETs (the reader's API) ----------------------------------------------------


def lookup(path: str | os.PathLike[str]) -> tuple[Trace, dict | None] | None:
    """The cached decode of the ET ``path``, or None."""
    ck = read_index(_index() / stat_key(path))
    if ck is None:
        return None
    hit = _get("et", ck, str(path))
    if hit is None:
        return None
    traces, info = hit
    return traces[0], info.get("manifest")


def store(path: str | os.PathLike[str], key: str, trace: Trace, manifest: dict | None) -> None:
    """Remember ``trace`` as the decode of ``path`` (content key ``key``); errors are ignored."""
    try:
        _write_entry(_entries("et") / key, {"": trace}, {"manifest": manifest, "source": str(path)})
        _write_small(_index() / stat_key(path), index_text(key))
        prune()
    except InputError:
        raise  # a bad CHARLLM_TRACE_CACHE_MAX_GB
    except Exception:  # noqa: BLE001 - caching is best effort
        return


# --- converted JSON files and run directories ------------------------------------------


def lookup_run(kind: str, key: str, what: str) -> tuple[dict[int, Trace], dict[str, Any]] | None:
    """A cached converted input (``kind`` "kineto" or "run"): (traces by rank, manifest)."""
    hit = _get(kind, key, what)
    if hit is None:
        return None
    traces, info = hit
    ranks = info.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != len(traces):
        _discard(_entries(kind) / key, what, "meta.json: ranks do not match the tables")
        return None
    return dict(zip(ranks, traces, strict=True)), info.get("manifest") or {}


def store_run(kind: str, key: str, traces: dict[int, Trace], manifest: dict[str, Any], source: str) -> None:
    """Remember a converted input (best effort)."""
    ranks = list(traces)
    _put(
        kind,
        key,
        {f"{r}.": traces[r] for r in ranks},
        {"ranks": ranks, "manifest": manifest, "source": source},
    )


# ---------------------------------------------------------------------------
# housekeeping: size cap, stale temporaries, info, clear
# ---------------------------------------------------------------------------


def _size(p: Path) -> int:
    try:
        if p.is_dir():
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        return p.stat().st_size
    except OSError:
        return 0


def _remove(p: Path) -> None:
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    except OSError:
        pass


def _ours(root: Path) -> list[tuple[str, Path]]:
    """(kind or index name, path) of everything in the cache that this tool wrote."""
    out = []
    for sub in (*KINDS, *INDEXES):
        d = root / sub
        try:
            items = list(d.iterdir())
        except OSError:
            continue
        out += [(sub, e) for e in items if (_KEY.match(e.name) or _TEMP.match(e.name)) and owned(e, sub)]
    return out


def max_gb() -> float:
    """The size cap, ``$CHARLLM_TRACE_CACHE_MAX_GB`` (default 20; ``inf``: none); UsageError for a
    value that is not a number of GB, 0 or more."""
    text = os.environ.get("CHARLLM_TRACE_CACHE_MAX_GB", "20")
    try:
        gb = float(text)
    except ValueError:
        gb = float("nan")
    if not gb >= 0:  # also NaN
        raise UsageError(f"CHARLLM_TRACE_CACHE_MAX_GB={text!r:.40} is not a number of GB (0 or more, or inf)")
    return gb


def prune() -> None:
    """Remove stale temporaries and, above the size cap, least recently used entries."""
    limit = max_gb() * 1e9
    now = time.time()
    entries = []
    total = 0
    for sub, e in _ours(cache_root()):
        try:
            st = e.stat()
        except OSError:
            continue
        if e.name.startswith("."):
            if now - st.st_mtime > STALE_S:
                _remove(e)
            continue
        if sub not in KINDS:
            continue
        size = _size(e)
        meta = e / "meta.json"
        # a results entry is one file (its own time); a directory entry without meta.json goes first
        used = meta.stat().st_mtime if meta.exists() else (st.st_mtime if e.is_file() else 0.0)
        entries.append((used, size, e))
        total += size
    for _, size, e in sorted(entries):
        if total <= limit:
            break
        _remove(e)  # a directory entry, or a results file
        total -= size


def info() -> dict[str, Any]:
    """Where the cache is and what it holds (entries and bytes per kind)."""
    root = cache_root()
    kinds: dict[str, dict[str, int]] = {k: {"entries": 0, "bytes": 0} for k in (*KINDS, *INDEXES)}
    temps = 0
    for sub, e in _ours(root):
        if e.name.startswith("."):
            temps += 1
            continue
        kinds[sub]["entries"] += 1
        kinds[sub]["bytes"] += _size(e)
    return {
        "root": str(root),
        "exists": root.is_dir(),
        "enabled": enabled(),
        "max_gb": max_gb(),
        "entries": sum(kinds[k]["entries"] for k in KINDS),
        "bytes": sum(v["bytes"] for v in kinds.values()),
        "kinds": kinds,
        "temporaries": temps,
    }


def clear() -> dict[str, int]:
    """Delete every entry, index record and temporary this tool wrote; nothing else.

    Returns the number of items removed per kind."""
    root = cache_root()
    removed: dict[str, int] = {}
    for sub, e in _ours(root):
        _remove(e)
        removed[sub] = removed.get(sub, 0) + 1
    for sub in (*KINDS, *INDEXES):
        try:
            (root / sub).rmdir()  # only when empty: foreign files stay
        except OSError:
            pass
    return removed
