"""Execution dependencies (``graph.execution_deps`` / ``run_execution_deps``), the point graph
behind them, ``to_networkx`` and the ``self_ns`` column, on small hand-built traces.

Each edge kind of ``model.EXEC_DEP_KINDS`` has a trace here whose answer is written out by hand.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from charllm_trace.core.model import EXEC_DEP_KINDS, EXEC_DEP_SCHEMA, Run, Trace
from charllm_trace.graph import execution_deps, run_execution_deps, to_networkx
from charllm_trace.graph import points as P
from tests.helpers.graph_traces import N, coll_rank, edge_set, mk_trace

# ---------------------------------------------------------------------------
# builders (also used by tests/graph/test_graph_critical.py and tests/graph/test_graph_whatif.py)
# ---------------------------------------------------------------------------


def step_trace() -> Trace:
    """One step on one thread:

    ProfilerStep#1 [0, 100]
      aten::mm [10, 50]
        cudaLaunchKernel [20, 30]  (correlation 7) -> gemm_kernel [35, 90] on stream 7
      aten::add [60, 80]
      cudaStreamSynchronize [85, 95]  (waits for gemm_kernel, which ends at 90)
    """
    return mk_trace(
        [
            N(1, "ProfilerStep#1", "annotation", 0, 100),
            N(2, "aten::mm", "cpu_op", 10, 40, parent=1),
            N(3, "cudaLaunchKernel", "runtime", 20, 10, parent=2, corr=7),
            N(4, "aten::add", "cpu_op", 60, 20, parent=1),
            N(5, "cudaStreamSynchronize", "runtime", 85, 10, parent=1),
            N(6, "gemm_kernel", "kernel", 35, 55, gpu=True, stream=7, corr=7),
        ]
    )


# ---------------------------------------------------------------------------
# each edge kind
# ---------------------------------------------------------------------------


def test_schema_and_kinds():
    df = execution_deps(step_trace())
    assert df.schema == pl.Schema(EXEC_DEP_SCHEMA)
    assert set(df["kind"].cast(pl.String).to_list()) <= set(EXEC_DEP_KINDS)
    assert df["dep_rank"].null_count() == df.height  # one rank: no collective edges


def test_nesting_thread_order_launch_sync_known_answer():
    got = edge_set(execution_deps(step_trace()))
    assert got == {
        (2, 1, "nesting", False, False, None),  # mm starts after the step starts
        (3, 2, "nesting", False, False, None),  # the launch call starts after mm starts
        (2, 3, "nesting", True, True, None),  # mm ends after the launch call ends
        (4, 2, "thread_order", True, False, None),  # siblings: add starts after mm ends
        (5, 4, "thread_order", True, False, None),
        (1, 5, "nesting", True, True, None),  # the step ends after its last child ends
        (6, 3, "launch", False, False, None),  # kernel starts after its launch call starts
        (5, 6, "sync", True, True, None),  # the synchronize call ends after the kernel ends
    }


def test_lane_is_the_euler_tour_of_the_call_tree():
    g = to_networkx(step_trace())
    lane_kinds = {"span", "nesting", "thread_order"}
    cpu = nxx_lane_chain(g, lane_kinds, start=(1, "start"))
    assert cpu == [
        (1, "start"),
        (2, "start"),
        (3, "start"),
        (3, "end"),
        (2, "end"),
        (4, "start"),
        (4, "end"),
        (5, "start"),
        (5, "end"),
        (1, "end"),
    ]
    # measured times come with the points; each lane edge's lag is the measured gap, except the
    # synchronize call's own span: 5 of its 10 ns were waiting for the kernel (the sync edge's)
    for u, v, d in g.edges(data=True):
        assert g.nodes[v]["time_ns"] >= g.nodes[u]["time_ns"] + d["lag_ns"]
        if d["kind"] in lane_kinds:
            gap = g.nodes[v]["time_ns"] - g.nodes[u]["time_ns"]
            assert d["lag_ns"] == (5 if (u, v) == ((5, "start"), (5, "end")) else gap)


def nxx_lane_chain(g, kinds: set[str], start) -> list:
    out = [start]
    while True:
        nxt = [v for _, v, d in g.out_edges(out[-1], data=True) if d["kind"] in kinds]
        if not nxt:
            return out
        assert len(nxt) == 1, f"a lane point has one lane successor, {out[-1]} has {nxt}"
        out.append(nxt[0])


def test_top_level_ops_chained_per_thread_only():
    tr = mk_trace(
        [
            N(1, "A", "cpu_op", 0, 10, tid=1),
            N(2, "B", "cpu_op", 20, 10, tid=1),
            N(3, "C", "cpu_op", 30, 5, tid=1),
            N(4, "X", "cpu_op", 5, 10, tid=2),  # another thread: no edge to A/B/C
            N(5, "Y", "cpu_op", 40, 10, tid=2),
        ]
    )
    assert edge_set(execution_deps(tr)) == {
        (2, 1, "thread_order", True, False, None),
        (3, 2, "thread_order", True, False, None),
        (5, 4, "thread_order", True, False, None),
    }


def test_stream_order_per_stream_and_launch_by_correlation_or_launch_id():
    tr = mk_trace(
        [
            N(1, "fwd", "cpu_op", 0, 100),
            N(2, "cudaLaunchKernel", "runtime", 10, 5, parent=1, corr=21),
            N(3, "cudaLaunchKernel", "runtime", 20, 5, parent=1, corr=22),
            N(4, "cudaMemcpyAsync", "runtime", 30, 5, parent=1, corr=23),
            N(10, "k1", "kernel", 15, 20, gpu=True, stream=7, corr=21),
            N(11, "k2", "kernel", 40, 20, gpu=True, stream=7, corr=22),
            N(12, "Memcpy HtoD", "memcpy", 36, 4, gpu=True, stream=8, corr=23),
            # no correlated runtime call: launched by the op named in launch_id
            N(13, "k3", "kernel", 70, 5, gpu=True, stream=8, launch_id=1),
            # correlation that matches no runtime call and no launch_id: no launch edge
            N(14, "k4", "kernel", 80, 5, gpu=True, stream=8, corr=999),
        ]
    )
    got = edge_set(execution_deps(tr))
    launch = {e for e in got if e[2] == "launch"}
    stream = {e for e in got if e[2] == "stream_order"}
    assert launch == {
        (10, 2, "launch", False, False, None),
        (11, 3, "launch", False, False, None),
        (12, 4, "launch", False, False, None),
        (13, 1, "launch", False, False, None),
    }
    assert stream == {
        (11, 10, "stream_order", True, False, None),
        (13, 12, "stream_order", True, False, None),
        (14, 13, "stream_order", True, False, None),
    }


def test_sync_waits_for_the_last_kernel_that_ended_during_the_call():
    tr = mk_trace(
        [
            N(1, "cudaLaunchKernel", "runtime", 0, 5, corr=1),
            N(2, "cudaLaunchKernel", "runtime", 6, 5, corr=2),
            N(3, "cudaStreamSynchronize", "runtime", 12, 50),  # [12, 62]: k2 ends at 60 inside it
            # [70, 73]: nothing ends in it, but it waits for what was launched before it (k2): an edge
            # that does not bind now (lag 3, its own time) and would if k2 ran longer
            N(4, "cudaDeviceSynchronize", "runtime", 70, 3),
            N(10, "k1", "kernel", 5, 30, gpu=True, stream=7, corr=1),
            N(11, "k2", "kernel", 35, 25, gpu=True, stream=7, corr=2),
        ]
    )
    got = edge_set(execution_deps(tr))
    assert {e for e in got if e[2] == "sync"} == {
        (3, 11, "sync", True, True, None),
        (4, 11, "sync", True, True, None),
    }
    # the wait is the GPU's: the call's own span keeps only what is left after the kernel ended
    g = P.build(tr)
    i3 = int(np.flatnonzero(g.ids == 3)[0])
    span3 = np.flatnonzero((g.kind == P.EK["span"]) & (g.dst == 2 * i3 + 1))
    assert g.base[span3].tolist() == [2]  # ends at 62, the kernel at 60
    sync = np.flatnonzero(g.kind == P.EK["sync"])
    assert sorted(g.lags()[sync].tolist()) == [2, 3] and set(g.cat[sync].tolist()) == {P.CAT["sync_wait"]}


def test_data_deps_from_the_trace_and_ctrl_deps_not_used_on_a_timed_trace():
    rows = [
        N(1, "producer", "cpu_op", 0, 10, tid=1),
        N(2, "consumer", "cpu_op", 15, 10, tid=2),
        N(3, "other", "cpu_op", 30, 10, tid=2),
    ]
    tr = mk_trace(rows, [(2, 1, "data"), (3, 1, "ctrl")])
    got = edge_set(execution_deps(tr))
    assert got == {
        (2, 1, "data", True, False, None),  # producer's end -> consumer's start, across threads
        (3, 2, "thread_order", True, False, None),
    }


def test_data_dep_that_contradicts_the_times_is_dropped_with_a_note():
    rows = [N(1, "producer", "cpu_op", 0, 10, tid=1), N(2, "consumer", "cpu_op", 5, 10, tid=2)]
    tr = mk_trace(rows, [(2, 1, "data")])
    g = P.build(tr)
    assert not (g.kind == P.EK["data"]).any()
    assert any("1 data dependencies contradict the measured times" in n for n in g.notes), g.notes
    assert {e[2] for e in edge_set(execution_deps(tr))} <= {"thread_order"}


def _cut_note(notes: list[str], count: int) -> bool:
    return any(f"{count} " in n and ("clipped" in n or "cut" in n) for n in notes)


def test_child_ending_after_its_parent_is_cut_with_a_note():
    tr = mk_trace(
        [
            N(1, "parent", "cpu_op", 0, 100),
            N(2, "child", "cpu_op", 50, 70, parent=1),  # ends at 120, after the parent (100)
            N(3, "next", "cpu_op", 130, 10),
        ]
    )
    g = P.build(tr)
    assert _cut_note(g.notes, 1), g.notes
    # the graph's times are monotone along the thread; measured starts are kept
    nx_g = to_networkx(tr)
    assert [nx_g.nodes[(i, "start")]["time_ns"] for i in (1, 2, 3)] == [0, 50, 130]
    assert sorted((nx_g.nodes[(1, "end")]["time_ns"], nx_g.nodes[(2, "end")]["time_ns"])) != [100, 120], (
        "no end was cut"
    )
    for u, v, d in nx_g.edges(data=True):
        assert nx_g.nodes[u]["time_ns"] + d["lag_ns"] <= nx_g.nodes[v]["time_ns"], (u, v, d)
        assert d["lag_ns"] >= 0, (u, v, d)
    # the model's own columns are not changed
    assert tr.nodes.filter(pl.col("id") == 2)["dur_ns"].item() == 70


def test_overlapping_ops_on_a_thread_are_cut_with_a_note():
    # B starts 10 ns before A ends; neither encloses the other
    tr = mk_trace([N(1, "A", "cpu_op", 0, 50), N(2, "B", "cpu_op", 40, 20), N(3, "C", "cpu_op", 70, 5)])
    g = P.build(tr)
    assert _cut_note(g.notes, 1) and any("overlap" in n for n in g.notes), g.notes
    assert (g.base >= 0).all(), "a negative lag"
    assert edge_set(execution_deps(tr)) == {
        (2, 1, "thread_order", True, False, None),
        (3, 2, "thread_order", True, False, None),
    }


def test_nesting_of_a_timed_trace_follows_the_times_per_thread():
    # the parent column names an op on another thread (a host-ET parent): on a timed trace each
    # thread's call tree comes from time nesting, so no edge joins the two threads
    tr = mk_trace([N(1, "outer", "cpu_op", 0, 100, tid=1), N(2, "inner", "cpu_op", 10, 10, tid=2, parent=1)])
    assert edge_set(execution_deps(tr)) == set()
    # ... and ops enclosed in time on one thread nest even without a parent column
    tr = mk_trace([N(1, "outer", "cpu_op", 0, 100), N(2, "inner", "cpu_op", 10, 10)])
    assert edge_set(execution_deps(tr)) == {
        (2, 1, "nesting", False, False, None),
        (1, 2, "nesting", True, True, None),
    }


def test_untimed_parent_on_another_thread_is_top_level_with_a_note():
    rows = [N(1, "outer", "cpu_op", None, 100, tid=1), N(2, "inner", "cpu_op", None, 10, tid=2, parent=1)]
    g = P.build(mk_trace(rows, timed=False))
    assert any("1 nodes whose parent runs on another thread" in n for n in g.notes), g.notes
    assert not (g.kind == P.EK["nesting"]).any()


def test_gpu_annotations_are_not_in_the_graph():
    tr = mk_trace(
        [
            N(1, "cudaLaunchKernel", "runtime", 0, 5, corr=1),
            N(2, "k", "kernel", 10, 10, gpu=True, stream=7, corr=1),
            N(3, "## fwd ##", "gpu_annotation", 0, 30, gpu=True, stream=7),
        ]
    )
    g = P.build(tr)
    assert sorted(g.ids.tolist()) == [1, 2]
    assert all(3 not in (e[0], e[1]) for e in edge_set(execution_deps(tr)))


# ---------------------------------------------------------------------------
# collectives across ranks
# ---------------------------------------------------------------------------


def test_collective_edges_match_group_and_sequence_across_ranks():
    # sequence 0 on both ranks; sequence 5 only on rank 0 (unmatched: no edge)
    run = Run(traces={0: coll_rank(0, 10, 100, (0, 5)), 1: coll_rank(1, 60, 50, (0,))})
    deps = run_execution_deps(run)
    for r, other in ((0, 1), (1, 0)):
        df = deps[r]
        assert df.schema == pl.Schema(EXEC_DEP_SCHEMA)
        coll = edge_set(df.filter(pl.col("kind") == "collective"))
        # the instance's end (node_end) waits for the peer's instance to start (dep_end false)
        assert coll == {(12, 12, "collective", False, True, other)}
        rest = df.filter(pl.col("kind") != "collective")
        assert rest["dep_rank"].null_count() == rest.height
        assert edge_set(rest) == edge_set(execution_deps(run.traces[r]))


def test_collective_edges_three_ranks():
    run = Run(traces={r: coll_rank(r, 10 + 20 * r, 50) for r in range(3)})
    deps = run_execution_deps(run)
    for r in range(3):
        coll = deps[r].filter(pl.col("kind") == "collective")
        assert sorted(coll["dep_rank"].to_list()) == sorted(set(range(3)) - {r})
        assert set(coll["node"].to_list()) == {12} and set(coll["dep"].to_list()) == {12}


def test_collective_waiting_is_split_from_the_transfer():
    """Rank 0 arrives at 20, rank 1 at 70; the transfer is the shorter duration (50): rank 0's
    kernel [20, 120] is 50 of waiting for rank 1 and 50 of transfer."""
    from charllm_trace.graph.run import build_run_graph

    run = Run(traces={0: coll_rank(0, 10, 100), 1: coll_rank(1, 60, 50)})
    rg = build_run_graph(run)
    g = rg.g
    assert rg.n_collectives == 1
    v = rg.point_rank < 0
    assert int(v.sum()) == 1 and g.time[v].tolist() == [70]  # the last arrival
    into = np.flatnonzero((g.kind == P.EK["collective"]) & v[g.dst])
    out = np.flatnonzero((g.kind == P.EK["collective"]) & v[g.src])
    assert len(into) == 2 and len(out) == 2
    assert g.lags()[out].tolist() == [50, 50] and (g.cat[out] == P.CAT["communication"]).all()


# ---------------------------------------------------------------------------
# traces without timestamps (recorded order)
# ---------------------------------------------------------------------------


def test_untimed_trace_lanes_follow_ids_and_recorded_deps_are_edges():
    rows = [
        N(1, "A", "cpu_op", None, 10),
        N(2, "A.child", "cpu_op", None, 4, parent=1),
        N(3, "B", "cpu_op", None, 5),
        N(4, "K", "kernel", None, 7, gpu=True, stream=7),
    ]
    tr = mk_trace(rows, [(3, 1, "ctrl"), (4, 3, "data"), (2, 1, "ctrl")], timed=False)
    got = edge_set(execution_deps(tr))
    assert got == {
        (2, 1, "nesting", False, False, None),
        (1, 2, "nesting", True, True, None),
        (3, 1, "thread_order", True, False, None),
        (3, 1, "data", True, False, None),  # a recorded dependency (ctrl or data)
        (4, 3, "data", True, False, None),
        # (2, 1) is the parent: nesting already says it (an edge to the parent's end would be a cycle)
    }
    g = P.build(tr)
    assert not g.measured
    # own (exclusive) time sits after a node's start; the parent's own time is 10 - 4 = 6
    i1 = int(np.flatnonzero(g.ids == 1)[0])
    first = np.flatnonzero((g.src == 2 * i1) & (g.kind == P.EK["nesting"]))
    assert g.base[first].tolist() == [6]


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------


def test_dangling_dependency_ids_are_ignored_with_a_note():
    rows = [N(1, "producer", "cpu_op", 0, 10, tid=1), N(2, "consumer", "cpu_op", 15, 10, tid=2)]
    tr = mk_trace(rows, [(2, 1, "data"), (2, 77, "data"), (88, 1, "data")])
    g = P.build(tr)
    assert (g.kind == P.EK["data"]).sum() == 1  # the good one is used
    assert any(
        "2" in n and ("dangling" in n or "not in the trace" in n or "unknown" in n) for n in g.notes
    ), g.notes


def test_data_dep_on_an_ancestor_at_equal_times_makes_no_cycle():
    """A zero-length child at its parent's very end with a data dependency on the parent (seen
    in the DLRM host ETs: ``detach_`` inside ``aten::detach_``, times in whole µs)."""
    from charllm_trace.core import dag as engine

    tr = mk_trace(
        [
            N(1, "aten::detach_", "cpu_op", 0, 1000),
            N(2, "detach_", "cpu_op", 1000, 0, parent=1),
            N(3, "next", "cpu_op", 2000, 10),
        ],
        [(2, 1, "data")],
    )
    g = P.build(tr)
    _, _, done = engine.longest_path(g.n_points, g.src, g.dst, g.lags(), g.prio, g.root)
    assert done == g.n_points


# ---------------------------------------------------------------------------
# self_ns
# ---------------------------------------------------------------------------


def test_self_ns_values():
    tr = mk_trace(
        [
            N(1, "ProfilerStep#1", "annotation", 0, 100),
            N(2, "aten::mm", "cpu_op", 10, 40, parent=1),
            N(3, "cudaLaunchKernel", "runtime", 20, 10, parent=2, corr=7),
            N(4, "aten::add", "cpu_op", 60, 20, parent=1),
            N(5, "gemm_kernel", "kernel", 35, 55, gpu=True, stream=7, corr=7, parent=2),  # GPU: not a child
            N(6, "over", "cpu_op", 0, 10),
            N(7, "a", "cpu_op", 0, 8, parent=6),
            N(8, "b", "cpu_op", 5, 8, parent=6),  # children sum 16 > 10: never below 0
            N(9, "unknown", "cpu_op", 0, None),
            N(10, "c", "cpu_op", 0, 3, parent=9),
        ]
    )
    got = dict(zip(tr.nodes["id"].to_list(), tr.nodes["self_ns"].to_list(), strict=True))
    assert got == {1: 40, 2: 30, 3: 10, 4: 20, 5: 55, 6: 0, 7: 8, 8: 8, 9: None, 10: 3}


def test_self_ns_given_is_kept_and_follows_ids_not_rows():
    nodes = pl.DataFrame(
        {
            "id": [30, 10, 20],
            "name": ["c", "p", "q"],
            "dur_ns": [5, 50, 7],
            "parent": [10, None, 10],
            "on_gpu": [False, False, False],
        }  # fmt: skip
    )
    tr = Trace(nodes=nodes)
    assert dict(zip(tr.nodes["id"].to_list(), tr.nodes["self_ns"].to_list(), strict=True)) == {
        30: 5,
        10: 38,
        20: 7,
    }
    given = Trace(nodes=nodes.with_columns(self_ns=pl.Series([1, 2, 3])))
    assert given.nodes["self_ns"].to_list() == [1, 2, 3]


# ---------------------------------------------------------------------------
# networkx view
# ---------------------------------------------------------------------------


def test_to_networkx_has_every_point_and_edge():
    tr = step_trace()
    g = P.build(tr)
    nx_g = to_networkx(tr)
    assert nx_g.number_of_nodes() == g.n_points == 2 * tr.nodes.height
    assert nx_g.number_of_edges() == len(set(zip(g.src.tolist(), g.dst.tolist(), strict=True)))
    assert nx_g.nodes[(6, "start")] == {"name": "gemm_kernel", "time_ns": 35}
    assert nx_g.edges[(3, "start"), (6, "start")]["kind"] == "launch"
    kinds = {d["kind"] for _, _, d in nx_g.edges(data=True)}
    assert kinds == {"span", "nesting", "thread_order", "launch", "sync"}
    # calibrated lags never ask for a point earlier than measured
    for u, v, d in nx_g.edges(data=True):
        assert nx_g.nodes[u]["time_ns"] + d["lag_ns"] <= nx_g.nodes[v]["time_ns"]


# ---------------------------------------------------------------------------
# the table as a graph
# ---------------------------------------------------------------------------


def table_graph(deps: dict[int, pl.DataFrame], traces: dict[int, Trace]):
    """The time points of an EXEC_DEP table (each node's start -> end, then every edge)."""
    import networkx as nx

    g = nx.DiGraph()
    for r, tr in traces.items():
        g.add_edges_from(((r, i, False), (r, i, True)) for i in tr.nodes["id"].to_list())
    for r, df in deps.items():
        for row in df.iter_rows(named=True):
            dr = r if row["dep_rank"] is None else row["dep_rank"]
            g.add_edge((dr, row["dep"], row["dep_end"]), (r, row["node"], row["node_end"]))
    return g


def test_execution_deps_is_acyclic_and_agrees_with_the_run_table():
    import networkx as nx

    rows = [
        N(1, "A", "cpu_op", 10, 0, tid=1),
        N(2, "B", "cpu_op", 10, 0, tid=2),
        N(3, "C", "cpu_op", 20, 10, tid=1),
        N(4, "D", "cpu_op", 40, 10, tid=2),
    ]
    tr = mk_trace(rows, [(1, 2, "data"), (2, 1, "data"), (4, 3, "data")])
    run_table = run_execution_deps(Run.single(tr))[0]
    assert (4, 3, "data", True, False, None) in edge_set(run_table)  # only the cycle's edges go
    assert nx.is_directed_acyclic_graph(table_graph({0: run_table}, {0: tr}))
    table = execution_deps(tr)
    assert nx.is_directed_acyclic_graph(table_graph({0: table}, {0: tr}))
    assert edge_set(table) == edge_set(run_table)


@pytest.mark.parametrize("which", ["a100", "gloo"])
def test_real_tables_are_acyclic(which):
    import networkx as nx

    import charllm_trace as ct
    from tests.conftest import FIXTURES, shared_trace

    path = FIXTURES / "cpu-2rank-gloo" if which == "gloo" else shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    run = ct.load(path)
    deps = run_execution_deps(run)
    assert set(deps) == set(run.ranks)
    kinds = set()
    for df in deps.values():
        kinds |= set(df["kind"].cast(pl.String).unique().to_list())
    assert {"thread_order", "nesting"} <= kinds
    if which == "gloo":
        assert "collective" in kinds
    else:
        assert {"launch", "stream_order"} <= kinds and kinds & {"sync", "wake"}
    assert nx.is_directed_acyclic_graph(table_graph(deps, run.traces))


def test_inferred_wake_ups_between_threads():
    """A thread that starts right after another thread's op (a kick), and a thread that resumes
    after a long gap right after another thread's op ended (a wake-up), get ``wake`` edges; a
    resumption long after the other op ended gets none."""
    us = 1_000
    tr = mk_trace(
        [
            N(1, "main_a", "cpu_op", 0, 10 * us, tid=1),
            N(2, "worker_x", "cpu_op", 10 * us + 200, 240 * us, tid=2),  # starts 200 ns after main_a
            N(3, "main_b", "cpu_op", 250 * us + 200 + 30 * us, 10 * us, tid=1),  # 30 us after worker_x ends
            N(4, "main_c", "cpu_op", 2_000 * us, 10 * us, tid=1),  # 1.7 ms after anything else: no wake
        ]
    )
    wake = {e for e in edge_set(execution_deps(tr), wake=True) if e[2] == "wake"}
    assert wake == {
        (2, 1, "wake", True, False, None),  # main_a's end -> worker_x's start (thread start)
        (3, 2, "wake", True, False, None),  # worker_x's end -> main_b's start (resumed after 270 us)
    }
    # the critical path of the whole trace hands over at each wake-up and keeps the measured times
    from charllm_trace.analysis.critical import critical_path

    cp = critical_path(Run.single(tr))
    row = cp.paths.filter(pl.col("step").is_null()).row(0, named=True)
    assert row["length_ns"] == row["span_ns"] == 2_010 * us
