"""The results cache: a second analysis of the same input with the same options (any command:
they all go through ``service.analyze``, the cache's one front end) loads the stored analysis
instead of loading the trace and analysing it again (docs/cache.md, "Results"). This module holds
the entries (key, lookup, store); ``service.py`` decides when to use them.

An entry is the ``results`` namespace's of the one store (``core/cas.py``: key, atomic write,
ownership, housekeeping): the store's head, then a results file (``store/results.py``: zip of Arrow
IPC frames + JSON, every member checksummed), the same bytes ``analyze --save`` writes and the
same reader that checks them. The key is the SHA-256 of

- the input's content key, as the input cache computes it (``et/cache.py``): ``json_key`` for a
  JSON file, ``run_key`` for a directory (run directory or directory of ETs; every file's
  content), the SHA-256 of the bytes for an ET file, with the ET reader's code fingerprint for
  ETs; a re-read finds the content hashes by stat key, without hashing the file again;
- the analysis options and the ranks selected;
- a fingerprint of the code that computes results: the ``.py``/``.c`` sources of ``analysis/``,
  ``graph/``, ``core/``, ``inputs/loader.py``, ``render/report_views.py`` (the report's views), ``service.py``
  (what is run) and the results file code, plus the versions of Python, polars and numpy;
- the results format version.

A hit replaces the stored ``source`` by the path given now (two copies of a file share an
entry; the output names the copy analysed). Entries are never trusted: a file that fails any
check of the store or of ``results.read_results`` is deleted with a one-line note and the input
analysed again. The store counts, clears and prunes the entries with every other namespace.

On a hit nothing of the analyses, the graph engine, the converters or numpy is imported: the
key needs only the stat index, the entry only zipfile, JSON and polars.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from charllm_trace.core import cas
from charllm_trace.et import cache as et_cache
from charllm_trace.inputs.urls import is_url
from charllm_trace.store.results import VERSION, SavedResults, read_results, results_bytes

if TYPE_CHECKING:
    from charllm_trace.analysis.results import AnalyzeOptions, RunAnalysis
    from charllm_trace.render.report_views import ReportViews

KIND = "results"
#: sources whose code decides the results (relative to the package); the input's reading and
#: conversion are in the input key already (et/cache.py fingerprints)
CODE = (
    "analysis",
    "graph",
    "core",  # the model, classification, intervals, the DAG kernel, limits (--sample's ranks)
    "inputs/loader.py",
    "render/report_views.py",
    "store/results.py",
    "store/results_cache.py",
    "service.py",  # the road from input to results
)


def code_fingerprint() -> str:
    """SHA-256 of the sources in ``CODE`` and the versions of Python, polars and numpy (once per process)."""
    return cas.fingerprint(KIND, CODE, versions=True)


def input_key(path: str | os.PathLike[str]) -> str:
    """The input's content key (see the module's docstring); OSError when it cannot be read."""
    p = Path(path)
    if p.is_dir():
        return f"{et_cache.run_key(p)}|{et_cache.code_fingerprint('et')}"
    if p.name.lower().endswith((".json", ".json.gz")):
        return et_cache.json_key(p)
    return f"et|{et_cache.file_digest(p)}|{et_cache.code_fingerprint('et')}"


def options_text(options: AnalyzeOptions) -> str:
    """The options as canonical JSON (part of the key)."""
    d = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    for k, v in d.items():
        if v is not None and hasattr(v, "items"):
            d[k] = dict(v)
    return json.dumps(d, sort_keys=True)


def allow_partial() -> bool:
    from charllm_trace.collectors.run_checks import allow_partial as allowed

    return allowed()


def results_key(
    path: str | os.PathLike[str],
    options: AnalyzeOptions,
    ranks: list[int] | None = None,
    sample: int | None = None,
) -> str:
    """The key of the results of analysing ``path`` (ranks ``ranks``, all when None; ``sample``: N
    of them, ``--sample``) with ``options``."""
    return cas.key(
        cas.RESULTS,
        VERSION,
        input_key(path),
        options_text(options),
        "all" if ranks is None else ",".join(map(str, ranks)),
        "" if sample is None else f"sample={sample}",
        "partial-allowed" if allow_partial() else "whole-only",
        code_fingerprint(),
    )


def lookup(key: str, path: str | os.PathLike[str], *, views: bool = False) -> SavedResults | None:
    """The stored results of ``key`` (None: not stored, or stored without the report's views and
    ``views`` asked for them). A damaged entry is deleted with a note (None)."""
    try:
        data = cas.read(cas.RESULTS, key)
        if data is None:
            return None
        saved = read_results(cas.RESULTS.path(key), data)
    except Exception as exc:  # noqa: BLE001 - a broken entry is deleted and rebuilt, never trusted
        why = getattr(exc, "problem", None) or str(exc) or type(exc).__name__
        _discard(key, str(path), why)
        return None
    if views and not saved.has_views:
        return None
    # what the loader names the input (Run.source): a URL as given, a path as pathlib writes it
    saved.set_source(str(path) if is_url(path) else str(Path(path)))
    return saved


def _discard(key: str, what: str, why: str) -> None:
    if not cas.discard(cas.RESULTS, key):
        cas.note(
            f"{cas.RESULTS.path(key)} is not a cache entry of charllm-trace; left alone, analysing {what} again"
        )
        return
    why = " ".join(str(why).split())[:120]
    cas.note(f"the cached results for {what} were corrupt ({why}); deleted, analysing again")


def store(key: str, res: RunAnalysis, views: ReportViews | None = None) -> None:
    """Remember ``res`` (and the report's ``views``) under ``key``; best effort (errors ignored)."""
    try:
        data = results_bytes(res, views)
        cas.write(cas.RESULTS, key, data)  # replaces an entry without views
        cas.stored(len(data))
    except Exception:  # noqa: BLE001 - caching is best effort
        return
