"""Save and load analysis results, so tables, JSON/CSV/Parquet and the HTML report can be redrawn
without the trace and without analysing again (``analyze --save``, ``analyze RESULTS``,
``report RESULTS``; the results cache, ``store/results_cache.py``). docs/cache.md, "Saved results".

A results file holds a :class:`~charllm_trace.analysis.results.RunAnalysis` whole — every frame
and scalar of each analysis, the notes, skipped reasons, ranks, options and source — and,
optionally, what the report draws from the trace itself
(:class:`charllm_trace.render.report_views.ReportViews`: activity lanes, telemetry series, time origin).
Not saved: ``RunAnalysis.classified`` (the analyses' input, as large as the trace; the views keep
what the report draws from it).

Format (``VERSION``): one zip file (``zipfile``, members stored uncompressed):

- ``charllm-results.json``: ``{"format": "charllm-trace-results", "version": 1, "written_by",
  "members": {name: {"size", "sha256"}}, "analysis": {...}, "views": {...} | null}``; the
  analysis' scalars, notes and options as JSON (floats round-trip exactly, NaN included);
- ``frames/<analysis>.<field>.arrow``: each frame as an Arrow IPC file (polars, zstd-compressed);
- ``views/<name>.arrow``: the report's series, long format (rank/index columns + values).

Nothing read back is trusted: ``zipfile`` checks every member's CRC-32 as it is read, each
member's size and SHA-256 must match the manifest, the members must be exactly those the manifest
lists, and the analysis' fields exactly those of this version's result types (the analysis
registry's), each value of its declared type (``msgspec.convert`` against the types' own
annotations). Anything else is an
:class:`InputError` naming the file (exit 2 in the CLI): not a zip, not ours, another version,
truncated or corrupt.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import os
import typing
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import polars as pl

from charllm_trace.analysis.registry import ANALYSES, BY_NAME, Live
from charllm_trace.analysis.results import AnalyzeOptions, LinkPeak, RunAnalysis
from charllm_trace.core.cas import write_atomic
from charllm_trace.core.errors import InputError
from charllm_trace.store import results_checks as checks

if TYPE_CHECKING:
    from charllm_trace.render.report_views import ReportViews

FORMAT = "charllm-trace-results"
VERSION = 1
MANIFEST = "charllm-results.json"
#: RunAnalysis fields holding one analysis' result, and its type (the analysis registry)
RESULT_TYPES: Mapping[str, type] = Live(lambda: {a.name: a.result for a in ANALYSES})
#: results added to version 1 after its first files were written: read as None from a file without them (with a reason in ``skipped``, but the configuration and the optional results: computed only where the run has their data)
ADDED_RESULTS: Mapping[str, bool] = Live(lambda: {a.name: True for a in ANALYSES if a.added})
#: RunAnalysis' own fields (a registered analysis that is not one is saved under its name, from ``extra``)
_FIELDS = tuple(f.name for f in dataclasses.fields(RunAnalysis) if f.name != "extra")
#: analysis options added to version 1 after its first files were written: a file without them
#: was analysed as their defaults do (display options: the figures do not depend on them)
ADDED_OPTIONS = ("breakdown_top", "step_marker")
_ZIP_MAGIC = b"PK\x03\x04"


def is_results_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file that starts like a zip (the loader reads no zip: a results file,
    or a file to be refused with a clear message)."""
    from charllm_trace.core.files import open_regular, path_kind

    if path_kind(path) != "file":  # a FIFO, a dangling link, a loop ...: InputError naming it
        return False
    with open_regular(path) as f:
        return f.read(4) == _ZIP_MAGIC


# ---- writing ----


def _ipc(df: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.write_ipc(buf, compression="zstd")
    return buf.getvalue()


def _plain(v: Any) -> Any:
    """A JSON-able copy of a scalar field (mappings as dicts, tuples as lists)."""
    if isinstance(v, dict) or (hasattr(v, "items") and hasattr(v, "keys")):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # a numpy scalar
        return v.item()
    return v


def _encode_result(name: str, v: Any, members: dict[str, bytes]) -> dict[str, Any] | None:
    if v is None:
        return None
    part: dict[str, Any] = {"frames": {}, "values": {}}
    for g in dataclasses.fields(v):
        x = getattr(v, g.name)
        if isinstance(x, pl.DataFrame):
            member = f"frames/{name}.{g.name}.arrow"
            members[member] = _ipc(x)
            part["frames"][g.name] = member
        elif g.name == "peaks":
            part["values"][g.name] = {k: _plain(dataclasses.asdict(p)) for k, p in x.items()}
        else:
            part["values"][g.name] = _plain(x)
    return part


def _encode_analysis(res: RunAnalysis, members: dict[str, bytes]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for name in _FIELDS:
        v = getattr(res, name)
        if name in RESULT_TYPES:
            doc[name] = _encode_result(name, v, members)
        elif name == "options":
            doc[name] = {g.name: _plain(getattr(v, g.name)) for g in dataclasses.fields(v)}
        else:
            doc[name] = _plain(v)
    for a in ANALYSES:  # the registered analyses that are no field of RunAnalysis, after them
        if a.name not in _FIELDS:
            doc[a.name] = _encode_result(a.name, res.extra.get(a.name), members)
    return doc


def _long(parts: list[dict[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    """One frame of several series (each a dict of equal-length columns), in order."""
    frames = [pl.DataFrame(p, schema=schema) for p in parts]
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


_LANES = {"lane": pl.Int64, "row": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}
_OVERLAY = {"index": pl.Int64, "t_ns": pl.Int64, "power_w": pl.Float64}
_DEVICES = {
    "index": pl.Int64,
    "t_ns": pl.Int64,
    "power_w": pl.Float64,
    "temp_c": pl.Float64,
    "sm_clock_mhz": pl.Float64,
}
_LANE_ROWS = ("compute", "comm", "idle")


def _encode_views(views: ReportViews, members: dict[str, bytes]) -> dict[str, Any]:
    # one part per drawn series (at most 16 lanes x 3 rows, 8 devices): no per-event work
    lanes = [
        {"lane": [i] * len(s), "row": [row] * len(s), "start_ns": s, "end_ns": e}
        for i, ln in enumerate(views.lanes)
        for row, (s, e) in zip(_LANE_ROWS, (ln.compute, ln.comm, ln.idle), strict=True)
    ]
    members["views/lanes.arrow"] = _ipc(_long(lanes, _LANES))
    overlay = [
        {"index": [i] * len(t), "t_ns": t, "power_w": w} for i, (t, w) in enumerate(views.overlay.values())
    ]
    members["views/overlay.arrow"] = _ipc(_long(overlay, _OVERLAY))
    devices = [
        {
            "index": [i] * len(d.t),
            "t_ns": d.t,
            "power_w": d.power_w,
            "temp_c": d.temp_c,
            "sm_clock_mhz": d.sm_clock_mhz,
        }
        for i, d in enumerate(views.devices)
    ]
    members["views/devices.arrow"] = _ipc(_long(devices, _DEVICES))
    return {
        "source": views.source,
        "ranks": _plain(views.ranks),
        "origin_ns": _plain(views.origin_ns),
        "notes": list(views.notes),
        "lanes": [
            {"rank": _plain(ln.rank), "mode": ln.mode, "window": _plain(ln.window)} for ln in views.lanes
        ],
        "overlay": _plain(list(views.overlay)),
        "devices": [
            {"rank": _plain(d.rank), "device": _plain(d.device), "throttle": _plain(d.throttle)}
            for d in views.devices
        ],
    }


def results_bytes(res: RunAnalysis, views: ReportViews | None = None) -> bytes:
    """The results file of ``res`` (and the report's ``views``) as bytes."""
    members: dict[str, bytes] = {}
    body: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "written_by": f"charllm-trace {_version()}",
        "analysis": _encode_analysis(res, members),
        "views": None if views is None else _encode_views(views, members),
    }
    body["members"] = {
        n: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in members.items()
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(MANIFEST, json.dumps(body, indent=1))
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def save_results(
    res: RunAnalysis,
    path: str | os.PathLike[str],
    *,
    views: ReportViews | None = None,
    force: bool = False,
) -> Path:
    """Write ``res`` (and the report's ``views``, :func:`charllm_trace.render.report_views.report_views`)
    to ``path``; refuses to replace an existing file unless ``force``. Written to a temporary
    file beside it and renamed, so a reader never sees half a file."""
    p = Path(path)
    if p.exists() and not force:
        raise InputError(p, "already exists; pass --force to overwrite it")
    if not p.parent.is_dir():
        raise InputError(p.parent, "directory does not exist")
    data = results_bytes(res, views)  # the bytes of a results-cache entry's payload too
    try:
        write_atomic(p, (data,))  # the store's one atomic write (core/cas.py)
    except OSError as exc:
        raise InputError(p, f"cannot write: {exc.strerror or exc}") from None
    return p


def _version() -> str:
    from charllm_trace import __version__

    return __version__


# ---- reading ----


class _Bad(Exception):
    """A results file that is not one, or is damaged (the message says how)."""


def _check(ok: bool, why: str) -> None:
    if not ok:
        raise _Bad(why)


def _frame(data: bytes, name: str) -> pl.DataFrame:
    try:
        return pl.read_ipc(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - polars' own errors: the member is not Arrow IPC
        raise _Bad(f"{name}: not an Arrow IPC file ({type(exc).__name__})") from None


def _json_type(t: Any) -> Any:
    """The type a saved value of a field annotated ``t`` must convert to: the result types' own
    annotations, with :class:`LinkPeak` as a closed object of its fields."""
    if t is LinkPeak:
        return _checker(LinkPeak, frozenset(f.name for f in dataclasses.fields(LinkPeak)))
    args = typing.get_args(t)
    if typing.get_origin(t) is dict and len(args) == 2 and args[1] is LinkPeak:
        return dict[args[0], _json_type(LinkPeak)]  # type: ignore[valid-type]
    return t


@functools.cache
def _checker(cls: type, names: frozenset[str]) -> type[msgspec.Struct]:
    """A msgspec ``Struct`` of the fields ``names`` of the dataclass ``cls``, each of its declared
    type, all required and no other (what ``msgspec.convert`` checks a saved result's values
    against)."""
    hints = typing.get_type_hints(cls)
    fields = [(f.name, _json_type(hints[f.name])) for f in dataclasses.fields(cls) if f.name in names]
    _check(len(fields) == len(names), f"{cls.__name__}: other fields")
    return msgspec.defstruct(f"Saved{cls.__name__}", fields, forbid_unknown_fields=True)


def _values(cls: type, values: dict[str, Any], what: str) -> dict[str, Any]:
    """``values`` (JSON) as the keyword arguments of ``cls``, each checked against its field's
    declared type by msgspec (values kept as read: an integer saved for a float stays one)."""
    _check(all(isinstance(k, str) for k in values), f"{what}: malformed")
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
    _check(not unknown, f"{what}.{unknown[0] if unknown else ''}: not a field")
    try:
        msgspec.convert(values, _checker(cls, frozenset(values)), strict=True)
    except msgspec.ValidationError as exc:
        raise _Bad(f"{what}: {exc}") from None
    hints = typing.get_type_hints(cls)
    return {
        k: {n: LinkPeak(**p) for n, p in v.items()} if _json_type(hints[k]) is not hints[k] else v
        for k, v in values.items()
    }


def _decode_result(cls: type, part: Any, members: dict[str, bytes], what: str) -> Any:
    _check(isinstance(part, dict) and set(part) == {"frames", "values"}, f"{what}: malformed")
    frames, values = part["frames"], part["values"]
    _check(isinstance(frames, dict) and isinstance(values, dict), f"{what}: malformed")
    names = {f.name for f in dataclasses.fields(cls)}
    have = set(frames) | set(values)
    _check(
        not have < names,
        f"{what}: saved without {', '.join(sorted(names - have))}, which this version has "
        "(written by an older one): analyse the trace again",
    )
    _check(have == names and not set(frames) & set(values), f"{what}: other fields")
    _check(all(isinstance(m, str) and m in members for m in frames.values()), f"{what}: a frame is missing")
    kw: dict[str, Any] = {k: _frame(members[m], m) for k, m in frames.items()}
    return cls(**kw, **_values(cls, values, what))


def _decode_analysis(doc: Any, members: dict[str, bytes], written_by: Any = None) -> RunAnalysis:
    _check(isinstance(doc, dict), "analysis: malformed")
    fields = set(_FIELDS) | set(RESULT_TYPES)
    absent = [k for k in ADDED_RESULTS if k not in doc]  # written before they existed
    doc = {**{k: None for k in absent}, **doc}
    _check(set(doc) == fields, "analysis: other fields (written by another version?)")
    opts = doc["options"]
    _check(isinstance(opts, dict), "options: malformed")
    defaults = {f.name: f.default for f in dataclasses.fields(AnalyzeOptions)}
    opt_fields = set(defaults)
    opts = {**{k: defaults[k] for k in ADDED_OPTIONS if k not in opts}, **opts}
    _check(set(opts) == opt_fields, "options: other fields (written by another version?)")
    kw: dict[str, Any] = {
        name: None if doc[name] is None else _decode_result(cls, doc[name], members, name)
        for name, cls in RESULT_TYPES.items()
    }
    kw["options"] = AnalyzeOptions(**_values(AnalyzeOptions, opts, "options"))
    rest = {k: v for k, v in doc.items() if k not in kw}
    extra = {k: kw.pop(k) for k in list(kw) if k not in _FIELDS}
    res = RunAnalysis(**kw, **_values(RunAnalysis, rest, "analysis"), extra=extra)
    by = f" (written by {written_by})" if isinstance(written_by, str) else ""
    for k in absent:
        if k != "config" and not BY_NAME[k].optional:  # optional: None says nothing
            res.skipped.setdefault(
                k, f"not in this results file{by}, saved before the analysis existed: analyse the trace again"
            )
    return res


@dataclasses.dataclass
class SavedResults:
    """A results file, read and checked: the analysis, and the report's views if saved."""

    path: str
    analysis: RunAnalysis
    _views: dict[str, Any] | None
    _members: dict[str, bytes]

    def set_source(self, source: str | None) -> None:
        """Name another path as the input (a copy of the same content: the results cache)."""
        self.analysis.source = source
        if self._views is not None:
            self._views = {**self._views, "source": source}

    @property
    def has_views(self) -> bool:
        return self._views is not None

    def views(self) -> ReportViews:
        """The report's views (lanes, telemetry series); InputError when none were saved."""
        if self._views is None:
            raise InputError(
                self.path,
                "has no report data (saved without the trace's lanes and telemetry); "
                "save results with the charllm-trace command, or report the trace itself",
            )
        try:
            return _decode_views(self._views, self._members)
        except (_Bad, IndexError, *checks.READ_ERRORS) as exc:
            raise InputError(self.path, f"corrupt charllm-trace results ({exc})") from None


def _decode_views(doc: dict[str, Any], members: dict[str, bytes]) -> ReportViews:
    import numpy as np

    from charllm_trace.render.report_views import DeviceSeries, RankLanes, ReportViews

    def parts(name: str, keys: list[str]) -> dict[tuple[Any, ...], pl.DataFrame]:
        df = _frame(members[f"views/{name}.arrow"], f"views/{name}.arrow")
        return df.partition_by(keys, as_dict=True, maintain_order=True)

    def col(df: pl.DataFrame | None, name: str, dtype: Any) -> np.ndarray:
        return np.empty(0, dtype) if df is None else df[name].to_numpy().astype(dtype)

    by_lane = parts("lanes", ["lane", "row"])
    lanes = []
    for i, ln in enumerate(doc["lanes"]):
        rows = [by_lane.get((i, row)) for row in _LANE_ROWS]
        c, m, idle = ((col(df, "start_ns", np.int64), col(df, "end_ns", np.int64)) for df in rows)
        w0, w1 = ln["window"]
        lanes.append(RankLanes(int(ln["rank"]), str(ln["mode"]), c, m, idle, (int(w0), int(w1))))
    by_overlay = parts("overlay", ["index"])
    overlay = {}
    for i, r in enumerate(doc["overlay"]):
        df = by_overlay.get((i,))
        overlay[int(r)] = (col(df, "t_ns", np.int64), col(df, "power_w", np.float64))
    by_device = parts("devices", ["index"])
    devices = []
    for i, d in enumerate(doc["devices"]):
        df = by_device.get((i,))
        devices.append(
            DeviceSeries(
                int(d["rank"]),
                int(d["device"]),
                col(df, "t_ns", np.int64),
                col(df, "power_w", np.float64),
                col(df, "temp_c", np.float64),
                col(df, "sm_clock_mhz", np.float64),
                [(int(a), int(b), str(why)) for a, b, why in d["throttle"]],
            )
        )
    return ReportViews(
        source=doc["source"],
        ranks=[int(r) for r in doc["ranks"]],
        lanes=lanes,
        overlay=overlay,
        devices=devices,
        origin_ns=None if doc["origin_ns"] is None else int(doc["origin_ns"]),
        notes=[str(n) for n in doc["notes"]],
    )


def _read(data: bytes | None, path: Path) -> SavedResults:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data) if data is not None else path)
    except zipfile.BadZipFile as exc:
        raise _Bad(f"not a zip file or truncated ({exc})") from None
    with zf:
        from charllm_trace.core.limits import gzip_out_limit

        names = zf.namelist()
        # zipfile reads no more than a member's declared size: bounding the declared sizes
        # bounds the memory a zip bomb can take (the same limit as gzip inputs)
        size = len(data) if data is not None else path.stat().st_size
        total, limit = sum(i.file_size for i in zf.infolist()), gzip_out_limit(size)
        _check(
            total <= limit,
            f"its members expand to {total:,} bytes, past the limit of {limit:,} for this file",
        )
        _check(MANIFEST in names, f"a zip file without {MANIFEST}: not charllm-trace results")
        try:
            body = json.loads(zf.read(MANIFEST))
        except ValueError as exc:
            raise _Bad(f"{MANIFEST}: not JSON ({exc})") from None
        _check(
            isinstance(body, dict) and body.get("format") == FORMAT, f"{MANIFEST}: not charllm-trace results"
        )
        _check(
            body.get("version") == VERSION,
            f"results format version {body.get('version')!r} (written by {body.get('written_by')}); "
            f"this charllm-trace reads version {VERSION}",
        )
        listed = body.get("members")
        _check(isinstance(listed, dict), f"{MANIFEST}: malformed")
        _check(
            sorted(listed) == sorted(n for n in names if n != MANIFEST), "members differ from the manifest"
        )
        _check(len(names) == len(set(names)), "duplicate members")
        members: dict[str, bytes] = {}
        for name, want in listed.items():
            got = zf.read(name)  # zipfile checks the member's CRC-32
            _check(
                isinstance(want, dict)
                and len(got) == want.get("size")
                and hashlib.sha256(got).hexdigest() == want.get("sha256"),
                f"{name}: checksum mismatch",
            )
            members[name] = got
    _check(not (why := checks.frames_bound(members, limit)), str(why))
    analysis = _decode_analysis(body.get("analysis"), members, body.get("written_by"))
    views = body.get("views")
    _check(views is None or isinstance(views, dict), "views: malformed")
    _check(not (why := checks.saved_problem(analysis, views)), str(why))
    return SavedResults(str(path), analysis, views, members)


def read_results(path: str | os.PathLike[str], data: bytes | None = None) -> SavedResults:
    """Read and check the results file ``path`` (or its bytes ``data``); InputError naming the
    file when it is not a charllm-trace results file, another version, truncated or corrupt."""
    p = Path(path)
    try:
        return _read(data, p)
    except _Bad as exc:
        raise InputError(p, str(exc)) from None
    except OSError as exc:
        raise InputError(p, f"cannot read: {exc.strerror or exc}") from None
    except checks.READ_ERRORS as exc:
        first = " ".join(str(exc).split())[:120]
        raise InputError(p, f"corrupt charllm-trace results ({type(exc).__name__}: {first})") from None


def load_results(path: str | os.PathLike[str]) -> RunAnalysis:
    """The :class:`RunAnalysis` saved in ``path`` (see :func:`read_results`)."""
    return read_results(path).analysis
