"""``dcgmi dmon -e 155,150,100,...`` logs.

The format (DCGM ``dcgmi/DeviceMonitor.cpp``): whitespace-aligned text, no CSV. A header line
``#Entity`` followed by each field's short name (``POWER``, ``TMPTR``, ``SMCLK``), then a units line
``ID`` followed by each field's unit in the same columns (``W``, ``C``, ``mJ``, blank for clocks),
then one line per entity per poll: ``GPU 0`` and the values, ``N/A`` for a blank value. The two
header lines are printed again every 14 polls. Rows carry no time: dmon reads the latest values,
prints them and sleeps ``-d`` ms (default 1000). Times therefore come from a Unix-time prefix on each
line (``dcgmi dmon ... | ts '%.s'``, moreutils) or are derived from a given start time and the
interval (with drift: the real period is ``-d`` plus the time to read and print).
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from charllm_trace.core.errors import InputError
from charllm_trace.telemetry_import.common import (
    ImportedLog,
    ParseOptions,
    finish,
    hex_or_int,
    log_lines,
    numbers,
    one_header,
    row_times,
)

#: dmon short name (dcgm_fields.cpp) -> model column
SHORT_NAMES = {
    "POWER": "power_w",  # 155 DCGM_FI_DEV_POWER_USAGE
    "POWINST": "power_w",  # 157 DCGM_FI_DEV_POWER_USAGE_INSTANT (used when 155 is absent)
    "TOTEC": "energy_j",  # 156 DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ
    "TMPTR": "temp_c",  # 150 DCGM_FI_DEV_GPU_TEMP
    "MMTMP": "mem_temp_c",  # 140 DCGM_FI_DEV_MEMORY_TEMP
    "SMCLK": "sm_clock_mhz",  # 100 DCGM_FI_DEV_SM_CLOCK
    "MMCLK": "mem_clock_mhz",  # 101 DCGM_FI_DEV_MEM_CLOCK
    "GPUTL": "util_pct",  # 203 DCGM_FI_DEV_GPU_UTIL
    "EPLMT": "power_limit_w",  # 164 DCGM_FI_DEV_ENFORCED_POWER_LIMIT
    "PMLMT": "power_limit_w",  # 160 DCGM_FI_DEV_POWER_MGMT_LIMIT (when 164 is absent)
    "DVCCTR": "throttle_reasons",  # 112 DCGM_FI_DEV_CLOCKS_EVENT_REASONS
}
DEFAULT_INTERVAL_MS = 1000.0  # dmon's -d default
#: units of fields whose unit is not the model's, for a log without its ``ID`` units line
FIELD_UNITS = {"TOTEC": "mJ"}


def _columns(header: str, units: str | None) -> list[tuple[str, str | None]]:
    """(short name, unit) per field, the unit read from the units line at the name's column."""
    spans = [(m.start(), m.group()) for m in re.finditer(r"\S+", header)][1:]
    out = []
    for k, (start, name) in enumerate(spans):
        end = spans[k + 1][0] if k + 1 < len(spans) else None
        u = units[start:end].strip() if units is not None else ""
        out.append((name, u or (FIELD_UNITS.get(name) if units is None else None)))
    return out


def parse(path: Path, opts: ParseOptions) -> ImportedLog:
    lines, prefix, stripped = log_lines(path)
    header = one_header(
        path,
        stripped,
        "#Entity",
        "not a dcgmi dmon log: no '#Entity' header line",
        "dcgmi dmon log has two different field lists (two runs in one file?)",
    )
    raw_lines = lines.to_list()
    hpos = stripped.to_list().index(header)
    header_line = raw_lines[hpos]
    unit_line = (
        raw_lines[hpos + 1] if hpos + 1 < len(raw_lines) and stripped[hpos + 1].startswith("ID") else None
    )
    fields = _columns(header_line, unit_line)
    log = ImportedLog("dcgmi dmon", path.name, pl.DataFrame(), "Unix-time prefix of each line (ts '%.s')")
    is_row = stripped.str.contains(r"^GPU\s+\d+\s")
    other = stripped.str.contains(r"^(GPU-I|GPU-CI|CPU|SW|LINK|NVSWITCH)\b")
    if other.any():
        log.notes.append("rows of other entities than whole GPUs (MIG instances, CPUs, links) are not used")
    toks = stripped.filter(is_row).str.extract_all(r"\S+")
    if toks.len() and (toks.list.len() != len(fields) + 2).any():
        n = int(toks.list.len().filter(toks.list.len() != len(fields) + 2)[0])
        raise InputError(path, f"a GPU row has {n - 2} values, the header names {len(fields)} fields")
    cols: dict[str, pl.Series] = {"device": toks.list.get(1).cast(pl.Int64)}
    used: set[str] = set()
    for k, (name, unit) in enumerate(fields):
        col = SHORT_NAMES.get(name)
        if col is None or col in used:
            continue
        used.add(col)
        cells = toks.list.get(k + 2)
        what = f"field {name}"
        cols[col] = (
            hex_or_int(path, cells, what)
            if col == "throttle_reasons"
            else numbers(path, cells, col, unit, what)
        )
    if not used:
        raise InputError(
            path, "dcgmi dmon log has none of the fields power, temperature, clocks (-e 155,150,100)"
        )
    cols["time_ns"] = row_times(
        path, opts, log, prefix, is_row, cols["device"], DEFAULT_INTERVAL_MS, "dcgmi dmon ... | ts '%.s'"
    )
    return finish(path, log, pl.DataFrame(cols), opts)
