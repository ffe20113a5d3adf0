"""The sums of many critical paths at once (every rank's steps, its whole trace, the job): the
numbers ``critical.path_piece`` gives one path, and the top operators ``critical.top_ops_of``
gives one path, computed for all paths in one pass of numpy and one polars query each instead
of a few polars queries per path (a trace of 263 steps had 264 paths: 0.7 s of per-path
overhead).

The results are the per-path functions' exactly (same rows, same order, same floats):
``tests/test_critical_batch.py`` compares both on generated and real graphs. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from charllm_trace.analysis.results import CP_CATEGORIES, CRITICAL_OPS_SCHEMA, frame
from charllm_trace.graph import points as P

_CATS = np.asarray(CP_CATEGORIES, dtype=object)


@dataclass
class PathKeys:
    """The edges of many paths, summed as they come: for each edge that takes time, its path
    (``tgt``, an index into the caller's list of paths), its owner rank, its node's name code
    (-1: no node), its category as the segments count it, and the time it spans. Whole paths
    are held until ``CHUNK`` edges are pending, then summed per (path, rank, code, category): the
    keys of every path of a 854 k-event trace held at once were the critical path's peak memory
    (+94 MiB); a path is never split between two sums, so their rows are the sums of all edges."""

    pending: dict[str, list[np.ndarray]] = field(default_factory=lambda: {c: [] for c in _DTYPES})
    n_pending: int = 0
    sums: list[pl.DataFrame] = field(default_factory=list)

    @classmethod
    def empty(cls) -> PathKeys:
        return cls()

    def add(self, i: int, orank: np.ndarray, code: np.ndarray, cat: np.ndarray, t: np.ndarray) -> None:
        """The edges of path ``i``; those that take no time are never summed, so not kept."""
        took = np.flatnonzero(t > 0)
        got = {"tgt": np.full(len(took), i), "orank": orank, "code": code, "cat": cat, "t": t}
        for c, d in _DTYPES.items():
            x = got[c] if c == "tgt" else np.asarray(got[c])[took]
            self.pending[c].append(x.astype(d, copy=False))
        self.n_pending += len(took)
        if self.n_pending >= CHUNK:
            self._sum_pending()

    def _sum_pending(self) -> None:
        if not self.n_pending:
            return
        data = {}
        for c, d in _DTYPES.items():
            data[c] = np.concatenate(self.pending[c]).astype(d, copy=False)
            self.pending[c] = []
        self.n_pending = 0
        self.sums.append(
            pl.DataFrame(data, schema=_PL_DTYPES)
            .group_by("tgt", "orank", "code", "cat")
            .agg(time_ns=pl.col("t").sum(), count=pl.len().cast(pl.Int64))
        )

    def summed(self) -> pl.DataFrame:
        """(tgt, orank, code, cat, time_ns, count) of every path, in no particular order."""
        self._sum_pending()
        if not self.sums:
            schema = {c: _PL_DTYPES[c] for c in ("tgt", "orank", "code", "cat")}
            return pl.DataFrame(schema={**schema, "time_ns": pl.Int64, "count": pl.Int64})
        return pl.concat(self.sums)


#: PathKeys' columns and their dtypes: exact (a rank, a name code and a path index fit in 32
#: bits, a category in 8; the time stays 64-bit); edges held before they are summed
_DTYPES = {"tgt": np.int32, "orank": np.int32, "code": np.int32, "cat": np.int8, "t": np.int64}
_PL_DTYPES = {"tgt": pl.Int32, "orank": pl.Int32, "code": pl.Int32, "cat": pl.Int8, "t": pl.Int64}
CHUNK = 1 << 20


def edge_keys(g, time, path, edges, orank, code_of) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(name code, segment category, time spanned) of each edge of one path (``critical.path_piece``'s
    grouping keys)."""
    seg_t = time[path[:-1]] - time[path[1:]]
    seg_cat = np.where((g.fixed[edges] > 0) & (g.base[edges] <= 0), P.CAT["sync_wait"], g.cat[edges])
    own = g.owner[edges]
    code = np.full(len(edges), -1, dtype=np.int64)
    for rr in np.unique(orank).tolist():
        sel = np.flatnonzero((orank == rr) & (own >= 0))
        if len(sel) and rr in code_of:
            code[sel] = code_of[rr][own[sel]]
    return code, seg_cat, seg_t


def _first_n_per(df: pl.DataFrame, n: int) -> pl.DataFrame:
    """The first ``n`` rows of each ``tgt`` (``df`` sorted by ``tgt`` first)."""
    return df.filter(pl.int_range(pl.len()).over("tgt") < n)


def _names(orank: np.ndarray, code: np.ndarray, vocab: dict[int, pl.Series]) -> pl.Series:
    """Node names of (rank, code) pairs (null: code -1 or a rank without names)."""
    out = pl.Series("name", [None] * len(code), dtype=pl.String)
    for rr in np.unique(orank).tolist():
        sel = np.flatnonzero((orank == rr) & (code >= 0))
        if len(sel) == 0 or rr not in vocab:
            continue
        out = out.scatter(sel, vocab[rr].gather(pl.Series(code[sel])))
    return out


def top_ops_all(keys: PathKeys, paths: list[tuple], vocab: dict[int, pl.Series], top: int) -> pl.DataFrame:
    """CRITICAL_OPS_SCHEMA rows of every path: for each path (``paths[tgt]``: its scope, rank,
    step and length), its ``top`` (name, category) pairs by time, as
    ``critical.top_ops_of(critical.name_codes(path_piece(...).ops, vocab, top), ...)`` gives
    them, concatenated in ``tgt`` order."""
    sums = keys.summed().sort(  # only edges that take time (PathKeys.add)
        ["tgt", "time_ns", "orank", "code", "cat"], descending=[False, True, False, False, False]
    )
    lead = _first_n_per(sums, top * 4)
    return _top_of_lead(
        lead.with_columns(name=_names(lead["orank"].to_numpy(), lead["code"].to_numpy(), vocab)), paths, top
    )


def top_ops_named(named: pl.DataFrame, paths: list[tuple], top: int) -> pl.DataFrame:
    """:func:`top_ops_all` from sums already named: ``named`` holds (tgt, orank, code, cat,
    time_ns, count, name) rows, one per (tgt, orank, code, cat), as ``critical.top_ops_of``
    reads them for one path (the Dask engine's walked pieces, ``analysis/graph_merge.py``)."""
    sums = named.sort(
        ["tgt", "time_ns", "orank", "code", "cat"], descending=[False, True, False, False, False]
    )
    return _top_of_lead(_first_n_per(sums, top * 4), paths, top)


def _top_of_lead(lead: pl.DataFrame, paths: list[tuple], top: int) -> pl.DataFrame:
    """The rows of :func:`top_ops_all` from each path's first ``4 x top`` sums by time, named."""
    named = lead.with_columns(
        name=pl.col("name").fill_null("(wait / idle)"),
        category=pl.Series(_CATS[lead["cat"].to_numpy()].tolist(), dtype=pl.String),
    )
    best = (
        named.group_by("tgt", "name", "category")
        .agg(pl.col("time_ns").sum(), pl.col("count").sum())
        .sort(["tgt", "time_ns", "name", "category"], descending=[False, True, False, False])
    )
    out = _first_n_per(best, top)
    at = out["tgt"]
    out = out.with_columns(
        scope=pl.Series([p[0] for p in paths], dtype=pl.String).gather(at),
        rank=pl.Series([p[1] for p in paths], dtype=pl.Int64).gather(at),
        step=pl.Series([p[2] for p in paths], dtype=pl.Int64).gather(at),
        # polars divides by a literal as a product with its reciprocal: top_ops_of's
        # ``100.0 * time_ns / length`` is (100.0 * time_ns) * (1.0 / length), to the last bit
        inv=pl.Series([1.0 / p[3] if p[3] > 0 else None for p in paths], dtype=pl.Float64).gather(at),
    ).with_columns(pct=(100.0 * pl.col("time_ns")) * pl.col("inv"))
    return frame(out, CRITICAL_OPS_SCHEMA)
