"""Bandwidth per collective instance, aggregated and matched across ranks.

For every collective instance (a communication kernel on the GPU; in CPU mode, the
outermost CPU op carrying a collective type):

- ``bytes``: the nccl-tests message size (the model's ``comm_bytes``; when missing,
  ``num_elems`` x dtype size);
- ``algbw = bytes / dur`` (GB/s, GB = 1e9), ``busbw = algbw x factor`` with
  nccl-tests' factors for a group of n ranks: all_reduce 2(n-1)/n; all_gather,
  reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, gather, scatter, send,
  recv 1; barrier has no bandwidth;
- ``util_pct = 100 x busbw / peak`` with the link peak of :mod:`.hardware`.

Across ranks, instances are matched by ``(pg_name, coll_seq)`` (when the trace has no
sequence numbers, by the order of collectives of the group on each rank). For each
match: the duration free of waiting for late ranks is the minimum duration across
ranks (the last rank to arrive waits least), the arrival skew is the latest start
minus the earliest, and the late rank is the one that started last.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import polars as pl

from charllm_trace.analysis.context import RankContext, context_of
from charllm_trace.analysis.group_size import Tally, ranks_per_node, tensor_group_notes, tensor_group_sizes
from charllm_trace.analysis.hardware import link_peak, spans_nodes
from charllm_trace.analysis.results import (
    BANDWIDTH_SUMMARY_SCHEMA,
    COLLECTIVE_SCHEMA,
    MATCHED_SCHEMA,
    NO_PEAK,
    BandwidthResult,
    LinkPeak,
    frame,
)
from charllm_trace.analysis.stragglers import stragglers
from charllm_trace.core.classify import ancestor_any, is_gpu_trace, positions
from charllm_trace.core.model import Run, Trace

#: Element sizes in bytes by dtype name (torch / Kineto / Chakra spellings).
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "f32": 4, "float64": 8, "double": 8, "f64": 8,
    "float16": 2, "half": 2, "f16": 2, "bfloat16": 2, "bf16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "int8": 1, "uint8": 1, "char": 1, "byte": 1, "bool": 1,
    "int16": 2, "short": 2, "int32": 4, "int": 4, "int64": 8, "long": 8,
    "complex64": 8, "complex128": 16,
}  # fmt: skip

#: nccl-tests bus-bandwidth factor as a function of the group size n.
BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "gather": lambda n: 1.0,
    "scatter": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}

#: Kernel-name fragments -> collective type, for comm kernels the converter left untyped. A
#: ``SendRecv`` kernel says nothing of its type (NCCL runs all_to_all, and the point-to-point parts
#: of other collectives, through it): without a launcher that says, its type stays unknown (null).
_NAME_TYPES: tuple[tuple[str, str | None], ...] = (
    ("(?i)allreduce|all_reduce", "all_reduce"),
    ("(?i)allgather|all_gather", "all_gather"),
    ("(?i)reducescatter|reduce_scatter", "reduce_scatter"),
    ("(?i)alltoall|all_to_all", "all_to_all"),
    ("(?i)broadcast", "broadcast"),
    ("(?i)sendrecv", None),
    ("(?i)send", "send"),
    ("(?i)recv", "recv"),
    ("(?i)reduce", "reduce"),
)

_UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))


def _fmt_bytes(b: int) -> str:
    for size, unit in _UNITS:
        if b >= size:
            return f"{b // size}{unit}"
    return "0B"


def size_bucket_low(nbytes: int) -> int:
    """The lower bound 4^k of the bucket of ``nbytes`` (0 for a size of 0 or less)."""
    if nbytes <= 0:
        return 0
    k = int(math.floor(math.log(nbytes, 4)))
    while 4**k > nbytes:  # guard float error
        k -= 1
    while 4 ** (k + 1) <= nbytes:
        k += 1
    return int(4**k)


def size_bucket_label(nbytes: int | None) -> str | None:
    """Powers-of-4 buckets in binary units: ``[4^k, 4^(k+1))``, e.g. ``1MiB-4MiB``."""
    if nbytes is None:
        return None
    if nbytes <= 0:
        return "0B"
    low = size_bucket_low(nbytes)
    return f"{_fmt_bytes(low)}-{_fmt_bytes(4 * low)}"


#: Collectives whose bus factor does not depend on the group size (1 for any n).
SIZE_FREE = frozenset({"broadcast", "reduce", "gather", "scatter", "send", "recv"})


def bus_factor(coll_type: str | None, n: int | None) -> float | None:
    """nccl-tests' factor for ``coll_type`` in a group of ``n``; null when it cannot be known
    (an unknown type, or an unknown size where the factor depends on it)."""
    f = BUS_FACTOR.get(coll_type or "")
    if f is None:
        return None
    if coll_type in SIZE_FREE:
        return 1.0
    if not n or n < 1:
        return None
    return float(f(n))


def _instances(trace: Trace, df: pl.DataFrame) -> pl.DataFrame:
    gpu_mode = is_gpu_trace(df)
    if gpu_mode:
        return df.filter(pl.col("cls") == "comm")
    flag = df["coll_type"].is_not_null().to_numpy() & (df["cls"] == "cpu_comm").to_numpy()
    ids, parents = df["id"].to_numpy(), df["parent"].to_numpy()
    # outermost: flagged, and no strict ancestor flagged
    ppos = positions(ids, parents)
    anc = ancestor_any(ids, parents, flag, ppos)
    strict = np.where(ppos >= 0, anc[np.maximum(ppos, 0)], False)
    return df.filter(pl.Series(flag & ~strict))


def _coll_type_expr() -> pl.Expr:
    e: pl.Expr = pl.lit(None, dtype=pl.String)
    for rx, ct in reversed(_NAME_TYPES):
        e = pl.when(pl.col("name").str.contains(rx)).then(pl.lit(ct, dtype=pl.String)).otherwise(e)
    return pl.coalesce(pl.col("coll_type"), e)


def collectives(
    source: Trace | RankContext,
    *,
    peak_gbps: float | None = None,
    group_dims: Mapping[str, str | None] | None = None,
    hosts: Mapping[int, str | None] | None = None,
    tally: Tally | None = None,
    node_gpus: int | None = None,
) -> tuple[pl.DataFrame, dict[str, LinkPeak]]:
    """COLLECTIVE_SCHEMA rows of one rank, and the link peak used per process group. Group sizes
    taken from the collectives' own tensors (:mod:`.group_size`) are counted in ``tally``;
    ``node_gpus``: the run's GPUs per node, when known (for the link peak). ``source``: the
    rank's trace, or its :class:`RankContext` (classified nodes and step windows computed once)."""
    ctx = context_of(source)
    trace = ctx.trace
    rank = trace.meta.rank if trace.meta.rank is not None else 0
    df = ctx.classified
    inst = _instances(trace, df).filter(pl.col("dur_ns").is_not_null())
    if inst.height == 0:
        return frame({}, COLLECTIVE_SCHEMA), {}
    dims = dict(group_dims or {})
    hosts = dict(hosts or {})
    if trace.meta.hostname is not None:
        hosts.setdefault(rank, trace.meta.hostname)
    dtype_size = (
        pl.col("dtype")
        .str.to_lowercase()
        .str.replace(r"^(torch\.|c10::)", "")
        .replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
    )
    attr_n = pl.col("attrs").str.extract(r'"Group size"\s*:\s*"?(\d+)', 1).cast(pl.Int64, strict=False)
    pgs = {pg.name: pg for pg in trace.meta.process_groups}
    pg_size = {k: (len(v.ranks) or None) for k, v in pgs.items()}
    inst = inst.with_columns(
        coll_type=_coll_type_expr(),
        bytes=pl.coalesce(pl.col("comm_bytes"), pl.col("num_elems") * dtype_size),
        group_size=pl.coalesce(
            pl.col("pg_name").replace_strict(pg_size, default=None, return_dtype=pl.Int64),
            attr_n,
            pl.lit(trace.meta.world_size, dtype=pl.Int64),
        ),
    )
    inst = tensor_group_sizes(inst, tally)
    # step of each instance: the step window holding its start (analysis/step_windows.py)
    step = np.full(inst.height, None, dtype=object)
    if inst["start_ns"].is_not_null().any():
        t = inst["start_ns"].fill_null(np.iinfo(np.int64).min).to_numpy()
        step[:] = ctx.windows.step_of(t)
    # bus factor per (type, n): few distinct pairs
    pairs = inst.select("coll_type", "group_size").unique()
    fac = pairs.with_columns(
        bus_factor=pl.Series([bus_factor(c, n) for c, n in pairs.iter_rows()], dtype=pl.Float64)
    )
    # link peak per process group
    peaks: dict[str, LinkPeak] = {}
    peak_of: dict[str | None, float | None] = {}
    sizes = dict(inst.group_by("pg_name").agg(pl.col("group_size").max()).iter_rows())
    for pg_name in inst["pg_name"].unique(maintain_order=True).to_list():
        pg = pgs.get(pg_name) if pg_name is not None else None
        spans = spans_nodes(pg.ranks, hosts) if pg is not None and pg.ranks else None
        lp = link_peak(trace.meta.device_model, spans, peak_gbps, sizes.get(pg_name), node_gpus)
        peaks[str(pg_name)] = lp
        peak_of[pg_name] = lp.gbps
    peak_df = pl.DataFrame(
        {"pg_name": list(peak_of), "peak_gbps": list(peak_of.values())},
        schema={"pg_name": pl.String, "peak_gbps": pl.Float64},
    )
    out = (
        inst.with_columns(step=pl.Series(step.tolist(), dtype=pl.Int64))
        .join(fac, on=["coll_type", "group_size"], how="left", nulls_equal=True)
        .join(peak_df, on="pg_name", how="left", nulls_equal=True)
        .with_columns(
            rank=pl.lit(rank, dtype=pl.Int64),
            algbw_gbps=pl.when(pl.col("dur_ns") > 0).then(pl.col("bytes") / pl.col("dur_ns")),
            pg_desc=pl.col("pg_name").replace_strict(
                {k: v.desc for k, v in pgs.items()}, default=None, return_dtype=pl.String
            ),
            dim=pl.col("pg_name").replace_strict(dims, default=None, return_dtype=pl.String)
            if dims
            else pl.lit(None, dtype=pl.String),
        )
        .with_columns(busbw_gbps=pl.col("algbw_gbps") * pl.col("bus_factor"))
        .with_columns(util_pct=100.0 * pl.col("busbw_gbps") / pl.col("peak_gbps"))
    )
    buckets = {b: size_bucket_label(b) for b in out["bytes"].drop_nulls().unique().to_list()}
    out = out.with_columns(
        size_bucket=pl.col("bytes").replace_strict(buckets, default=None, return_dtype=pl.String)
    ).sort("start_ns")
    return frame(out, COLLECTIVE_SCHEMA), peaks


def summarize(coll: pl.DataFrame) -> pl.DataFrame:
    """Aggregate by (coll_type, pg_name, size_bucket): totals and time-weighted bandwidths."""
    if coll.height == 0:
        return frame({}, BANDWIDTH_SUMMARY_SCHEMA)
    agg = (
        coll.group_by(["coll_type", "pg_name", "size_bucket"], maintain_order=True)
        .agg(
            pl.col("dim").first(),
            pl.len().alias("count"),
            # null, not 0, for a group whose sizes are unknown (their instances have no bytes)
            pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()).alias("bytes_total"),
            pl.col("dur_ns").sum().alias("dur_ns_total"),
            pl.when(pl.col("bytes").is_not_null().any())
            .then((pl.col("bytes") * pl.col("bus_factor")).sum())
            .alias("_bus_bytes"),
            pl.col("bus_factor").is_null().any().alias("_nofac"),
            pl.col("busbw_gbps").max().alias("busbw_max_gbps"),
            pl.col("peak_gbps").first(),
            pl.col("bytes").min().alias("_minb"),
        )
        .with_columns(
            algbw_time_weighted_gbps=pl.when(pl.col("dur_ns_total") > 0).then(
                pl.col("bytes_total") / pl.col("dur_ns_total")
            ),
            busbw_time_weighted_gbps=pl.when((pl.col("dur_ns_total") > 0) & ~pl.col("_nofac")).then(
                pl.col("_bus_bytes") / pl.col("dur_ns_total")
            ),
        )
        .with_columns(util_pct=100.0 * pl.col("busbw_time_weighted_gbps") / pl.col("peak_gbps"))
        .sort(["coll_type", "pg_name", "_minb"], nulls_last=True)
    )
    return frame(agg, BANDWIDTH_SUMMARY_SCHEMA)


def match_ranks(coll: pl.DataFrame) -> pl.DataFrame:
    """Match instances across ranks by (pg_name, coll_seq); MATCHED_SCHEMA rows for
    collectives seen on at least two ranks."""
    if coll.height == 0 or coll["rank"].n_unique() < 2:
        return frame({}, MATCHED_SCHEMA)
    c = coll.sort("start_ns").with_columns(
        _order=pl.int_range(pl.len()).over(["rank", "pg_name"]),
    )
    c = c.with_columns(_key=pl.coalesce(pl.col("coll_seq"), pl.col("_order")))
    m = (
        c.group_by(["pg_name", "_key"])
        .agg(
            pl.col("coll_type").first(),
            pl.col("bytes").max(),
            pl.col("group_size").max(),
            pl.col("rank").n_unique().alias("n_ranks"),
            pl.col("dur_ns").min().alias("dur_min_ns"),
            pl.col("dur_ns").max().alias("dur_max_ns"),
            pl.col("bus_factor").first(),
            pl.col("start_ns").min().alias("first_start_ns"),
            pl.col("start_ns").max().alias("last_start_ns"),
            pl.col("rank").sort_by("start_ns").last().alias("late_rank"),
        )
        .filter(pl.col("n_ranks") >= 2)
        .with_columns(
            coll_seq=pl.col("_key"),
            skew_ns=pl.col("last_start_ns") - pl.col("first_start_ns"),
            busbw_gbps=pl.when(pl.col("dur_min_ns") > 0).then(
                pl.col("bytes") * pl.col("bus_factor") / pl.col("dur_min_ns")
            ),
        )
        .sort(["pg_name", "coll_seq"])
    )
    return frame(m, MATCHED_SCHEMA)


def bandwidth(
    run: Run | Trace,
    *,
    peak_gbps: float | None = None,
    group_dims: Mapping[str, str | None] | None = None,
    contexts: Mapping[int, RankContext] | None = None,
) -> BandwidthResult:
    """Bandwidth of every collective of every rank of ``run`` (``contexts``: the ranks'
    :class:`RankContext`, when the caller has them)."""
    if isinstance(run, Trace):
        run = Run.single(run)
    hosts = run_hosts(run)
    node_gpus = ranks_per_node(run.manifest)
    frames: list[pl.DataFrame] = []
    peaks: dict[str, LinkPeak] = {}
    tally: Tally = {}
    simulated = False
    for r in run.ranks:
        tr = run.traces[r]
        simulated |= bool(tr.meta.extra.get("simulated"))
        c, p = collectives(
            (contexts or {}).get(r) or tr,
            peak_gbps=peak_gbps,
            group_dims=group_dims,
            hosts=hosts,
            tally=tally,
            node_gpus=node_gpus,
        )
        frames.append(c)
        peaks.update(p)
    return bandwidth_from(frames, peaks, simulated=simulated, tally=tally)


def run_hosts(run: Run) -> dict[int, str | None]:
    """Each rank's host: the collector's manifest (``ranks_by_host``), then each trace's hostname."""
    return hosts_of(run.manifest, {r: t.meta.hostname for r, t in run.traces.items()})


def hosts_of(manifest: object, hostnames: Mapping[int, str | None]) -> dict[int, str | None]:
    """:func:`run_hosts` from the manifest and each rank's hostname (what a worker sends back)."""
    hosts: dict[int, str | None] = {}
    by_host = manifest.get("ranks_by_host") if isinstance(manifest, dict) else None
    if isinstance(by_host, dict):  # the collector's manifest knows every rank's host
        for h, ranks in by_host.items():
            for r in ranks if isinstance(ranks, list) else ():
                if isinstance(r, int):
                    hosts[r] = str(h)
    for r, h in hostnames.items():
        if h is not None:
            hosts[r] = h
    return hosts


def bandwidth_from(
    frames: list[pl.DataFrame],
    peaks: dict[str, LinkPeak],
    *,
    simulated: bool = False,
    tally: Tally | None = None,
) -> BandwidthResult:
    """The cross-rank part of :func:`bandwidth`: every rank's COLLECTIVE_SCHEMA rows (in rank
    order), link peaks and tensor group-size tally (summed over ranks) -> notes, summary, the
    matching across ranks and the stragglers."""
    notes: list[str] = []
    coll = pl.concat(frames) if frames else frame({}, COLLECTIVE_SCHEMA)
    if coll.height == 0:
        notes.append("no collectives in this trace")
    else:
        nb = coll["bytes"].is_null().sum()
        if nb:
            notes.append(f"{nb} collectives carry no message size: no bandwidth for them")
        notes.extend(tensor_group_notes(tally or {}))
        nofac = coll.filter(pl.col("bus_factor").is_null() & pl.col("coll_type").is_not_null())
        if nofac.height:  # a factor that depends on the group size (broadcast's is 1 for any size)
            kinds = ", ".join(sorted(set(nofac["coll_type"].to_list())))
            notes.append(
                f"group size unknown for {nofac.height} collectives ({kinds}): no bus bandwidth for them"
            )
        if any(p.gbps is None for p in peaks.values()):
            notes.append(NO_PEAK)
        if coll["rank"].n_unique() >= 2 and coll["coll_seq"].is_null().all():
            notes.append(
                "no collective sequence numbers: ranks matched by the order of each group's collectives"
            )
    return BandwidthResult(
        collectives=coll,
        summary=summarize(coll),
        matched=match_ranks(coll),
        peaks=peaks,
        simulated=simulated,
        notes=notes,
        stragglers=stragglers(coll),
    )
