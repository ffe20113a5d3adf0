"""``amd-smi monitor`` and ``amd-smi metric`` logs (CSV with ``--csv``, or ``monitor``'s table).

The formats (ROCm amdsmi, ``amdsmi_cli/amdsmi_commands.py`` and ``amdsmi_logger.py``):

- ``--csv``: a header line of keys then one line per GPU; values are plain numbers (units only in
  the human-readable and JSON outputs), ``N/A`` when missing. With ``-w INTERVAL`` (watch mode) each
  row starts with ``timestamp``: ``int(time.time())``, Unix seconds (1 s resolution), and every
  poll prints its header again. ``monitor`` keys: ``gpu, power_usage, hotspot_temperature,
  memory_temperature, gfx, gfx_clock, mem, mem_clock, ...``; ``metric`` keys (nested dicts
  flattened): ``gpu, gfx_activity, socket_power, gfx_0_clk, mem_0_clk, edge, hotspot, mem,
  total_energy_consumption`` (J), ...
- ``monitor`` without ``--csv``: a table ``GPU  POWER  GPU_TEMP  MEM_TEMP  GFX_UTIL  GFX_CLOCK ...``
  (``TIMESTAMP`` first in watch mode), values with units (``126 W``, ``40 °C``, ``182 MHz``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from charllm_trace.core.errors import InputError
from charllm_trace.telemetry_import.common import (
    ImportedLog,
    ParseOptions,
    csv_cells,
    epoch_seconds_ns,
    finish,
    numbers,
    read_text,
)

#: CSV key -> model column; ``monitor`` and ``metric`` name some things alike ("mem" is memory
#: utilisation in monitor, the VRAM temperature in metric), so each has its own table
MONITOR_KEYS = {
    "power_usage": "power_w",
    "hotspot_temperature": "temp_c",
    "memory_temperature": "mem_temp_c",
    "gfx": "util_pct",
    "gfx_clock": "sm_clock_mhz",
    "mem_clock": "mem_clock_mhz",
}
METRIC_KEYS = {
    "socket_power": "power_w",
    "hotspot": "temp_c",
    "mem": "mem_temp_c",
    "gfx_activity": "util_pct",
    "gfx_0_clk": "sm_clock_mhz",
    "mem_0_clk": "mem_clock_mhz",
    "total_energy_consumption": "energy_j",
    "power_cap": "power_limit_w",
}
TABLE_KEYS = {
    "POWER": "power_w",
    "GPU_TEMP": "temp_c",
    "MEM_TEMP": "mem_temp_c",
    "GFX_UTIL": "util_pct",
    "GFX_CLOCK": "sm_clock_mhz",
    "MEM_CLOCK": "mem_clock_mhz",
}
#: unit words the table prints as a separate token after a number (or after N/A)
TABLE_UNITS = ("W", "°C", "%", "MHz", "MB", "Mb/s", "J", "V", "mV")


def _frame(path: Path, log: ImportedLog, cells: dict[str, pl.Series], keys: dict[str, str]) -> pl.DataFrame:
    if "timestamp" not in cells:
        raise InputError(
            path,
            "amd-smi rows carry no timestamp: record in watch mode (-w INTERVAL), which adds one per row",
        )
    cols: dict[str, pl.Series] = {"time_ns": epoch_seconds_ns(path, cells["timestamp"], "timestamp")}
    gpu = cells["gpu"].str.strip_chars().str.to_integer(strict=False)
    if gpu.null_count():
        raise InputError(path, "a row whose gpu is not an integer")
    cols["device"] = gpu
    for key, col in keys.items():
        if key in cells and col not in cols:
            cols[col] = numbers(path, cells[key], col, None, f"column {key!r}")
    if "power_w" not in cols:
        log.notes.append("the log has no power column (record with -p / --power)")
    return pl.DataFrame(cols)


def _csv(path: Path, text: str, log: ImportedLog) -> pl.DataFrame:
    first, _, _ = text.partition("\n")
    head = [h.strip().lower() for h in first.split(",")]
    if "gpu" not in head:
        raise InputError(path, f"not an amd-smi CSV log: no 'gpu' column in {first.strip()[:80]!r}")
    lines = [ln for ln in text.split("\n") if ln.strip() and ln.strip().lower() != first.strip().lower()]
    if any(ln.lower().startswith(("timestamp,", "gpu,")) for ln in lines):
        raise InputError(path, "amd-smi log has two different headers (two commands in one file?)")
    cells = csv_cells(path, "\n".join(lines) + "\n", len(head), "amd-smi log")
    named = {h: cells[f"c{i}"] for i, h in enumerate(head)}
    keys = METRIC_KEYS if ("socket_power" in head or "gfx_activity" in head) else MONITOR_KEYS
    return _frame(path, log, named, keys)


def _table(path: Path, text: str, log: ImportedLog) -> pl.DataFrame:
    lines = pl.Series("l", text.split("\n"), dtype=pl.String).str.strip_chars()
    is_head = lines.str.contains(r"^(TIMESTAMP\s+)?GPU\s+[A-Z]")
    if not is_head.any():
        raise InputError(path, "not an amd-smi log: neither a CSV header nor a 'GPU  POWER ...' table header")
    heads = lines.filter(is_head).unique(maintain_order=True)
    if heads.len() > 1:
        raise InputError(path, "amd-smi log has two different table headers (two commands in one file?)")
    head = heads[0].split()
    rows = lines.filter(lines.str.contains(r"^\d") & ~is_head)
    toks = rows.str.extract_all(r"\S+").list.eval(pl.element().filter(~pl.element().is_in(TABLE_UNITS)))
    if toks.len() and (toks.list.len() != len(head)).any():
        n = int(toks.list.len().filter(toks.list.len() != len(head))[0])
        raise InputError(path, f"a table row has {n} values, the header names {len(head)}")
    named = {h.lower() if h in ("TIMESTAMP", "GPU") else h: toks.list.get(i) for i, h in enumerate(head)}
    return _frame(path, log, named, TABLE_KEYS)


def parse(path: Path, opts: ParseOptions) -> ImportedLog:
    text = read_text(path)
    log = ImportedLog("amd-smi", path.name, pl.DataFrame(), "amd-smi timestamp column (Unix seconds)")
    first = text.lstrip().partition("\n")[0]
    frame = _csv(path, text.lstrip(), log) if "," in first else _table(path, text, log)
    log.notes.append(
        "amd-smi timestamps are whole seconds (int(time.time())): each sample is up to 1 s later than its time"
    )
    return finish(path, log, frame, opts)
