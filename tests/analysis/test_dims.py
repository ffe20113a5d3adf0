"""Every headline figure by parallel dimension (analysis/dims.py) on hand-built runs whose answer is
known, the partition check (where the dimensions partition the communication, their rows add up
to the run's), the message-size histogram (counts = the collectives; the chunking note) and the
4-rank pipeline fixture (the pp row's bubbles and waiting are the pipeline view's and the
waiting/transfer split's)."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from charllm_trace.analysis.api import analyze_run
from charllm_trace.analysis.dims import ALL, NO_DIMS
from charllm_trace.analysis.results import AnalyzeOptions, RunAnalysis
from charllm_trace.core.model import ProcessGroup, Run
from charllm_trace.inputs.loader import load
from charllm_trace.render.export import to_document
from tests.conftest import FIXTURES, invoke
from tests.helpers.analysis_helpers import kernel, make_trace

MS = 1_000_000
OPTS = AnalyzeOptions(critical_path=False)
TP = ProcessGroup(name="5", desc="tp", ranks=(0, 1))
DP = ProcessGroup(name="7", desc="dp", ranks=(0, 1))
ADDITIVE = ("comm_ns", "overlap_ns", "exposed_comm_ns", "n_ops", "bytes_total", "n_matched", "wait_ns",
            "transfer_ns")  # fmt: skip


def coll(id: int, pg: str, seq: int, start: int, dur: int, nbytes: int = 8 * MS) -> dict[str, Any]:
    return kernel(id, "nccl:all_reduce", start, dur, coll_type="all_reduce", node_type="COMM_COLL",
                  pg_name=pg, coll_seq=seq, comm_bytes=nbytes)  # fmt: skip


def run_of(rows: dict[int, list[dict[str, Any]]]) -> Run:
    return Run(
        traces={r: make_trace(x, rank=r, world_size=2, process_groups=(TP, DP)) for r, x in rows.items()}
    )


def dims_of(res: RunAnalysis) -> dict[str | None, dict[str, Any]]:
    assert res.dims is not None, res.skipped
    return {r["dim"]: r for r in res.dims.dims.iter_rows(named=True)}


@pytest.fixture(scope="module")
def partitioned() -> RunAnalysis:
    # tp all-reduce at 0-10 ms (rank 1 arrives at 4 ms), dp all-reduce at 20-30 ms, a GEMM at 5-25 ms
    gemm = {r: kernel(9, "gemm", 5 * MS, 20 * MS) for r in (0, 1)}
    return analyze_run(
        run_of({
            0: [coll(1, "5", 0, 0, 10 * MS), coll(2, "7", 0, 20 * MS, 10 * MS), gemm[0]],
            1: [coll(1, "5", 0, 4 * MS, 6 * MS), coll(2, "7", 0, 20 * MS, 10 * MS), gemm[1]],
        }),
        OPTS,
    )  # fmt: skip


def test_figures_by_dimension_are_the_hand_computed_ones(partitioned: RunAnalysis) -> None:
    d = dims_of(partitioned)
    assert list(d) == [ALL, "tp", "dp"]
    tp, dp = d["tp"], d["dp"]
    # rank 0: tp [0,10) against compute [5,25): 5 ms overlapped; rank 1: tp [4,10): 6 ms, 5 overlapped
    assert (tp["comm_ns"], tp["overlap_ns"], tp["exposed_comm_ns"]) == (16 * MS, 10 * MS, 6 * MS)
    assert tp["overlap_pct"] == pytest.approx(62.5)
    assert (dp["comm_ns"], dp["overlap_ns"], dp["exposed_comm_ns"]) == (20 * MS, 10 * MS, 10 * MS)
    # busbw (all-reduce of 2: factor 1): 8 MB over 10 ms and over 6 ms, time-weighted: 16 MB / 16 ms
    assert tp["n_ops"] == 2 and tp["bytes_total"] == 16 * MS
    assert tp["busbw_gbps"] == pytest.approx(1.0)
    assert dp["busbw_gbps"] == pytest.approx(0.8)
    # rank 0 waits 4 ms for rank 1 at the tp all-reduce; both transfer 6 ms
    assert (tp["n_matched"], tp["wait_ns"], tp["transfer_ns"]) == (2, 4 * MS, 12 * MS)
    assert tp["wait_pct"] == pytest.approx(25.0)
    assert tp["transfer_busbw_gbps"] == pytest.approx(16e6 / 12e6)
    assert (dp["wait_ns"], dp["transfer_ns"]) == (0, 20 * MS)
    assert tp["bubble_ns"] is None and d[ALL]["bubble_ns"] is None  # no pipeline


def test_dimensions_that_partition_the_communication_add_up_to_the_run(partitioned: RunAnalysis) -> None:
    d = dims_of(partitioned)
    for col in ADDITIVE:
        assert d["tp"][col] + d["dp"][col] == d[ALL][col], col
    # the ratio figures of the run are those of the summed parts
    assert d[ALL]["busbw_gbps"] == pytest.approx((16e6 + 16e6) / 36e6)
    assert d[ALL]["wait_pct"] == pytest.approx(100 * 4 / 36)
    assert partitioned.dims is not None and not partitioned.dims.notes


SMALL, BIG = 256 << 10, 4 << 20


def chunked_run() -> Run:
    # dp: 20 messages of 256 KiB at 1 ms each (0.26 GB/s) carry 5 of its 9 MiB; one of 4 MiB in 0.5 ms
    rows = [coll(i, "7", i, i * 2 * MS, MS, SMALL) for i in range(20)]
    rows.append(coll(20, "7", 20, 50 * MS, MS // 2, BIG))
    rows.append(coll(21, "5", 0, 60 * MS, MS, BIG))
    return run_of({0: rows, 1: rows})


CHUNK_OPTS = AnalyzeOptions(critical_path=False, peak_gbps=100.0)


def test_histogram_counts_are_the_collectives_and_chunking_is_noted() -> None:
    small, big = SMALL, BIG
    res = analyze_run(chunked_run(), CHUNK_OPTS)
    assert res.dims is not None and res.bandwidth is not None
    h = res.dims.sizes
    assert h["count"].sum() == res.bandwidth.collectives.height == 44
    dp = h.filter(pl.col("dim") == "dp")
    assert dp["size_bucket"].to_list() == ["256KiB-1MiB", "4MiB-16MiB"]
    assert dp["count"].to_list() == [40, 2]
    assert dp["bytes_pct"].to_list() == pytest.approx(
        [100 * 20 * small / (20 * small + big)] * 1 + [100 * big / (20 * small + big)]
    )
    assert dp["busbw_gbps"].to_list() == pytest.approx([small / MS, big / (MS / 2)])
    assert dp["peak_gbps"].to_list() == [100.0, 100.0]
    assert dp["util_pct"].to_list() == pytest.approx([100 * small / MS / 100, 100 * big / (MS / 2) / 100])
    notes = res.dims.notes
    assert len(notes) == 1 and notes[0].startswith("dp: 40 messages under 4MiB carry 55.6 % of its")
    assert "at 0.262 GB/s" in notes[0] and "reach 8.39 GB/s (link peak 100 GB/s)" in notes[0]
    # the one tp message: nothing smaller, no note


def test_a_run_without_dimensions_says_so() -> None:
    g = ProcessGroup(name="0", desc="default_pg", ranks=(0, 1))
    run = Run(
        traces={
            r: make_trace([coll(1, "0", 0, 0, MS)], rank=r, world_size=2, process_groups=(g,)) for r in (0, 1)
        }
    )
    res = analyze_run(run, OPTS)
    assert res.dims is None and res.skipped["dims"] == NO_DIMS
    doc = to_document(res)
    assert doc["frames"]["dims"] == [] and doc["frames"]["dim_msg_sizes"] == []


@pytest.fixture(scope="module")
def pp2dp2() -> RunAnalysis:
    return analyze_run(load(FIXTURES / "cpu-4rank-pp2-dp2"), OPTS)


def test_pipeline_fixture_pp_row_is_the_pipeline_and_wait_views(pp2dp2: RunAnalysis) -> None:
    d = dims_of(pp2dp2)
    assert pp2dp2.pipeline is not None and pp2dp2.comm_wait is not None and pp2dp2.bandwidth is not None
    st = pp2dp2.pipeline.stages
    assert d["pp"]["bubble_ns"] == st["bubble_ns"].sum() and d["pp"]["window_ns"] == st["window_ns"].sum()
    assert d["pp"]["bubble_pct"] == pytest.approx(100 * st["bubble_ns"].sum() / st["window_ns"].sum())
    pp = pp2dp2.comm_wait.by_dim.filter(pl.col("dim") == "pp")
    assert d["pp"]["wait_ns"] == pp["wait_ns"].sum() and d["pp"]["transfer_ns"] == pp["transfer_ns"].sum()
    assert d["pp"]["n_matched"] == 64
    # gloo records no process group: its all-reduces and the bandwidth analysis' sends are unnamed
    assert d[None]["n_ops"] == pp2dp2.bandwidth.collectives.height
    assert pp2dp2.dims is not None
    assert pp2dp2.dims.sizes["count"].sum() == pp2dp2.bandwidth.collectives.height


def test_analyze_prints_the_dimension_table() -> None:
    out = invoke("analyze", str(FIXTURES / "cpu-4rank-pp2-dp2"), "--no-critical-path", "--no-cache")
    assert out.exit_code == 0, out.output
    assert "By parallel dimension" in out.output and "Messages by size, per dimension" in out.output


def test_report_has_the_dimension_table_and_the_bandwidth_by_size_charts() -> None:
    from charllm_trace.render.report import render_report, report_data

    run = chunked_run()
    page = render_report(report_data(run, analyze_run(run, CHUNK_OPTS)))
    assert 'id="dims"' in page and "transfer-only busbw GB/s" in page
    assert "Bus bandwidth by message size: dp" in page and "Bus bandwidth by message size: tp" in page
    assert "link peak (GB/s)" in page and "dp: 40 messages under 4MiB" in page


def test_compare_columns_are_the_dims_rows(pp2dp2: RunAnalysis) -> None:
    from charllm_trace.regress.sweep import run_row

    row, d = run_row(pp2dp2), dims_of(pp2dp2)
    assert row["bubble_pp_pct"] == d["pp"]["bubble_pct"] and row["wait_pp_pct"] == d["pp"]["wait_pct"]
    assert row["xfer_busbw_pp_gbps"] == d["pp"]["transfer_busbw_gbps"]
    assert row["exposed_pp_ms"] is None and row["exposed_dp_ms"] is None  # gloo: no group, no overlap row
