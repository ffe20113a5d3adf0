"""One content-addressed store behind every cache of charllm-trace (docs/cache.md, issue 23 item 3).

The caches are *namespaces* of this store: ``et``, ``kineto`` and ``run`` (directories of table
files, ``et/cache.py``), ``results`` (results files, ``store/results_cache.py``), ``compare`` (rows
of ``compare``, ``store/sweep_cache.py``) and ``outputs`` (printed outputs, ``store/output_cache.py``),
and two stat indexes (``et-index``, ``file-index``). This module holds what they share, once:

- **where**: ``$CHARLLM_TRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/charllm-trace``, else
  ``~/.cache/charllm-trace`` (never beside the user's files); ``<root>/<namespace>/<key>``;
- **keys**: a SHA-256 (:func:`key`) over the namespace, the store's :data:`FORMAT` and the parts
  a namespace names (content hashes, options, a :func:`fingerprint` of the code that made the
  entry); bumping :data:`FORMAT` makes every older entry a miss: never misread;
- **one stat index** (:func:`stat_key`, :func:`file_digest`): a file's SHA-256 remembered by its
  identity (resolved path, device, inode, size, modification and change times in ns);
- **one atomic write** (:func:`write_atomic`): a temporary beside the target, renamed over it;
- **one ownership rule** (:func:`owned`): a file entry starts with :data:`FILE_HEAD` (namespace
  and the SHA-256 of its payload, checked on every read), a directory entry holds
  :data:`MARK_FILE`, written before anything else; nothing without it is ever deleted or
  replaced. There are no locks: writers of one key race to a rename, readers see a whole entry
  or none, a file never replaces a file that is not the store's;
- **one housekeeping** (:func:`prune`, :func:`info`, :func:`clear`): a size cap
  (``$CHARLLM_TRACE_CACHE_MAX_GB``, default 20), least recently used first (a read refreshes an
  entry's time), temporaries of interrupted stores removed after an hour.

It imports only the standard library (``hashlib``, ``os``; ``tempfile`` and ``shutil`` on a
write): a printed-output hit reads through it before anything else is imported.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from charllm_trace.core.errors import UsageError

#: the store's format: in every key and every file entry's head (7: the one store, issue 23 item 3)
FORMAT = "7"
MARK_FILE = ".charllm-trace-entry"
DIR_MARK = b"charllm-trace cache entry\n"
#: a file entry: FILE_HEAD, FORMAT, the namespace, the SHA-256 of the payload in hex, a newline
FILE_HEAD = b"charllm-trace cas "
#: temporaries of interrupted stores older than this are removed
STALE_S = 3600.0
_KEY = re.compile(r"^[0-9a-f]{64}$")
_TEMP = re.compile(r"^\.(?:[0-9a-f]{16}-|dead-)")
_HEX64 = re.compile(rb"^[0-9a-f]{64}$")

_enabled: bool | None = None
_noted: set[str] = set()
_fingerprints: dict[str, str] = {}


class Corrupt(Exception):
    """A stored entry failed a check (its head, its checksum)."""


class Namespace:
    """One cache in the store: ``<root>/<name>/<key>``, a file or (``directory``) a directory; an
    ``index`` holds stat-index records, not entries. (A plain class: ``dataclasses`` imports
    ``inspect``, ~5 ms of a printed-output hit.)"""

    __slots__ = ("name", "what", "directory", "index")

    def __init__(self, name: str, what: str, directory: bool = False, index: bool = False) -> None:
        self.name, self.what, self.directory, self.index = name, what, directory, index

    def path(self, key: str) -> Path:
        return root() / self.name / key


ET = Namespace("et", "decoded Chakra ET files", directory=True)
KINETO = Namespace("kineto", "converted Kineto profiles / host-ET JSON files", directory=True)
RUN = Namespace("run", "converted run directories", directory=True)
RESULTS = Namespace("results", "saved analysis results (analyze, report)")
COMPARE = Namespace("compare", "per-run summaries of compare")
OUTPUTS = Namespace("outputs", "printed outputs of analyze (json, table)")
ET_INDEX = Namespace("et-index", "ET file -> ET key", index=True)
FILE_INDEX = Namespace("file-index", "file -> SHA-256 of its bytes", index=True)
NAMESPACES = {ns.name: ns for ns in (ET, KINETO, RUN, RESULTS, COMPARE, OUTPUTS, ET_INDEX, FILE_INDEX)}
#: the namespaces that hold entries (the indexes hold records)
KINDS = {ns.name: ns.what for ns in NAMESPACES.values() if not ns.index}
INDEXES = tuple(ns.name for ns in NAMESPACES.values() if ns.index)


# ---------------------------------------------------------------------------
# where, on/off, notes
# ---------------------------------------------------------------------------


def root() -> Path:
    env = os.environ.get("CHARLLM_TRACE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "charllm-trace"


def enabled() -> bool:
    """Whether the caches are used (``--no-cache`` / ``CHARLLM_TRACE_NO_CACHE=1``: no)."""
    if _enabled is not None:
        return _enabled
    return os.environ.get("CHARLLM_TRACE_NO_CACHE", "") in ("", "0")


def set_enabled(on: bool | None) -> None:
    """Turn the caches on or off for this process (None: back to the environment's choice)."""
    global _enabled
    _enabled = on


def note(text: str, once: bool = True) -> None:
    """One line on stderr (``once``: once per process)."""
    if not once or text not in _noted:
        _noted.add(text)
        print(f"note: {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------


def key(ns: Namespace, *parts: object) -> str:
    """The key of an entry of ``ns``: SHA-256 over the namespace, :data:`FORMAT` and ``parts``."""
    return hashlib.sha256("\n".join((ns.name, FORMAT, *map(str, parts))).encode()).hexdigest()


#: the libraries whose versions a fingerprint ``versions=True`` covers (results: polars, numpy)
VERSIONED = ("polars", "numpy")


def _dist_versions(names: Iterable[str]) -> str:
    """Python's version and the ``<name>-X.dist-info`` names beside each package of ``names``
    (found without importing them)."""
    import importlib.util

    out = [sys.version]
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            out.append(f"{name}:absent")
            continue
        site = os.path.dirname(os.path.dirname(spec.origin))
        try:
            out += sorted(
                n for n in os.listdir(site) if n.startswith(f"{name}-") and n.endswith(".dist-info")
            )
        except OSError:
            out.append(f"{name}:{spec.origin}")
    return "|".join(out)


def fingerprint(name: str, parts: Iterable[str], versions: bool | tuple[str, ...] = False) -> str:
    """SHA-256 of the ``.py``/``.c``/``.h`` sources under ``parts`` (folders or files relative to the
    package; ``""``: all of it) and, with ``versions``, of Python's version and those of
    :data:`VERSIONED` (or of the libraries named); computed once per process per ``name``."""
    if name in _fingerprints:
        return _fingerprints[name]
    pkg = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the package, above core/
    libs = VERSIONED if versions is True else versions or ()
    h = hashlib.sha256(f"{name}|{_dist_versions(libs) if versions else ''}".encode())
    for part in parts:
        top = os.path.join(pkg, part) if part else pkg
        if os.path.isfile(top):
            walked: Iterable[tuple[str, list[str], list[str]]] = [
                (os.path.dirname(top), [], [os.path.basename(top)])
            ]
        else:
            walked = os.walk(top)
        for here, dirs, files in walked:  # plain strings: this runs on every printed-output hit
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(here, pkg)
            for f in sorted(files):
                if f.endswith((".py", ".c", ".h")):
                    h.update(f"{rel}/{f}\0".encode())
                    with open(os.path.join(here, f), "rb") as fh:
                        h.update(fh.read())
    _fingerprints[name] = h.hexdigest()
    return _fingerprints[name]


def identity(path: str | os.PathLike[str]) -> str:
    """A file's identity: resolved path, device, inode, size, modification and change times (ns).
    Any write moves the change time, which users cannot set back. OSError when it cannot be read."""
    p = os.path.realpath(path)
    st = os.stat(p)
    return f"{p}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"


def stat_key(path: str | os.PathLike[str], *extra: object) -> str:
    """The stat index's key of ``path`` (its :func:`identity`; a missing path, a dangling link or a
    loop: InputError naming it)."""
    from charllm_trace.core.files import path_kind

    path_kind(path)
    return hashlib.sha256(f"{identity(path)}|{FORMAT}|{'|'.join(map(str, extra))}".encode()).hexdigest()


def read_index(ns: Namespace, skey: str) -> str | None:
    """The 64-hex value the index ``ns`` holds for ``skey`` (None: none, or not a record of ours)."""
    try:
        payload = read(ns, skey)
    except Corrupt:
        return None
    if payload is None or not _HEX64.match(payload):
        return None
    return payload.decode()


def write_index(ns: Namespace, skey: str, value: str) -> None:
    """Record ``value`` for ``skey`` in the index ``ns`` (best effort)."""
    try:
        write(ns, skey, value.encode())
    except OSError:
        pass


def file_digest(path: str | os.PathLike[str], *extra: object) -> str:
    """SHA-256 of a file's bytes, remembered in the ``file-index`` by stat key (a re-read of an
    unchanged file does not hash it again)."""
    skey = stat_key(path, *extra)
    got = read_index(FILE_INDEX, skey)
    if got is not None:
        return got
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    write_index(FILE_INDEX, skey, digest)
    return digest


# ---------------------------------------------------------------------------
# writing and reading entries
# ---------------------------------------------------------------------------


def write_atomic(target: Path, parts: Iterable[bytes], prefix: str | None = None) -> None:
    """Write ``parts`` to a new file beside ``target`` and rename it over ``target``: a reader sees
    the old file or the new one, never half of one. The new file is removed if anything fails;
    the error is raised. (The store's one way to write a file, and ``--save``'s.)"""
    import tempfile  # here, on a write: its import (shutil, random, bz2, lzma) is ~10 ms of a hit

    fd, tmp = tempfile.mkstemp(prefix=prefix or f".{target.name}.", suffix=".tmp" if prefix is None else "",
                               dir=target.parent)  # fmt: skip
    try:
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _head(ns: Namespace, payload: bytes | memoryview) -> bytes:
    return FILE_HEAD + f"{FORMAT} {ns.name} ".encode() + hashlib.sha256(payload).hexdigest().encode() + b"\n"


def write(ns: Namespace, key_: str, payload: bytes) -> None:
    """Store ``payload`` as the entry ``key_`` of the file namespace ``ns`` (atomically; never over
    a file that is not the store's; OSError when the directory cannot be written)."""
    entry = ns.path(key_)
    if os.path.lexists(entry) and not owned(entry, ns.name):
        return  # someone else's file under our name: never replaced
    entry.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(entry, (_head(ns, payload), payload), prefix=f".{key_[:16]}-")


def read(ns: Namespace, key_: str) -> bytes | None:
    """The payload of the entry ``key_`` of ``ns``, checked (None: not stored or unreadable;
    :class:`Corrupt` when the head or the checksum is wrong). A read refreshes the entry's time."""
    entry = ns.path(key_)
    try:
        data = entry.read_bytes()
    except OSError:
        return None
    want = FILE_HEAD + f"{FORMAT} {ns.name} ".encode()
    nl = data.find(b"\n", 0, len(want) + 80)
    if not data.startswith(want) or nl < 0:
        raise Corrupt("not an entry of this format")
    payload = memoryview(data)[nl + 1 :]
    if hashlib.sha256(payload).hexdigest().encode() != data[len(want) : nl]:
        raise Corrupt("checksum mismatch")
    touch(entry)
    return bytes(payload)


def touch(entry: Path) -> None:
    """Mark ``entry`` as just used (least recently used goes first when pruning)."""
    try:
        os.utime(entry)
    except OSError:
        pass


def write_dir(ns: Namespace, key_: str, fill: Callable[[Path], None], done: str) -> None:
    """Store the directory entry ``key_`` of ``ns``: made in a hidden temporary (marked first),
    filled by ``fill(tmp)`` and renamed into place when ``tmp / done`` exists; an entry already
    there (another process stored the same content first) is kept."""
    import shutil
    import tempfile

    entry = ns.path(key_)
    entry.parent.mkdir(parents=True, exist_ok=True)
    if (entry / done).is_file():
        return
    tmp = Path(tempfile.mkdtemp(prefix=f".{key_[:16]}-", dir=entry.parent))
    try:
        (tmp / MARK_FILE).write_bytes(DIR_MARK)  # first: what the clean-ups look for
        fill(tmp)
        try:
            os.replace(tmp, entry)
        except OSError:
            pass  # another process stored the same content first
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def discard(ns: Namespace, key_: str) -> bool:
    """Delete the entry ``key_`` (a directory is renamed away first, so no reader sees it half
    deleted); False when it is not the store's (then it is left alone)."""
    entry = ns.path(key_)
    if not owned(entry, ns.name):
        return False
    dead = entry.parent / f".dead-{entry.name[:16]}-{os.getpid()}"
    try:
        os.replace(entry, dead)
    except OSError:
        dead = entry
    _remove(dead)
    return True


# ---------------------------------------------------------------------------
# the ownership rule
# ---------------------------------------------------------------------------


def _first(p: Path, n: int) -> bytes:
    try:
        with open(p, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def _legacy_file(p: Path, ns: str) -> bool:
    """Files of format 6 and earlier (before the one store): each cache's own head."""
    head = _first(p, 128)
    if ns == "results":
        return head[:4] == b"PK\x03\x04" and head[30:50] == b"charllm-results.json"
    if ns == "compare":
        return head.startswith(b'{"_written_by": "charllm-trace compare"')
    if ns == "outputs":
        return head.startswith(b"charllm-trace output 1 ")
    if ns in INDEXES:
        key_ = (
            head[len(b"charllm-trace cache index\n") :]
            if head.startswith(b"charllm-trace cache index\n")
            else head
        )
        return bool(_HEX64.match(key_.strip()))
    return False


def _legacy_dir(p: Path, ns: str) -> bool:
    """Directory entries written before the marker file: a ``meta.json`` sealed with its CRC-32,
    naming the entry's kind."""
    import json
    import zlib

    meta = p / "meta.json"
    try:
        if meta.is_symlink() or not meta.is_file() or meta.stat().st_size > 64 << 20:
            return False
        body, sep, crc = meta.read_bytes().rpartition(b"\n")
        if not sep or crc.strip() != f"{zlib.crc32(body):08x}".encode():
            return False
        obj = json.loads(body)
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and obj.get("kind") == ns and "format" in obj


def owned(p: Path, ns: str) -> bool:
    """Whether ``p`` (an item under the store's folder ``ns``) is the store's: a file starting with
    :data:`FILE_HEAD`, a directory holding :data:`MARK_FILE` (or an entry of an earlier release
    with that release's marker). Symbolic links are never the store's."""
    try:
        if p.is_symlink():
            return False
        if p.is_dir():
            return _first(p / MARK_FILE, 64) == DIR_MARK or _legacy_dir(p, ns)
        if not os.path.isfile(p):
            return False
    except OSError:
        return False
    return _first(p, len(FILE_HEAD)) == FILE_HEAD or _legacy_file(p, ns)


# ---------------------------------------------------------------------------
# housekeeping: size cap, stale temporaries, info, clear
# ---------------------------------------------------------------------------


def entry_size(p: Path) -> int:
    """Bytes of an entry (a file, or a directory's files); 0 when unreadable."""
    try:
        if p.is_dir():
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        return p.stat().st_size
    except OSError:
        return 0


def _remove(p: Path) -> None:
    import shutil

    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    except OSError:
        pass


def _ours(base: Path) -> list[tuple[str, Path]]:
    """(namespace, path) of everything in the store that it wrote."""
    out = []
    for sub in NAMESPACES:
        try:
            items = list((base / sub).iterdir())
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


def _used(e: Path, st: os.stat_result) -> float:
    """When an entry was last used: a directory's ``meta.json`` time (0: none, it goes first), a file's own."""
    if not e.is_dir():
        return st.st_mtime
    try:
        return (e / "meta.json").stat().st_mtime
    except OSError:
        return 0.0


def prune(limit_gb: float | None = None) -> None:
    """Remove stale temporaries and, above the size cap (``limit_gb``, else :func:`max_gb`), the
    least recently used entries of every namespace."""
    limit = (max_gb() if limit_gb is None else limit_gb) * 1e9
    now = time.time()
    entries = []
    total = 0
    for sub, e in _ours(root()):
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
        size = entry_size(e)
        entries.append((_used(e, st), size, e))
        total += size
    for _, size, e in sorted(entries):
        if total <= limit:
            break
        _remove(e)
        total -= size
    _write_usage(total, now)


#: at the store's root: what the last :func:`prune` walk found plus what was stored since
USAGE_FILE = ".charllm-trace-usage"
_USAGE_HEAD = "charllm-trace usage "


def _read_usage() -> tuple[float, float] | None:
    """(bytes, time of the last walk) from the usage file; None when absent, foreign or unreadable."""
    try:
        text = (root() / USAGE_FILE).read_text(encoding="ascii")
        if not text.startswith(_USAGE_HEAD):
            return None
        total, walked = (float(x) for x in text[len(_USAGE_HEAD) :].split())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return total, walked


def _write_usage(total: float, walked: float) -> None:
    """Record the estimate (best effort; a file of that name that is not ours is left alone)."""
    target = root() / USAGE_FILE
    try:
        if os.path.lexists(target) and _read_usage() is None:
            return
        ms = int(walked * 1000)  # truncated, never rounded up: a walk is never dated after now
        write_atomic(target, [f"{_USAGE_HEAD}{int(total)} {ms // 1000}.{ms % 1000:03d}\n".encode()])
    except OSError:
        return


def stored(nbytes: int) -> None:
    """After an entry of about ``nbytes`` was stored: :func:`prune` when the store may be over its
    cap. The walk over every entry runs only when the running estimate (the last walk's total
    plus what was stored since) passes the cap, when the last walk is older than ``STALE_S``
    (stale temporaries; a concurrent writer's addition may be missing from the estimate: the
    file is read, added to and replaced without a lock), or when there is no estimate. An
    overestimate (an entry replaced or deleted since) only brings the walk sooner. Without this
    every store walked the whole store: O(entries) stats per store, quadratic in a session."""
    limit = max_gb() * 1e9
    state = _read_usage()
    if state is not None:
        total, walked = state
        total += max(0, nbytes)
        if total <= limit and 0 <= time.time() - walked <= STALE_S:
            _write_usage(total, walked)
            return
    prune()


def info() -> dict[str, Any]:
    """Where the store is and what it holds (entries and bytes per namespace)."""
    base = root()
    kinds: dict[str, dict[str, int]] = {k: {"entries": 0, "bytes": 0} for k in NAMESPACES}
    temps = 0
    for sub, e in _ours(base):
        if e.name.startswith("."):
            temps += 1
            continue
        kinds[sub]["entries"] += 1
        kinds[sub]["bytes"] += entry_size(e)
    return {
        "root": str(base),
        "exists": base.is_dir(),
        "enabled": enabled(),
        "max_gb": max_gb(),
        "format": FORMAT,
        "entries": sum(kinds[k]["entries"] for k in KINDS),
        "bytes": sum(v["bytes"] for v in kinds.values()),
        "kinds": kinds,
        "temporaries": temps,
    }


def clear() -> dict[str, int]:
    """Delete every entry, index record and temporary the store wrote (any format); nothing else.
    Returns the number of items removed per namespace."""
    base = root()
    removed: dict[str, int] = {}
    for sub, e in _ours(base):
        _remove(e)
        removed[sub] = removed.get(sub, 0) + 1
    for sub in NAMESPACES:
        try:
            (base / sub).rmdir()  # only when empty: foreign files stay
        except OSError:
            pass
    if _read_usage() is not None:
        (base / USAGE_FILE).unlink(missing_ok=True)
    return removed
