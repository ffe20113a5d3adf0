"""busbw's group size from the collective's own tensors (issue 13, item 5).

A 16-rank job's all_gathers and reduce_scatters ran on groups of 8 whose ranks the profile does
not record: the bus factor took the world's 16 while ``c10d::_allgather_base_``'s output
[65536, 384] from its input [8192, 384] says 8, and busbw came out 7.1 % too high. The profile is
built here with that shape.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest

from charllm_trace.analysis.bandwidth import bandwidth
from tests.helpers.kineto_builder import trace_of
from tests.helpers.kineto_builder import x as _x

ROWS, COLS = 8192, 384  # one rank's part
BYTES = 8 * ROWS * COLS * 2  # the whole bf16 buffer of a group of 8
DUR_US = 1000


def _collective(t: float, corr: int, c10d: str, kernel: str, dims: list, rpc: dict | None) -> list[dict]:
    ev = [
        _x(
            c10d,
            "cpu_op",
            t,
            100,
            **{"Input Dims": dims, "Input type": ["c10::BFloat16", "c10::BFloat16", "", ""]},
        ),
    ]
    if rpc is not None:
        ev.append(_x("record_param_comms", "cpu_op", t + 5, 90, **rpc))
    ev += [
        _x("cudaLaunchKernel", "cuda_runtime", t + 10, 5, correlation=corr),
        _x(kernel, "kernel", t + 20, DUR_US, pid=0, tid=7, device=0, stream=7, correlation=corr),
    ]
    return ev


def doc(with_rpc: bool) -> dict:
    whole, part = [8 * ROWS, COLS], [ROWS, COLS]

    def rpc(name: str, n_in: int, n_out: int) -> dict | None:
        if not with_rpc:
            return None
        return {"Collective name": name, "In msg nelems": n_in, "Out msg nelems": n_out, "dtype": "BFloat16"}

    ev = [_x("ProfilerStep#1", "user_annotation", 0, 10_000)]
    ev += _collective(
        100,
        1,
        "c10d::_allgather_base_",
        "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        [whole, part, [], []],
        rpc("_allgather_base", ROWS * COLS, 8 * ROWS * COLS),
    )
    ev += _collective(
        3000,
        2,
        "c10d::_reduce_scatter_base_",
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        [part, whole, [], []],
        rpc("_reduce_scatter_base", 8 * ROWS * COLS, ROWS * COLS),
    )
    # an all_reduce: no ratio to take, the world's size stands
    ev += _collective(
        6000,
        3,
        "c10d::allreduce_",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        [[[ROWS, COLS]], [], []],
        rpc("allreduce", ROWS * COLS, ROWS * COLS),
    )
    return {"traceEvents": ev, "distributedInfo": {"rank": 0, "world_size": 16, "backend": "nccl"}}


@pytest.fixture(params=[True, False], ids=["record_param_comms", "c10d_input_dims"])
def trace(request: pytest.FixtureRequest, tmp_path: Path):
    t = trace_of(tmp_path / "rank0.json", doc(request.param))
    return t


def test_converter_records_the_tensors_group_size(trace) -> None:
    comm = trace.nodes.filter(pl.col("node_type").str.starts_with("COMM")).sort("start_ns")
    assert comm["coll_type"].to_list() == ["all_gather", "reduce_scatter", "all_reduce"]
    assert comm["comm_bytes"].to_list() == [BYTES, BYTES, ROWS * COLS * 2]
    attrs = [orjson.loads(a) for a in comm["attrs"].to_list()]
    assert [a.get("tensor_group_size") for a in attrs] == [8, 8, None]


def test_busbw_uses_the_tensors_group_size_with_a_note(trace) -> None:
    bw = bandwidth(trace)
    c = bw.collectives.sort("start_ns")
    assert c["group_size"].to_list() == [8, 8, 16]  # was [16, 16, 16]
    algbw = BYTES / (DUR_US * 1000)
    assert c["busbw_gbps"].to_list()[:2] == pytest.approx([algbw * 7 / 8] * 2, rel=1e-12)
    assert c["busbw_gbps"][2] == pytest.approx(ROWS * COLS * 2 / (DUR_US * 1000) * 2 * 15 / 16, rel=1e-12)
    notes = [n for n in bw.notes if "own tensors" in n]
    assert notes == [
        "1 all_gather collectives: their own tensors imply a group of 8 (the whole buffer's elements "
        "over one rank's part), not the 16 of their process group or world; the bus factor uses 8",
        "1 reduce_scatter collectives: their own tensors imply a group of 8 (the whole buffer's elements "
        "over one rank's part), not the 16 of their process group or world; the bus factor uses 8",
    ]


def test_no_note_when_tensors_and_group_agree(tmp_path: Path) -> None:
    d = doc(True)
    d["distributedInfo"]["world_size"] = 8
    t = trace_of(tmp_path / "rank0.json", d)
    bw = bandwidth(t)
    assert bw.collectives["group_size"].to_list() == [8, 8, 8]
    assert not [n for n in bw.notes if "own tensors" in n]


# --- the link peak of a group larger than a node, hosts unknown (issue 13, item 5) ---------------

A100 = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]


def _pg_doc() -> dict:
    """The profile above on an A100, its all_gather/reduce_scatter in group "1" (ranks not
    recorded), its all_reduce in the world's group "0" (16 ranks)."""
    d = doc(True)
    for e in d["traceEvents"]:
        if e["name"] == "record_param_comms":
            e["args"]["Process Group Name"] = "0" if e["args"]["Collective name"] == "allreduce" else "1"
    d["deviceProperties"] = A100
    d["distributedInfo"]["pg_config"] = [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 16, "ranks": []}
    ]
    return d


def test_link_peak_of_a_group_larger_than_a_node_is_assumed_network(tmp_path: Path) -> None:
    t = trace_of(tmp_path / "rank0.json", _pg_doc())
    bw = bandwidth(t)
    world, sub = bw.peaks["0"], bw.peaks["1"]
    # 16 ranks, hosts unknown: more than a node holds; was NVLink 3 at 300 GB/s
    assert (world.gbps, world.spans_nodes) == (50.0, None)
    assert world.link == (
        "InfiniBand NDR port (assumed: a group of 16 ranks spans nodes of 8 GPUs, the default; the group's hosts unknown)"
    )
    # 8 ranks by its tensors: one node's worth, still an assumption
    assert (sub.gbps, sub.link) == (300.0, "NVLink 3 (assumed single node: hosts unknown)")
    util = dict(bw.collectives.select("coll_type", "util_pct").iter_rows())
    busbw = dict(bw.collectives.select("coll_type", "busbw_gbps").iter_rows())
    assert util["all_reduce"] == pytest.approx(100 * busbw["all_reduce"] / 50.0)


def test_link_peak_with_the_run_s_ranks_per_node(tmp_path: Path) -> None:
    from charllm_trace.core.model import Run

    t = trace_of(tmp_path / "rank0.json", _pg_doc())
    bw = bandwidth(Run(traces={0: t}, manifest={"ranks_per_node": 16}))
    assert (bw.peaks["0"].gbps, bw.peaks["0"].link) == (
        300.0,
        "NVLink 3 (assumed single node: hosts unknown)",
    )
    bw = bandwidth(Run(traces={0: t}, manifest={"ranks_per_node": 4}))
    assert (bw.peaks["1"].gbps, bw.peaks["1"].link) == (
        50.0,
        "InfiniBand NDR port (assumed: a group of 8 ranks spans nodes of 4 GPUs by the run's manifest; "
        "the group's hosts unknown)",
    )
    # the manifest's hosts say where every rank is: the group spans two nodes, no assumption
    by_host = {"a": list(range(8)), "b": list(range(8, 16))}
    bw = bandwidth(Run(traces={0: t}, manifest={"ranks_by_host": by_host}))
    assert (bw.peaks["0"].gbps, bw.peaks["0"].link, bw.peaks["0"].spans_nodes) == (
        50.0,
        "InfiniBand NDR port",
        True,
    )
