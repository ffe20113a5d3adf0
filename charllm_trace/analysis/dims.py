"""Every headline figure by parallel dimension (tp/cp/dp/pp/ep), gathered from the analyses that
compute them: exposed communication and overlap (``overlap``'s per-dimension rows), bus bandwidth
(``bandwidth``'s instances), waiting, transfer and the bandwidth over transfer time
(``comm_wait``'s matched ops) and bubbles (``pipeline``'s stages). Nothing is measured again: each
figure is a sum over the rows another analysis made, or a ratio of such sums. The message-size
histogram of each dimension shows chunking (many small messages carrying most of a dimension's
bytes while larger ones reach a higher bandwidth) and, where the link's peak is known, the
bandwidth-vs-size curve. Definitions: docs/analyses.md, "By dimension". Pure: no I/O."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from charllm_trace.analysis.bandwidth import size_bucket_low
from charllm_trace.analysis.comm_wait_results import CommWaitResult
from charllm_trace.analysis.dims_results import DIM_SIZES_SCHEMA, DIMS_SCHEMA, DimsResult
from charllm_trace.analysis.frame_build import frame
from charllm_trace.analysis.pipeline_results import PipelineResult
from charllm_trace.analysis.registry import Merge
from charllm_trace.analysis.results import BandwidthResult, OverlapResult

#: The whole run's row of the ``dims`` frame.
ALL = "all"
#: The order of the dimensions' rows (others, e.g. "ep+dp", after them; not named last).
ORDER = (ALL, "tp", "cp", "dp", "pp", "ep")
#: Why there is no table by dimension.
NO_DIMS = (
    "no communication or pipeline stage of a named parallel dimension (a process group named by "
    "the parallel layout given, the manifest's layout or its description): nothing to show by dimension"
)
#: Chunking: messages below a dimension's fastest size bucket are "small"; a note when they carry
#: at least this share of the dimension's bytes ...
CHUNK_BYTES_PCT = 50.0
#: ... are at least this many ...
CHUNK_MIN_COUNT = 4
#: ... and reach less than this fraction of the fastest bucket's bandwidth.
CHUNK_SLOW = 0.5


def busbw_weighted(df: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Time-weighted bus bandwidth of the instances grouped by ``keys`` (none: one row):
    Σ(busbw × duration) / Σ duration over the instances with a finite busbw and a duration, i.e.
    Σ(bytes × bus factor) / Σ duration; columns ``keys`` + ``busbw_gbps`` (groups without such an
    instance have no row)."""
    ok = df.filter(
        pl.col("busbw_gbps").is_not_null() & pl.col("busbw_gbps").is_finite() & (pl.col("dur_ns") > 0)
    )
    ks = list(keys) or [pl.lit(ALL).alias("_all")]
    out = ok.group_by(ks, maintain_order=True).agg(
        ((pl.col("busbw_gbps") * pl.col("dur_ns")).sum() / pl.col("dur_ns").sum()).alias("busbw_gbps")
    )
    return out.drop("_all") if not keys else out


def _ratio(a: str, b: str) -> pl.Expr:
    return pl.when(pl.col(b) > 0).then(100.0 * pl.col(a) / pl.col(b))


def _overlap(ov: OverlapResult | None) -> pl.DataFrame | None:
    if ov is None:
        return None
    cols = [pl.col(c).sum() for c in ("comm_ns", "overlap_ns", "exposed_comm_ns")]
    whole = ov.per_rank.filter(pl.col("step").is_null()).select(cols).with_columns(dim=pl.lit(ALL))
    per = ov.per_dim.filter(pl.col("step").is_null()).group_by("dim").agg(cols)
    return pl.concat([whole, per], how="diagonal_relaxed")


def _bandwidth(bw: BandwidthResult | None) -> pl.DataFrame | None:
    if bw is None or bw.collectives.height == 0:
        return None
    c = bw.collectives
    agg = [pl.len().cast(pl.Int64).alias("n_ops"), pl.col("bytes").sum().alias("bytes_total")]
    counts = pl.concat(
        [c.select(agg).with_columns(dim=pl.lit(ALL)), c.group_by("dim").agg(agg)], how="diagonal_relaxed"
    )
    rates = pl.concat(
        [busbw_weighted(c, []).with_columns(dim=pl.lit(ALL)), busbw_weighted(c, ["dim"])],
        how="diagonal_relaxed",
    )
    return counts.join(rates, on="dim", how="left", nulls_equal=True)


def _waits(cw: CommWaitResult | None) -> pl.DataFrame | None:
    if cw is None:
        return None
    has = pl.col("busbw_gbps").is_not_null() & pl.col("busbw_gbps").is_finite()
    agg = [
        pl.len().cast(pl.Int64).alias("n_matched"),
        pl.col("wait_ns").sum(),
        pl.col("transfer_ns").sum(),
        pl.when(has).then(pl.col("busbw_gbps") * pl.col("dur_ns")).sum().alias("_bf"),
        pl.when(has).then(pl.col("transfer_ns")).sum().alias("_tr"),
    ]
    o = cw.ops
    out = pl.concat(
        [o.select(agg).with_columns(dim=pl.lit(ALL)), o.group_by("dim").agg(agg)], how="diagonal_relaxed"
    )
    return out.with_columns(
        transfer_busbw_gbps=pl.when(pl.col("_tr") > 0).then(pl.col("_bf") / pl.col("_tr"))
    ).drop("_bf", "_tr")


def _bubbles(pipe: PipelineResult | None) -> pl.DataFrame | None:
    if pipe is None or pipe.stages.height == 0:
        return None
    agg = [pl.col("bubble_ns").sum(), pl.col("window_ns").sum()]
    s = pipe.stages.select(agg)
    return pl.concat([s.with_columns(dim=pl.lit(ALL)), s.with_columns(dim=pl.lit("pp"))])


def _order(df: pl.DataFrame) -> pl.DataFrame:
    rank = {d: i for i, d in enumerate(ORDER)}
    key = pl.col("dim").replace_strict(rank, default=len(ORDER), return_dtype=pl.Int64)
    return df.with_columns(_o=pl.when(pl.col("dim").is_null()).then(len(ORDER) + 1).otherwise(key)).sort(
        "_o", "dim"
    )


def dims_table(
    ov: OverlapResult | None,
    bw: BandwidthResult | None,
    cw: CommWaitResult | None,
    pipe: PipelineResult | None,
) -> pl.DataFrame:
    """The ``dims`` frame (DIMS_SCHEMA): one row per dimension any of the analyses names, the
    run's "all" row first, the communication no dimension is named for (dim null) last."""
    parts = [p for p in (_overlap(ov), _bandwidth(bw), _waits(cw), _bubbles(pipe)) if p is not None]
    if not parts:
        return frame({}, DIMS_SCHEMA)
    keys = pl.concat([p.select("dim") for p in parts]).unique()
    out = keys
    for p in parts:
        out = out.join(p, on="dim", how="left", nulls_equal=True)
    out = out.with_columns(pl.lit(None, t).alias(c) for c, t in DIMS_SCHEMA.items() if c not in out.columns)
    out = out.with_columns(
        overlap_pct=_ratio("overlap_ns", "comm_ns"),
        wait_pct=pl.when((pl.col("wait_ns") + pl.col("transfer_ns")) > 0).then(
            100.0 * pl.col("wait_ns") / (pl.col("wait_ns") + pl.col("transfer_ns"))
        ),
        bubble_pct=_ratio("bubble_ns", "window_ns"),
    )
    return frame(_order(out), DIMS_SCHEMA)


def size_histogram(bw: BandwidthResult | None) -> pl.DataFrame:
    """The ``dim_msg_sizes`` frame (DIM_SIZES_SCHEMA): the bandwidth analysis' instances by
    (dimension, size bucket); instances without a size are left out (the bandwidth notes count
    them)."""
    if bw is None:
        return frame({}, DIM_SIZES_SCHEMA)
    c = bw.collectives.filter(pl.col("size_bucket").is_not_null())
    if c.height == 0:
        return frame({}, DIM_SIZES_SCHEMA)
    h = (
        c.group_by("dim", "size_bucket")
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("bytes").sum().alias("bytes_total"),
            pl.col("busbw_gbps").max().alias("busbw_max_gbps"),
            pl.col("peak_gbps").max(),
            pl.col("bytes").min().alias("_minb"),
        )
        .join(
            busbw_weighted(c, ["dim", "size_bucket"]), on=["dim", "size_bucket"], how="left", nulls_equal=True
        )
    )
    lows = {b: size_bucket_low(b) for b in h["_minb"].unique().to_list()}  # one per bucket: few
    total = pl.col("bytes_total").sum().over(pl.col("dim").fill_null(""))
    h = h.with_columns(
        bucket_low_bytes=pl.col("_minb").replace_strict(lows, return_dtype=pl.Int64),
        bytes_pct=pl.when(total > 0).then(100.0 * pl.col("bytes_total") / total),
        util_pct=100.0 * pl.col("busbw_gbps") / pl.col("peak_gbps"),
    )
    return frame(_order(h).sort("_o", "dim", "bucket_low_bytes", maintain_order=True), DIM_SIZES_SCHEMA)


def _gb(b: float) -> str:
    return f"{b / 1e9:.3g} GB" if b >= 1e8 else f"{b / 1e6:.3g} MB"


def chunking_notes(sizes: pl.DataFrame, coll: pl.DataFrame) -> list[str]:
    """A note per dimension whose small messages carry most of its bytes slowly: the messages below
    its fastest size bucket (the highest ``busbw_gbps`` of ``sizes``) carry at least
    CHUNK_BYTES_PCT % of the dimension's bytes, number at least CHUNK_MIN_COUNT, and reach
    together (``busbw_weighted`` over those instances of ``coll``) less than CHUNK_SLOW of the
    fastest bucket's bandwidth."""
    notes = []
    for (dim,), g in sizes.filter(pl.col("busbw_gbps").is_not_null()).group_by("dim", maintain_order=True):
        best = g.sort("busbw_gbps", descending=True).row(0, named=True)
        small = g.filter(pl.col("bucket_low_bytes") < best["bucket_low_bytes"])
        n, b = int(small["count"].sum()), float(small["bytes_pct"].sum() or 0)
        if not small.height or n < CHUNK_MIN_COUNT or b < CHUNK_BYTES_PCT:
            continue
        mine = coll.filter(
            (pl.col("dim").is_null() if dim is None else pl.col("dim") == dim)
            & pl.col("size_bucket").is_in(small["size_bucket"].implode())
        )
        rate = busbw_weighted(mine, [])
        bw = float(rate["busbw_gbps"][0]) if rate.height else float("nan")
        if not bw < CHUNK_SLOW * best["busbw_gbps"]:  # nan (no rate): no note
            continue
        peak = best["peak_gbps"]
        notes.append(
            f"{dim or 'no dimension'}: {n:,} messages under {best['size_bucket'].split('-')[0]} carry "
            f"{b:.1f} % of its {_gb(float(g['bytes_total'].sum()))} at {bw:.3g} GB/s, while its "
            f"{best['size_bucket']} messages reach {best['busbw_gbps']:.3g} GB/s"
            + (f" (link peak {peak:.3g} GB/s)" if peak is not None else "")
            + ": the data is chunked into messages too small to fill the link"
        )
    return notes


def dims_from(
    ov: OverlapResult | None,
    bw: BandwidthResult | None,
    cw: CommWaitResult | None,
    pipe: PipelineResult | None,
    *,
    simulated: bool = False,
) -> DimsResult | None:
    """The figures by dimension of a run's merged analyses; None (reason :data:`NO_DIMS`) when no
    row but "all" and the unnamed one would be left."""
    dims = dims_table(ov, bw, cw, pipe)
    named = dims.filter(pl.col("dim").is_not_null() & (pl.col("dim") != ALL))
    if named.height == 0:
        return None
    sizes = size_histogram(bw)
    notes = chunking_notes(sizes, bw.collectives) if bw is not None else []
    if dims.filter(pl.col("dim").is_null()).height:
        notes.append(
            "communication of no named dimension (a collective without a process group, as gloo's, or "
            "of a group no layout names) is the row '-': the dimensions' rows do not add up to 'all'"
        )
    whole = dims.filter(pl.col("dim") == ALL)["comm_ns"]
    if whole.len() and whole[0] is not None and (named["comm_ns"].sum() or 0) > whole[0]:
        notes.append(
            f"the dimensions' communication overlaps in time on a rank (Σ {named['comm_ns'].sum() / 1e6:,.1f} ms "
            f"over the dimensions, {whole[0] / 1e6:,.1f} ms in all): their comm and exposed columns add up "
            "to more than 'all'"
        )
    return DimsResult(dims=dims, sizes=sizes, simulated=simulated, notes=notes)


def merge(m: Merge) -> DimsResult | None:
    """The registry's merge of ``dims`` (``analysis/registry.py``): from the merged overlap,
    bandwidth, waiting-vs-transfer and pipeline results (it runs after them); no per-rank part."""
    r = m.results
    dm = dims_from(
        r.get("overlap"), r.get("bandwidth"), r.get("comm_wait"), r.get("pipeline"), simulated=m.simulated
    )
    if dm is None:
        m.skipped["dims"] = NO_DIMS
    return dm
