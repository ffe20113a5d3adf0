"""``nvidia-smi --query-gpu=... --format=csv -lms N`` logs.

The format (nvidia-smi(1), "--format=csv" and the --help-query-gpu list): one header line naming
the queried fields, a unit in brackets where the field has one (``power.draw [W]``,
``clocks.sm [MHz]``, ``utilization.gpu [%]``), then one line per GPU per poll, fields separated by
``", "``, numbers followed by their unit (``250.12 W``, ``1410 MHz``, ``98 %``; ``nounits`` drops
them), ``[N/A]`` / ``[Not Supported]`` where a value is missing, and ``timestamp`` as
``2024/04/03 14:25:51.123``: local time without a zone. GPUs of one poll share a timestamp
(interleaved: GPU 0, 1, ... then the next poll).
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
    finish,
    hex_or_int,
    local_times_ns,
    numbers,
    read_text,
    zone_for,
)

TIME_FORMAT = "%Y/%m/%d %H:%M:%S%.f"

#: model column -> query field names, the first present is used
FIELDS: dict[str, tuple[str, ...]] = {
    "power_w": ("power.draw.instant", "power.draw", "power.draw.average"),
    "temp_c": ("temperature.gpu",),
    "mem_temp_c": ("temperature.memory",),
    "sm_clock_mhz": ("clocks.sm", "clocks.current.sm"),
    "mem_clock_mhz": ("clocks.mem", "clocks.current.memory"),
    "util_pct": ("utilization.gpu",),
    "power_limit_w": ("enforced.power.limit", "power.limit"),
    "throttle_reasons": (
        "clocks_event_reasons.active",
        "clocks_throttle_reasons.active",
        "clocks_event_reasons",
        "clocks_throttle_reasons",
    ),
}


def _header(line: str) -> list[tuple[str, str | None]]:
    out = []
    for cell in line.split(","):
        m = re.fullmatch(r"\s*(.*?)\s*(?:\[(.*)\])?\s*", cell)
        name, unit = (m.group(1), m.group(2)) if m else (cell.strip(), None)
        out.append((name.lower(), unit))
    return out


def parse(path: Path, opts: ParseOptions) -> ImportedLog:
    text = read_text(path)
    first, _, body = text.partition("\n")
    head = _header(first)
    names = [n for n, _ in head]
    if "timestamp" not in names or "index" not in names:
        if re.match(r"\s*\d{4}/\d\d/\d\d ", first):
            raise InputError(
                path, "nvidia-smi log has no header line: record it with --format=csv (not noheader)"
            )
        raise InputError(
            path,
            "not an nvidia-smi --query-gpu CSV log: the header must name timestamp and index "
            f"(found {first.strip()[:80]!r})",
        )
    log = ImportedLog("nvidia-smi", path.name, pl.DataFrame(), "log timestamps (local time)")
    cells = csv_cells(path, body, len(head), "nvidia-smi log")
    ts = cells[f"c{names.index('timestamp')}"]
    cells = cells.filter(ts.str.strip_chars().str.to_lowercase() != "timestamp")  # a repeated header
    tz = zone_for(path, opts, log, "nvidia-smi timestamps")
    cols: dict[str, pl.Series] = {
        "time_ns": local_times_ns(path, cells[f"c{names.index('timestamp')}"], TIME_FORMAT, tz, "timestamp"),
    }
    idx = cells[f"c{names.index('index')}"].str.strip_chars().str.to_integer(strict=False)
    if idx.null_count():
        raise InputError(path, "a row whose GPU index is not an integer")
    cols["device"] = idx
    for col, candidates in FIELDS.items():
        found = [c for c in candidates if c in names]
        if not found:
            continue
        i = names.index(found[0])
        what = f"column {found[0]!r}"
        if col == "throttle_reasons":
            cols[col] = hex_or_int(path, cells[f"c{i}"], what)
        else:
            cols[col] = numbers(path, cells[f"c{i}"], col, head[i][1], what)
        if col == "power_w":
            log.notes.append(f"power from nvidia-smi's {found[0]}")
    if "uuid" in names:
        u = pl.DataFrame({"d": idx, "u": cells[f"c{names.index('uuid')}"].str.strip_chars()}).unique("d")
        log.uuids = {int(d): str(x) for d, x in u.iter_rows() if x}
    return finish(path, log, pl.DataFrame(cols), opts)
