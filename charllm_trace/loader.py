"""Open whatever the user points at as a Run.

Accepted inputs:
- a Chakra ET file (``.et``, ``.et.gz``, or any file whose bytes are a Chakra ET);
- a directory of per-rank Chakra ETs;
- a collected run directory (host ETs + Kineto profiles + telemetry + manifest),
  converted in memory;
- a Kineto profile (``.json`` / ``.json.gz``), converted in memory.

Decoded ETs and converted JSON files and run directories are cached by content
(``charllm_trace/et/cache.py``, docs/cache.md): a second load of the same input maps the
stored tables instead of converting again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from charllm_trace.errors import InputError
from charllm_trace.model import Run

ET_SUFFIXES = (".et", ".et.gz")
JSON_SUFFIXES = (".json", ".json.gz")


def is_et_name(p: Path) -> bool:
    return p.name.lower().endswith(ET_SUFFIXES)


def is_json_name(p: Path) -> bool:
    return p.name.lower().endswith(JSON_SUFFIXES)


def _cached_convert(kind: str, p: Path, convert: Callable[[Path], Run]) -> Run:
    """``convert(p)``, or its cached result (``kind``: "kineto" for a file, "run" for a directory)."""
    from charllm_trace.et import cache as et_cache

    try:
        key = et_cache.json_key(p) if kind == "kineto" else et_cache.run_key(p)
    except OSError:
        return convert(p)  # unreadable files: the converter words the error
    hit = et_cache.lookup_run(kind, key, str(p))
    if hit is not None:
        traces, manifest = hit
        return Run(traces=traces, manifest=manifest, source=str(p))
    run = convert(p)
    et_cache.store_run(kind, key, run.traces, run.manifest, str(p))
    return run


def load(path: str | os.PathLike[str], *, cache: bool | None = None) -> Run:
    """Load ``path`` into a :class:`Run`. Raises :class:`InputError` for bad input, and for a
    directory whose run is incomplete unless partial runs are allowed (:mod:`run_checks`)."""
    from charllm_trace.engine import is_url
    from charllm_trace.run_checks import label_partial

    if is_url(path):  # read here from a local copy (with --scheduler, workers read URLs themselves)
        from charllm_trace.engine.localize import localize_input, url_errors

        url = str(path)
        local = localize_input(url)
        with url_errors(url, local):
            run = load(local, cache=False)
        run.source = url
        return run
    run = _load(path, cache=cache)
    if os.path.isdir(path):
        label_partial(run, path)
    return run


def _load(path: str | os.PathLike[str], *, cache: bool | None = None) -> Run:
    """Load ``path`` into a :class:`Run`. Raises :class:`InputError` for bad input.

    ``cache``: use the cache of decoded/converted inputs (default: unless turned off for the
    process, ``charllm_trace.et.cache.set_enabled(False)`` or ``CHARLLM_TRACE_NO_CACHE=1``)."""
    if cache is None:
        from charllm_trace.et.cache import enabled

        cache = enabled()
    from charllm_trace.inputs import open_regular, path_kind

    p = Path(path)
    if path_kind(p) == "dir":
        entries = [e for e in p.iterdir() if not e.name.startswith(".")]
        if not entries:
            raise InputError(p, "directory is empty")
        from charllm_trace.inputs import trace_entries

        if trace_entries(p, ET_SUFFIXES):
            from charllm_trace.et.reader import read_et_dir

            return read_et_dir(p, cache=cache)
        if trace_entries(p, JSON_SUFFIXES):
            from charllm_trace.converters.run_dir import convert_run

            return _cached_convert("run", p, convert_run) if cache else convert_run(p)
        raise InputError(p, "no Chakra ET (.et) files, Kineto profiles or run directory found here")
    with open_regular(p, "a trace file or a directory") as f:
        head = f.read(4)
        if not head:
            raise InputError(p, "file is empty")
        if head == b"PK\x03\x04":  # a zip: what `analyze --save` writes (results_store.py)
            raise InputError(
                p,
                "a zip file, not a trace: charllm-trace results (analyze --save) are read by "
                "'analyze' and 'report'; the other commands need the trace itself",
            )
    if is_json_name(p):
        from charllm_trace.converters.run_dir import convert_file

        return _cached_convert("kineto", p, convert_file) if cache else convert_file(p)
    from charllm_trace.et.reader import read_et

    trace = read_et(p, cache=cache)
    return Run.single(trace, source=str(p))
