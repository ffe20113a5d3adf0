"""Columns declared as data: each frame's columns as a list of :class:`Col` (name, dtype, unit,
description), declared once beside the result type that holds the frame.

:func:`columns` gives the frame's column table, a :class:`Columns` (``name -> polars dtype``, what
polars, the renderers and the exporters read), which keeps the declarations (``.cols``). From the
same declarations come the JSON Schema of ``analyze --format json`` (:func:`row_struct`: a msgspec
``Struct`` per frame, whose ``msgspec.json.schema`` is the frame's schema; ``render/contract.py``)
and the documentation's column tables (:func:`markdown_table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
import polars as pl


@dataclass(frozen=True)
class Col:
    """One column: its name, polars dtype, unit ("" for none: counts, names, flags) and what it
    holds (one plain sentence or phrase)."""

    name: str
    dtype: pl.DataType
    unit: str = ""
    doc: str = ""


class Columns(dict[str, pl.DataType]):
    """A frame's column table: ``name -> polars dtype`` in order (a dict, as polars takes a
    schema), with the declarations it was made from in ``cols``."""

    cols: tuple[Col, ...]


def columns(*cols: Col) -> Columns:
    """The column table of ``cols`` (names must be unique)."""
    table = Columns((c.name, c.dtype) for c in cols)
    if len(table) != len(cols):
        raise ValueError(f"duplicate column names in {[c.name for c in cols]}")
    table.cols = tuple(cols)
    return table


def declared(table: dict[str, pl.DataType]) -> tuple[Col, ...]:
    """The declarations of a column table (a plain dict: its names and dtypes, no unit or doc)."""
    cols = getattr(table, "cols", None)
    return cols if cols is not None else tuple(Col(n, d) for n, d in table.items())


def _py_type(dtype: pl.DataType) -> Any:
    """The Python type of one JSON value of a column of ``dtype`` (every column may hold null)."""
    if dtype.is_integer():
        t: Any = int
    elif dtype.is_float():
        t = float
    elif dtype == pl.Boolean:
        t = bool
    elif isinstance(dtype, pl.List):
        t = list[_py_type(dtype.inner)]  # type: ignore[misc]
    else:
        t = str
    return t | None


def row_struct(name: str, table: dict[str, pl.DataType]) -> type[msgspec.Struct]:
    """A msgspec ``Struct`` of one row of the frame ``name`` (columns closed, each nullable, its
    description attached): ``msgspec.json.schema`` of it is the row's JSON Schema, and
    ``msgspec.convert`` validates a row against it."""
    fields = []
    for c in declared(table):
        meta = msgspec.Meta(description=c.doc) if c.doc else msgspec.Meta()
        fields.append((c.name, Annotated[_py_type(c.dtype), meta]))
    return msgspec.defstruct(name, fields, forbid_unknown_fields=True)


def markdown_table(table: dict[str, pl.DataType]) -> str:
    """The documentation's table of a frame's columns: name, type, unit, description."""
    lines = ["| column | type | unit | description |", "|---|---|---|---|"]
    for c in declared(table):
        doc = c.doc.replace("|", "\\|")
        lines.append(f"| `{c.name}` | {c.dtype} | {c.unit} | {doc} |")
    return "\n".join(lines)
