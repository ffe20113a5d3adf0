"""Columns declared as data: each frame's columns (name, dtype, unit, description) are declared
once, in ``analysis/analyses.toml`` beside the analysis that fills the frame, and loaded here
(once) into :class:`Columns` tables.

:func:`frame_columns` gives a frame's column table, a :class:`Columns` (``name -> polars dtype``,
what polars, the renderers and the exporters read), which keeps the declarations (``.cols``, each
a :class:`Col`) and what one row is (``.doc``). From the same declarations come the JSON Schema of
``analyze --format json`` (:func:`row_struct`: a msgspec ``Struct`` per frame, whose
``msgspec.json.schema`` is the frame's schema; ``render/contract.py``), saved results' frame
checks (``store/results_checks.py``) and the documentation's column tables
(:func:`markdown_table`, docs/columns.md). :func:`columns` builds a table in Python (an analysis
registered by a plug-in or a test, ``registry.register``).

The dtype grammar of the data file: ``i64 i32 f64 f32 str bool`` and ``list[<dtype>]``; anything
else is a :class:`DeclarationError` naming the file, the frame and the column.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Annotated, Any

import msgspec
import polars as pl

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: the backport (a dependency there)
    import tomli as tomllib

#: the data file of the analyses and their frames' columns (package data)
DATA_FILE = "analyses.toml"
#: the dtypes of the data file, by their names there
DTYPES: dict[str, Any] = {
    "i64": pl.Int64,
    "i32": pl.Int32,
    "f64": pl.Float64,
    "f32": pl.Float32,
    "str": pl.String,
    "bool": pl.Boolean,
}


class DeclarationError(ValueError):
    """The data file declares something that cannot be (the message names the file and where)."""


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
    schema), with the declarations it was made from in ``cols`` and what one row is in ``doc``."""

    cols: tuple[Col, ...]
    doc: str = ""


def columns(*cols: Col, doc: str = "") -> Columns:
    """The column table of ``cols`` (names must be unique)."""
    table = Columns((c.name, c.dtype) for c in cols)
    if len(table) != len(cols):
        raise ValueError(f"duplicate column names in {[c.name for c in cols]}")
    table.cols = tuple(cols)
    table.doc = doc
    return table


def parse_dtype(text: str) -> pl.DataType:
    """The polars dtype named ``text`` (``DTYPES``, or ``list[<dtype>]``); ValueError otherwise."""
    if text.startswith("list[") and text.endswith("]"):
        return pl.List(parse_dtype(text[5:-1]))
    if text not in DTYPES:
        raise ValueError(f"unknown dtype {text!r} (one of {', '.join(DTYPES)}, or list[<dtype>])")
    return DTYPES[text]  # type: ignore[no-any-return]


@cache
def declarations() -> dict[str, Any]:
    """The data file, parsed (once): ``{"analysis": [...], "table": [...]}``."""
    text = resources.files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DeclarationError(f"{DATA_FILE}: {exc}") from None


def _col(item: Any, where: str) -> Col:
    if not (isinstance(item, list) and 2 <= len(item) <= 4 and all(isinstance(x, str) for x in item)):
        raise DeclarationError(f"{where}: a column is [name, dtype, unit, description] (2 to 4 strings)")
    try:
        return Col(item[0], parse_dtype(item[1]), *item[2:])
    except ValueError as exc:
        raise DeclarationError(f"{where}, column {item[0]!r}: {exc}") from None


def _table(decl: dict[str, Any], where: str) -> Columns:
    cols = decl.get("columns")
    if not isinstance(cols, list) or not cols:
        raise DeclarationError(f"{where}: no columns")
    try:
        return columns(*(_col(c, where) for c in cols), doc=str(decl.get("doc", "")))
    except DeclarationError:
        raise
    except ValueError as exc:
        raise DeclarationError(f"{where}: {exc}") from None


@cache
def tables() -> dict[str, Columns]:
    """Every column table of the data file (:func:`tables_of`), built once."""
    return tables_of(declarations())


def tables_of(data: dict[str, Any]) -> dict[str, Columns]:
    """Every column table of ``data`` (the parsed data file), by the name of the frame (or
    ``[[table]]``) that declares it; a frame with ``same_as`` has the table of the frame it names."""
    out: dict[str, Columns] = {}
    same: dict[str, str] = {}
    decls = [(f, f"frame {f.get('name')!r}") for a in data.get("analysis", []) for f in a.get("frame", [])]
    decls += [(t, f"table {t.get('name')!r}") for t in data.get("table", [])]
    for decl, what in decls:
        where = f"{DATA_FILE}: {what}"
        name = decl.get("name")
        if not isinstance(name, str):
            raise DeclarationError(f"{where}: no name")
        if name in out or name in same:
            raise DeclarationError(f"{where}: declared twice")
        if "same_as" in decl:
            same[name] = decl["same_as"]
        else:
            out[name] = _table(decl, where)
    for name, other in same.items():
        if other not in out:
            raise DeclarationError(
                f"{DATA_FILE}: frame {name!r}: same_as {other!r}, which declares no columns"
            )
        out[name] = out[other]
    return out


def frame_columns(name: str) -> Columns:
    """The column table of the frame ``name`` (``analyses.toml``)."""
    try:
        return tables()[name]
    except KeyError:
        raise DeclarationError(f"{DATA_FILE}: no frame or table named {name!r}") from None


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
