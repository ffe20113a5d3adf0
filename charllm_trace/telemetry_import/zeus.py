"""Zeus-style power CSV logs: a time column and one power column per GPU.

The formats:

- Zeus ``PowerMonitor(power_csv_path=...)`` (``zeus/monitor/power.py`` up to v0.11): no header;
  each line ``time.time()`` (Unix seconds) then the power of each monitored GPU in W (NVML mW /
  1000), in ``gpu_indices`` order; Zeus names the columns ``time, power<i>``. Without a header the
  GPU indices are taken as 0, 1, ... in column order.
- the same with a header (what the study's scripts and ``PowerMonitor``'s frame write):
  ``time`` or ``timestamp``, then ``power<i>`` / ``gpu<i>`` / ``power_gpu<i>`` / ``gpu<i>_power``,
  optionally with a unit (``power0_mw``, ``gpu0 [W]``); times as Unix seconds, or as local
  date-times ``2024-04-03 14:25:51.123`` (the zone is then needed).
- the deprecated ``zeus_monitor`` (C++) file: header ``Time,Power``, local date-times with ns, one
  GPU, power in mW.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from charllm_trace.core.errors import InputError
from charllm_trace.telemetry_import.common import (
    ImportedLog,
    ParseOptions,
    csv_cells,
    epoch_seconds_ns,
    finish,
    local_times_ns,
    numbers,
    read_text,
    zone_for,
)

_POWER_COL = re.compile(
    r"^(?:power_?gpu|gpu_?power|power|gpu)[_ ]?(\d+)(?:[_ ]?power)?(?:[_ ]*\[?(w|mw)\]?)?$", re.IGNORECASE
)
_NUMBER = re.compile(r"^\s*\d+(?:\.\d*)?\s*$")


def _times(path: Path, s: pl.Series, opts: ParseOptions, log: ImportedLog) -> pl.Series:
    sample = s.drop_nulls().head(1).to_list()
    if sample and _NUMBER.match(sample[0]):
        log.time_source = "log timestamps (Unix seconds)"
        return epoch_seconds_ns(path, s, "time")
    log.time_source = "log timestamps (local time)"
    tz = zone_for(path, opts, log, "Zeus log times")
    txt = s.str.strip_chars().str.replace("T", " ")
    # zeus_monitor writes nanoseconds (9 digits); %.f takes any fraction
    return local_times_ns(path, txt, "%Y-%m-%d %H:%M:%S%.f", tz, "time")


def parse(path: Path, opts: ParseOptions) -> ImportedLog:
    text = read_text(path)
    first = text.partition("\n")[0]
    cells0 = [c.strip() for c in first.split(",")]
    log = ImportedLog("zeus", path.name, pl.DataFrame(), "")
    if len(cells0) < 2:
        raise InputError(path, "not a Zeus power CSV: a time column and at least one power column are needed")
    header = not _NUMBER.match(cells0[0])
    if header:
        body = text.partition("\n")[2]
        names = [c.lower() for c in cells0]
        if names[0] not in ("time", "timestamp", "time_s", "timestamp_s"):
            raise InputError(
                path, f"not a Zeus power CSV: the first column is {cells0[0]!r:.30}, not time/timestamp"
            )
        gpus: list[tuple[int, int, str | None]] = []  # (column, GPU index, unit)
        if names[1:] == ["power"]:  # zeus_monitor: one GPU, mW
            gpus = [(1, 0, "mW")]
            log.notes.append("zeus_monitor log: one GPU (index 0), power in mW")
        for i, n in enumerate(cells0[1:], start=1):
            m = _POWER_COL.match(n.strip())
            if m:
                gpus.append((i, int(m.group(1)), m.group(2)))
        if not gpus:
            raise InputError(path, f"no per-GPU power column (power0, gpu0, ...) in {first.strip()[:80]!r}")
    else:
        body = text
        gpus = [(i, i - 1, None) for i in range(1, len(cells0))]
        log.notes.append(
            f"no header: columns read as time, then the power (W) of GPUs {list(range(len(gpus)))} in order "
            "(Zeus writes its gpu_indices in order; other indices need a device map)"
        )
    cells = csv_cells(path, body, len(cells0), "Zeus log")
    t = _times(path, cells["c0"], opts, log)
    parts = [
        pl.DataFrame(
            {
                "time_ns": t,
                "device": pl.Series([gpu] * cells.height, dtype=pl.Int64),
                "power_w": numbers(
                    path, cells[f"c{col}"], "power_w", unit, f"column {cells0[col] if header else col}"
                ),
            }
        )
        for col, gpu, unit in gpus
    ]
    return finish(path, log, pl.concat(parts), opts)
