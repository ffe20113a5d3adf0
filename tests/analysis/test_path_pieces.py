"""A critical path's pieces summed as they arrive (``graph_merge.add_piece``: the Dask engine keeps
one piece per path, not one per rank crossed) give the row and the what-if's fixed waits that the
pieces kept one by one give (``critical.path_row``, ``graph_merge.whatif_from``), on random pieces;
the pieces walked are not changed."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from charllm_trace.analysis import graph_merge as gm
from charllm_trace.analysis.critical import PathPiece, path_row
from charllm_trace.analysis.results import CP_CATEGORIES, WHATIF_SCHEMA, frame


def _pieces(rng: random.Random, n: int, t_end: int) -> list[PathPiece]:
    """``n`` pieces, latest first, each ending where the previous one began."""
    out, t = [], t_end
    for _ in range(n):
        t -= rng.randrange(0, 5_000)
        cats = np.array([rng.randrange(0, 10**9) for _ in CP_CATEGORIES], dtype=np.int64)
        ranks = {rng.randrange(0, 8) for _ in range(rng.randrange(1, 4))}
        edges = rng.choice([0, rng.randrange(1, 50)])
        out.append(PathPiece(cats, rng.randrange(0, 10**6), rng.randrange(0, 9), edges, ranks, t, None))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_summed_pieces_give_the_row_and_the_waits_of_the_pieces(seed: int) -> None:
    rng = random.Random(seed)
    end = 10**12
    pieces = _pieces(rng, 1 + seed % 5, end)
    before = copy.deepcopy(pieces)
    p = gm.Path("rank", 3, None, end - 10**7, end)
    for pc in pieces:
        gm.add_piece(p, pc)
    assert len(p.pieces) == 1
    assert path_row("rank", 3, None, p.start_ns, end, p.pieces) == path_row(
        "rank", 3, None, p.start_ns, end, pieces
    )
    kept = gm.Path("rank", 3, None, p.start_ns, end, pieces=pieces)
    rows = [frame({}, WHATIF_SCHEMA)]  # no step rows: only the fixed waits are compared
    a = gm.whatif_from(rows, [p], {"gemm": 2.0}, [], True)
    b = gm.whatif_from(rows, [kept], {"gemm": 2.0}, [], True)
    assert a.fixed_wait_pct is not None or not any(pc.n_edges for pc in pieces)
    assert a.fixed_wait_pct == b.fixed_wait_pct
    for x, y in zip(pieces, before, strict=True):  # the walked pieces are left as they came
        assert np.array_equal(x.cats, y.cats) and x.ranks == y.ranks and x.wait == y.wait
