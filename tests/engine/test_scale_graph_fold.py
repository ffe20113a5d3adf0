"""The driver's graph rounds folded a gathered batch at a time (``engine/graph_fold.py``; issue 26
item 3, fourth round): each fold gives the merge functions what the per-rank results gave them.
The whole path (a generated 16-rank run through a LocalCluster, critical path and what-if, equal
to the local path) is ``tests/engine/test_scale_stored.py``; here the folds against the per-rank
computation they replace, on random instances, batch by batch as the engine gathers them."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from charllm_trace.analysis import graph_merge as gm
from charllm_trace.engine import ENV, graph_step
from charllm_trace.engine import cluster as cluster_mod
from charllm_trace.engine import graph_fold as gf
from tests.engine.test_scale_dask import dask_cluster  # noqa: F401  (the fixture)
from tests.engine.test_scale_generated import _same
from tests.engine.test_scale_stored import _doc, run16  # noqa: F401  (the fixture)

RANKS = [0, 1, 2, 3, 5, 8, 9]  # rank 4 absent from the run; ranks 2 and 9 hold no instance


def _batches(items, size):
    return [items[i : i + size] for i in range(0, len(items), size)]


def _inst(rng: np.random.Generator) -> pl.DataFrame:
    rows = []
    for r in RANKS:
        if r in (2, 9):
            continue
        for i in range(int(rng.integers(1, 6))):
            rows.append({"pg_name": "0", "coll_seq": i, "_i": i, "_v": int(rng.integers(0, 9)),
                         "_tr": int(rng.integers(0, 100)), "_vt": int(rng.integers(0, 1000)), "rank": r})  # fmt: skip
    rng.shuffle(rows)  # any order: each rank's rows keep theirs
    return pl.DataFrame(rows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_by_rank_are_each_ranks_rows_in_their_order(seed):
    inst = _inst(np.random.default_rng(seed))
    got = gf.RowsByRank(inst, RANKS)
    assert len(got) == len(RANKS) and len(list(got)) == len(RANKS)  # iteration stops
    by = inst.partition_by("rank", as_dict=True, maintain_order=True)
    for i, r in enumerate(RANKS):
        want = by[(r,)].select(gf.ROW_COLS) if (r,) in by else inst.select(gf.ROW_COLS).clear()
        assert got[i].equals(want), r
        assert got[i : i + 2][0].equals(want)
    empty = gf.RowsByRank(inst.clear(), RANKS)
    assert [f.height for f in empty] == [0] * len(RANKS)
    assert empty[0].columns == gf.ROW_COLS


def _contracted(rng: np.random.Generator, n_v: int):
    """(notes, dropped, V ids, {set: (A, D, left)}) per rank, as contracted_task returns them."""
    out = []
    for r in RANKS:
        k = 0 if r in (2, 9) else int(rng.integers(1, 5))
        vids = rng.choice(n_v, size=k, replace=False).astype(np.int64)
        con = {}
        for s in ("base", "new"):
            a = rng.integers(0, 1000, size=k).astype(np.int64)
            m = int(rng.integers(0, 2 * k + 1)) if k > 1 else 0
            d = np.stack([rng.integers(0, k, m), rng.integers(0, k, m), rng.integers(0, 50, m)], 1) if m else np.zeros((0, 3), np.int64)  # fmt: skip
            con[s] = (a, d.astype(np.int64), int(r == 3))
        out.append(([f"note {r}"] if r % 2 else [], r % 3, vids, con))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("size", [1, 3, 64])
def test_contracted_fold_solves_and_binds_as_the_ranks_one_by_one(seed, size):
    rng = np.random.default_rng(seed)
    n_v = 12
    parts = _contracted(rng, n_v)
    con = gf.Contracted(RANKS, ["base", "new"])
    for b in _batches(parts, size):
        assert con(b) == [None] * len(b)
    assert con.notes == [(r, p[0]) for r, p in zip(RANKS, parts, strict=True)]
    assert con.dropped == sum(p[1] for p in parts)
    vtimes = {}
    for k in ("base", "new"):
        assert con.left[k] == sum(p[3][k][2] for p in parts)
        want = gm.solve_virtual(n_v, [(p[2], p[3][k][0], p[3][k][1]) for p in parts])
        got = gm.solve_virtual(n_v, [con.share(k)])
        assert np.array_equal(got[0], want[0]) and got[1] == want[1], k
        vtimes[k] = want[0]
    per_rank = gf.VTimesByRank(vtimes, con)
    assert len(per_rank) == len(RANKS) and len(list(per_rank)) == len(RANKS)
    for i, p in enumerate(parts):
        for k in vtimes:
            assert np.array_equal(per_rank[i][k], vtimes[k][p[2]])
    # the finish round's summaries: start times per instance, targets, what-if parts
    sums = [(rng.integers(0, 2000, size=len(p[2])).astype(np.int64), [(None, i, 0, 1, 2)], None)
            for i, p in enumerate(parts)]  # fmt: skip
    fold = gf.Summaries(RANKS)
    for b in _batches(sums, size):
        fold(b)
    assert fold.targets == [(r, s[1]) for r, s in zip(RANKS, sums, strict=True)]
    want_who = gm.bind_virtual(n_v, [(r, p[2], s[0]) for r, p, s in zip(RANKS, parts, sums, strict=True)])
    assert np.array_equal(gm.bind_virtual(n_v, fold.binds(per_rank)), want_who)


@pytest.mark.parametrize(
    "extra", [[], ["--per-step"], ["--what-if", "comm=0.5"]], ids=["cp", "per-step", "what-if"]
)
def test_small_folds_equal_the_local_path(spawn, run16, tmp_path, monkeypatch, dask_cluster, extra):  # noqa: F811
    """The generated 16-rank run through the cluster with every round gathered 3 ranks at a time
    and the critical paths made into rows 4 at a time (several folds and chunks, a last one
    short) equals the local path."""
    local = _doc([str(run16), *extra], tmp_path / "local.json")
    monkeypatch.setattr(cluster_mod, "GATHER_BATCH", 3)
    monkeypatch.setattr(graph_step, "PATH_CHUNK", 4)
    monkeypatch.setenv(ENV, dask_cluster)
    dist = _doc([str(run16), *extra], tmp_path / "dist.json")
    assert len(local["frames"]["critical_path"]) > 2 * 4  # several chunks of paths
    assert local["frames"]["critical_path_ops"]
    if "--what-if" in extra:
        local["what_if"]["inferred_pct"] = None  # not reported by the distributed what-if (docs/scale.md)
    assert _same(local, dist) > 1000
