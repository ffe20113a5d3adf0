"""``compare``'s per-run summaries, cached: comparing the same runs again reads one small JSON
entry per run (its row of the sweep table, :func:`charllm_trace.regress.sweep.run_row`) instead of
decoding each run's whole results file and computing the row again (docs/cache.md).

An entry is ``<cache root>/compare/<key>``: the row as JSON. The key is the SHA-256 of the run's
results key (``results_cache.results_key``: the input's content, the analysis options, the code
that computes results) and the sources that turn results into the row (``regress/sweep.py``,
``regress/diff.py``). A miss analyses the run through the results cache (``results_cache.
analyze_path``: a results entry is reused when one exists) and stores both. Entries are never
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
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from charllm_trace.et import cache as et_cache
from charllm_trace.et.cache_owner import ROW_KEY, owned
from charllm_trace.store.results_cache import analyze_path, results_key

if TYPE_CHECKING:
    from charllm_trace.analysis.results import AnalyzeOptions

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


def _lookup(key: str, path: str | os.PathLike[str]) -> dict[str, Any] | None:
    entry = _entry(key)
    try:
        data = entry.read_bytes()
    except OSError:
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


def _store(key: str, row: dict[str, Any]) -> None:
    try:
        entry = _entry(key)
        if os.path.lexists(entry) and not owned(entry, KIND):
            return  # someone else's file under our name: never replaced
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", dir=entry.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({ROW_KEY: "charllm-trace compare", **row}, f)  # its marker first (cache_owner)
            os.replace(tmp, entry)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except Exception:  # noqa: BLE001 - caching is best effort
        return


def summary_row(
    path: str | os.PathLike[str], options: AnalyzeOptions, *, cache: bool | None = None
) -> dict[str, Any]:
    """The sweep row of the input at ``path`` analysed with ``options``: from the cache when it
    holds it, else analysed (through the results cache) and stored. InputError for bad input."""
    from charllm_trace.inputs.urls import is_url
    from charllm_trace.regress.sweep import run_row

    if cache is None:
        cache = et_cache.enabled()
    key = None
    if cache and not is_url(path):  # a URL's rows are not kept (the loader copies its bytes)
        try:
            key = hashlib.sha256(f"{results_key(path, options)}|{code_fingerprint()}".encode()).hexdigest()
        except OSError:
            key = None  # unreadable: analysing words the error
    if key is not None:
        row = _lookup(key, path)
        if row is not None:
            from charllm_trace.collectors.run_checks import note_on_results_hit

            note_on_results_hit(path)
            return row
    row = run_row(analyze_path(path, options, cache=cache).analysis)
    if key is not None:
        _store(key, row)
    return row
