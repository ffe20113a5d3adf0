"""CPU runs export their host gaps as GPU runs do (issue 27 item 9): the time no exported op
covers becomes ``charllm.host_gap`` compute on the host lane, so ASTRA-sim does not simulate it
away. The gap total is checked against an independent interval merge."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import charllm_trace as ct
from charllm_trace.exports.astra_sim import plan_run
from charllm_trace.exports.astra_sim_plan import HOST_LANE, host_gaps

MS = 1_000_000


def _uncovered(intervals: list[tuple[int, int]]) -> int:
    """Time between the first start and the last end that no interval covers (gaps >= 1 µs)."""
    out, end = 0, None
    for s, e in sorted(intervals):
        if end is not None and s - end >= 1000:
            out += s - end
        end = e if end is None else max(end, e)
    return out


def test_cpu_host_gaps_by_hand() -> None:
    sel = pl.DataFrame(
        {"start_ns": [0, 2 * MS, 15 * MS], "end_ns": [10 * MS, 4 * MS, 20 * MS], "on_gpu": [False] * 3}
    )
    g = host_gaps(sel, 100, "cpu")
    assert g.select("id", "start_ns", "end_ns", "lane").rows() == [(100, 10 * MS, 15 * MS, HOST_LANE)]
    assert host_gaps(sel, 100, "gpu").height == 0  # a GPU run's gaps are the GPU's (none here)


def test_gloo_run_exports_its_host_gaps(gloo_ets: Path) -> None:
    run = ct.load(gloo_ets)
    with_gaps, _, _ = plan_run(run)
    without, _, _ = plan_run(run, host_gaps=False)
    for r, p in with_gaps.items():
        assert p.mode == "cpu"
        n = p.nodes
        gaps = n.filter(pl.col("name") == "charllm.host_gap")
        rest = without[r].nodes.filter(pl.col("name") != "charllm.start_offset")
        want = _uncovered(list(zip(rest["start_ns"].to_list(), rest["end_ns"].to_list(), strict=True)))
        assert want > 0 and int(gaps["dur_ns"].sum()) == want
        assert n.height == without[r].nodes.height + gaps.height
        assert (gaps["lane"] == HOST_LANE).all() and (gaps["x_dur"] == gaps["dur_ns"]).all()
