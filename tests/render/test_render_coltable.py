"""Tables from the column declarations (render/coltable.py): headers are the declared names with the
unit as shown, cells are formatted by unit, a table's overrides replace just what they name, and
every table built on it shows a null as its mark (never ``None``)."""

from __future__ import annotations

import importlib
import io
import pkgutil

import polars as pl
import pytest
from rich.console import Console

import charllm_trace.render as render_pkg
from charllm_trace.analysis.columns import Col, columns
from charllm_trace.render.coltable import HTML_UNITS, TERMINAL_UNITS, Layout, Show, fit_table, header

FRAME = columns(
    Col("dim", pl.String),
    Col("count", pl.Int64),
    Col("bytes_total", pl.Int64, "B"),
    Col("wait_ns", pl.Int64, "ns"),
    Col("wait_pct", pl.Float64, "%"),
    Col("busbw_gbps", pl.Float64, "GB/s"),
    Col("avg_w", pl.Float64, "W"),
    Col("energy_j", pl.Float64, "J"),
)


def test_header_is_the_name_without_its_unit_suffix_and_the_unit_as_shown() -> None:
    by_name = {c.name: c for c in FRAME.cols}
    assert header(by_name["wait_ns"], TERMINAL_UNITS) == "wait ms"
    assert header(by_name["wait_pct"], TERMINAL_UNITS) == "wait %"
    assert header(by_name["avg_w"], TERMINAL_UNITS) == "avg W"
    assert header(by_name["energy_j"], TERMINAL_UNITS) == "energy J"
    # GB/s is named in the report's headers; the terminal's legends name it
    assert header(by_name["busbw_gbps"], TERMINAL_UNITS) == "busbw"
    assert header(by_name["busbw_gbps"], HTML_UNITS) == "busbw GB/s"
    assert header(by_name["bytes_total"], TERMINAL_UNITS) == "bytes total"
    assert header(by_name["dim"], {}) == "dim"
    # a name without the unit's suffix keeps its name whole
    assert header(Col("ttft_mean", pl.Float64, "ns"), TERMINAL_UNITS) == "ttft mean ms"


def test_cells_by_unit_and_dtype_with_the_tables_mark_for_nulls() -> None:
    lay = Layout(FRAME, [c.name for c in FRAME.cols])
    row = {"dim": "tp", "count": 12, "bytes_total": 3_000_000, "wait_ns": 1_234_567, "wait_pct": 12.345,
           "busbw_gbps": 123.456, "avg_w": 1234.56, "energy_j": 0.5}  # fmt: skip
    assert lay.row(row) == ["tp", "12", "3000000", "1.235", "12.3", "123", "1,234.6", "0.500"]
    assert lay.row(dict.fromkeys(row)) == ["-"] * len(row)
    assert [j for _, j in lay.heads] == ["left"] + ["right"] * 7
    html = Layout(FRAME, ["dim", "wait_ns"], units=HTML_UNITS, missing="")
    assert html.heads == [("dim", "left"), ("wait ms", "right")]
    assert html.row({"dim": None, "wait_ns": None}) == ["", ""]


def test_overrides_replace_only_what_they_name() -> None:
    lay = Layout(
        FRAME,
        [Show("dim", missing="all"), Show("count", "ops", "{:,}"), Show("bytes_total", "MB", "{:,.2f}", div=1e6),
         Show("wait_ns", just="left"), Show("wait_pct", cell=lambda r: f"{r['wait_ns']}/{r['count']}")],
    )  # fmt: skip
    assert lay.heads == [
        ("dim", "left"),
        ("ops", "right"),
        ("MB", "right"),
        ("wait ms", "left"),
        ("wait %", "right"),
    ]
    row = {"dim": None, "count": 12345, "bytes_total": 2_500_000, "wait_ns": 5, "wait_pct": 1.0}
    assert lay.row(row) == ["all", "12,345", "2.50", "0.000", "5/12345"]
    assert lay.row({**row, "bytes_total": None})[2] == "-"


def test_an_undeclared_column_is_refused() -> None:
    with pytest.raises(KeyError):
        Layout(FRAME, ["no_such_column"])


def _layouts() -> list[tuple[str, Layout]]:
    found = []
    for m in pkgutil.iter_modules(render_pkg.__path__):
        mod = importlib.import_module(f"charllm_trace.render.{m.name}")
        found += [(f"{m.name}.{k}", v) for k, v in vars(mod).items() if isinstance(v, Layout)]
    return found


@pytest.mark.parametrize("name,layout", _layouts(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_table_shows_nulls_as_its_mark(name: str, layout: Layout) -> None:
    # a row of nulls, except the parts of a cell made of several columns
    row: dict[str, object] = dict.fromkeys(layout.cols)
    if any(s.cell is not None for s in layout.shows) and "n_stages" in row:
        row = {**row, "stage": 1, "n_stages": 2}
    cells = layout.row(row)
    assert len(cells) == len(layout.heads)
    assert not any("None" in c for c in cells), (name, cells)
    buf = io.StringIO()
    Console(file=buf, width=80, no_color=True).print(
        fit_table(name, layout, pl.DataFrame([row], schema={k: c.dtype for k, c in layout.cols.items()}))
    )
    assert name in buf.getvalue()
