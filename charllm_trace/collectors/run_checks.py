"""Is a run whole? Checks on the ranks a run directory (or a directory of ETs) holds against what
its manifest (written by ``charllm-trace collect``) says was traced (issue 15: no silent
acceptance). Directories without a manifest hold what someone chose to share (a few ranks of a big
job are common) and are taken as they are.

A run that finished but lacks ranks, or whose manifest cannot be trusted, is refused with one
line; ``--allow-partial`` (``CHARLLM_TRACE_ALLOW_PARTIAL=1``) analyses the ranks present and
labels the result. A run that was interrupted or failed is not refused here: its reader note
(``collectors.outcome.reader_note``) already says what happened and what is usable.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from charllm_trace.core.errors import InputError
from charllm_trace.core.limits import MAX_RANK

ENV = "CHARLLM_TRACE_ALLOW_PARTIAL"


def allow_partial() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes")


def set_allow_partial(on: bool | None) -> None:
    """Turn ``--allow-partial`` on for this process (None: back to the environment's default)."""
    if on:
        os.environ[ENV] = "1"
    else:
        os.environ.pop(ENV, None)


def ranges(ranks: Any) -> str:
    from charllm_trace.core.model import rank_ranges

    return rank_ranges(ranks)


def _int_field(mp: Path, man: dict[str, Any], key: str, lo: int, hi: int) -> int | None:
    v = man.get(key)
    if v is None:
        return None
    if type(v) is not int or not lo <= v <= hi:
        raise InputError(mp, f"{key} is {v!r}, expected an integer from {lo} to {hi:,}")
    return v


def check_manifest(mp: Path, man: dict[str, Any]) -> tuple[int | None, list[int] | None]:
    """The manifest's version is one this charllm-trace reads; its world size and traced ranks are
    integers in range. Returns (world size, ranks traced), None where the manifest does not say."""
    from charllm_trace.collectors.manifest import MANIFEST_VERSION

    v = man.get("manifest_version")
    if v is not None and (type(v) is not int or not 1 <= v <= MANIFEST_VERSION):
        raise InputError(
            mp, f"manifest_version {v!r} is not supported (this charllm-trace reads 1 to {MANIFEST_VERSION})"
        )
    world = _int_field(mp, man, "world_size", 1, MAX_RANK)
    traced = man.get("ranks_traced")
    if traced is not None and not isinstance(traced, list) and traced != "all":
        raise InputError(mp, f"ranks_traced is {traced!r}, expected a list of ranks or 'all'")
    ranks = None
    if isinstance(traced, list):
        hi = (world or MAX_RANK) - 1
        bad = [r for r in traced if type(r) is not int or not 0 <= r <= hi]
        if bad:
            raise InputError(mp, f"ranks_traced holds {bad[0]!r}, not a rank from 0 to {hi:,}")
        ranks = sorted(set(traced))
    if man.get("ranks_requested", "all") == "all" and world is not None and ranks is not None:
        if ranks != list(range(world)):
            raise InputError(
                mp,
                f"inconsistent: every rank was requested in a world of {world} but ranks_traced is "
                f"{ranges(ranks)}",
            )
    return world, ranks


def check_complete(
    source: str | os.PathLike[str], manifest: dict[str, Any], present: list[int], worlds: set[int]
) -> str | None:
    """Refuse a finished run missing ranks (``InputError`` naming them) unless partial runs are
    allowed; then return the label to show. ``worlds``: the world sizes the rank traces state."""
    d = Path(source)
    if not manifest:
        # no record of what was traced: labs share a few ranks of a big job (the shared HTA set
        # holds ranks 0-1 of a world of 128); those are what the user has, not an incomplete run
        return None
    world, traced = check_manifest(d / "manifest.json", manifest)
    if world is None and len(worlds) == 1:
        world = next(iter(worlds))
    if world is not None:
        outside = [r for r in present if r >= world]
        if outside:
            raise InputError(d, f"rank {outside[0]} is outside the run's world size {world}")
    expected = set(traced) if traced is not None else set(range(world)) if world is not None else set(present)
    missing = sorted(expected - set(present))
    if not missing:
        return None
    status = manifest.get("status") if manifest else None
    if status in ("interrupted", "failed", "running"):
        return None  # the reader note says what happened and what is usable
    what = f"rank(s) {ranges(missing)} of {ranges(expected)} have no trace" + (
        f" (world size {world})" if world is not None else ""
    )
    if not allow_partial():
        raise InputError(
            d, f"an incomplete run: {what}; --allow-partial analyses the {len(present)} rank(s) present"
        )
    return f"partial run (--allow-partial): {what}; results cover rank(s) {ranges(present)} only"


def label_partial(run: Any, path: str | os.PathLike[str], *, present: list[int] | None = None) -> None:
    """Check that the run (a :class:`~charllm_trace.core.model.Run`) read from directory ``path`` is
    whole; label it (a note, ``manifest["partial"]``) when partial runs are allowed and it is not.
    An interrupted run's reader note is printed here, on every read, cached or not. ``present``:
    the ranks the directory holds, when only some of them were read (``--ranks``/``--sample``)."""

    import sys

    said = run.manifest.get("reader_note") if isinstance(run.manifest, dict) else None
    if isinstance(said, str):  # an interrupted or failed run (collectors.outcome.reader_note)
        print(f"note: {path}: {said}", file=sys.stderr, flush=True)
    worlds = {t.meta.world_size for t in run.traces.values() if t.meta.world_size is not None}
    note = check_complete(path, run.manifest, run.ranks if present is None else present, worlds)
    if note:
        print(f"note: {path}: {note}", file=sys.stderr, flush=True)
        run.manifest = {**run.manifest, "partial": note}


def note_on_results_hit(path: str | os.PathLike[str]) -> None:
    """Results taken from the results cache skip reading the run: say again what a reader of an
    interrupted or failed run directory would be told (``collectors.outcome.reader_note``)."""
    import json
    import sys

    from charllm_trace.collectors.outcome import reader_note

    d = Path(path)
    if not d.is_dir():
        return
    try:
        manifest = json.loads((d / "manifest.json").read_bytes())
    except (OSError, ValueError):
        return
    if not isinstance(manifest, dict):
        return
    ranks = sorted({int(m.group(1)) for p in d.iterdir() if (m := _RANK_FILE.match(p.name))})
    note = reader_note(d, manifest, ranks)
    if note:
        print(f"note: {d}: {note}", file=sys.stderr, flush=True)


_RANK_FILE = __import__("re").compile(r"rank-(\d+)\.kineto\.json")


#: ranks of one run are traced over the same steps: spans this far apart are two collections
APART_NS = 60 * 10**9


def check_one_collection(run_dir: str | os.PathLike[str], traces: dict[int, Any]) -> None:
    """InputError when two ranks' traced spans (first start to last end of their timed nodes) are
    more than a minute apart: files of two collections in one folder, which the run ids (absent
    in files of older collections and other tools) cannot tell."""
    spans = []
    for rank, t in sorted(traces.items()):
        span = trace_span(t)
        if span is not None:
            spans.append((*span, rank))
    check_spans(run_dir, spans)


def trace_span(t: Any) -> tuple[int, int] | None:
    """(first start, last end) of a trace's timed nodes; None without timestamps or nodes."""
    import polars as pl

    if not t.meta.has_timestamps or t.nodes.height == 0:
        return None
    lo, hi = t.nodes.select(
        start=pl.col("start_ns").min(),
        end=(pl.col("start_ns") + pl.col("dur_ns")).max(),
    ).row(0)
    return (int(lo), int(hi)) if lo is not None and hi is not None else None


def check_spans(run_dir: str | os.PathLike[str], spans: list[tuple[int, int, int]]) -> None:
    """``check_one_collection`` on the ranks' (first start, last end, rank), in rank order."""
    if len(spans) < 2:
        return
    first_end = min(spans, key=lambda s: s[1])
    last_start = max(spans, key=lambda s: s[0])
    gap = last_start[0] - first_end[1]
    if gap > APART_NS:
        raise InputError(
            run_dir,
            f"rank {last_start[2]} was traced {gap / 1e9:,.0f} s after rank {first_end[2]}'s trace ended: "
            "files of two collections in one folder? (the ranks of a run trace the same steps)",
        )
