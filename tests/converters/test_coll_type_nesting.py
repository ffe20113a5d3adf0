"""A communication node whose own name names a collective keeps that type; the type of the op
that encloses or enqueued it applies only to nodes whose name says nothing (issue 10, item 6).

gloo runs ``reduce_scatter_tensor`` (``c10d::_reduce_scatter_base_``) as a ``gloo:all_reduce`` of
the whole input: that node is an all_reduce of the whole input, not a reduce_scatter. The
bandwidth analysis counts each collective once (the c10d op carries no type).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from charllm_trace.analysis.bandwidth import collectives
from charllm_trace.converters import collectives as C
from charllm_trace.converters.run_dir import convert_pair, convert_run
from tests.helpers.kineto_builder import trace_of, x

RUN = Path(__file__).parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"
RS_ELEMS = 2000  # the fixture's reduce_scatter input: 1000 float32 per rank x 2 ranks


@pytest.fixture(scope="module")
def run():
    return convert_run(RUN, workers=1)


def _gloo_under_reduce_scatter(t) -> pl.DataFrame:
    """Communication nodes launched by a c10d::_reduce_scatter_base_ op."""
    launcher = t.nodes.select(pl.col("id").alias("launch_id"), pl.col("name").alias("launcher"))
    return (
        t.nodes.filter(pl.col("node_type").str.starts_with("COMM"))
        .join(launcher, on="launch_id", how="left")
        .filter(pl.col("launcher") == "c10d::_reduce_scatter_base_")
    )


@pytest.mark.parametrize("rank", [0, 1])
def test_gloo_all_reduce_inside_reduce_scatter_is_an_all_reduce(run, rank: int) -> None:
    t = run.traces[rank]
    inner = _gloo_under_reduce_scatter(t)
    assert inner.height == 2  # one per traced step
    assert inner["name"].to_list() == ["gloo:all_reduce"] * 2
    assert inner["coll_type"].to_list() == ["all_reduce"] * 2  # was reduce_scatter, from its launcher
    assert inner["node_type"].to_list() == ["COMM_COLL"] * 2
    # all_reduce: the buffer reduced, i.e. the reduce_scatter's whole input
    assert inner["num_elems"].to_list() == [RS_ELEMS] * 2
    assert inner["comm_bytes"].to_list() == [RS_ELEMS * 4] * 2
    assert inner["dtype"].to_list() == ["float32"] * 2
    # every gloo op is typed by its own name
    comm = t.nodes.filter(pl.col("name").str.starts_with("gloo:"))
    assert comm["coll_type"].to_list() == [C.coll_type_of(n) for n in comm["name"].to_list()]
    # the c10d ops stay untyped compute nodes: one typed node per collective
    c10d = t.nodes.filter(pl.col("name").str.starts_with("c10d::"))
    assert c10d["coll_type"].null_count() == c10d.height
    assert set(c10d["node_type"].to_list()) == {"COMP"}


def test_kineto_only_conversion_agrees(run) -> None:
    for rank in (0, 1):
        t, _ = convert_pair(None, RUN / f"rank-{rank}.kineto.json.gz")
        inner = _gloo_under_reduce_scatter(t)
        assert inner["coll_type"].to_list() == ["all_reduce"] * 2
        assert inner["comm_bytes"].to_list() == [RS_ELEMS * 4] * 2
        comm = t.nodes.filter(pl.col("node_type").str.starts_with("COMM")).sort("coll_seq")
        want = run.traces[rank].nodes.filter(pl.col("node_type").str.starts_with("COMM")).sort("coll_seq")
        cols = ["name", "coll_type", "comm_bytes", "coll_seq", "pg_name"]
        assert comm.select(cols).rows() == want.select(cols).rows()


@pytest.mark.parametrize("rank", [0, 1])
def test_bandwidth_counts_each_collective_once(run, rank: int) -> None:
    t = run.traces[rank]
    comm = t.nodes.filter(pl.col("node_type").str.starts_with("COMM"))
    inst, _ = collectives(t)
    assert inst.height == comm.height == 12  # 6 collectives x 2 steps, nothing counted twice
    inner = _gloo_under_reduce_scatter(t)
    got = inst.filter(pl.col("start_ns").is_in(inner["start_ns"].implode()))
    assert got["coll_type"].to_list() == ["all_reduce"] * 2
    assert got["bytes"].to_list() == [RS_ELEMS * 4] * 2
    # the all_reduce's bus factor: 2(n-1)/n = 1 for n = 2
    assert got["bus_factor"].to_list() == [1.0, 1.0]


# --- synthetic profiles: the nesting cases one by one ---------------------------------------

T0 = 1_700_000_000_000_000  # µs


def _x(name: str, cat: str, ts: int, dur: int, tid: int = 1, pid: int = 100, **args) -> dict:
    return x(name, cat, ts, dur, pid, tid, t0=T0, **args)


def _convert(tmp_path: Path, events: list[dict]):
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [],
        "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2},
        "traceEvents": [_x("ProfilerStep#1", "user_annotation", 0, 10_000), *events],
    }
    return trace_of(tmp_path / "kineto.json", doc)


RS_ARGS = {
    "Collective name": "_reduce_scatter_base",
    "In msg nelems": RS_ELEMS,
    "Out msg nelems": RS_ELEMS // 2,
    "dtype": "Float",
    "Group size": 2,
    "Process Group Name": "0",
    "Process Group Ranks": "[0, 1]",
}


def _row(trace, name: str) -> dict:
    (row,) = trace.nodes.filter(pl.col("name") == name).rows(named=True)
    return row


def test_inline_gloo_op_keeps_its_type_over_record_param_comms_args(tmp_path: Path) -> None:
    """c10d::_reduce_scatter_base_ > record_param_comms (args: _reduce_scatter_base) > gloo:all_reduce,
    nested on one thread: the gloo op is an all_reduce, sized by the all_reduce rule."""
    t = _convert(
        tmp_path,
        [
            _x("c10d::_reduce_scatter_base_", "cpu_op", 10, 300),
            _x("record_param_comms", "cpu_op", 11, 290, **RS_ARGS),
            _x("gloo:all_reduce", "cpu_op", 20, 250, **{"Input Dims": [[RS_ELEMS]], "Input type": ["float"]}),
        ],
    )
    g = _row(t, "gloo:all_reduce")
    assert (g["coll_type"], g["num_elems"], g["comm_bytes"], g["pg_name"]) == (
        "all_reduce",
        RS_ELEMS,
        RS_ELEMS * 4,
        "0",
    )
    assert _row(t, "record_param_comms")["coll_type"] is None
    assert _row(t, "c10d::_reduce_scatter_base_")["coll_type"] is None
    # CPU bandwidth: the outermost typed op of the nest, once
    inst, _ = collectives(t)
    assert inst["name"].to_list() == ["gloo:all_reduce"]
    assert inst["coll_type"].to_list() == ["all_reduce"] and inst["bytes"].to_list() == [RS_ELEMS * 4]


def test_size_from_the_enqueuing_op_is_its_input(tmp_path: Path) -> None:
    """Without shapes on the gloo op, its all_reduce buffer is the c10d op's input (the second
    argument), not its output."""
    t = _convert(
        tmp_path,
        [
            _x(
                "c10d::_reduce_scatter_base_",
                "cpu_op",
                10,
                300,
                **{
                    "Input Dims": [[RS_ELEMS // 2], [RS_ELEMS], [], []],
                    "Input type": ["float", "float", "", ""],
                },
            ),
            _x("gloo:all_reduce", "cpu_op", 20, 250),
        ],
    )
    g = _row(t, "gloo:all_reduce")
    assert (g["coll_type"], g["num_elems"], g["comm_bytes"], g["dtype"]) == (
        "all_reduce",
        RS_ELEMS,
        RS_ELEMS * 4,
        "float32",
    )


def test_a_node_whose_name_says_nothing_takes_the_enclosing_type(tmp_path: Path) -> None:
    """A GPU kernel named SendRecv, launched inside c10d::alltoall_base_: an all_to_all."""
    t = _convert(
        tmp_path,
        [
            _x("c10d::alltoall_base_", "cpu_op", 400, 100),
            _x(
                "record_param_comms",
                "cpu_op",
                401,
                90,
                **{**RS_ARGS, "Collective name": "all_to_all", "In msg nelems": 1000, "Out msg nelems": 1000},
            ),
            _x("cudaLaunchKernel", "cuda_runtime", 410, 5, correlation=7),
            _x(
                "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                "kernel",
                420,
                50,
                tid=7,
                pid=0,
                correlation=7,
                device=0,
                stream=7,
            ),
        ],
    )
    assert C.coll_type_of("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") is None
    k = t.nodes.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert (k["coll_type"], k["comm_bytes"], k["node_type"]) == ("all_to_all", 4000, "COMM_COLL")
