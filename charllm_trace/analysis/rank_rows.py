"""The frames of a run's result that are every rank's own rows, stacked in rank order.

A frame listed in :data:`RANK_ROWS` is, in the run's result, exactly the concatenation (in rank
order) of one frame of each rank's part that its merge takes (``analysis/rank_steps.py``,
``analysis/flops.py``), and no other merge reads its rows. The Dask engine uses this to keep such
rows off the driver (docs/scale.md, "What travels to the driver"): a worker takes them out of its
rank's part (:func:`take_rows`, leaving an empty frame of the same columns), writes them to a file,
and the merged result's frame is empty with the files named in ``RunAnalysis.spilled``; the
writers of machine formats stream them from there. ``tests/analysis/test_rank_rows.py`` checks
every entry against the merge: taking the rows out and stacking them back gives the result the
merge gives with them in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import polars as pl

from charllm_trace.analysis.breakdown import breakdown_from, sum_ranks


@dataclass(frozen=True)
class RankRows:
    """Where a frame's rows sit in a rank's part: ``holder(part)`` is the object holding the
    frame as its attribute ``attr`` (None when the merge takes nothing of this part)."""

    frame: str
    holder: Callable[[Any], Any]
    attr: str


def _streams(i: int) -> Callable[[Any], Any]:
    def holder(p: Any) -> Any:  # merge_idle_time: the timed ranks' parts, those with streams
        s = p.parts.get("idle_time")
        return None if p.no_ts or s is None else s[i]

    return holder


def _energy(p: Any) -> Any:  # merge_energy: the ranks with both energy and power
    e = p.parts.get("energy")
    return e.energy if e is not None and e.energy is not None and e.power is not None else None


def _flops_timed(p: Any) -> Any:  # flops_from: by_op of the ranks with per-step rows
    f = p.parts.get("flops")
    return f[1] if f and f[1].per_step.height else None


def _flops_all(p: Any) -> Any:  # flops_from: devices of every rank with a part
    f = p.parts.get("flops")
    return f[1] if f else None


#: The frames whose rows are their ranks' own, stacked in rank order (module docstring).
RANK_ROWS: tuple[RankRows, ...] = (
    RankRows("idle_time", _streams(0), "streams"),
    RankRows("launch_stats", _streams(1), "stats"),
    RankRows("launch_queue", _streams(1), "queue"),
    RankRows("energy_totals", _energy, "totals"),
    RankRows("energy", _energy, "by"),
    RankRows("flops_by_op", _flops_timed, "by_op"),
    RankRows("flops_devices", _flops_all, "devices"),
)


#: The time breakdown's frames: a rank's rows are its own (computed from its part alone), the
#: all-ranks rows (rank null, last) sums over every rank's part: see :class:`RowsFold`.
BREAKDOWN_ROWS = ("breakdown", "breakdown_totals")


def take_rows(part: Any, top_n: int | None = None) -> Iterator[tuple[str, pl.DataFrame]]:
    """(frame name, rows) of each :data:`RANK_ROWS` frame with rows in ``part`` (a ``RankPart``),
    each left in the part as an empty frame of the same columns, so that the merge stacks none of
    them; then the rank's own rows of the time breakdown (``top_n``: ``--breakdown-top``), its
    part left as it is (the driver sums it into the all-ranks rows: :class:`RowsFold`)."""
    for rr in RANK_ROWS:
        h = rr.holder(part)
        df = getattr(h, rr.attr, None) if h is not None else None
        if isinstance(df, pl.DataFrame) and df.height:
            setattr(h, rr.attr, df.clear())
            yield rr.frame, df
    bd = part.parts.get("breakdown")
    if bd is not None and bd[1] is not None:
        yield from _breakdown_rows(bd, top_n)


def _breakdown_rows(bd: Any, top_n: int | None) -> Iterator[tuple[str, pl.DataFrame]]:
    """A rank's own rows of the time breakdown (``bd``: its part), computed as the run's are."""
    by, totals = _rows_among(bd, top_n)
    yield BREAKDOWN_ROWS[0], by
    yield BREAKDOWN_ROWS[1], totals


def _rows_among(bd: Any, top_n: int | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rows of the part ``bd`` (a rank's, or a sum of ranks') in the breakdown, computed beside
    a copy of itself as another rank, as a rank's rows are among several: alone, a rank's
    ``gpu_time_ns`` is one value, which polars holds as a scalar column and divides by
    differently (``pct`` then differs in its last bit from the same row among several ranks)."""
    rank = bd[0]
    twin = (-1, bd[1].with_columns(pl.lit(-1, dtype=pl.Int64).alias("rank")), [], bd[3])
    both = breakdown_from([twin, bd], top_n=top_n)
    assert both is not None  # bd has rows
    return both.by.filter(pl.col("rank") == rank), both.totals.filter(pl.col("rank") == rank)


class RowsFold:
    """The driver's side of :func:`take_rows` for the time breakdown. Each gathered batch's
    breakdown parts are summed into one (:func:`~charllm_trace.analysis.breakdown.sum_ranks`)
    and left in the parts without rows (:meth:`add`): the driver holds one sum, not a part per
    rank, and the merge gives a result without rows (its notes, flags). :meth:`apply` puts the
    all-ranks rows in it (the ranks' own rows are in their files); for a run of one rank with
    rows, that rank's rows instead (as the merge gives them: there are no all-ranks rows), its
    files unused."""

    def __init__(self, top_n: int | None) -> None:
        self.top_n = top_n
        self.total: pl.DataFrame | None = None
        self.first: tuple[int, Any] | None = None  # (index of the first part with rows, its part)
        self.n = 0
        self.seen = 0

    def add(self, parts: list[Any]) -> None:
        fines = []
        for i, p in enumerate(parts, start=self.seen):
            bd = p.parts.get("breakdown")
            if bd is None or bd[1] is None:
                continue
            if self.first is None:
                self.first = (i, bd)
            fines.append(bd[1])
            p.parts["breakdown"] = (bd[0], bd[1].clear(), bd[2], bd[3])
        self.seen += len(parts)
        self.n += len(fines)
        if fines:
            self.total = sum_ranks([f for f in (self.total, *fines) if f is not None])

    def apply(self, res: Any, drop: Callable[[int, str], None]) -> None:
        """Put the rows held by the driver into ``res.breakdown`` (the merged result); a lone
        rank's breakdown files are dropped: ``drop(i, name)`` of the ``i``-th part's file of the
        frame ``name`` (``engine/spill.Written.drop``)."""
        bd_res = getattr(res, "breakdown", None)
        if self.first is None or self.total is None or bd_res is None:
            return
        i, bd = self.first
        if self.n == 1:
            own = breakdown_from([bd], top_n=self.top_n)
            assert own is not None
            bd_res.by, bd_res.totals = own.by, own.totals
            for name in BREAKDOWN_ROWS:
                drop(i, name)
            return
        whole = (-2, self.total.with_columns(pl.lit(-2, dtype=pl.Int64).alias("rank")), [], bd[3])
        by, totals = _rows_among(whole, self.top_n)
        no_rank = pl.lit(None, dtype=pl.Int64).alias("rank")
        bd_res.by, bd_res.totals = by.with_columns(no_rank), totals.with_columns(no_rank)
