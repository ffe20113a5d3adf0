"""The telemetry file format: what the sampler writes and how it is read back.

Per node, in the run directory:

- ``telemetry-<host>.csv``: one row per device per sample, a header line first, columns
  :data:`CSV_COLUMNS` (the model's ``TELEMETRY_SCHEMA``). Empty field = not available. Rows are
  appended and flushed to the OS at least every :data:`FLUSH_S` seconds, so a sampler killed with
  SIGKILL loses at most that much; a last line cut short is ignored by the reader.
- ``telemetry-<host>.meta.json``: the source (``nvml``, ``amdsmi``, ``replay`` or ``null`` with
  ``no_source_reason``), devices (model, UUID, PCI bus id, power field, shared power domains),
  driver/CUDA/ROCm versions, requested and achieved rate, detected sensor update period,
  per-device errors. Rewritten atomically at start, every few seconds and at the end.

Times are ``time.time_ns()``: integer nanoseconds on the Unix epoch, the clock Kineto's
``baseTimeNanoseconds`` and the model use. Units: W, J (cumulative counter), deg C, MHz, percent.
``throttle_reasons`` is NVML's clock-event reason mask (AMD: the SMU ``throttle_status`` word).

This module must stay importable without polars for the writer side; the readers import polars.
"""

from __future__ import annotations

import json
import os
import re
import socket
from typing import IO, Any

FORMAT = "charllm-telemetry-csv"
FORMAT_VERSION = 1
FLUSH_S = 0.25
META_EVERY_S = 5.0

#: CSV columns, in order; the same names and meaning as ``model.TELEMETRY_SCHEMA``.
CSV_COLUMNS = (
    "time_ns",
    "device",
    "power_w",
    "energy_j",
    "temp_c",
    "mem_temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "util_pct",
    "power_limit_w",
    "throttle_reasons",
)
#: The values a backend returns for one device, in order (CSV_COLUMNS minus time and device).
VALUE_COLUMNS = CSV_COLUMNS[2:]


def host_tag(host: str | None = None) -> str:
    """A file-name-safe form of the host name."""
    h = host if host is not None else socket.gethostname()
    return re.sub(r"[^A-Za-z0-9._-]", "_", h) or "host"


def csv_path(run_dir: str | os.PathLike[str], host: str | None = None) -> str:
    return os.path.join(os.fspath(run_dir), f"telemetry-{host_tag(host)}.csv")


def meta_path(run_dir: str | os.PathLike[str], host: str | None = None) -> str:
    return os.path.join(os.fspath(run_dir), f"telemetry-{host_tag(host)}.meta.json")


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if v != v:  # NaN
            return ""
        return repr(v)
    return str(int(v)) if isinstance(v, bool) else str(v)


def format_row(time_ns: int, device: int, values: tuple[Any, ...]) -> str:
    return f"{time_ns},{device}," + ",".join(_fmt(v) for v in values) + "\n"


class SampleWriter:
    """Appends rows to the CSV and flushes them to the OS at least every ``flush_s`` seconds."""

    def __init__(self, path: str, flush_s: float = FLUSH_S) -> None:
        self.path = path
        self.flush_s = flush_s
        self._f: IO[str] = open(path, "w", buffering=1 << 20)
        self._f.write(",".join(CSV_COLUMNS) + "\n")
        self._f.flush()
        self._buf: list[str] = []
        self.rows = 0

    def add(self, time_ns: int, device: int, values: tuple[Any, ...]) -> None:
        self._buf.append(format_row(time_ns, device, values))
        self.rows += 1

    def flush(self) -> None:
        if self._buf:
            self._f.write("".join(self._buf))
            self._buf.clear()
        self._f.flush()

    def close(self) -> None:
        self.flush()
        self._f.close()


def write_meta(path: str, meta: dict[str, Any]) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    from charllm_trace.core.errors import InputError
    from charllm_trace.core.files import read_regular

    try:
        d = json.loads(read_regular(path, "a telemetry metadata file"))
    except (ValueError, RecursionError) as exc:
        raise InputError(
            path, f"telemetry metadata is not valid JSON: {' '.join(str(exc).split())[:120]}"
        ) from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise InputError(path, f"not a charllm-trace telemetry metadata file (format != {FORMAT})")
    f = d.get("file")
    if f is not None and (not isinstance(f, str) or not f or os.path.basename(f) != f or f in (".", "..")):
        # the samples live beside their metadata: a path elsewhere (../../x, /etc/x) is not read
        raise InputError(path, f"'file' must name a file in the run directory, not {f!r:.80}")
    devices = d.get("devices")
    if devices is not None and (
        not isinstance(devices, list)
        or any(not isinstance(x, dict) or type(x.get("index")) is not int for x in devices)
    ):
        raise InputError(path, "'devices' must be a list of objects with an integer 'index'")
    return d
