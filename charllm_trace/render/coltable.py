"""Tables from the column declarations (``analysis/columns.py``): one builder behind the terminal
tables of ``analyze`` and the HTML report's tables.

A table names the declared columns it shows (:class:`Show`); each column's header is its declared
name without the unit's suffix (``wait_ns`` → ``wait``, ``wait_pct`` → ``wait``), underscores as
spaces, and the unit as shown (``ns`` is shown in ms: ``wait ms``); its cells are formatted by the
declared unit, or by the dtype where there is none (:func:`formatter`). Where a table's header or
format differs from the generated one on purpose (a short head in an 80-column table, a value
scaled to MB), the table's own ``Show`` says so: that list is the one place of its overrides.
Formatting only."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import polars as pl

from charllm_trace.analysis.columns import Col, declared
from charllm_trace.render.fit import FitTable
from charllm_trace.render.units import ms

Cell = Callable[[Any], str]

#: the suffix a column's name carries for its unit (dropped from the header)
SUFFIX = {"ns": "_ns", "%": "_pct", "GB/s": "_gbps", "W": "_w", "J": "_j"}
#: how a unit is named in a terminal header ("" none: the legend or the title names it)
TERMINAL_UNITS = {"ns": "ms", "%": "%", "W": "W", "J": "J"}
#: how a unit is named in an HTML header (the report has the room)
HTML_UNITS = {"ns": "ms", "%": "%", "W": "W", "J": "J", "GB/s": "GB/s"}
#: the format of a value of each unit (numbers; ns goes through the table's time formatter)
UNIT_FORMATS: dict[str, str | Cell] = {"%": "{:.1f}", "GB/s": "{:.3g}", "W": "{:,.1f}", "J": "{:,.3f}"}


@dataclass(frozen=True)
class Show:
    """One shown column: the declared column ``name``; ``head`` where the header differs from the
    generated one; ``fmt`` (a format string, or a function of the value) where the cell's format
    differs from its unit's; ``div`` divides the value first (bytes shown as MB: 1e6);
    ``missing`` the mark of a null where it differs from the table's (e.g. ``all`` for a step);
    ``just`` the justification where it differs from the dtype's (numbers right, text left);
    ``cell`` a function of the whole row, for a cell made of several columns."""

    name: str
    head: str | None = None
    fmt: str | Cell | None = None
    div: float | None = None
    missing: str | None = None
    just: str | None = None
    cell: Callable[[dict[str, Any]], str] | None = None


def _numeric(col: Col) -> bool:
    return col.dtype.is_numeric()


def header(col: Col, units: Mapping[str, str]) -> str:
    """The generated header of ``col``: its name without the unit's suffix, underscores as spaces,
    then the unit as ``units`` names it (none where it names none)."""
    base = col.name
    suffix = SUFFIX.get(col.unit)
    if suffix and base.endswith(suffix):
        base = base[: -len(suffix)]
    shown = units.get(col.unit, "")
    return base.replace("_", " ") + (f" {shown}" if shown else "")


def number(fmt: str, missing: str = "-", finite: bool = False) -> Cell:
    """A number by the format string ``fmt``; ``missing`` for a null (and, with ``finite``, for
    an infinite or NaN float)."""
    if finite:
        return lambda v: (
            missing if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)
        )
    return lambda v: missing if v is None else fmt.format(v)


def _text(missing: str) -> Cell:
    return lambda v: missing if v is None or v == "" else str(v)


def formatter(
    col: Col, missing: str, time: Cell, formats: Mapping[str, str | Cell] = UNIT_FORMATS, finite: bool = False
) -> Cell:
    """The cell format of ``col`` by its unit (``ns``: ``time``; the others by ``formats``), else
    by its dtype: integers as they are, text as it is; ``missing`` for a null (``finite``: for an
    infinite or NaN float too)."""
    if col.unit == "ns":
        return time
    if col.unit in formats:
        f = formats[col.unit]
        return number(f, missing, finite) if isinstance(f, str) else f
    if _numeric(col):
        return number("{}", missing, finite)
    return _text(missing)


class Layout:
    """The shown columns of one frame, with their headers and cell formats resolved.

    ``table``: the frame's column table (a ``Columns``); ``shows``: the columns shown, a name
    alone where nothing differs; ``units``: how units are named in the headers; ``missing``: the
    table's mark of a null; ``time``: the format of ns values (a function of the value);
    ``formats``: the table's formats of units (format strings or functions of the value) that
    differ from :data:`UNIT_FORMATS`; ``finite``: an infinite or NaN float shown as a null.
    ``cols``: the frame's declarations by name; ``heads``: (header, justify) of each shown column."""

    def __init__(
        self,
        table: dict[str, pl.DataType],
        shows: Iterable[Show | str],
        *,
        units: Mapping[str, str] = TERMINAL_UNITS,
        missing: str = "-",
        time: Cell | None = None,
        formats: Mapping[str, str | Cell] | None = None,
        finite: bool = False,
    ) -> None:
        self.cols: dict[str, Col] = {c.name: c for c in declared(table)}
        self.shows = tuple(s if isinstance(s, Show) else Show(s) for s in shows)
        time = time or partial(ms, missing=missing)
        self.heads: list[tuple[str, str]] = []
        self._cells: list[Callable[[dict[str, Any]], str]] = []
        for s in self.shows:
            col = self.cols[s.name]
            self.heads.append(
                (s.head or header(col, units), s.just or ("right" if _numeric(col) else "left"))
            )
            mark = missing if s.missing is None else s.missing
            self._cells.append(_cell(s, col, mark, time, {**UNIT_FORMATS, **(formats or {})}, finite))

    def row(self, r: dict[str, Any]) -> list[str]:
        """The cells of one row (a dict of the frame's columns)."""
        return [f(r) for f in self._cells]

    def rows(self, df: pl.DataFrame) -> list[list[str]]:
        return [self.row(r) for r in df.iter_rows(named=True)]


def _cell(
    s: Show, col: Col, missing: str, time: Cell, formats: Mapping[str, str | Cell], finite: bool
) -> Callable[[dict[str, Any]], str]:
    if s.cell is not None:
        return s.cell
    if isinstance(s.fmt, str):
        base = number(s.fmt, missing, finite)
    elif s.fmt is not None:
        base = s.fmt
    else:
        base = formatter(col, missing, time, formats, finite)
    name, div = s.name, s.div
    if div is None:
        return lambda r: base(r[name])
    return lambda r: base(None if r[name] is None else r[name] / div)


def new_table(
    title: str, heads: Iterable[tuple[str, str]], *, keys: int = 1, shrink: int | None = None,
    max_width: int | None = None,
) -> FitTable:  # fmt: skip
    """An empty terminal table of ``heads`` ((header, justify) pairs), as :func:`fit_table`."""
    t = FitTable(title, keys=keys)
    for i, (name, just) in enumerate(heads):
        t.add_column(name, just, shrink=i == shrink, max_width=max_width if i == shrink else None)
    return t


def fit_table(
    title: str, layout: Layout, df: pl.DataFrame, *, keys: int = 1, shrink: int | None = None,
    max_width: int | None = None,
) -> FitTable:  # fmt: skip
    """The terminal table of ``df``'s rows under ``layout`` (a :class:`FitTable`: too wide for the
    console it is split into parts that repeat its ``keys`` first columns; column ``shrink`` (an
    index) may be shortened from the middle to ``max_width``)."""
    t = new_table(title, layout.heads, keys=keys, shrink=shrink, max_width=max_width)
    for r in df.iter_rows(named=True):
        t.add_row(*layout.row(r))
    return t
