"""Unknown collective types stay unknown (issue 13, item 5).

``ncclKernel_SendRecv`` / ``ncclDevKernel_SendRecv`` kernels carry every point-to-point pattern
NCCL runs (all_to_all, and the send/recv parts of other collectives): in the profile that showed
it, every such kernel with a launcher was an all_to_all, all_reduce, all_gather or reduce_scatter,
yet those without one were called ``send``. Their type is null (printed ``unknown``) unless the
launcher says; no table prints ``None``.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from rich.console import Console

from charllm_trace.analysis import analyze_run
from charllm_trace.analysis.bandwidth import bandwidth
from charllm_trace.core.model import Run
from charllm_trace.et.summary import run_summary
from charllm_trace.render.info import render_info
from charllm_trace.render.tables import render_analysis
from tests.helpers.kineto_builder import trace_of
from tests.helpers.kineto_builder import x as _x

SENDRECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
OLD_SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"


def _k(name: str, ts: float, corr: int) -> dict:
    return _x(name, "kernel", ts, 100, pid=0, tid=7, device=0, stream=7, correlation=corr)


@pytest.fixture
def trace(tmp_path: Path):
    ev = [
        _x("ProfilerStep#1", "user_annotation", 0, 5000),
        # launched under c10d::alltoall_base_: an all_to_all
        _x("c10d::alltoall_base_", "cpu_op", 100, 50),
        _x("cudaLaunchKernel", "cuda_runtime", 110, 5, correlation=1),
        _k(SENDRECV, 200, 1),
        # a matmul so that the trace is in GPU mode with compute to overlap
        _x("aten::mm", "cpu_op", 400, 20),
        _x("cudaLaunchKernel", "cuda_runtime", 405, 5, correlation=2),
        _k("ampere_sgemm_128x64_nn", 450, 2),
        # no launcher in the profile (its runtime call fell outside the trace)
        _k(SENDRECV, 1000, 99),
        _k(OLD_SENDRECV, 2000, 98),
    ]
    return trace_of(
        tmp_path / "rank0.json", {"traceEvents": ev, "distributedInfo": {"rank": 0, "world_size": 2}}
    )


def test_sendrecv_without_a_launcher_has_no_type(trace) -> None:
    comm = trace.nodes.filter(pl.col("node_type").str.starts_with("COMM")).sort("start_ns")
    assert comm["coll_type"].to_list() == ["all_to_all", None, None]
    c = bandwidth(trace).collectives.sort("start_ns")
    assert c["coll_type"].to_list() == ["all_to_all", None, None]  # was ["all_to_all", "send", "send"]
    assert c["busbw_gbps"].to_list()[1:] == [None, None]  # no type: no bus factor, not a guess
    s = bandwidth(trace).summary
    assert s.filter(pl.col("coll_type").is_null())["count"].to_list() == [2]


def _text(render: Any, *args: Any) -> str:
    buf = io.StringIO()
    render(*args, Console(file=buf, width=250, force_terminal=False))
    return buf.getvalue()


def test_tables_print_unknown_not_none_or_send(trace) -> None:
    summary = run_summary(Run.single(trace))
    assert [(c["coll_type"], c["count"]) for c in summary["collectives"]] == [("all_to_all", 1), (None, 2)]
    info = _text(render_info, summary)
    assert "None" not in info and "send" not in info and "type not recorded" not in info
    assert re.search(r"^unknown\s+2\s", info, re.M)
    out = _text(render_analysis, analyze_run(Run.single(trace)))
    assert "None" not in out
    assert " send " not in out


def test_energy_by_collective_type_keeps_an_unknown_type() -> None:
    """A communication kernel of unknown type is in the energy-by-collective-type table as
    ``(unknown)``, not left out (its energy was in no row of that table)."""
    from charllm_trace.analysis.energy import energy
    from tests.helpers.analysis_helpers import T0 as H0
    from tests.helpers.analysis_helpers import cpu, kernel, make_trace

    s = 1_000_000_000
    rows = [
        cpu(1, "aten::mm", 0, 10),
        kernel(10, "gemm", 0, s // 2, stream=7, launch_id=1),
        kernel(11, SENDRECV, 3 * s // 2, s // 2, stream=20),  # no coll_type, no launcher
        kernel(12, "ncclDevKernel_AllReduce", 3 * s // 2, s // 2, stream=21, coll_type="all_reduce"),
    ]
    tel = {"time_ns": [H0, H0 + s, H0 + 2 * s], "device": [0] * 3, "power_w": [100.0, 200.0, 100.0]}
    r = energy(make_trace(rows, telemetry=tel))
    ct = {row["key"]: row["energy_j"] for row in r.group("coll_type").iter_rows(named=True)}
    # [1.5 s, 2 s): 75 J shared by the two communication kernels
    assert ct == {"all_reduce": pytest.approx(37.5), "(unknown)": pytest.approx(37.5)}
