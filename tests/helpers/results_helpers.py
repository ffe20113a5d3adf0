"""Helpers of the saved-results tests: a run with telemetry (so energy, power, throttling and the
report's device charts exist), and a field-by-field comparison of two analyses."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.core.model import Run, Trace
from charllm_trace.store.results import RESULT_TYPES


def with_telemetry(run: Run) -> Run:
    """``run`` with a 100 Hz power/temperature/clock stream over each rank's span, throttled
    (power cap bit) in a few samples."""
    traces = {}
    for r, tr in run.traces.items():
        s0 = int(tr.nodes["start_ns"].min())
        s1 = int((tr.nodes["start_ns"] + tr.nodes["dur_ns"]).max())
        t = np.arange(s0 - 5_000_000, s1 + 10_000_000, 10_000_000, dtype=np.int64)
        i = np.arange(t.size)
        cols = {
            "time_ns": t,
            "device": np.full(t.size, tr.meta.device_index or 0),
            "power_w": 250 + 100 * np.sin(i / 3.0),
            "temp_c": 60 + i / 7.0,
            "sm_clock_mhz": 1400 - 10.0 * (i % 5),
            "power_limit_w": np.full(t.size, 300.0),
            "throttle_reasons": np.where(i % 4 == 1, 0x0004, 0),
        }
        tel = pl.DataFrame(cols).select(
            [
                pl.col(c).cast(d) if c in cols else pl.lit(None, d).alias(c)
                for c, d in tr.telemetry.schema.items()
            ]
        )
        traces[r] = Trace(nodes=tr.nodes, deps=tr.deps, telemetry=tel, meta=tr.meta)
    return Run(traces, manifest=run.manifest, source=run.source)


def differences(a: RunAnalysis, b: RunAnalysis) -> list[str]:
    """Where two analyses differ: every frame (schema and values, nulls and NaNs equal) and
    every scalar of every result, and the run's own fields. Empty when they are equal."""
    out: list[str] = []

    def same(x: Any, y: Any, where: str) -> None:
        if isinstance(x, pl.DataFrame) or isinstance(y, pl.DataFrame):
            if not (isinstance(x, pl.DataFrame) and isinstance(y, pl.DataFrame)):
                out.append(f"{where}: frame vs {type(y).__name__}")
            elif x.schema != y.schema:
                out.append(f"{where}: schema {x.schema} != {y.schema}")
            elif not x.equals(y):
                out.append(f"{where}: values differ")
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            if type(x) is not type(y):
                out.append(f"{where}: {type(x).__name__} != {type(y).__name__}")
                return
            for f in dataclasses.fields(x):
                same(getattr(x, f.name), getattr(y, f.name), f"{where}.{f.name}")
        elif isinstance(x, dict) and isinstance(y, dict):
            if list(x) != list(y):
                out.append(f"{where}: keys {list(x)} != {list(y)}")
                return
            for k in x:
                same(x[k], y[k], f"{where}[{k!r}]")
        elif type(x) is not type(y) and not (isinstance(x, float) and isinstance(y, float)):
            out.append(f"{where}: {type(x).__name__} {x!r} != {type(y).__name__} {y!r}")
        elif isinstance(x, float) and x != x:
            if y == y:
                out.append(f"{where}: NaN != {y!r}")
        elif x != y:
            out.append(f"{where}: {x!r} != {y!r}")

    for f in dataclasses.fields(RunAnalysis):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "options":
            for g in dataclasses.fields(x):
                gx, gy = getattr(x, g.name), getattr(y, g.name)
                same(
                    dict(gx) if hasattr(gx, "items") else gx, dict(gy) if hasattr(gy, "items") else gy, g.name
                )
            continue
        if f.name in RESULT_TYPES and (x is None) != (y is None):
            out.append(f"{f.name}: {x is None} vs {y is None}")
            continue
        same(x, y, f.name)
    return out


def n_frames(res: RunAnalysis) -> int:
    """Frames held by the analysis' results (segments and all)."""
    return sum(
        isinstance(getattr(r, f.name), pl.DataFrame)
        for name in RESULT_TYPES
        if (r := getattr(res, name)) is not None
        for f in dataclasses.fields(r)
    )


def analyze_json_without_source(path: Any) -> dict[str, Any]:
    """``analyze PATH --format json`` run in this process, as a dict without its ``source`` (the
    one field that names the input): what sanitize's tests compare before and after."""
    import json

    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    r = CliRunner().invoke(main, ["analyze", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    doc.pop("source")
    return doc
