"""The analysis registry: every analysis of ``analyze_run`` declared once, in :data:`ANALYSES`,
loaded from the data file ``analysis/analyses.toml`` (with the columns of each frame,
``analysis/columns.py``) and checked as it is loaded.

An entry (:class:`Analysis`) names, in one place:

- ``name``: its field of :class:`~charllm_trace.analysis.results.RunAnalysis`, its key in
  ``skipped`` and in the notes;
- ``result``: its result type, and ``frames``: the frames of that result in machine outputs
  (JSON, CSV/Parquet, the JSON Schema), each with the result attribute holding it and its columns;
- ``rank``: its per-rank function ``(RankContext, AnalyzeOptions) -> part`` (what a Dask worker
  computes and sends; ``analysis/context.py``), and ``merge``: ``(Merge) -> result | None``, the
  run's result from every rank's part (setting ``skipped[name]`` when there is none);
- ``step``: where it runs among the others (per rank and in the merge, in that order);
- ``added``: whether it came after the first files of results format version 1 (saved results
  without it load with it None and a reason);
- ``optional``: computed only where the run has its data (CPU scheduler telemetry, graph
  launches): without it the result is None, nothing is said in ``skipped`` and its frames are not
  in the JSON document (nor required by its schema);
- ``table`` and ``html``: its renderers (terminal table, HTML report sections), named by
  reference so that the analysis layer imports no renderer; ``table_at`` / ``html_at``: their
  places in the printed output and the page.

Functions and result types are named ``"module:attribute"`` and loaded on first
use (:func:`resolve`; :func:`unresolved` tries them all), so the registry imports nothing of the analyses: the result types' module
loops over it (``RunAnalysis.frames``) without an import circle, and reading it (saved results,
the JSON Schema) loads no analysis and no renderer. The loops over
it: ``analysis/rank_parts.py`` (per rank and merge), ``RunAnalysis.frames``/``notes``,
``store/results.py`` (saved results), ``analysis/frame_schemas.py`` (the JSON document and its
schema), ``render/tables.py`` (the terminal) and ``render/report.py`` (the HTML page). Adding an analysis:
docs/architecture.md, "Adding an analysis".
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import msgspec
import polars as pl

from charllm_trace.analysis.columns import (
    DATA_FILE,
    DeclarationError,
    declarations,
    frame_columns,
    tables,
    tables_of,
)
from charllm_trace.core.model import rank_ranges


@dataclass(frozen=True)
class Frame:
    """One frame of a result in machine outputs: its stable name, the result attribute that
    holds it, and its columns (:attr:`columns` the table): ``columns_ref`` names a frame of the
    data file, or a column table in Python as ``"module:attribute"`` (a plug-in's)."""

    name: str
    attr: str
    columns_ref: str

    @property
    def columns(self) -> dict[str, pl.DataType]:
        """The frame's columns: name -> polars dtype."""
        if ":" in self.columns_ref:
            return resolve(self.columns_ref)  # type: ignore[no-any-return]
        return frame_columns(self.columns_ref)


@dataclass(frozen=True)
class Analysis:
    """One analysis, declared once (module docstring)."""

    name: str
    result_ref: str
    frames: tuple[Frame, ...]
    step: int
    rank: str | None = None
    merge: str | None = None
    added: bool = False
    partial_note: bool = True  # --allow-partial: the result says it covers part of the run
    optional: bool = False  # computed only where the run has its data: no frames, no reason otherwise
    table: str | None = None
    table_at: float | None = None
    html: str | None = None
    html_at: float | None = None
    doc: str = ""

    @property
    def result(self) -> type:
        """The result type (its module loaded on first use)."""
        return resolve(self.result_ref)  # type: ignore[return-value]

    def get(self, res: Any) -> Any:
        """This analysis' result in ``res`` (a RunAnalysis: its field, or ``extra``), or None."""
        return getattr(res, self.name, None)

    def frames_of(self, result: Any) -> dict[str, pl.DataFrame]:
        """The frames of ``result`` (this analysis' result), by their stable names."""
        return {f.name: getattr(result, f.attr) for f in self.frames}


class _FrameEntry(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    attr: str
    doc: str = ""
    columns: list[Any] = msgspec.field(default_factory=list)  # checked by analysis/columns.py
    same_as: str | None = None


class _Entry(msgspec.Struct, forbid_unknown_fields=True):
    """One ``[[analysis]]`` of the data file, as it must be written (msgspec checks it)."""

    name: str
    result: str
    step: int
    merge: str
    doc: str = ""
    rank: str | None = None
    added: bool = False
    partial_note: bool = True
    optional: bool = False
    table: str | None = None
    table_at: int | float | None = None
    html: str | None = None
    html_at: int | float | None = None
    frame: list[_FrameEntry] = msgspec.field(default_factory=list)


class _File(msgspec.Struct, forbid_unknown_fields=True):
    analysis: list[_Entry]
    table: list[dict[str, Any]] = msgspec.field(default_factory=list)


def _ref(text: str | None, where: str) -> str | None:
    """``"module:attribute"`` under the package, named in full (None stays None)."""
    if text is None:
        return None
    module, colon, attr = text.partition(":")
    if not (colon and module and attr.isidentifier() and all(p.isidentifier() for p in module.split("."))):
        raise DeclarationError(f'{DATA_FILE}: {where}: {text!r} is not a reference "module:attribute"')
    return f"charllm_trace.{text}"


def _analysis(e: _Entry) -> Analysis:
    where = f"analysis {e.name!r}"
    if (e.table is None) != (e.table_at is None) or (e.html is None) != (e.html_at is None):
        raise DeclarationError(f"{DATA_FILE}: {where}: a renderer (table, html) goes with its place (_at)")
    frames = tuple(Frame(f.name, f.attr, f.name) for f in e.frame)
    return Analysis(
        e.name,
        _ref(e.result, where) or "",
        frames,
        e.step,
        rank=_ref(e.rank, where),
        merge=_ref(e.merge, where),
        added=e.added,
        partial_note=e.partial_note,
        optional=e.optional,
        table=_ref(e.table, where),
        table_at=e.table_at,
        html=_ref(e.html, where),
        html_at=e.html_at,
        doc=e.doc,
    )


def entries_of(doc: dict[str, Any]) -> list[Analysis]:
    """The entries of ``doc`` (the parsed data file), checked: every key known and of its type
    (msgspec), every reference well formed, every frame's columns declared (``columns.tables_of``);
    the references are resolved on first use (a test resolves them all: :func:`unresolved`)."""
    try:
        data = msgspec.convert(doc, _File)
    except msgspec.ValidationError as exc:
        raise DeclarationError(f"{DATA_FILE}: {exc}") from None
    # every frame's columns declared (the package's own file: its tables built once and kept)
    _ = tables() if doc is declarations() else tables_of(doc)
    entries = [_analysis(e) for e in data.analysis]
    names = [a.name for a in entries]
    if len(set(names)) != len(names):
        raise DeclarationError(f"{DATA_FILE}: an analysis is declared twice in {names}")
    return entries


#: Every analysis of ``analyze_run``, in the order of machine outputs (frames, notes, saved
#: results); ``step``: the order they run in (per rank, then merged). Declared in the data file.
ANALYSES: list[Analysis] = entries_of(declarations())

#: name -> entry
BY_NAME: dict[str, Analysis] = {a.name: a for a in ANALYSES}


def register(a: Analysis) -> None:
    """Add an analysis (after those above, in machine outputs). One whose name is not a field of
    ``RunAnalysis`` keeps its result in ``RunAnalysis.extra`` (read as ``res.<name>`` all the
    same); every loop over the registry sees it from then on."""
    if a.name in BY_NAME:
        raise ValueError(f"an analysis named {a.name!r} is registered already")
    ANALYSES.append(a)
    BY_NAME[a.name] = a


def unregister(name: str) -> None:
    """Remove the analysis ``name`` (a test's, or a plug-in's)."""
    ANALYSES.remove(BY_NAME.pop(name))


class Live(Mapping[str, Any]):
    """A mapping computed from the registry each time it is read (so that an analysis registered
    later is in it): e.g. ``frame_schemas.FRAME_SCHEMAS``, ``store.results.RESULT_TYPES``."""

    def __init__(self, build: Callable[[], dict[str, Any]]) -> None:
        self._build = build

    def __getitem__(self, key: str) -> Any:
        return self._build()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())


#: where a frame lies in a part: attribute names and tuple/list indices, from the part down
FramePath = tuple[str | int, ...]


def frame_at(obj: Any, path: FramePath) -> Any:
    """What lies at ``path`` in ``obj`` (None where a step finds None)."""
    for key in path:
        if obj is None:
            return None
        obj = obj[key] if isinstance(key, int) else getattr(obj, key)
    return obj


@dataclass
class Merge:
    """What a merge function reads: every rank's part (in rank order), the options, the run's
        facts, and ``skipped`` to fill; ``shared`` carries what one merge computes for another
        (idle time's launch statistics, energy's power, the critical path's what-if); ``results`` the
    results of the analyses merged before (in ``step`` order: by-dimension figures read them)."""

    parts: list[Any]
    options: Any
    simulated: bool
    multi: bool
    skipped: dict[str, str]
    manifest: object = None
    graph_step: Callable[..., Any] | None = None
    shared: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)  # the results merged so far, by name
    cpu_sched: Any = None  # the run's CPU scheduler samples (Run.cpu_sched; the local path only)

    def entries(self, name: str) -> list[tuple[int, Any]]:
        """(rank, part) of every rank that gave a part for ``name``, in rank order. Parts held as
        the Dask driver holds them (``engine/compact.HeldParts``) give each part as held: its
        other fields as they arrived, its frames unresolved (read them with :meth:`frames`), so
        that no rank's frames are rebuilt to read its notes."""
        held = getattr(self.parts, "entries", None)
        if held is not None:
            return held(name)  # type: ignore[no-any-return]
        return [(p.rank, p.parts[name]) for p in self.parts if p.parts.get(name) is not None]

    def timed(self, name: str) -> list[tuple[int, Any]]:
        """(rank, part or None) of every rank with timestamps (or simulated ones), in rank order;
        held parts as :meth:`entries` gives them."""
        held = getattr(self.parts, "timed", None)
        if held is not None:
            return held(name)  # type: ignore[no-any-return]
        return [(p.rank, p.parts.get(name)) for p in self.parts if not p.no_ts]

    def frames(self, name: str, path: FramePath, ranks: Container[int] | None = None) -> list[pl.DataFrame]:
        """The frames at ``path`` (attribute names and indices from the part down) of every rank's
        ``name`` part, in rank order (of ``ranks`` only, when given); ranks without the part, or
        with None there, are left out.
        Their concatenation is every rank's rows in rank order. From held parts, one piece per
        run of ranks whose rows lie next to each other in one held frame (a gathered batch),
        not a frame per rank: at 4,096 ranks a frame per rank per place cost the merges up to
        88 MiB (docs/benchmarks.md)."""
        held = getattr(self.parts, "frames", None)
        if held is not None:
            return held(name, path, ranks)  # type: ignore[no-any-return]
        out = []
        for p in self.parts:
            if ranks is not None and p.rank not in ranks:
                continue
            f = frame_at(p.parts.get(name), path)
            if f is not None:
                out.append(f)
        return out


def merge_notes(per_rank: list[tuple[int, list[str]]], multi: bool) -> list[str]:
    """Each distinct note once, with the ranks it holds for (``ranks 0-7: ...``; on the 8-rank
    DLRM set the same note was printed once per rank), in order of first appearance."""
    ranks_of: dict[str, dict[int, None]] = {}  # ordered sets: linear in ranks (10,000 ranks: ms, not s)
    for r, notes in per_rank:
        for n in notes:
            ranks_of.setdefault(n, {})[r] = None
    if not multi:
        return list(ranks_of)
    return [
        f"{'ranks' if len(rs) > 1 else 'rank'} {rank_ranges(list(rs))}: {n}" for n, rs in ranks_of.items()
    ]


@cache
def resolve(ref: str) -> Any:
    """The object named ``"module:attribute"`` (a function, a result type, a column table;
    its module loaded on first use)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


def in_steps() -> list[Analysis]:
    """The entries in the order they run (per rank and in the merge)."""
    return sorted(ANALYSES, key=lambda a: a.step)


def shown(kind: str) -> list[tuple[Analysis, str]]:
    """``(entry, renderer)`` of the entries with a ``kind`` ("table" | "html") renderer, in the
    order they are shown."""
    found = [(getattr(a, f"{kind}_at"), a, getattr(a, kind)) for a in ANALYSES if getattr(a, kind)]
    return [(a, ref) for _, a, ref in sorted(found, key=lambda x: x[0])]


def unresolved() -> list[str]:
    """What no entry's reference finds (``"analysis: reference (why)"``); empty when every
    function, result type, renderer and column table resolves (a test asserts it)."""
    bad = []
    for a in ANALYSES:
        for ref in (a.result_ref, a.rank, a.merge, a.table, a.html):
            if ref is None:
                continue
            try:
                ok = callable(resolve(ref))
            except (ImportError, AttributeError) as exc:
                bad.append(f"{a.name}: {ref} ({exc})")
                continue
            if not ok:
                bad.append(f"{a.name}: {ref} (not callable)")
        for f in a.frames:
            try:
                f.columns  # noqa: B018 - resolves the table
            except (ImportError, AttributeError, DeclarationError) as exc:
                bad.append(f"{a.name}: frame {f.name} ({exc})")
    return bad


def entry_of(result_type: type) -> Analysis:
    """The entry whose result type is ``result_type``."""
    ref = f"{result_type.__module__}:{result_type.__qualname__}"
    for a in ANALYSES:
        if a.result_ref == ref:
            return a
    raise KeyError(f"no registered analysis has the result type {ref}")
