"""``compare``'s outputs: the terminal table (rich), JSON, CSV and Parquet. Formatting only: every
figure comes from :class:`charllm_trace.regress.sweep.Sweep`.

The terminal table fits 80 columns: the columns are split into groups (the ``run`` column repeated
in each), filled in table order until the next column would pass the width; ``wide`` prints one
table. Columns without a value in any run are left out and named below the tables. The best value
of each ranked column carries ``*`` (bold); the header's arrow says which direction is better
(``↓`` lower, ``↑`` higher). Unknown values are ``-``.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import polars as pl

from charllm_trace.core.errors import InputError
from charllm_trace.regress.sweep import HIGHER, LOWER, Col, Sweep
from charllm_trace.render.contract import stamp
from charllm_trace.render.table_style import dim_line

if TYPE_CHECKING:  # rich is imported where the tables are drawn (JSON/CSV output needs none of it)
    from rich.console import Console
    from rich.table import Table

WIDTH = 80
ARROW = {LOWER: "↓", HIGHER: "↑"}


def cell(c: Col, v: Any) -> str:
    """One value as printed: ``-`` for unknown, numbers with the column's digits."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 100_000 else str(v)
    if isinstance(v, float):
        if c.better is None and v.is_integer():
            return str(int(v))
        if abs(v) >= 100_000:
            return f"{v:,.0f}"
        if 0 < abs(v) < 10 ** (1 - c.digits):  # small values keep 3 significant digits
            return f"{v:.3g}"
        return f"{v:.{c.digits}f}"
    return str(v)


def header(c: Col) -> str:
    return f"{c.title} {ARROW[c.better]}" if c.better in ARROW else c.title


def shown_columns(sw: Sweep) -> tuple[list[Col], list[Col]]:
    """(columns with a value in some run, columns without): the run column is always shown."""
    shown, hidden = [], []
    for c in sw.columns:
        if c.name == "run" or sw.table[c.name].null_count() < sw.table.height:
            shown.append(c)
        else:
            hidden.append(c)
    return shown, hidden


def cells(sw: Sweep, cols: list[Col]) -> dict[str, list[str]]:
    """The printed text of every shown cell, best values marked ``*``."""
    best = sw.best()
    out = {}
    for c in cols:
        marked = set(best.get(c.name, ())) if sw.table.height > 1 else set()
        out[c.name] = [
            cell(c, v) + ("*" if i in marked else "") for i, v in enumerate(sw.table[c.name].to_list())
        ]
    return out


def column_groups(cols: list[Col], text: dict[str, list[str]], width: int = WIDTH) -> list[list[Col]]:
    """Split ``cols`` (the first, ``run``, repeated in each group) so each table fits ``width``."""

    def w(c: Col) -> int:  # the column's text plus rich's padding and separator
        return max([len(header(c))] + [len(t) for t in text[c.name]]) + 3

    first, rest = cols[0], cols[1:]
    groups: list[list[Col]] = []
    cur: list[Col] = [first]
    used = 1 + w(first)
    for c in rest:
        if len(cur) > 1 and used + w(c) > width:
            groups.append(cur)
            cur, used = [first], 1 + w(first)
        cur.append(c)
        used += w(c)
    if len(cur) > 1 or not groups:
        groups.append(cur)
    return groups


def sweep_tables(sw: Sweep, *, wide: bool = False, width: int = WIDTH) -> list[Table]:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    cols, _ = shown_columns(sw)
    text = cells(sw, cols)
    groups = [cols] if wide else column_groups(cols, text, width)
    tables = []
    for g in groups:
        names = sorted({c.group for c in g[1:]}, key=[c.group for c in g].index)
        title = f"Runs compared ({', '.join(names)})" if len(groups) > 1 else "Runs compared"
        t = Table(
            title=title, title_justify="left", title_style="bold", header_style="bold", box=box.SIMPLE_HEAD
        )
        for c in g:
            left = sw.table[c.name].dtype == pl.String
            t.add_column(header(c), justify="left" if left else "right")
        for i in range(sw.table.height):
            t.add_row(
                *(Text(text[c.name][i], style="bold" if text[c.name][i].endswith("*") else "") for c in g)
            )
        tables.append(t)
    return tables


def print_sweep(sw: Sweep, console: Console, *, wide: bool = False) -> None:
    width = console.width if wide else min(console.width, WIDTH)
    tables = sweep_tables(sw, wide=wide, width=width)
    if wide:  # as wide as it takes: rich would squeeze the table into the console's width
        from rich.console import Console

        console = Console(width=max(console.width, 1000))
    for t in tables:
        console.print(t)
    _, hidden = shown_columns(sw)
    console.print("* best in its column (↓ lower is better, ↑ higher is better); - unknown", style="dim")
    if hidden:
        console.print(
            f"no value in any run (not shown): {', '.join(c.name for c in hidden)}",
            style="dim",
            markup=False,
            highlight=False,
        )
    for n in sw.notes:
        dim_line(console, f"note: {n}")


# ---------------------------------------------------------------------------
# Machine formats
# ---------------------------------------------------------------------------


def to_json(sw: Sweep) -> bytes:
    """``{"schema": "charllm-trace/compare", "version": 1, "columns": [{name, title, unit, better,
    group}], "rows": [...], "best": {column: [run]}, "notes": [...]}`` (docs/schema/compare.schema.json)."""
    return orjson.dumps(
        stamp("compare", sw.to_dict()), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    )


def to_csv(sw: Sweep) -> str:
    buf = io.StringIO()
    sw.table.write_csv(buf)
    return buf.getvalue()


def write(sw: Sweep, fmt: str, output: str | os.PathLike[str]) -> None:
    """Write the table to ``output`` as json, csv or parquet (one file; the caller checked it)."""
    p = Path(output)
    try:
        if fmt == "json":
            p.write_bytes(to_json(sw))
        elif fmt == "csv":
            p.write_text(to_csv(sw), encoding="utf-8")
        elif fmt == "parquet":
            sw.table.write_parquet(p)
        else:
            raise ValueError(fmt)
    except OSError as exc:
        raise InputError(p, f"cannot write: {exc.strerror or exc}") from None
