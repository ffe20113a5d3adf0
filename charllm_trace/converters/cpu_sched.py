"""Reading CPU scheduler telemetry (``cpusched-<host>.csv``, written by
``collectors/cpu_sched.py``; docs/collect.md, "CPU scheduler telemetry") into polars frames.

Hostile values are not used silently: rows with a negative counter or time, and rows where a
thread's cumulative counter goes backwards, are dropped, and a note says how many.
"""

from __future__ import annotations

import glob
import os

import polars as pl

from charllm_trace.core.errors import InputError

THREAD_SCHEMA: dict[str, pl.DataType] = {
    "time_ns": pl.Int64, "pid": pl.Int64, "tid": pl.Int64, "comm": pl.String, "state": pl.String,
    "utime_ticks": pl.Int64, "stime_ticks": pl.Int64, "run_ns": pl.Int64, "wait_ns": pl.Int64,
    "slices": pl.Int64, "vol_cs": pl.Int64, "invol_cs": pl.Int64,
}  # fmt: skip
CGROUP_SCHEMA: dict[str, pl.DataType] = {
    "time_ns": pl.Int64, "nr_periods": pl.Int64, "nr_throttled": pl.Int64, "throttled_usec": pl.Int64,
    "quota_us": pl.Int64, "period_us": pl.Int64,
}  # fmt: skip
_COUNTERS = ("utime_ticks", "stime_ticks", "run_ns", "wait_ns", "slices", "vol_cs", "invol_cs")


def _csv(path: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    try:
        with open(path, "rb") as f:
            head = f.readline(4096).rstrip(b"\r\n")
        if head != ",".join(schema).encode():
            first = ",".join(list(schema)[:3])
            raise InputError(
                path, f"not a CPU scheduler telemetry file: its first line is not the header ({first},...)"
            )
        df = pl.read_csv(path, schema=schema, truncate_ragged_lines=True, ignore_errors=True)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(
            path, f"not a CPU scheduler telemetry file: {str(exc).splitlines()[0]:.200}"
        ) from None
    # a last line cut short (a killed sampler) has no tail: a complete row has every one of these
    need = ("state", "utime_ticks", "stime_ticks") if "state" in schema else ("nr_periods",)
    return df.filter(pl.all_horizontal([pl.col(c).is_not_null() for c in ("time_ns", *need)]))


def read_cpu_sched(run_dir: str | os.PathLike[str]) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """The threads' samples and the cgroup's (every host of the run directory), and notes; empty
    frames when the run recorded none."""
    d = os.fspath(run_dir)
    notes: list[str] = []
    threads = [_csv(p, THREAD_SCHEMA) for p in sorted(glob.glob(os.path.join(d, "cpusched-*.csv")))
               if not os.path.basename(p).startswith("cpusched-cgroup-")]  # fmt: skip
    groups = [_csv(p, CGROUP_SCHEMA) for p in sorted(glob.glob(os.path.join(d, "cpusched-cgroup-*.csv")))]
    th = pl.concat(threads) if threads else pl.DataFrame(schema=THREAD_SCHEMA)
    cg = pl.concat(groups) if groups else pl.DataFrame(schema=CGROUP_SCHEMA)
    th, n_bad = _sane(th, ["pid", "tid"], _COUNTERS)
    if n_bad:
        notes.append(
            f"CPU scheduler telemetry: {n_bad} thread samples ignored (negative values or counters going backwards)"
        )
    cg, n_bad = _sane(cg, [], ("nr_periods", "nr_throttled", "throttled_usec"))
    if n_bad:
        notes.append(
            f"CPU scheduler telemetry: {n_bad} cgroup samples ignored (negative values or counters going backwards)"
        )
    return th, cg, notes


def _sane(df: pl.DataFrame, keys: list[str], counters: tuple[str, ...]) -> tuple[pl.DataFrame, int]:
    """Rows with no negative value whose counters never decrease (per ``keys``), sorted by time."""
    neg = pl.any_horizontal([pl.col(c) < 0 for c in ("time_ns", *counters)]).fill_null(False)
    ok = df.filter(~neg).sort([*keys, "time_ns"])

    def backwards(c: str) -> pl.Expr:
        e = pl.col(c) < pl.col(c).cum_max().shift(1)
        return (e.over(keys) if keys else e).fill_null(False)

    back = pl.any_horizontal([backwards(c) for c in counters])
    good = ok.filter(~back)
    return good, df.height - good.height
