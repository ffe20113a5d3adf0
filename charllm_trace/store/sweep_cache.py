"""``compare``'s per-run summaries, stored beside the results entries: comparing the same runs
again reads one small JSON entry per run (its row of the sweep table,
:func:`charllm_trace.regress.sweep.run_row`) instead of decoding each run's whole results file and
computing the row again (docs/cache.md). This module holds the entries; ``service.analyze`` (with
``Request(row=True)``) is the front end that looks them up beside the results entry.

An entry is the ``compare`` namespace's of the one store (``core/cas.py``): the row as JSON. The key (:func:`row_key`) is the
SHA-256 of the run's results key (``results_cache.results_key``: the input's content, the analysis
options, the code that computes results) and the sources that turn results into the row
(``regress/sweep.py``, ``regress/diff.py``). A miss reads the results entry when there is one (else
analyses the run) and stores both. Entries are never
trusted: one that is not a JSON object of plain values is deleted with a note and the row
computed again. The store counts, clears and prunes them with the other namespaces.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from charllm_trace.core import cas

KIND = "compare"
CODE = ("regress/sweep.py", "regress/diff.py")  # relative to the package


def code_fingerprint() -> str:
    return cas.fingerprint("compare-row|1", CODE)


def _plain(v: Any) -> bool:
    return v is None or isinstance(v, (str, int)) or (isinstance(v, float) and math.isfinite(v))


def row_key(results_key: str) -> str:
    """The key of the row of the results stored under ``results_key``."""
    return cas.key(cas.COMPARE, results_key, code_fingerprint())


def lookup(key: str, path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The stored row of ``key`` (None: not stored; a damaged entry is deleted with a note)."""
    try:
        data = cas.read(cas.COMPARE, key)
        if data is None:
            return None
        row = json.loads(data)
        ok = isinstance(row, dict) and all(isinstance(k, str) and _plain(v) for k, v in row.items())
    except (cas.Corrupt, ValueError):
        ok = False
    if ok:
        return row
    if not cas.discard(cas.COMPARE, key):  # a file of someone else's under our name: left alone
        cas.note(
            f"{cas.COMPARE.path(key)} is not a cache entry of charllm-trace; left alone, computing again"
        )
        return None
    cas.note(f"the cached compare row for {path} was corrupt; deleted, computing again")
    return None


def store(key: str, row: dict[str, Any]) -> None:
    """Remember ``row`` under ``key``; best effort (errors ignored)."""
    try:
        data = json.dumps(row).encode()
        cas.write(cas.COMPARE, key, data)
        cas.stored(len(data))
    except Exception:  # noqa: BLE001 - caching is best effort
        return
