"""Find the part of a Kineto profile that a host execution trace covers.

A host ET is often recorded over one iteration while the Kineto profile beside it covers many
(a host ET of 928 ops beside a profile of 40 iterations, 37,078 CPU ops). Matching the k-th host
op named N to the k-th Kineto op named N from the start of the profile then pairs the host's
iteration with the profile's first, and the link fails (81 % parent agreement) or, worse, holds
for the wrong iteration. Here the candidate windows are runs of consecutive ``ProfilerStep``
ranges of the profile, as many steps as the host ET's op count suggests (±1); the host ET is
matched by name and order (``link._by_name_order``) inside each, and the window that links the
most host ops with parent agreement wins. Kineto ops outside the window are kept as Kineto-only
nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

#: try windows when the host ET has fewer ops than this share of the profile's CPU ops
WINDOW_SHARE = 0.75

Matcher = Callable[[pl.DataFrame], tuple[pl.DataFrame, dict[str, Any]]]


def profile_steps(ev: pl.DataFrame) -> pl.DataFrame:
    """The profile's ``ProfilerStep#N`` ranges: step, start_ns, end_ns (sorted)."""
    st = ev.filter(~pl.col("on_gpu") & pl.col("name").str.contains(r"^ProfilerStep#\d+$"))
    return (
        st.select(
            pl.col("name").str.extract(r"#(\d+)$").cast(pl.Int64).alias("step"),
            "start_ns",
            (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        )
        .unique("step", keep="first")
        .sort("start_ns")
    )


def _windows(steps: pl.DataFrame, kin: pl.DataFrame, n_host: int) -> list[tuple[str, int, int]]:
    """Candidate windows: (name, start_ns, end_ns)."""
    s0, s1, num = steps["start_ns"].to_list(), steps["end_ns"].to_list(), steps["step"].to_list()
    inside = kin.filter(pl.col("start_ns").is_between(s0[0], s1[-1], closed="left")).height
    k0 = max(1, round(n_host / max(inside / len(num), 1.0)))
    out = []
    for k in sorted({k for k in (k0 - 1, k0, k0 + 1) if 1 <= k <= len(num)}):
        for i in range(len(num) - k + 1):
            name = f"ProfilerStep#{num[i]}" if k == 1 else f"ProfilerStep#{num[i]}..#{num[i + k - 1]}"
            out.append((f"{name} ({k} of the profile's {len(num)} steps)", s0[i], s1[i + k - 1]))
    return out


def best_window(
    kin: pl.DataFrame, ev: pl.DataFrame, n_host: int, match: Matcher
) -> tuple[pl.DataFrame, dict[str, Any], float] | None:
    """The pairs, stats (naming the window: ``kineto_window``) and matched share of the window
    that links the host ET best; None when the profile has fewer than two steps or the host ET
    is not smaller than it (no window to look for)."""
    steps = profile_steps(ev)
    if steps.height < 2 or n_host == 0 or n_host >= WINDOW_SHARE * kin.height:
        return None
    best: tuple[float, float, Any] | None = None
    for name, t0, t1 in _windows(steps, kin, n_host):
        pairs, st = match(kin.filter(pl.col("start_ns").is_between(t0, t1, closed="left")))
        score = (pairs.height / n_host, st.get("parent_agreement", 0.0))
        if best is None or score > best[:2]:
            best = (*score, (pairs, {**st, "kineto_window": name}))
    if best is None:
        return None
    return best[2][0], best[2][1], best[0]


def no_window_reason(n_host: int, n_kin: int, frac: float, agree: float, need: tuple[float, float]) -> str:
    """One line: the host ET matched neither the whole profile nor any window of it."""
    return (
        f"the host ET ({n_host:,} ops) matches no window of the Kineto profile ({n_kin:,} CPU ops) "
        f"nor the whole of it: without record-function ids, matching by name and order found at best "
        f"{frac:.0%} of host ops with {agree:.0%} parent agreement (need {need[0]:.0%} and {need[1]:.0%})"
    )
