"""The top operators of every critical path summed in one pass (``analysis/critical_batch.py``)
are, row for row and bit for bit, what the per-path functions give (``critical.path_piece`` ->
``name_codes`` -> ``top_ops_of``, the computation ``critical_path`` made path by path before, and
the one the per-rank engine still makes): on random multi-rank runs (whole-trace and job paths),
on the real H200 fixture (4 steps) and on the real 8-rank DLRM run (steps, job path across ranks)."""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from charllm_trace.analysis import critical_batch
from charllm_trace.analysis.critical import (
    critical_path,
    name_codes,
    path_piece,
    retime,
    top_ops_of,
    windows,
)
from charllm_trace.analysis.results import CRITICAL_OPS_SCHEMA, frame
from charllm_trace.core import dag as engine
from charllm_trace.core.model import Run
from charllm_trace.graph import points as P
from charllm_trace.graph.run import build_run_graph
from charllm_trace.inputs import loader
from tests.conftest import FIXTURES, shared_trace
from tests.graph.test_graph_critical import random_run


def per_path_top_ops(run: Run, top: int) -> pl.DataFrame:
    """The top ops of every path computed one path at a time, as ``critical_path`` did before."""
    rg = build_run_graph(run)
    g = rg.g
    time, bind = retime(rg)
    f = np.ones(len(P.WHATIF_CLASSES))
    vocab, code_of = {}, {}
    for r in rg.ranks:
        nm = run.traces[r].nodes["name"]
        u = nm.drop_nulls().unique(maintain_order=True)
        codes = nm.cast(pl.Enum(u)).to_physical().fill_null(len(u)).to_numpy()
        vocab[r] = u.extend_constant("", 1)
        code_of[r] = codes[rg.parts[r].rows].astype(np.int64)
    targets = [
        ("rank", r, s, sink, int(time[w0]))
        for r, s, sink, w0 in windows(rg, run, g.time if g.measured else time)
    ]
    whole = [(sink, w0) for _, _, s, sink, w0 in targets if s is None]
    if len(whole) > 1:
        sink = max((w[0] for w in whole), key=lambda p: time[p])
        targets.append(("job", None, None, int(sink), min(w[1] for w in whole)))
    out = []
    for scope, r, s, sink, w0 in targets:
        path = engine.walk_back(g.src, bind, time, sink, w0)
        edges = bind[path[:-1]] if len(path) > 1 else np.zeros(0, np.int64)
        if len(edges) == 0:
            continue
        pc = path_piece(g, time, path, edges, f, rg.point_rank[path], rg.owner_rank[edges], code_of)
        length = int(time[sink] - time[path[-1]])
        out.append(top_ops_of(name_codes(pc.ops, vocab, top), scope, r, s, length, top))
    return frame(pl.concat(out), CRITICAL_OPS_SCHEMA) if out else frame({}, CRITICAL_OPS_SCHEMA)


def check(run: Run, top: int) -> pl.DataFrame:
    got = critical_path(run, top=top, segments=False).top_ops
    want = per_path_top_ops(run, top)
    assert_frame_equal(got, want, check_exact=True)
    return got


@pytest.mark.parametrize("seed", range(6))
def test_batch_top_ops_equal_per_path_on_random_runs(seed: int) -> None:
    rng = random.Random(seed)
    run = random_run(rng, n_ranks=1 + seed % 3, n_coll=seed % 4)
    got = check(run, top=1 + seed % 4)
    assert got.height > 0


@pytest.mark.parametrize("top", [2, 10])
def test_batch_top_ops_equal_per_path_on_h200(top: int) -> None:
    got = check(loader.load(FIXTURES / "h200-1rank-nccl", cache=False), top)
    assert got["step"].drop_nulls().n_unique() == 4  # every step has its own top ops


def test_batch_top_ops_equal_per_path_on_dlrm_8_ranks() -> None:
    run = loader.load(shared_trace("param/dlrm_8ranks_v100"), cache=False)
    got = check(run, top=10)
    assert got.filter(pl.col("scope") == "job").height > 0
    assert got["rank"].drop_nulls().n_unique() == 8


@pytest.mark.parametrize("chunk", [1, 50])
def test_batch_top_ops_summed_in_chunks_equal_per_path(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Paths summed a few at a time (``PathKeys`` sums its pending edges every ``CHUNK``: a path
    per sum at 1) give the per-path rows exactly, as one sum of every path does."""
    monkeypatch.setattr(critical_batch, "CHUNK", chunk)
    got = check(loader.load(FIXTURES / "h200-1rank-nccl", cache=False), top=3)
    assert got["step"].drop_nulls().n_unique() == 4
    for seed in range(3):
        check(random_run(random.Random(seed), n_ranks=2, n_coll=2), top=2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_walked_paths_top_ops_in_one_query_equal_per_path(seed: int) -> None:
    """``graph_merge.critical_from`` (the Dask engine's walked paths) takes every path's top ops in
    one query (``critical_batch.top_ops_named``): the rows equal, to the bit, summing each path's
    pieces on its own and ``critical.top_ops_of`` per path, on random pieces whose (rank, code,
    category) keys repeat across pieces, with unnamed ops, tied times and a path without edges."""
    from charllm_trace.analysis import graph_merge as gm
    from charllm_trace.analysis.critical import PathPiece, top_ops_of
    from charllm_trace.analysis.results import CP_CATEGORIES

    rng = random.Random(seed)

    def piece_names(n: int) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "orank": [rng.randrange(3) for _ in range(n)],
                "code": [rng.randrange(-1, 30) for _ in range(n)],
                "cat": [rng.randrange(len(CP_CATEGORIES)) for _ in range(n)],
                "time_ns": [rng.choice([5, 10, rng.randrange(1, 10_000)]) for _ in range(n)],
                "count": [rng.randrange(1, 4) for _ in range(n)],
            },
            schema={
                "orank": pl.Int64,
                "code": pl.Int64,
                "cat": pl.Int64,
                "time_ns": pl.Int64,
                "count": pl.Int64,
            },
        ).with_columns(
            name=pl.when(pl.col("code") >= 0).then(pl.format("op{}", pl.col("code") % 17)).otherwise(None)
        )

    paths = []
    for i in range(25):
        k = rng.randrange(1, 4)
        pieces = [
            PathPiece(
                np.zeros(len(CP_CATEGORIES), dtype=np.int64), 0, 1, 0 if i == 3 else 5, {0}, 1_000 * j, None
            )
            for j in range(k)
        ]
        p = gm.Path("job" if i == 24 else "rank", None if i == 24 else i % 7, i % 3 or None, 0, 50_000 + i)
        p.pieces, p.names = pieces, [piece_names(rng.randrange(0, 60)) for _ in range(k)]
        paths.append(p)
    got = gm.critical_from(paths, [], True, top=5).top_ops
    want = [
        top_ops_of(
            pl.concat(p.names)
            .group_by("orank", "code", "cat")
            .agg(pl.col("time_ns").sum(), pl.col("count").sum(), pl.col("name").first()),
            p.scope,
            p.rank,
            p.step,
            p.end_ns - p.pieces[-1].last_time,
            5,
        )
        for p in paths
        if sum(pc.n_edges for pc in p.pieces)
    ]
    assert got.height > 50
    assert_frame_equal(got, frame(pl.concat(want), CRITICAL_OPS_SCHEMA))
