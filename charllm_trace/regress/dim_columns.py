"""``compare``'s columns per parallel dimension: each run's figures of the ``dims`` result
(``analysis/dims.py``: whole trace, summed over ranks) — exposed communication, overlap %, the bus
bandwidth over transfer time alone, the waiting share — and the pipeline's bubble share. Read from
the run's analysis, never computed here (docs/analyses.md, "Comparing runs")."""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.analysis.results import RunAnalysis

DIMS = ("tp", "cp", "dp", "pp", "ep")
LOWER, HIGHER = "lower", "higher"

#: (column name pattern, title pattern, unit, better, the dims frame's column, scale)
_SPECS = (
    ("exposed_{d}_ms", "exposed {d} ms", "ms", LOWER, "exposed_comm_ns", 1e-6),
    ("overlap_{d}_pct", "overlap {d} %", "%", HIGHER, "overlap_pct", 1.0),
    ("wait_{d}_pct", "wait {d} %", "%", LOWER, "wait_pct", 1.0),
    ("xfer_busbw_{d}_gbps", "xfer busbw {d}", "GB/s", HIGHER, "transfer_busbw_gbps", 1.0),
)


def dim_column_specs() -> list[tuple[str, str, str, str, int]]:
    """(name, title, unit, better, digits) of every column, in table order: per measure, per dimension;
    then the pp bubble share."""
    out = [
        (n.format(d=d), t.format(d=d), u, b, 1 if u == "%" else 3)
        for n, t, u, b, _c, _s in _SPECS
        for d in DIMS
    ]
    return [*out, ("bubble_pp_pct", "bubble pp %", "%", LOWER, 1)]


def dim_figures(an: RunAnalysis) -> dict[str, Any]:
    """The run's value of every column of :func:`dim_column_specs` (null where unknown)."""
    row: dict[str, Any] = {name: None for name, *_ in dim_column_specs()}
    dm = getattr(an, "dims", None)
    if dm is None:
        return row
    by = {r["dim"]: r for r in dm.dims.filter(pl.col("dim").is_in(list(DIMS))).iter_rows(named=True)}
    for n, _t, _u, _b, col, scale in _SPECS:
        for d, r in by.items():
            v = r[col]
            row[n.format(d=d)] = None if v is None else v * scale
    if "pp" in by:
        row["bubble_pp_pct"] = by["pp"]["bubble_pct"]
    return row
