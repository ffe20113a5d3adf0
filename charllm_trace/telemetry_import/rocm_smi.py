"""``rocm-smi --showpower --showtemp [--showclocks --showuse --showenergycounter] --csv`` logs.

The format (ROCm ``rocm_smi_lib/python_smi_tools/rocm_smi.py``, ``formatCsv``): a header line
``device,`` followed by the metric names with their unit in parentheses (``Average Graphics
Package Power (W)``, ``Current Socket Graphics Package Power (W)`` on MI300, ``Temperature (Sensor
junction) (C)``), then one line per card (``card0,35.0,...``), ``N/A`` where a value is missing.
``--showclocks`` adds ``sclk clock level`` = ``1 (1900Mhz)``. rocm-smi prints one snapshot and has
no loop option: a log is a shell loop of calls, so header and rows repeat per poll. The rows carry
no time: prefix each line with its Unix time (``... | ts '%.s'``) or give the first poll's time
and the interval.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from charllm_trace.telemetry_import.common import (
    ImportedLog,
    ParseOptions,
    csv_cells,
    finish,
    log_lines,
    numbers,
    one_header,
    row_times,
)

#: model column -> header names (lower case, the unit in parentheses removed), first present used
FIELDS: dict[str, tuple[str, ...]] = {
    "power_w": ("current socket graphics package power", "average graphics package power"),
    "temp_c": ("temperature (sensor junction)", "temperature (sensor edge)"),
    "mem_temp_c": ("temperature (sensor memory)",),
    "sm_clock_mhz": ("sclk clock level",),
    "mem_clock_mhz": ("mclk clock level",),
    "util_pct": ("gpu use",),
    "energy_j": ("accumulated energy",),
    "power_limit_w": ("max graphics package power",),
}


def _split_unit(name: str) -> tuple[str, str | None]:
    n = name.strip()
    if n.endswith(")") and "(" in n:
        base, _, unit = n[:-1].rpartition("(")
        if unit in ("W", "C", "%", "uJ", "J", "mW"):
            return base.strip().lower(), unit
    return n.lower(), None


def parse(path: Path, opts: ParseOptions) -> ImportedLog:
    lines, prefix, stripped = log_lines(path)
    header = one_header(
        path,
        stripped,
        "device,",
        "not a rocm-smi --csv log: no 'device,...' header line",
        "rocm-smi log has two different headers (different --show options in one file?)",
    )
    head = [_split_unit(h) for h in header.split(",")]
    names = [n for n, _ in head]
    is_row = stripped.str.contains(r"^card\d+,")
    log = ImportedLog("rocm-smi", path.name, pl.DataFrame(), "Unix-time prefix of each line (ts '%.s')")
    cells = csv_cells(path, "\n".join(stripped.filter(is_row).to_list()) + "\n", len(head), "rocm-smi log")
    cols: dict[str, pl.Series] = {"device": cells["c0"].str.slice(4).cast(pl.Int64)}
    for col, candidates in FIELDS.items():
        found = [c for c in candidates if c in names]
        if not found:
            continue
        i = names.index(found[0])
        s = cells[f"c{i}"]
        unit = head[i][1]
        if col in ("sm_clock_mhz", "mem_clock_mhz"):  # "1 (1900Mhz)": the level, then the clock
            s = s.str.extract(r"\((\d+(?:\.\d+)?)\s*[Mm]hz\)", 1)
            unit = None
        cols[col] = numbers(path, s, col, unit, f"column {found[0]!r}")
        if col == "power_w":
            log.notes.append(f"power from rocm-smi's {header.split(',')[i].strip()}")
    cols["time_ns"] = row_times(path, opts, log, prefix, is_row, cols["device"], None, "... | ts '%.s'")
    return finish(path, log, pl.DataFrame(cols), opts)
