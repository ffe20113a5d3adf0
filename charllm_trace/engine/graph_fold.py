"""The driver's side of the graph rounds (``engine/graph_step.py``), folded a gathered batch at a
time (issue 26 item 3: a driver whose memory does not grow with ranks).

Each round's per-rank results are small, but a rank's handful of small arrays or frames costs a
few kB of Python objects and buffers whatever its rows (a small polars frame ~8 kB resident): held
for every rank until the round ends, they were the driver's largest grower (+59 MiB from 128 to
1,024 DLRM ranks, docs/benchmarks.md). Here each batch is concatenated as it arrives (one frame
or array per batch, with each rank's offset), and what the next round sends each rank is cut from
the concatenation when its task is submitted (:class:`RowsByRank`, :class:`VTimesByRank`), not
held per rank. The folded values are the same values in the same (rank) order: the merge
functions (``analysis/graph_merge.py``, ``graph/run.py`` ``match_instances``) get the same input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np
import polars as pl

#: what the join round sends each rank of the matched instances
ROW_COLS = ["_i", "_v", "_tr", "_vt"]


class Instances:
    """The instances round (``instances_task``: (rank, measured, instances)) folded: each batch's
    frames with rows, a ``rank`` column added, concatenated into one frame."""

    def __init__(self) -> None:
        self.frames: list[pl.DataFrame] = []
        self.measured = True

    def __call__(self, got: list[Any]) -> list[None]:
        self.measured = self.measured and all(m for _, m, _ in got)
        fs = [f.with_columns(rank=pl.lit(r, dtype=pl.Int64)) for r, _, f in got if f.height]
        if fs:
            self.frames.append(pl.concat(fs))
        return [None] * len(got)


class RowsByRank(Sequence[pl.DataFrame]):
    """Each rank's matched instances (in ``ranks``' order), as the join round sends them: the rows
    of ``inst`` with that rank (in their order), ``ROW_COLS`` only, cut on access."""

    def __init__(self, inst: pl.DataFrame, ranks: list[int]) -> None:
        if inst.height:
            inst = inst.sort("rank", maintain_order=True)  # stable: each rank's rows in their order
        self.rows = inst.select(ROW_COLS)
        r = inst["rank"].to_numpy() if inst.height else np.zeros(0, np.int64)
        want = np.asarray(ranks, np.int64)
        self.lo = np.searchsorted(r, want, "left")
        self.hi = np.searchsorted(r, want, "right")

    def __len__(self) -> int:
        return len(self.lo)

    @overload
    def __getitem__(self, i: int) -> pl.DataFrame: ...
    @overload
    def __getitem__(self, i: slice) -> list[pl.DataFrame]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not 0 <= i < len(self):
            raise IndexError(i)
        if not self.rows.height:
            return self.rows
        lo = int(self.lo[i])
        return self.rows.slice(lo, int(self.hi[i]) - lo)


class Contracted:
    """The join round (``contracted_task``: (notes, dependencies dropped, V ids, {set: (A, D,
    points not reached)})) folded: each rank's notes, the dropped and unreached counts, and per
    batch the V ids and each set's A concatenated, D's rows (j, k, d) with j and k moved to index
    the concatenated V ids. :meth:`share` is then one ``(V ids, A, D)`` for all ranks:
    ``graph_merge.solve_virtual`` of it gives what it gives of the ranks' shares one by one."""

    def __init__(self, ranks: list[int], sets: Sequence[str]) -> None:
        self.ranks = ranks
        self.notes: list[tuple[int, list[str]]] = []
        self.dropped = 0
        self.n = 0  # V ids so far
        self.counts: list[int] = []
        self.vids: list[np.ndarray] = []
        self.a: dict[str, list[np.ndarray]] = {k: [] for k in sets}
        self.d: dict[str, list[np.ndarray]] = {k: [] for k in sets}
        self.left = dict.fromkeys(sets, 0)

    def __call__(self, got: list[Any]) -> list[None]:
        vids_b: list[np.ndarray] = []
        a_b: dict[str, list[np.ndarray]] = {k: [] for k in self.a}
        d_b: dict[str, list[np.ndarray]] = {k: [] for k in self.a}
        for notes, dropped, vids, con in got:
            self.notes.append((self.ranks[len(self.notes)], notes))
            self.dropped += dropped
            self.counts.append(len(vids))
            for k, (a, d, left) in con.items():
                self.left[k] += left
                if len(vids):  # as solve_virtual: a rank without Vs adds nothing
                    a_b[k].append(a)
                    moved = np.array(d, np.int64).reshape(-1, 3)
                    moved[:, :2] += self.n
                    d_b[k].append(moved)
            if len(vids):
                vids_b.append(vids)
                self.n += len(vids)
        if vids_b:
            self.vids.append(np.concatenate(vids_b))
            for k in self.a:
                self.a[k].append(np.concatenate(a_b[k]))
                self.d[k].append(np.concatenate(d_b[k]))
        return [None] * len(got)

    def all_vids(self) -> np.ndarray:
        return np.concatenate(self.vids) if self.vids else np.zeros(0, np.int64)

    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)])

    def share(self, k: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        vids = self.all_vids()
        a = np.concatenate(self.a[k]) if self.a[k] else np.zeros(0, np.int64)
        d = np.concatenate(self.d[k]) if self.d[k] else np.zeros((0, 3), np.int64)
        return vids, a, d


class VTimesByRank(Sequence[dict[str, np.ndarray]]):
    """What the finish round sends each rank: the times of its V ids in each set's solution,
    cut from :class:`Contracted`'s concatenation on access."""

    def __init__(self, vtimes: dict[str, np.ndarray], con: Contracted) -> None:
        self.vtimes, self.vids, self.off = vtimes, con.all_vids(), con.offsets()

    def __len__(self) -> int:
        return len(self.off) - 1

    @overload
    def __getitem__(self, i: int) -> dict[str, np.ndarray]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, np.ndarray]]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not 0 <= i < len(self):
            raise IndexError(i)
        v = self.vids[self.off[i] : self.off[i + 1]]
        return {k: t[v] for k, t in self.vtimes.items()}

    def rank_vids(self, i: int) -> np.ndarray:
        return self.vids[self.off[i] : self.off[i + 1]]


class Summaries:
    """The finish round (``summary_task``: (start times, critical-path targets, what-if part))
    folded: the start times concatenated per batch (in the order of the V ids), each rank's
    targets and what-if part kept (the paths and what-if rows are built from them)."""

    def __init__(self, ranks: list[int]) -> None:
        self.ranks = ranks
        self.starts: list[np.ndarray] = []
        self.targets: list[tuple[int, Any]] = []
        self.whatif: list[Any] = []

    def __call__(self, got: list[Any]) -> list[None]:
        ts = []
        for s0, s1, s2 in got:
            self.targets.append((self.ranks[len(self.targets)], s1))
            self.whatif.append(s2)
            ts.append(np.asarray(s0))
        if ts:
            self.starts.append(np.concatenate(ts))
        return [None] * len(got)

    def binds(self, by: VTimesByRank) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(rank, V ids, start times) of each rank, as ``graph_merge.bind_virtual`` reads them."""
        t = np.concatenate(self.starts) if self.starts else np.zeros(0, np.int64)
        return [(r, by.rank_vids(i), t[by.off[i] : by.off[i + 1]]) for i, (r, _) in enumerate(self.targets)]
