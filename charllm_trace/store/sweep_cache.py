"""``compare``'s per-run summaries, stored beside the results entries: comparing the same runs
again reads one small JSON entry per run (its row of the sweep table,
:func:`charllm_trace.regress.sweep.run_row`) instead of decoding each run's whole results file and
computing the row again (docs/cache.md). This module holds the entries; ``service.analyze`` (with
``Request(row=True)``) is the front end that looks them up beside the results entry.

An entry is ``<cache root>/compare/<key>``: the row as JSON. The key (:func:`row_key`) is the
SHA-256 of the run's results key (``results_cache.results_key``: the input's content, the analysis
options, the code that computes results) and the sources that turn results into the row
(``regress/sweep.py``, ``regress/diff.py``). A miss reads the results entry when there is one (else
analyses the run) and stores both. Entries are never
trusted: one that is not a JSON object of plain values is deleted with a note and the row
computed again. They are counted, cleared and pruned with the other caches (``et/cache.py``, kind
``compare``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from charllm_trace.et import cache as et_cache
from charllm_trace.et.cache_owner import ROW_KEY, owned
from charllm_trace.store.atomic import read_entry, replace_file

KIND = "compare"
CODE = ("regress/sweep.py", "regress/diff.py")  # relative to the package
_fingerprint: str | None = None


def code_fingerprint() -> str:
    global _fingerprint
    if _fingerprint is None:
        pkg = Path(__file__).resolve().parent.parent
        h = hashlib.sha256(b"compare-row|1")
        for part in CODE:
            h.update(f"{part}\0".encode())
            h.update((pkg / part).read_bytes())
        _fingerprint = h.hexdigest()
    return _fingerprint


def _entry(key: str) -> Path:
    return et_cache.cache_root() / KIND / key


def _plain(v: Any) -> bool:
    return v is None or isinstance(v, (str, int)) or (isinstance(v, float) and math.isfinite(v))


def row_key(results_key: str) -> str:
    """The key of the row of the results stored under ``results_key``."""
    return hashlib.sha256(f"{results_key}|{code_fingerprint()}".encode()).hexdigest()


def lookup(key: str, path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The stored row of ``key`` (None: not stored; a damaged entry is deleted with a note)."""
    entry = _entry(key)
    data = read_entry(entry)
    if data is None:
        return None
    try:
        row = json.loads(data)
        ok = isinstance(row, dict) and all(isinstance(k, str) and _plain(v) for k, v in row.items())
    except ValueError:
        ok = False
    if ok:
        row.pop(ROW_KEY, None)
        return row
    if not owned(entry, KIND):  # a file of someone else's under our name: left alone
        print(
            f"note: {entry} is not a cache entry of charllm-trace; left alone, computing again",
            file=sys.stderr,
        )
        return None
    try:
        entry.unlink()
    except OSError:
        pass
    print(f"note: the cached compare row for {path} was corrupt; deleted, computing again", file=sys.stderr)
    return None


def store(key: str, row: dict[str, Any]) -> None:
    """Remember ``row`` under ``key``; best effort (errors ignored)."""
    try:
        entry = _entry(key)
        if os.path.lexists(entry) and not owned(entry, KIND):
            return  # someone else's file under our name: never replaced
        entry.parent.mkdir(parents=True, exist_ok=True)
        # its marker first (cache_owner)
        replace_file(entry, key, (json.dumps({ROW_KEY: "charllm-trace compare", **row}).encode(),))
    except Exception:  # noqa: BLE001 - caching is best effort
        return
