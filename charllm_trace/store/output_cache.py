"""The printed-output cache: a repeated ``analyze --format json`` (to stdout) of an unchanged input
with the same options prints the bytes the first run printed, without importing polars, numpy,
the analyses or the results file code (issue 26 item 2: a hit was 0.25 s, of which polars' import
0.11 s; Python's own start-up is ~0.02 s).

It sits in front of the results cache (``store/results_cache.py``), which it does not replace: a miss
here goes through the results cache as before, and the output printed is then stored here too.

An entry is ``<cache root>/outputs/<key>``: :data:`HEAD`, the SHA-256 of the payload in hex, a
newline, then the payload (the output, byte for byte). It is checked on every read; a damaged
entry is deleted (when it carries this tool's head) and the input analysed again. The key is the
SHA-256 of

- the input as named on the command line, and the identity of every file it is made of
  (resolved path, device, inode, size, modification and change times; a directory: each of its
  non-hidden files), the way the input cache's stat index recognises an unchanged file;
- every parameter of the command as parsed (``click``'s ``ctx.params``) and the output format;
- whether partial runs are allowed, and the ``CHARLLM_TRACE_*`` variables of the environment
  other than the cache's own;
- a fingerprint of the whole package's sources (``.py``, ``.c``) and of the installed versions
  of Python, polars and numpy (their ``.dist-info`` names: no import).

The entries are counted, cleared and pruned with the others (``et/cache.py``, kind ``outputs``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from charllm_trace.et.cache_owner import OUTPUT_HEAD as HEAD
from charllm_trace.et.cache_owner import owned
from charllm_trace.store.atomic import read_entry, replace_file

KIND = "outputs"
_FORMAT = 1
#: environment variables that never change what is printed (the cache's own switches)
_ENV_IGNORED = ("CHARLLM_TRACE_CACHE_DIR", "CHARLLM_TRACE_NO_CACHE", "CHARLLM_TRACE_CACHE_MAX_GB")
_fingerprint: str | None = None


def cache_root() -> Path:
    """The cache directory (``et.cache.cache_root``, without importing it: it imports polars)."""
    env = os.environ.get("CHARLLM_TRACE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "charllm-trace"


def enabled() -> bool:
    """Whether the caches are on (``--no-cache`` sets ``et.cache``'s switch: it is imported then)."""
    mod = sys.modules.get("charllm_trace.et.cache")
    if mod is not None:
        return bool(mod.enabled())
    return os.environ.get("CHARLLM_TRACE_NO_CACHE", "") in ("", "0")


def _dist_versions() -> str:
    """``polars-X.dist-info`` / ``numpy-Y.dist-info`` names beside the packages (no import)."""
    import importlib.util

    out = [sys.version]
    for name in ("polars", "numpy"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            out.append(f"{name}:absent")
            continue
        site = Path(spec.origin).parent.parent
        try:
            out += sorted(
                n for n in os.listdir(site) if n.startswith(f"{name}-") and n.endswith(".dist-info")
            )
        except OSError:
            out.append(f"{name}:{spec.origin}")
    return "|".join(out)


def code_fingerprint() -> str:
    """SHA-256 of every ``.py``/``.c`` source of the package and the library versions (once per process)."""
    global _fingerprint
    if _fingerprint is None:
        pkg = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the package, above store/
        h = hashlib.sha256(f"outputs|{_FORMAT}|{_dist_versions()}".encode())
        for root, dirs, files in os.walk(pkg):  # plain strings: this runs on every hit
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(root, pkg)
            for name in sorted(files):
                if name.endswith((".py", ".c", ".h")):
                    h.update(f"{rel}/{name}\0".encode())
                    with open(os.path.join(root, name), "rb") as f:
                        h.update(f.read())
        _fingerprint = h.hexdigest()
    return _fingerprint


def _identity(p: Path) -> str:
    st = p.stat()
    return f"{p.resolve()}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"


def input_identity(path: str) -> str:
    """The identity of the files of the input ``path`` (OSError when it cannot be read)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if not f.name.startswith(".") and f.is_file())
        return "\n".join([_identity(p), *(f"{f.name}\0{_identity(f)}" for f in files)])
    if not p.is_file():
        raise OSError(f"{path}: not a file")
    return _identity(p)


def output_key(path: str, params: dict[str, Any], fmt: str, partial_allowed: bool) -> str | None:
    """The key of what ``analyze`` prints for ``path`` with ``params`` in format ``fmt`` (None:
    the input cannot be read; the command then reports it as usual)."""
    try:
        ident = input_identity(path)
    except OSError:
        return None
    env = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith("CHARLLM_TRACE_") and k not in _ENV_IGNORED
    )
    raw = "\n".join(
        [
            f"outputs|{_FORMAT}|{fmt}",
            path,
            ident,
            json.dumps(params, sort_keys=True, default=str),
            "partial-allowed" if partial_allowed else "whole-only",
            json.dumps(env),
            code_fingerprint(),
        ]
    )
    return hashlib.sha256(raw.encode()).hexdigest()


def _entry(key: str) -> Path:
    return cache_root() / KIND / key


def _discard(entry: Path) -> None:
    if not owned(entry, KIND):
        return
    try:
        entry.unlink()
    except OSError:
        return
    print(
        f"note: the cached output {entry.name[:16]}... was corrupt; deleted, analysing again", file=sys.stderr
    )


def lookup(key: str) -> bytes | None:
    """The output stored under ``key``, checked (None: none, or damaged: deleted)."""
    entry = _entry(key)
    data = read_entry(entry)
    if data is None:
        return None
    nl = data.find(b"\n", 0, len(HEAD) + 80)
    if not data.startswith(HEAD) or nl < 0:
        _discard(entry)
        return None
    payload = memoryview(data)[nl + 1 :]
    if hashlib.sha256(payload).hexdigest().encode() != data[len(HEAD) : nl]:
        _discard(entry)
        return None
    try:
        os.utime(entry)  # least recently used goes first when pruning
    except OSError:
        pass
    return bytes(payload)


def store(key: str, payload: bytes) -> None:
    """Remember ``payload`` under ``key`` (best effort: errors ignored; never over a file that is
    not this tool's)."""
    try:
        entry = _entry(key)
        if os.path.lexists(entry) and not owned(entry, KIND):
            return
        entry.parent.mkdir(parents=True, exist_ok=True)
        replace_file(entry, key, (HEAD + hashlib.sha256(payload).hexdigest().encode() + b"\n", payload))
    except Exception:  # noqa: BLE001 - caching is best effort
        return
