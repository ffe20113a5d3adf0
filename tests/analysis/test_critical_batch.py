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
