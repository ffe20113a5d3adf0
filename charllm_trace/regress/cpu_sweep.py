"""The CPU-allocation columns of ``compare`` (issue 24 item 5): a run's CPU wait figures, reduced
from its per-rank, per-step CPU-wait rows (``analysis.cpu_wait.CPU_WAIT_SCHEMA``). Pure.

Per step the mean over ranks, then the mean over steps (as exposed communication per step):

- **CPU wait ms/step**: the launching thread's time runnable but waiting for a core;
- **GPU idle ms/step**: the step's time with no GPU activity (null for a trace without GPU work);
- **wait in idle ms/step**: the launching thread's wait inside that GPU idle time;
- **iteration ms**: per iteration the slowest rank's window of the ``--step-marker`` range the run
  was collected with, the mean over iterations (null for a run without a marker).
"""

from __future__ import annotations

from typing import Any

import polars as pl

#: (row key, CPU_WAIT_SCHEMA column) of the per-step means
_MEANS = (("cpu_wait_ms", "wait_ns"), ("gpu_idle_ms", "gpu_idle_ns"), ("idle_wait_ms", "idle_wait_ns"))
CPU_KEYS = ("iter_ms", *(k for k, _ in _MEANS))


def cpu_figures(rows: pl.DataFrame, by_marker: bool) -> dict[str, Any]:
    """The run's CPU columns (module docstring) from its CPU-wait rows; nulls where unknown."""
    out: dict[str, Any] = dict.fromkeys(CPU_KEYS)
    steps = rows.filter(pl.col("step").is_not_null())
    if steps.height == 0:
        return out
    per = steps.group_by("step").agg(
        pl.col("window_ns").max().alias("_win"), *(pl.col(c).mean().alias(k) for k, c in _MEANS)
    )
    for k, _ in _MEANS:
        v = per[k].mean()
        out[k] = None if v is None else float(v) / 1e6  # type: ignore[arg-type]
    if by_marker:
        out["iter_ms"] = float(per["_win"].mean()) / 1e6  # type: ignore[arg-type]
    return out
