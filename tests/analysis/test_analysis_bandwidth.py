"""Bandwidth per collective, on synthetic traces with hand-computed answers."""

from __future__ import annotations

import polars as pl
import pytest

from charllm_trace.analysis.bandwidth import bandwidth, bus_factor, size_bucket_label
from charllm_trace.analysis.hardware import link_peak
from charllm_trace.core.model import ProcessGroup, Run
from tests.helpers.analysis_helpers import cpu, kernel, make_trace

PG4 = ProcessGroup(name="0", desc="default_pg", ranks=(0, 1, 2, 3))


def test_bus_factors_are_nccl_tests():
    assert bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert bus_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert bus_factor("all_to_all", 2) == pytest.approx(0.5)
    for t in ("broadcast", "reduce", "send", "recv"):
        assert bus_factor(t, 8) == 1.0
    assert bus_factor("barrier", 8) is None


def test_size_buckets():
    assert size_bucket_label(1) == "1B-4B"
    assert size_bucket_label(1 << 20) == "1MiB-4MiB"
    assert size_bucket_label((1 << 22) - 1) == "1MiB-4MiB"
    assert size_bucket_label(1 << 22) == "4MiB-16MiB"


def test_link_peak_table():
    assert link_peak("NVIDIA H100 80GB HBM3", False).gbps == 450.0
    assert link_peak("NVIDIA H200", False).gbps == 450.0
    assert link_peak("NVIDIA A100-PG509-200", False).gbps == 300.0
    assert link_peak("NVIDIA H100 80GB HBM3", True).gbps == 50.0  # InfiniBand NDR port
    assert link_peak("NVIDIA H100 80GB HBM3", False, override=123.0).gbps == 123.0
    assert link_peak("Something Else", False).gbps is None


def _rank(rank: int, start: int, dur: int, host: str = "h0"):
    return make_trace(
        [
            kernel(
                1,
                "ncclDevKernel_AllReduce_Sum_f32",
                start,
                dur,
                stream=20,
                coll_type="all_reduce",
                comm_bytes=4_000_000,
                pg_name="0",
                coll_seq=1,
                dtype="Float",
                num_elems=1_000_000,
            ),
            kernel(
                2,
                "ncclDevKernel_AllGather",
                start + 10_000,
                1_000,
                stream=20,
                pg_name="0",
                coll_seq=2,
                num_elems=1000,
                dtype="BFloat16",
            ),
        ],  # fmt: skip
        rank=rank,
        world_size=4,
        device_model="NVIDIA H100 80GB HBM3",
        hostname=host,
        process_groups=(PG4,),
    )


def test_bandwidth_instances_summary_and_matching():
    # 4 ranks; rank 2 arrives last (start 3000) and so waits least (dur 1000)
    starts = {0: 0, 1: 1000, 2: 3000, 3: 2000}
    durs = {0: 4000, 1: 3000, 2: 1000, 3: 2000}
    run = Run(traces={r: _rank(r, starts[r], durs[r]) for r in range(4)})
    res = bandwidth(run)
    c = res.collectives.filter(pl.col("rank") == 0).sort("start_ns")
    ar = c.row(0, named=True)
    assert ar["bytes"] == 4_000_000 and ar["group_size"] == 4
    assert ar["algbw_gbps"] == pytest.approx(4_000_000 / 4000)
    assert ar["busbw_gbps"] == pytest.approx(4_000_000 / 4000 * 1.5)
    assert ar["peak_gbps"] == 450.0
    assert ar["util_pct"] == pytest.approx(100 * 1500 / 450)
    ag = c.row(1, named=True)
    # no comm_bytes: num_elems x dtype size; type from the kernel name
    assert ag["coll_type"] == "all_gather" and ag["bytes"] == 2000
    m = res.matched.filter(pl.col("coll_seq") == 1).row(0, named=True)
    assert m["n_ranks"] == 4 and m["dur_min_ns"] == 1000 and m["dur_max_ns"] == 4000
    assert m["skew_ns"] == 3000 and m["late_rank"] == 2
    assert m["busbw_gbps"] == pytest.approx(4_000_000 * 1.5 / 1000)
    s = res.summary.filter(pl.col("coll_type") == "all_reduce").row(0, named=True)
    assert s["count"] == 4 and s["bytes_total"] == 16_000_000 and s["dur_ns_total"] == 10_000
    assert s["busbw_time_weighted_gbps"] == pytest.approx(16_000_000 * 1.5 / 10_000)
    assert res.peaks["0"].spans_nodes is False


def test_bandwidth_group_spanning_nodes_uses_network_peak():
    run = Run(traces={r: _rank(r, 0, 1000, host=f"h{r // 2}") for r in range(4)})
    res = bandwidth(run)
    assert res.peaks["0"].gbps == 50.0
    assert set(res.collectives["peak_gbps"].to_list()) == {50.0}


def test_bandwidth_cpu_mode_outermost_op():
    tr = make_trace(
        [
            cpu(1, "c10d::allreduce_", 0, 1000, coll_type="all_reduce", comm_bytes=800, pg_name="0"),
            cpu(
                2,
                "record_param_comms",
                10,
                900,
                parent=1,
                coll_type="all_reduce",
                comm_bytes=800,
                pg_name="0",
            ),
        ],
        world_size=2,
        process_groups=(ProcessGroup("0", "default_pg", (0, 1)),),
    )
    c = bandwidth(tr).collectives
    assert c["id"].to_list() == [1]
    assert c["busbw_gbps"].to_list() == [pytest.approx(800 / 1000 * 1.0)]


def test_bandwidth_no_collectives_says_so():
    res = bandwidth(make_trace([kernel(1, "gemm", 0, 10)]))
    assert res.collectives.height == 0 and res.notes == ["no collectives in this trace"]


def test_hosts_from_manifest_decide_spanning():
    traces = {r: _rank(r, 0, 1000, host=None) for r in range(4)}
    one = Run(traces=traces, manifest={"ranks_by_host": {"a": [0, 1, 2, 3]}})
    two = Run(traces=traces, manifest={"ranks_by_host": {"a": [0, 1], "b": [2, 3]}})
    assert bandwidth(one).peaks["0"].gbps == 450.0 and bandwidth(one).peaks["0"].spans_nodes is False
    assert bandwidth(two).peaks["0"].gbps == 50.0


def test_collectives_without_sizes_aggregate_to_unknown_not_zero(tmp_path, monkeypatch) -> None:
    """Issue 13: instances without a size were null, but their aggregate row said bytes 0,
    busbw 0.00, util 0.0, and the table printed the size as 'None'."""
    import json

    from click.testing import CliRunner

    from charllm_trace.cli.app import main
    from tests.bad_inputs import valid

    monkeypatch.setenv("CHARLLM_TRACE_CACHE_DIR", str(tmp_path / "cache"))
    doc = valid.kineto_doc()
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and "nccl" in e["name"]:
            for k in ("In msg nelems", "Out msg nelems", "dtype"):
                e["args"].pop(k)
    p = valid.dump(tmp_path / "rank-0.json", doc)
    r = CliRunner().invoke(main, ["analyze", str(p), "--format", "json"])
    (row,) = json.loads(r.stdout)["frames"]["bandwidth"]
    assert row["count"] == 2 and row["dur_ns_total"] == 4_000_000
    assert row["bytes_total"] is None and row["algbw_time_weighted_gbps"] is None
    assert row["busbw_time_weighted_gbps"] is None and row["util_pct"] is None
    text = CliRunner().invoke(main, ["analyze", "--wide", str(p)]).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("all_reduce"))
    assert "None" not in line and "unknown" in line, line


def test_size_free_collectives_get_their_factor_without_a_group_size() -> None:
    """broadcast's busbw stayed '-' ("group size unknown") though its factor is 1 for any size."""
    from charllm_trace.analysis.bandwidth import bus_factor

    assert bus_factor("broadcast", None) == 1.0 and bus_factor("send", 0) == 1.0
    assert bus_factor("all_reduce", None) is None and bus_factor("all_reduce", 4) == 1.5
    assert bus_factor(None, 8) is None and bus_factor("mystery", 8) is None


def test_stragglers_count_last_arrivals_and_lateness() -> None:
    """Per (group, rank): how often the rank started last and how late it was (issue 11 item 3)."""
    import polars as pl

    from charllm_trace.analysis.stragglers import stragglers

    # two collectives of group "0" on three ranks; rank 2 is last at both, rank 1 once second
    coll = pl.DataFrame(
        {
            "rank": [0, 1, 2, 0, 1, 2],
            "pg_name": ["0"] * 6,
            "dim": ["dp"] * 6,
            "coll_seq": [1, 1, 1, 2, 2, 2],
            "start_ns": [100, 150, 400, 1000, 1000, 1300],
        }
    )
    s = {r["rank"]: r for r in stragglers(coll).iter_rows(named=True)}
    assert s[2]["n_last"] == 2 and s[2]["n_matched"] == 2 and s[2]["last_pct"] == 100.0
    assert s[2]["mean_late_ns"] == (300 + 300) / 2 and s[2]["max_late_ns"] == 300
    assert s[1]["n_last"] == 0 and s[1]["mean_late_ns"] == (50 + 0) / 2 and s[0]["max_late_ns"] == 0
    assert stragglers(coll.filter(pl.col("rank") == 0)).height == 0  # one rank: nothing to compare
