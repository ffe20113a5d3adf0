"""What every log importer shares: the result type, value and time parsing, the time zone.

Values are parsed column-wise with polars (no per-line Python loop): a cell is stripped, a tool's
"no value" words (``[N/A]``, ``[Not Supported]``, ``N/A``, ...) become null, a unit written after
the number (``250.12 W``, ``40 °C``) is checked against the column's unit and removed, and what
is left must be a number, else the log is refused naming the column and the first bad cell.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from charllm_trace.collectors.telemetry.ranges import MAX_TIME_NS, MIN_TIME_NS, check_times, check_values
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import TELEMETRY_SCHEMA, conform

#: cells that mean "no value" in the tools' outputs (compared after stripping, case-insensitive)
NULL_WORDS = (
    "",
    "n/a",
    "[n/a]",
    "na",
    "nan",
    "[not supported]",
    "not supported",
    "[unknown error]",
    "[insufficient permissions]",
    "[gpu requires reset]",
    "[not found]",
    "[gpu is lost]",
    "n/a (secondary die)",
)

#: unit words a value may carry, and the factor to the model's unit (W, J, deg C, MHz, percent)
UNIT_FACTORS: dict[str, dict[str, float]] = {
    "W": {"w": 1.0, "mw": 1e-3, "kw": 1e3},
    "J": {"j": 1.0, "mj": 1e-3, "uj": 1e-6, "kj": 1e3},
    "C": {"c": 1.0, "°c": 1.0, "degc": 1.0},
    "MHz": {"mhz": 1.0, "ghz": 1e3, "khz": 1e-3},
    "%": {"%": 1.0},
}

#: the model's telemetry columns and their units
COLUMN_UNITS = {
    "power_w": "W",
    "energy_j": "J",
    "temp_c": "C",
    "mem_temp_c": "C",
    "sm_clock_mhz": "MHz",
    "mem_clock_mhz": "MHz",
    "util_pct": "%",
    "power_limit_w": "W",
}


#: the largest Unix-epoch seconds whose nanoseconds fit int64 (2262-04-11)
MAX_EPOCH_S = MAX_TIME_NS // 10**9
#: the longest sampling interval of a log whose rows carry no time (a day)
MAX_INTERVAL_MS = 86_400_000.0


@dataclass
class ParseOptions:
    """How to read times: the zone of zone-less local times, a clock offset, and for logs whose
    rows carry no time, the time of the first sample and the sampling interval."""

    tz: str | None = None
    clock_offset_ns: int = 0
    start: str | None = None  # local time (or Unix seconds) of the first sample
    interval_ms: float | None = None


@dataclass
class ImportedLog:
    """An external telemetry log read into ``TELEMETRY_SCHEMA`` (``device``: the tool's GPU index)."""

    tool: str
    file: str
    samples: pl.DataFrame
    time_source: str  # how the sample times were obtained, in words
    tz: str | None = None
    tz_assumed: bool = False
    clock_offset_ns: int = 0
    notes: list[str] = field(default_factory=list)
    uuids: dict[int, str] = field(default_factory=dict)

    @property
    def devices(self) -> list[int]:
        return sorted(self.samples["device"].unique().to_list())

    def rate_hz(self) -> float | None:
        """Samples per second per device: 1 / the median gap between a device's samples."""
        gaps = (
            self.samples.sort("device", "time_ns")
            .select(pl.col("time_ns").diff().over("device").alias("gap"))
            .filter(pl.col("gap") > 0)["gap"]
        )
        med = gaps.median() if gaps.len() else None
        return round(1e9 / float(med), 3) if med else None

    def describe(self) -> dict[str, object]:
        """The facts kept with the imported samples (metadata, ET header, notes)."""
        return {
            "tool": self.tool,
            "file": self.file,
            "samples": self.samples.height,
            "devices": self.devices,
            "rate_hz": self.rate_hz(),
            "time_source": self.time_source,
            "tz": self.tz,
            "tz_assumed": self.tz_assumed,
            "clock_offset_ns": self.clock_offset_ns,
            "start_ns": self.samples["time_ns"].min(),
            "end_ns": self.samples["time_ns"].max(),
            "notes": list(self.notes),
        }


def machine_zone() -> str:
    """This machine's time zone name (``TZ``, else ``/etc/localtime``'s target), else UTC."""
    import zoneinfo

    tz = os.environ.get("TZ", "").lstrip(":")
    candidates = [tz] if tz else []
    try:
        target = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in target:
            candidates.append(target.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    for c in candidates:
        try:
            zoneinfo.ZoneInfo(c)
            return c
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            continue
    return "UTC"


def check_zone(path: Path, tz: str) -> str:
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(tz)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise InputError(
            path, f"unknown time zone {tz!r:.60} (an IANA name such as UTC or Europe/Berlin)"
        ) from None
    return tz


def zone_for(path: Path, opts: ParseOptions, log: ImportedLog, what: str) -> str:
    """The zone of ``what`` (zone-less local times): the given one, else this machine's, said
    loudly in the notes (the CLI repeats it on stderr)."""
    if opts.tz:
        log.tz = check_zone(path, opts.tz)
        return log.tz
    log.tz = machine_zone()
    log.tz_assumed = True
    log.notes.append(
        f"{what} carry no time zone; read as {log.tz} (this machine's zone, an assumption: "
        "samples are shifted by the difference if the log was recorded in another zone)"
    )
    return log.tz


def local_times_ns(path: Path, s: pl.Series, fmt: str, tz: str, what: str) -> pl.Series:
    """Zone-less local date-times (strings in ``fmt``) in ``tz`` as Unix-epoch ns (Int64)."""
    full = s.str.strip_chars()
    s = full.unique().drop_nulls()  # GPUs of one poll share a time: each distinct time once
    us = s.str.strptime(pl.Datetime("us"), fmt, strict=False)  # no wrap past 2262, unlike ns
    bad = us.is_null() & s.is_not_null()
    if bad.any():
        raise InputError(path, f"{what} {s.filter(bad)[0]!r:.60} is not a time of the form {fmt}")
    far = (us.dt.year() < 1971) | (us.dt.year() > 2261)  # ns of int64 cover 1677..2262 (UTC)
    if far.any():
        raise InputError(
            path, f"{what} {s.filter(far)[0]!r:.60} is outside 1971..2261 (Unix-epoch ns in int64)"
        )
    dt = s.str.strptime(pl.Datetime("ns"), fmt, strict=False)  # in range: nanoseconds kept
    ns = (
        pl.DataFrame({"t": dt})
        .select(
            pl.col("t").dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null").dt.epoch("ns")
        )
        .to_series()
    )
    if ns.null_count() > dt.null_count():
        first = s.filter(ns.is_null() & dt.is_not_null())[0]
        raise InputError(path, f"{what} {first!r:.60} does not exist in time zone {tz} (a DST gap)")
    return _by_value(full, pl.DataFrame({"c": s, "v": ns.cast(pl.Int64)}), "time_ns")


def epoch_seconds_ns(path: Path, s: pl.Series, what: str) -> pl.Series:
    """Unix-epoch seconds (``1712153151.123``) as integer ns, exact to the digits given."""
    s = s.cast(pl.String).str.strip_chars()
    ok = s.str.contains(r"^\d{1,11}(?:\.\d{0,9})?$")
    if (~ok.fill_null(True)).any():
        raise InputError(path, f"{what} {s.filter(~ok.fill_null(True))[0]!r:.60} is not Unix-epoch seconds")
    parts = pl.DataFrame({"s": s}).select(
        pl.col("s").str.split_exact(".", 1).struct.rename_fields(["i", "f"]).alias("p")
    )
    whole = parts.unnest("p")["i"].cast(pl.Int64)
    if whole.len() and (whole.max() or 0) > MAX_EPOCH_S:  # type: ignore[operator]
        first = s.filter(whole > MAX_EPOCH_S)[0]
        raise InputError(path, f"{what} {first!r:.60} is past 2262: its nanoseconds do not fit int64")
    frame = parts.unnest("p").select(
        pl.col("i").cast(pl.Int64) * 1_000_000_000
        + pl.col("f").fill_null("").str.pad_end(9, "0").str.slice(0, 9).replace("", "0").cast(pl.Int64)
    )
    return frame.to_series().alias("time_ns")


def parse_start(path: Path, opts: ParseOptions, log: ImportedLog) -> int:
    """The time of the first sample of a log whose rows carry no time (``opts.start``)."""
    assert opts.start is not None
    txt = opts.start.strip()
    if txt.replace(".", "", 1).isdigit():
        return int(epoch_seconds_ns(path, pl.Series([txt]), "start time")[0])
    tz = zone_for(path, opts, log, "the start time")
    fmt = "%Y-%m-%d %H:%M:%S%.f" if ":" in txt.split(" ")[-1] and "-" in txt else "%Y/%m/%d %H:%M:%S%.f"
    return int(local_times_ns(path, pl.Series([txt.replace("T", " ")]), fmt, tz, "start time")[0])


_NUM_UNIT = r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)$"


def _by_value(s: pl.Series, parsed: pl.DataFrame, name: str) -> pl.Series:
    """Map each cell of ``s`` to its parsed value (``parsed``: columns ``c`` and ``v``, one row per
    distinct cell): logs repeat few distinct cells, each is parsed once."""
    out = pl.DataFrame({"c": s}).join(parsed, on="c", how="left", maintain_order="left")["v"]
    return out.alias(name)


def numbers(path: Path, s: pl.Series, column: str, unit: str | None, what: str) -> pl.Series:
    """A column of cells (strings) as Float64 in the model's unit of ``column``.

    ``unit``: the unit the header gives (None: the model's). A unit after a number overrides it;
    a unit of the wrong kind (``MHz`` in a power column) refuses the log."""
    want = COLUMN_UNITS.get(column)
    s = s.cast(pl.String).str.strip_chars()
    parts = (
        pl.DataFrame({"c": s.unique().drop_nulls()})
        .filter(~pl.col("c").str.to_lowercase().is_in(list(NULL_WORDS)))
        .with_columns(
            pl.col("c").str.extract(_NUM_UNIT, 1).alias("num"),
            pl.col("c").str.extract(_NUM_UNIT, 2).fill_null("").str.to_lowercase().alias("unit"),
        )
    )
    bad = parts.filter(pl.col("num").is_null())
    if bad.height:
        first = s.filter(s.is_in(bad["c"].implode()))[0]
        raise InputError(path, f"{what}: {first!r:.40} is not a number")
    factors = UNIT_FACTORS.get(want or "", {})
    default = 1.0
    if unit is not None and want is not None:
        u = unit.strip().lower()
        if u not in factors:
            raise InputError(path, f"{what}: unit {unit!r:.20} is not a unit of {want}")
        default = factors[u]
    seen = set(parts["unit"].unique().to_list()) - {""}
    wrong = sorted(seen - set(factors)) if want else sorted(seen)
    if wrong:
        raise InputError(path, f"{what}: unit {wrong[0]!r:.20} is not a unit of {want or 'a plain number'}")
    factor = pl.col("unit").replace_strict({"": default, **factors}, default=default, return_dtype=pl.Float64)
    parsed = parts.select("c", (pl.col("num").cast(pl.Float64) * factor).alias("v"))
    return _by_value(s, parsed, column)


def hex_or_int(path: Path, s: pl.Series, what: str) -> pl.Series:
    """Bit masks written as ``0x0000000000000004`` or as decimal integers (Int64)."""
    s = s.cast(pl.String).str.strip_chars()
    c = pl.col("c")
    parts = (
        pl.DataFrame({"c": s.unique().drop_nulls()})
        .filter(~c.str.to_lowercase().is_in(list(NULL_WORDS)))
        .with_columns(
            pl.when(c.str.to_lowercase().str.starts_with("0x"))
            .then(c.str.slice(2).str.to_integer(base=16, strict=False))
            .otherwise(c.str.to_integer(base=10, strict=False))
            .cast(pl.Int64)
            .alias("v")
        )
    )
    bad = parts.filter(pl.col("v").is_null())
    if bad.height:
        raise InputError(path, f"{what}: {bad['c'][0]!r:.40} is not a bit mask")
    return _by_value(s, parts, "throttle_reasons")


def finish(path: Path, log: ImportedLog, frame: pl.DataFrame, opts: ParseOptions) -> ImportedLog:
    """Shift by the clock offset, conform to ``TELEMETRY_SCHEMA``, sort, and refuse an empty log."""
    if frame.height == 0:
        raise InputError(path, f"no {log.tool} samples found in this log")
    if frame["time_ns"].null_count() or frame["device"].null_count():
        raise InputError(path, "a sample without a time or GPU index")
    if opts.clock_offset_ns:
        _check_shift(path, frame["time_ns"], opts.clock_offset_ns)
        frame = frame.with_columns(pl.col("time_ns") + opts.clock_offset_ns)
        log.clock_offset_ns = opts.clock_offset_ns
    frame = conform(frame, TELEMETRY_SCHEMA)
    check_times(path, frame)
    back = frame.select((pl.col("time_ns").diff().over("device") < 0).sum()).item()
    if back:
        log.notes.append(
            f"{back} samples are earlier than the sample before them on their GPU (a clock step?): "
            "the samples are sorted by time"
        )
    frame, nulled = check_values(path, frame.sort("device", "time_ns"))
    log.notes.extend(nulled)
    dup = frame.select(pl.struct("device", "time_ns").is_duplicated().sum()).item()
    if dup:
        log.notes.append(f"{dup} samples share a GPU and time with another; the first of each is used")
        frame = frame.unique(subset=["device", "time_ns"], keep="first", maintain_order=True)
    if frame["power_w"].is_null().all():
        log.notes.append("the log has no power values: energy and power cannot be computed from it")
    log.samples = frame
    return log


def _check_shift(path: Path, t: pl.Series, offset_ns: int) -> None:
    """Refuse a clock offset that moves a sample outside Unix-epoch ns of int64."""
    lo, hi = int(t.min()) + offset_ns, int(t.max()) + offset_ns  # type: ignore[arg-type]
    if lo < MIN_TIME_NS or hi > MAX_TIME_NS:
        raise InputError(
            path, f"the clock offset {offset_ns / 1e9:+g} s moves samples outside 1990..2262 (int64 ns)"
        )


def split_prefix_times(path: Path, lines: pl.Series) -> tuple[pl.Series, pl.Series | None]:
    """Lines prefixed by Unix-epoch seconds (moreutils ``ts '%.s'``): (rest of line, times or None)."""
    pattern = r"^(\d{9,11}(?:\.\d+)?)(?:\s+(.*))?$"  # ts prints an empty line as "<time> "
    m = lines.str.extract(pattern, 1)
    nonempty = lines.str.strip_chars() != ""
    if m.filter(nonempty).null_count() == 0 and m.filter(nonempty).len():
        rest = lines.str.extract(pattern, 2).fill_null("")
        return rest, epoch_seconds_ns(path, m.fill_null("0"), "line time prefix")
    return lines, None


def derived_times(
    path: Path,
    opts: ParseOptions,
    log: ImportedLog,
    index: pl.Series,
    default_interval_ms: float | None,
    how: str,
) -> pl.Series:
    """Times of rows that carry none: start + index x interval (``index``: the sample number)."""
    if opts.start is None:
        raise InputError(
            path,
            f"{log.tool} rows carry no time: prefix each line with its Unix time ({how}) "
            "or give the time of the first sample (and the interval)",
        )
    t0 = parse_start(path, opts, log)
    ms = opts.interval_ms if opts.interval_ms is not None else default_interval_ms
    if ms is None:
        raise InputError(
            path, f"{log.tool} rows carry no time and the tool has no fixed interval: give the interval"
        )
    if not (0 < ms <= MAX_INTERVAL_MS):  # also NaN
        raise InputError(
            path, f"the sampling interval must be in (0, {MAX_INTERVAL_MS:g}] ms (a day), not {ms} ms"
        )
    if t0 + index.len() * ms * 1e6 > MAX_TIME_NS:
        raise InputError(
            path, f"{index.len()} samples every {ms:g} ms from the start run past 2262 (int64 ns)"
        )
    log.time_source = f"derived: given start + sample number x {ms:g} ms (the log's rows carry no time)"
    log.notes.append(
        f"sample times are derived (start + n x {ms:g} ms): the tool sleeps the interval between reads, "
        "so the real period is a little longer and late samples drift later than shown"
    )
    return ((index.cast(pl.Float64) * ms * 1e6).round().cast(pl.Int64) + t0).alias("time_ns")


def log_lines(path: Path) -> tuple[pl.Series, pl.Series | None, pl.Series]:
    """The lines of a text log (the last, unterminated one dropped), their Unix-time prefixes
    (:func:`split_prefix_times`; None without), and the lines stripped of white space."""
    lines = pl.Series("l", read_text(path).split("\n")[:-1], dtype=pl.String)
    lines, prefix = split_prefix_times(path, lines)
    return lines, prefix, lines.str.strip_chars()


def one_header(path: Path, stripped: pl.Series, start: str, missing: str, twice: str) -> str:
    """The log's header line (the stripped line starting with ``start``); InputError ``missing``
    without one, ``twice`` with two different ones."""
    heads = stripped.filter(stripped.str.starts_with(start)).unique(maintain_order=True)
    if heads.len() == 0:
        raise InputError(path, missing)
    if heads.len() > 1:
        raise InputError(path, twice)
    return str(heads[0])


def row_times(
    path: Path,
    opts: ParseOptions,
    log: ImportedLog,
    prefix: pl.Series | None,
    is_row: pl.Series,
    device: pl.Series,
    default_interval_ms: float | None,
    how: str,
) -> pl.Series:
    """Times of a log's sample rows (``is_row``: the lines that are rows; ``device``: each row's
    device): the Unix-time prefix of their lines where the log has one (``split_prefix_times``),
    else derived per device from the given start and interval (:func:`derived_times`)."""
    if prefix is not None:
        return prefix.filter(is_row)
    n = pl.DataFrame({"device": device}).select(pl.int_range(pl.len()).over("device")).to_series()
    return derived_times(path, opts, log, n, default_interval_ms, how)


def read_text(path: Path) -> str:
    """The log's text (UTF-8, CRLF tolerated), a last line cut short (the tool was killed while
    writing it) dropped."""
    from charllm_trace.core.files import read_regular

    data = read_regular(path, "a telemetry log")
    if not data.strip():
        raise InputError(path, "telemetry log is empty")
    if b"\0" in data[:4096]:
        raise InputError(path, "not a text log (binary data)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not a UTF-8 text log (byte {exc.start})") from None
    text = text.replace("\r\n", "\n")
    if not text.endswith("\n"):
        cut = text.rfind("\n")
        text = text[: cut + 1] if cut >= 0 else text + "\n"
    return text


def csv_cells(path: Path, text: str, ncols: int, what: str) -> pl.DataFrame:
    """Comma-separated data lines (no header) as a String frame of ``ncols`` columns c0..cN."""
    import io

    if not text.strip():
        return pl.DataFrame(schema={f"c{i}": pl.String for i in range(ncols)})
    try:
        df = pl.read_csv(
            io.BytesIO(text.encode()),
            has_header=False,
            new_columns=[f"c{i}" for i in range(ncols)],
            schema_overrides={f"c{i}": pl.String for i in range(ncols)},
            infer_schema=False,
            quote_char='"',
        )
    except Exception as exc:  # polars' words: ragged lines, bad quoting
        raise InputError(path, f"{what} does not parse as CSV: {' '.join(str(exc).split())[:160]}") from None
    if df.width != ncols:
        raise InputError(path, f"{what}: rows have {df.width} fields, the header {ncols}")
    return df
