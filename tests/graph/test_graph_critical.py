"""Critical path (``analysis.critical``) and the longest-path kernel (``core.dag``).

- the kernel against a plain dynamic programme over ``networkx.topological_sort`` on random DAGs;
- random small traces (threads with nested ops, launches, kernels on streams, synchronize calls,
  data dependencies, collectives across ranks): the engine's time of every point against the
  longest-path times that networkx computes over the same graph (``to_networkx``, weights
  ``lag_ns``, the lanes' first points bounded by their measured times), and every walked path
  against ``networkx.dag_longest_path_length`` between the same endpoints;
- hand-built traces with known paths;
- every real trace in ``../shared/traces`` and the 2-rank gloo fixture: the path's length is at
  most the span and equals it when the path reaches back to the window's start, the breakdown adds
  up to the length, and the segments are in time order without gaps or overlaps.
"""

from __future__ import annotations

import functools
import random

import networkx as nx
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import charllm_trace as ct
from charllm_trace.analysis.critical import critical_path, retime
from charllm_trace.analysis.results import CP_CATEGORIES, CRITICAL_PATH_SCHEMA
from charllm_trace.core import dag as engine
from charllm_trace.core.model import Run, Trace
from charllm_trace.graph import points as P
from charllm_trace.graph import to_networkx
from charllm_trace.graph.run import build_run_graph
from tests.conftest import FIXTURES, shared_trace
from tests.helpers.fuzz_budget import examples
from tests.helpers.graph_traces import N, coll_rank, mk_trace

MIN = engine.NONE

# ---------------------------------------------------------------------------
# random traces
# ---------------------------------------------------------------------------

KERNEL_NAMES = ("volta_sgemm_128x64_nn", "elementwise_kernel", "flash_fwd_kernel", "reduce_kernel")


def random_trace(rng: random.Random, *, rank: int = 0, n_coll: int = 0, world: int | None = None) -> Trace:
    rows, deps = random_rows(rng, n_coll=n_coll)
    return mk_trace(rows, deps, rank=rank, world=world)


def random_rows(rng: random.Random, *, n_coll: int = 0) -> tuple[list[dict], list[tuple[int, int, str]]]:
    """The rows and dependencies of a timed trace whose times follow its structure: nested CPU ops on 1-2 threads, runtime
    calls that launch kernels on 1-2 streams (a kernel starts after its launch call and after
    the previous kernel on its stream), synchronize calls that end after the last kernel so far,
    zero-length ops (ties), cross-thread data dependencies (some contradicting the times), and
    ``n_coll`` all-reduces on a communication stream (group "0", sequence 0..n_coll-1)."""
    rows: list[dict] = []
    ids = iter(range(1, 10_000))
    corr = iter(range(1, 10_000))
    streams = list(range(7, 7 + rng.randint(1, 2)))
    free = {s: 0 for s in streams}
    cpu_ops: list[tuple[int, int, int, int]] = []  # (id, tid, start, end)

    def launch(t: int, parent: int, tid: int, stream: int, name: str, **coll) -> int:
        c = next(corr)
        d = rng.randint(1, 6)
        rows.append(N(next(ids), "cudaLaunchKernel", "runtime", t, d, tid=tid, parent=parent, corr=c))
        ks = max(t + rng.randint(1, 10), free.get(stream, 0) + rng.randint(0, 5))
        kd = rng.randint(1, 40)
        rows.append(N(next(ids), name, "kernel", ks, kd, gpu=True, stream=stream, corr=c, **coll))
        free[stream] = ks + kd
        return t + d

    def op(t: int, depth: int, parent: int | None, tid: int) -> int:
        i = next(ids)
        pos = len(rows)
        rows.append({})  # filled below, once the end is known
        if depth < 2 and rng.random() < 0.5:
            c = t + rng.randint(0, 5)
            for _ in range(rng.randint(1, 3)):
                c = op(c, depth + 1, i, tid) + rng.randint(0, 5)
            end = c + rng.randint(0, 3)
            rows[pos] = N(i, f"op{i}", "cpu_op", t, end - t, tid=tid, parent=parent)
            cpu_ops.append((i, tid, t, end))
            return end
        r = rng.random()
        if parent is not None and r < 0.35:
            rows.pop(pos)
            return launch(t, parent, tid, rng.choice(streams), rng.choice(KERNEL_NAMES))
        if r < 0.5:
            end = max(t + rng.randint(1, 4), max(free.values()) + rng.randint(0, 3))
            rows[pos] = N(i, "cudaStreamSynchronize", "runtime", t, end - t, tid=tid, parent=parent)
            return end
        end = t + rng.randint(0, 12)  # zero-length ops make ties
        rows[pos] = N(i, f"aten::op{i}", "cpu_op", t, end - t, tid=tid, parent=parent)
        cpu_ops.append((i, tid, t, end))
        return end

    for tid in range(1, rng.randint(1, 2) + 1):
        t = rng.randint(0, 20)
        for _ in range(rng.randint(1, 4)):
            t = op(t, 0, None, tid) + rng.randint(0, 15)
        if tid == 1 and n_coll:
            for seq in range(n_coll):
                i = next(ids)
                c = dict(coll_type="all_reduce", pg_name="0", coll_seq=seq)
                rows.append(N(i, "c10d::allreduce_", "cpu_op", t, 8, tid=tid, **c))
                launch(t + 1, i, tid, 99, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", **c)
                t += 8 + rng.randint(0, 30)
    deps = []
    for _ in range(rng.randint(0, 4)):
        if len(cpu_ops) < 2:
            break
        a, b = rng.sample(cpu_ops, 2)
        if a[1] != b[1]:
            deps.append((b[0], a[0], "data"))  # b consumes what a produced (maybe contradicting)
    return rows, deps


def random_run(rng: random.Random, n_ranks: int, n_coll: int) -> Run:
    """Ranks drawn independently, then each all-reduce made consistent across them (one clock):
    no rank's instance ends before the last rank's starts plus the shortest duration; later
    kernels on the communication stream move back to keep stream order."""
    per = [random_rows(rng, n_coll=n_coll) for _ in range(n_ranks)]
    comm = [sorted((r for r in rows if r.get("coll_seq") is not None and r["on_gpu"]), key=lambda r: r["coll_seq"])
            for rows, _ in per]  # fmt: skip
    for seq in range(n_coll):
        ks = [c[seq] for c in comm]
        last = max(k["start_ns"] for k in ks)
        transfer = min(k["dur_ns"] for k in ks)
        for c in comm:
            k = c[seq]
            k["dur_ns"] = max(k["dur_ns"], last + transfer - k["start_ns"])
            if seq + 1 < n_coll:
                nxt = c[seq + 1]
                nxt["start_ns"] = max(nxt["start_ns"], k["start_ns"] + k["dur_ns"])
    return Run(traces={r: mk_trace(rows, deps, rank=r, world=n_ranks) for r, (rows, deps) in enumerate(per)})


def point_key(g: P.PointGraph, p: int) -> tuple[int, str]:
    return (int(g.ids[p // 2]), "end" if p % 2 else "start")


def nx_longest_times(G: nx.DiGraph, root: dict) -> dict:
    """Longest-path time of every vertex: the largest of its root bound and its predecessors'
    times plus the edge's ``lag_ns`` (a DP over a topological order; the oracle)."""
    t: dict = {}
    for v in nx.topological_sort(G):
        cands = [t[u] + d["lag_ns"] for u, _, d in G.in_edges(v, data=True)]
        if v in root:
            cands.append(root[v])
        assert cands, f"{v} has no bound"
        t[v] = max(cands)
    return t


def nx_longest_from(G: nx.DiGraph, src, dst) -> int:
    """Length of the longest path from ``src`` to ``dst`` (networkx, on the subgraph of the
    vertices that lie between them)."""
    between = (nx.descendants(G, src) | {src}) & (nx.ancestors(G, dst) | {dst})
    sub = G.subgraph(between)
    # every vertex of ``sub`` is on some src -> dst path; with lags >= 0 the longest path of the
    # subgraph runs from src to dst
    return nx.dag_longest_path_length(sub, weight="lag_ns", default_weight=0)


def check_against_networkx(trace: Trace) -> None:
    g = P.build(trace)
    lags = g.lags()
    assert (lags >= 0).all()
    time, bind, done = engine.longest_path(g.n_points, g.src, g.dst, lags, g.prio, g.root)
    assert done == g.n_points
    assert np.array_equal(time, g.time), "the calibrated graph replays to the measured times"
    G = to_networkx(trace)
    assert G.number_of_nodes() == g.n_points and nx.is_directed_acyclic_graph(G)
    root = {point_key(g, p): int(g.root[p]) for p in np.flatnonzero(g.root != MIN)}
    t_nx = nx_longest_times(G, root)
    for p in range(g.n_points):
        assert t_nx[point_key(g, p)] == time[p], point_key(g, p)
    # one source "S" ahead of the lanes' first points, at their bound's distance from the earliest
    t0 = min(root.values())
    H = G.copy()
    H.add_edges_from(("S", v, {"lag_ns": r - t0}) for v, r in root.items())
    assert nx.dag_longest_path_length(H, weight="lag_ns") == int(time.max()) - t0
    path = nx.dag_longest_path(H, weight="lag_ns")
    assert (
        sum(H.edges[u, v]["lag_ns"] for u, v in zip(path[:-1], path[1:], strict=True)) == int(time.max()) - t0
    )
    # our walk back from every end point: tight binding edges, a longest path between its ends
    for sink in range(1, g.n_points, 2):
        walk = engine.walk_back(g.src, bind, time, sink, t0)
        edges = bind[walk[:-1]]
        assert np.array_equal(g.dst[edges], walk[:-1]) and np.array_equal(g.src[edges], walk[1:])
        assert np.array_equal(time[walk[:-1]], time[walk[1:]] + lags[edges]), "binding edges are tight"
        first = int(walk[-1])
        assert bind[first] == -1 and time[first] == g.root[first], "the walk ends at a lane's bound"
        length = int(time[sink] - time[first])
        assert int(lags[edges].sum()) == length
        assert nx_longest_from(G, point_key(g, first), point_key(g, sink)) == length
        # and through "S": no longer path reaches the sink from any lane's first point
        assert length + (time[first] - t0) == time[sink] - t0
    check_paths(critical_path(Run.single(trace)))


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=examples(60))
def test_engine_times_and_paths_match_networkx_on_random_traces(seed):
    check_against_networkx(random_trace(random.Random(seed)))


def test_random_trace_generator_covers_every_edge_kind():
    kinds: set[str] = set()
    for seed in range(40):
        g = P.build(random_trace(random.Random(seed)))
        kinds |= {P.EDGE_KINDS[k] for k in np.unique(g.kind)}
    assert kinds == set(P.EDGE_KINDS) - {"collective"}


@given(st.integers(0, 2**32 - 1), st.integers(2, 3), st.integers(1, 3))
@settings(max_examples=examples(40))
def test_merged_run_graph_matches_networkx(seed, n_ranks, n_coll):
    run = random_run(random.Random(seed), n_ranks, n_coll)
    rg = build_run_graph(run)
    g = rg.g
    assert rg.n_collectives == n_coll
    lags = g.lags()
    assert (lags >= 0).all()
    time, bind = retime(rg)
    real = rg.point_rank >= 0
    assert np.array_equal(time[real], g.time[real]), "replay at 1.0 gives back the measured times"
    G = nx.DiGraph()
    G.add_nodes_from(range(g.n_points))
    for s, d, lag in zip(g.src.tolist(), g.dst.tolist(), lags.tolist(), strict=True):
        if G.has_edge(s, d):
            lag = max(lag, G.edges[s, d]["lag_ns"])
        G.add_edge(s, d, lag_ns=lag)
    root = {int(p): int(g.root[p]) for p in np.flatnonzero(g.root != MIN)}
    t_nx = nx_longest_times(G, root)
    assert [t_nx[p] for p in range(g.n_points)] == time.tolist()
    cp = critical_path(run, graph=rg)
    check_paths(cp)
    job = cp.paths.filter(pl.col("scope") == "job")
    whole = cp.paths.filter((pl.col("scope") == "rank") & pl.col("step").is_null())
    assert whole.height == n_ranks
    # the job's path ends where the latest rank's window ends, and starts with the earliest
    assert job.height == 1 and job["end_ns"].item() == whole["end_ns"].max()
    assert job["start_ns"].item() == whole["start_ns"].min()


# ---------------------------------------------------------------------------
# the kernel itself
# ---------------------------------------------------------------------------


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=examples(60))
def test_kernel_matches_a_topological_dp_on_random_dags(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    m = int(rng.integers(0, 3 * n))
    a = rng.integers(0, n, m)
    b = rng.integers(0, n, m)
    keep = a != b
    src, dst = np.minimum(a, b)[keep], np.maximum(a, b)[keep]  # forward in vertex order: a DAG
    perm = rng.permutation(n)  # ... renamed so that vertex order is not the topological order
    src, dst = perm[src], perm[dst]
    lag = rng.integers(-5, 50, len(src))
    prio = rng.integers(0, 3, len(src)).astype(np.int8)
    root = np.where(rng.random(n) < 0.3, rng.integers(0, 100, n), MIN)
    time, bind, done = engine.longest_path(n, src, dst, lag, prio, root)
    assert done == n
    G = nx.MultiDiGraph()
    G.add_nodes_from(range(n))
    for e, (s, d) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        G.add_edge(s, d, lag=int(lag[e]))
    want: dict[int, int] = {}
    for v in nx.topological_sort(G):
        c = [want[u] + dd["lag"] for u, _, dd in G.in_edges(v, data=True) if want[u] != MIN]
        if root[v] != MIN:
            c.append(int(root[v]))
        want[v] = max(c) if c else MIN
    assert time.tolist() == [want[v] for v in range(n)]
    for v in range(n):
        e = bind[v]
        if e >= 0:
            assert dst[e] == v and time[src[e]] + lag[e] == time[v]
            # ties: no other edge into v gives the same time with a higher priority
            ties = np.flatnonzero((dst == v) & (time[src] != MIN) & (time[src] + lag == time[v]))
            assert prio[e] == prio[ties].max()
        else:
            assert time[v] == root[v], "no binding edge: the root bound (or no bound at all)"


def test_kernel_reports_cycles_and_bad_input():
    src = np.array([0, 1, 2, 3])
    dst = np.array([1, 2, 1, 4])
    time, _, done = engine.longest_path(
        5, src, dst, np.zeros(4, np.int64), np.zeros(4, np.int8), np.zeros(5, np.int64)
    )
    assert done == 3  # 0, 3 and 4; 1 and 2 are on a cycle
    assert time[1] == MIN and time[2] == MIN and time[4] == 0
    with pytest.raises(ValueError, match="out of range"):
        engine.longest_path(
            2,
            np.array([0]),
            np.array([5]),
            np.zeros(1, np.int64),
            np.zeros(1, np.int8),
            np.zeros(2, np.int64),
        )
    with pytest.raises(ValueError):
        engine.longest_path(
            2,
            np.array([0]),
            np.array([1]),
            np.zeros(2, np.int64),
            np.zeros(1, np.int8),
            np.zeros(2, np.int64),
        )


def test_ties_prefer_the_lane_edge():
    # vertex 2 reached at 10 from 0 (lane, prio 2) and from 1 (cross, prio 1)
    src, dst = np.array([0, 1]), np.array([2, 2])
    lag = np.array([10, 5])
    root = np.array([0, 5, MIN])
    for prio in (np.array([2, 1], np.int8), np.array([1, 2], np.int8)):
        _, bind, _ = engine.longest_path(3, src, dst, lag, prio, root)
        assert bind[2] == int(np.argmax(prio))


# ---------------------------------------------------------------------------
# hand-built traces
# ---------------------------------------------------------------------------


def row_of(cp, scope="rank", rank=0, step=None) -> dict:
    f = cp.paths.filter(pl.col("scope") == scope)
    f = f.filter(pl.col("rank").is_null() if rank is None else pl.col("rank") == rank)
    f = f.filter(pl.col("step").is_null() if step is None else pl.col("step") == step)
    assert f.height == 1, cp.paths
    return f.row(0, named=True)


def segs_of(cp, scope="rank", rank=0, step=None) -> pl.DataFrame:
    f = cp.segments.filter(pl.col("scope") == scope)
    f = f.filter(pl.col("rank").is_null() if rank is None else pl.col("rank") == rank)
    return f.filter(pl.col("step").is_null() if step is None else pl.col("step") == step)


def test_cpu_only_path_known_answer():
    # thread 1: A [0,10], gap 10, B [20,50] with child C [25,35]; thread 2: D [0,5] (shorter)
    tr = mk_trace(
        [
            N(1, "A", "cpu_op", 0, 10),
            N(2, "B", "cpu_op", 20, 30),
            N(3, "C", "cpu_op", 25, 10, parent=2),
            N(4, "D", "cpu_op", 0, 5, tid=2),
        ]
    )
    cp = critical_path(Run.single(tr))
    r = row_of(cp)
    assert (r["start_ns"], r["end_ns"], r["span_ns"], r["length_ns"]) == (0, 50, 50, 50)
    assert r["cpu_op_ns"] == 10 + 5 + 10 + 15 and r["idle_ns"] == 10
    assert sum(r[f"{c}_ns"] for c in CP_CATEGORIES) == 50
    s = segs_of(cp)
    assert s.select("name", "category", "start_ns", "end_ns").rows() == [
        ("A", "cpu_op", 0, 10),
        (None, "idle", 10, 20),
        ("B", "cpu_op", 20, 25),
        ("C", "cpu_op", 25, 35),
        ("B", "cpu_op", 35, 50),
    ]
    top = cp.top_ops.filter(pl.col("step").is_null())
    assert top.row(0, named=True)["name"] == "B" and top.row(0, named=True)["time_ns"] == 20


def gpu_step(sync: bool) -> Trace:
    rows = [
        N(1, "ProfilerStep#3", "annotation", 0, 130 if sync else 40),
        N(2, "cudaLaunchKernel", "runtime", 5, 5, parent=1, corr=1),
        N(3, "cudaLaunchKernel", "runtime", 12, 5, parent=1, corr=2),
        N(10, "k0", "kernel", 2, 3, gpu=True, stream=7),  # an earlier kernel on the stream, launcher unknown
        N(11, "volta_sgemm_128x64_nn", "kernel", 12, 60, gpu=True, stream=7, corr=1),
        N(12, "elementwise_kernel", "kernel", 72, 40, gpu=True, stream=7, corr=2),
    ]
    if sync:
        rows.append(N(4, "cudaStreamSynchronize", "runtime", 20, 95, parent=1))  # [20, 115]
    return mk_trace(rows)


def test_gpu_bound_step_path_goes_through_the_kernels():
    """The step's last point is a kernel's end (GPU ops launched in the step belong to it): the
    path runs back along the stream to the first kernel that waited for its launch (k11: its
    stream was idle), then along the launch edge to the CPU."""
    cp = critical_path(Run.single(gpu_step(sync=False)))
    r = row_of(cp, step=3)
    assert (r["start_ns"], r["end_ns"], r["span_ns"], r["length_ns"]) == (0, 112, 112, 112)
    assert (r["gpu_compute_ns"], r["launch_ns"], r["cpu_op_ns"]) == (100, 7, 5)
    # the whole trace is this step (segments are kept for whole-trace paths only)
    assert {k: v for k, v in row_of(cp).items() if k != "step"} == {k: v for k, v in r.items() if k != "step"}
    s = segs_of(cp)
    assert s.select("name", "category", "start_ns", "end_ns").rows() == [
        ("ProfilerStep#3", "cpu_op", 0, 5),
        ("cudaLaunchKernel", "launch", 5, 12),  # call start -> kernel start
        ("volta_sgemm_128x64_nn", "gpu_compute", 12, 72),
        ("elementwise_kernel", "gpu_compute", 72, 112),
    ]
    check_paths(cp)


def test_step_that_synchronizes_waits_for_the_gpu_on_its_path():
    cp = critical_path(Run.single(gpu_step(sync=True)))
    r = row_of(cp, step=3)
    assert (r["end_ns"], r["span_ns"], r["length_ns"]) == (130, 130, 130)
    assert r["gpu_compute_ns"] == 100 and r["sync_wait_ns"] == 3  # the call ends 3 ns after the kernel
    assert row_of(cp)["length_ns"] == 130
    s = segs_of(cp)
    assert s.select("name", "start_ns", "end_ns").rows()[-3:] == [
        ("elementwise_kernel", 72, 112),
        ("cudaStreamSynchronize", 112, 115),
        ("ProfilerStep#3", 115, 130),
    ]
    check_paths(cp)


def test_path_crosses_ranks_at_a_collective():
    """Rank 0 reaches the all-reduce at 20, rank 1 at 70: rank 0's kernel ends at 70 + 50 because
    of rank 1, so rank 0's path continues on rank 1 (the steps end at 100, before the kernels)."""
    run = Run(traces={0: coll_rank(0, 10, 100, step_dur=100), 1: coll_rank(1, 60, 50, step_dur=100)})
    cp = critical_path(run)
    r0 = row_of(cp, rank=0)
    assert (r0["start_ns"], r0["end_ns"]) == (0, 120)
    assert r0["ranks_on_path"] == "0,1" and r0["communication_ns"] >= 50
    s = segs_of(cp, rank=0)
    assert set(s["seg_rank"].to_list()) == {0, 1}
    comm = s.filter(pl.col("category") == "communication")
    assert comm.filter(pl.col("seg_rank") == 0).select("start_ns", "end_ns").rows()[-1] == (70, 120)
    # the wait is rank 1's CPU getting there: its op, launch call and launch latency
    assert s.filter(pl.col("seg_rank") == 1)["end_ns"].max() == 70
    assert r0["length_ns"] == r0["span_ns"] == 120
    job = row_of(cp, scope="job", rank=None)
    assert (job["start_ns"], job["end_ns"]) == (0, 120)
    check_paths(cp)


def test_path_follows_the_launch_of_the_first_kernel_on_a_stream():
    tr = mk_trace(
        [
            N(1, "A", "cpu_op", 0, 10),
            N(2, "B", "cpu_op", 10, 10),
            N(3, "cudaLaunchKernel", "runtime", 10, 5, parent=2, corr=5),
            N(4, "volta_sgemm_128x64_nn", "kernel", 30, 50, gpu=True, stream=7, corr=5),
        ]
    )
    cp = critical_path(Run.single(tr))
    r = row_of(cp)
    assert (r["span_ns"], r["length_ns"]) == (80, 80)
    assert r["gpu_compute_ns"] == 50 and r["launch_ns"] == 20 and r["cpu_op_ns"] == 10


def test_untimed_trace_path_is_labelled_simulated():
    rows = [
        N(1, "A", "cpu_op", None, 10),
        N(2, "B", "cpu_op", None, 5),
        N(3, "K", "kernel", None, 20, gpu=True),
    ]
    tr = mk_trace(rows, [(3, 1, "data")], timed=False)
    cp = critical_path(Run.single(tr))
    assert cp.simulated and cp.notes and "SIMULATED" in cp.notes[0]
    r = row_of(cp)
    assert r["length_ns"] == 30  # A (10) then K (20): longer than A then B
    check_paths(cp)


# ---------------------------------------------------------------------------
# invariants of a result, and the real traces
# ---------------------------------------------------------------------------


def check_paths(cp) -> None:
    assert cp.paths.schema == pl.Schema(CRITICAL_PATH_SCHEMA)
    keys = ["scope", "rank", "step"]
    for r in cp.paths.iter_rows(named=True):
        where = f"{r['scope']} rank {r['rank']} step {r['step']}"
        assert r["span_ns"] == r["end_ns"] - r["start_ns"], where
        assert 0 <= r["length_ns"] <= r["span_ns"], where
        parts = [r[f"{c}_ns"] for c in CP_CATEGORIES]
        assert sum(parts) == r["length_ns"], f"{where}: breakdown {parts} vs {r['length_ns']}"
        if r["step"] is not None:
            continue  # segments are kept for the whole-trace paths only
        s = cp.segments
        for k in keys:
            s = s.filter(pl.col(k).is_null() if r[k] is None else pl.col(k) == r[k])
        if not len(cp.segments):
            continue  # asked without segments
        if r["length_ns"] == 0:
            assert s.height == 0, where
            continue
        st_, en = s["start_ns"].to_numpy(), s["end_ns"].to_numpy()
        assert (en > st_).all(), where
        assert np.array_equal(en[:-1], st_[1:]), f"{where}: segments in time order, no gap, no overlap"
        assert int((en - st_).sum()) == r["length_ns"], where
        assert en[-1] == r["end_ns"] and st_[0] == r["end_ns"] - r["length_ns"], where
        # the path reaches back to the window's start exactly when its length is the span
        assert (st_[0] == r["start_ns"]) == (r["length_ns"] == r["span_ns"]), where
        assert set(s["category"].to_list()) <= set(CP_CATEGORIES), where
        ranks = {int(x) for x in r["ranks_on_path"].split(",")} if r["ranks_on_path"] else set()
        assert set(s["seg_rank"].to_list()) <= ranks, where
    top = (
        cp.top_ops.group_by(keys)
        .agg(pl.col("time_ns").sum())
        .join(cp.paths.select(*keys, "length_ns"), on=keys, nulls_equal=True)
    )
    assert (top["time_ns"] <= top["length_ns"]).all()


REAL = [
    "hta/a100_ddp_nccl_rank0.json.gz",
    "hta/mi250_minitoy_kineto.json.gz",
    "hta/simple_add_kineto.json.gz",
    "hta/trace_filter_2ranks",
    "tracelens/h100_qwen1.5-0.5b_inference.json.gz",
    "tracelens/mi300_qwen1.5-0.5b_inference.json.gz",
    "param/resnet_kineto.json.gz",
    "param/dlrm_8ranks_v100",
]


@functools.lru_cache(maxsize=2)
def _load(path: str) -> Run:
    return ct.load(path)


def real_run(rel: str) -> Run:
    if rel == "gloo":
        return _load(str(FIXTURES / "cpu-2rank-gloo"))
    return _load(str(shared_trace(rel)))


@pytest.fixture(scope="module", autouse=True)
def _drop_cached_runs():
    yield
    _load.cache_clear()


@pytest.mark.parametrize("rel", [*REAL, "gloo"])
def test_critical_path_invariants_on_real_traces(rel):
    run = real_run(rel)
    cp = critical_path(run)
    check_paths(cp)
    assert not cp.simulated
    for r in run.ranks:
        tr = run.traces[r]
        got = cp.paths.filter((pl.col("scope") == "rank") & (pl.col("rank") == r))
        assert got.filter(pl.col("step").is_null()).height == 1  # the whole trace
        assert sorted(got["step"].drop_nulls().to_list()) == sorted(tr.steps()["step"].to_list())
        # the steps tile the trace: the first starts at its ProfilerStep's start (the whole
        # trace's), each next where the one before ended (issue 22: the windows overlapped)
        st = got.filter(pl.col("step").is_not_null()).sort("start_ns")
        if st.height:
            whole = got.filter(pl.col("step").is_null()).row(0, named=True)
            first = tr.steps().sort("start_ns").row(0, named=True)
            assert st["start_ns"][0] == first["start_ns"] == whole["start_ns"]
            assert (st["start_ns"][1:] == st["end_ns"][:-1]).all()
            assert st["end_ns"][-1] <= whole["end_ns"]
    assert cp.paths.filter(pl.col("scope") == "job").height == (1 if len(run.ranks) > 1 else 0)


def test_critical_path_of_the_chakra_et_after_simulate():
    from charllm_trace.analysis.whatif import simulate

    tr = ct.load(shared_trace("chakra/feeder_tests_chakra.0.et")).traces[0]
    raw = critical_path(Run.single(tr))  # no timestamps: the recorded durations
    assert raw.simulated
    check_paths(raw)
    sim = critical_path(Run.single(simulate(tr)))
    check_paths(sim)
    # the simulated timeline's whole-trace path
    assert row_of(sim)["span_ns"] > 0


def test_equal_bounds_bind_the_edge_of_larger_index_not_the_one_visited_later():
    """Two edges of one priority give vertex 2 the same bound: the edge of larger index binds,
    whatever order the vertices are visited in (so a rank's own graph binds its points as the
    merged run's graph does: the Dask engine re-times each rank's graph alone)."""
    from charllm_trace.core import dag as engine

    # vertex 0 is visited first (its edge is edge 1), vertex 1 after (its edge is edge 0)
    src, dst = np.array([1, 0], np.int32), np.array([2, 2], np.int32)
    lag, prio = np.array([5, 5], np.int64), np.array([1, 1], np.int8)
    root = np.array([0, 0, engine.NONE], np.int64)
    time, bind, done = engine.longest_path(3, src, dst, lag, prio, root)
    assert done == 3 and time[2] == 5 and bind[2] == 1
    # a higher priority still wins over a larger index
    time, bind, _ = engine.longest_path(3, src, dst, lag, np.array([2, 1], np.int8), root)
    assert bind[2] == 0
