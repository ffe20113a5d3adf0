"""The terminal table of ``charllm-trace cpu-wait`` (formatting only: the figures come from
:func:`charllm_trace.analysis.cpu_wait.cpu_wait`). Fits 80 columns."""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console

from charllm_trace.render.table_style import dim_line, plain_table


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v / 1e6:.1f}"


def render_cpu_wait(df: pl.DataFrame, notes: list[str], console: Console) -> None:
    t = plain_table(
        "The launching thread per step (ms): is the CPU starving the GPU?",
        [("rank", "right"), ("step", "right"), ("tid", "right"), ("window", "right"), ("run", "right"),
         ("wait", "right"), ("other", "right"), ("wait%", "right"), ("GPU idle", "right"),
         ("wait in idle", "right"), ("throttled", "right")],
    )  # fmt: skip
    for r in df.iter_rows(named=True):
        t.add_row(str(r["rank"]), str(r["step"]), str(r["tid"]), _ms(r["window_ns"]), _ms(r["run_ns"]),
                  _ms(r["wait_ns"]), _ms(r["other_ns"]), f"{r['wait_pct']:.1f}", _ms(r["gpu_idle_ns"]),
                  _ms(r["idle_wait_ns"]), _ms(r["throttled_ns"]))  # fmt: skip
    console.print(t)
    dim_line(
        console,
        "  run = on a CPU; wait = runnable, waiting for a core; other = sleeping or blocked "
        "(docs/analyses.md, section 16)",
    )
    for n in notes:
        dim_line(console, f"  note: {n}")
