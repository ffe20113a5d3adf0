"""Energy intervals from the GPU's cumulative energy counter (``--energy-method counter``).

The power readings are points: NVML's instantaneous field is one reading per sensor update
(~100 ms on an H200), so a load that changes faster than that is aliased, and the integral of
the samples missed the counter by −3.04 % to +0.42 % over three training runs (the H200 fixture's
README). The energy counter accumulates every joule. Where it refreshes about as often as the
power sensor, its own increments are better intervals: interval k runs from the k-th to the
(k+1)-th observed change of the counter and holds exactly the energy the counter added, i.e.
power is the counter's average over each of its update periods. The window is the first to the
last observed change (the value before the first change began accumulating before sampling did),
so Σ E_k is the counter delta over that window and no correction is needed.

An observed change is stamped when the sampler saw it, up to one sampling period after the
counter was updated (3.9 ms of ~100 ms on the H200: the interval edges, not their energies,
carry that error).
"""

from __future__ import annotations

import numpy as np
import polars as pl

#: Fewer observed counter changes than this give no intervals (use the power samples).
MIN_CHANGES = 3


def counter_intervals(samples: pl.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """Interval edges (ns, the observed changes of ``energy_j``) and each interval's energy (J),
    or None when the counter is absent, changes fewer than :data:`MIN_CHANGES` times, or ever
    goes backwards (a reset: the caller says so and uses the power samples)."""
    c = samples.filter(pl.col("energy_j").is_not_null()).select("time_ns", "energy_j")
    if c.height < 2:
        return None
    t = c["time_ns"].to_numpy().astype(np.int64)
    e = c["energy_j"].to_numpy().astype(np.float64)
    if np.any(np.diff(e) < 0):
        return None
    chg = np.flatnonzero(np.diff(e) != 0) + 1  # the first sample showing each new value
    if chg.size < MIN_CHANGES:
        return None
    return t[chg], np.diff(e[chg])


def update_period_ns(edges: np.ndarray) -> int:
    """The counter's update period as observed: the median time between its changes."""
    return int(np.median(np.diff(edges))) if edges.size > 1 else 0
