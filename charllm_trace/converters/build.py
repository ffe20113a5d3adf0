"""Assemble the trace model (:class:`~charllm_trace.core.model.Trace`) from a parsed Kineto profile,
optionally joined with a PyTorch host execution trace.

Node ids: in a Kineto-only conversion a node's id is its row in the profile's
table of complete events. When a host ET is linked, linked CPU ops take the host
ET node id and every other node gets an id above the host ET's largest.

``launch_id`` of a GPU node (kernel, memcpy, memset) is the CPU op that encloses
the runtime call (``cudaLaunchKernel``, ``hipMemcpyWithStream`` ...) whose
``correlation`` matches it; when the runtime call has no enclosing op (called
directly from a thread's top level) it is the runtime call itself. The runtime
call stays reachable through the shared ``correlation`` value. GPU nodes with no
runtime call fall back to the CPU op with the same ``External id``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.converters.annotate import annotate_collectives
from charllm_trace.converters.build_steps import (
    attrs_column,
    control_deps,
    cpu_tree,
    link_gpu,
    meta_from_profile,
    node_types,
)
from charllm_trace.converters.kineto_profile import KinetoProfile
from charllm_trace.core.alloc import trim_heap
from charllm_trace.core.model import Trace


def kineto_trace(prof: KinetoProfile) -> tuple[Trace, dict[str, Any]]:
    """Kineto-only conversion: CPU tree by time nesting, GPU nodes by correlation, collectives.

    Consumes ``prof.events`` (left empty) so that a big profile is not held twice."""
    ev = prof.events.rename({"row": "id"})
    prof.events = prof.events.clear()  # consumed: lets its buffers go as soon as ev's replace them
    ev = cpu_tree(ev)
    # the call tree's numpy temporaries (sorts of the CPU rows) are freed: their pages go back
    # before the polars steps below allocate (jemalloc does not reuse glibc's free pages)
    trim_heap()
    ev, gstats = link_gpu(ev)
    ev = node_types(ev)
    ev, creport, pgs = annotate_collectives(ev, prof.comm_args, prof)
    attrs = attrs_column(ev, prof.comm_args)
    nodes = ev.drop("_rt_id", "cat").with_columns(attrs)
    meta = meta_from_profile(prof, ev, pgs)
    report: dict[str, Any] = {
        "source": "kineto",
        "kineto": prof.path,
        "kineto_events": prof.n_raw_events,
        "nodes": nodes.height,
        "link_method": "none (Kineto only)",
        **gstats,
        **creport,
    }
    meta.extra["convert"] = report
    trace = Trace(nodes=nodes, deps=control_deps(nodes), meta=meta)
    trim_heap()  # the build's numpy temporaries are freed: give their pages back
    return trace, report


#: Host-ET ops whose inputs feed the collective sizes (kept small: the io map is a dict).
_COMM_IO_PREFIXES = ("c10d::", "gloo:", "nccl:", "rccl:", "hccl:", "record_param_comms")


def _fill_times_from_descendants(nodes: pl.DataFrame, rounds: int = 16) -> pl.DataFrame:
    """Give timeless nodes (host-ET thread roots, ops outside the profile) the span of their timed
    descendants, bottom-up. Nodes with no timed descendant keep null times."""
    for _ in range(rounds):
        missing = nodes["start_ns"].is_null()
        if not missing.any():
            break
        span = (
            nodes.filter(pl.col("parent").is_not_null() & pl.col("start_ns").is_not_null())
            .group_by("parent")
            .agg(
                pl.col("start_ns").min().alias("_s"),
                (pl.col("start_ns") + pl.col("dur_ns")).max().alias("_e"),
            )
            .rename({"parent": "id"})
        )
        before = int(missing.sum())
        nodes = (
            nodes.join(span, on="id", how="left", maintain_order="left")
            .with_columns(
                pl.coalesce("start_ns", "_s").alias("start_ns"),
                pl.when(pl.col("start_ns").is_null())
                .then(pl.col("_e") - pl.col("_s"))
                .otherwise(pl.col("dur_ns"))
                .alias("dur_ns"),
            )
            .drop("_s", "_e")
        )
        if int(nodes["start_ns"].is_null().sum()) == before:
            break
    return nodes


def linked_trace(host: Any, prof: KinetoProfile) -> tuple[Trace, dict[str, Any]]:
    """Host ET + Kineto profile of the same rank: host ops with Kineto times, plus every Kineto-only
    node (runtime calls, kernels, memcpys, Python functions), collectives and data dependencies."""
    from charllm_trace.converters.host_et import data_deps, pg_groups
    from charllm_trace.converters.link import link

    ev = prof.events.rename({"row": "id"})
    ev = cpu_tree(ev)
    lk = link(host, ev, prof.path)
    if lk.method == "none":
        trace, report = kineto_trace(prof)
        report.update(host_et=host.path, link_method="none", link=lk.stats)
        report["link_method"] = f"none (Kineto only: {lk.stats.get('fallback_reason')})"
        trace.meta.extra["convert"] = report
        trace.meta.extra["link_method"] = "none"
        if not trace.meta.process_groups:
            trace.meta.process_groups = pg_groups(host.process_groups)
        return trace, report
    ev, gstats = link_gpu(ev)
    ev = node_types(ev)
    pairs = lk.pairs
    comm_like = host.nodes.filter(
        pl.col("name").str.starts_with(_COMM_IO_PREFIXES[0])
        | pl.col("name").str.starts_with("gloo:")
        | pl.col("name").str.starts_with("nccl:")
        | pl.col("name").str.starts_with("rccl:")
        | pl.col("name").str.starts_with("hccl:")
        | (pl.col("name") == "record_param_comms")
    )
    comm_pairs = pairs.join(comm_like.select(pl.col("id").alias("host_id")), on="host_id")
    io = {kid: host.io[hid] for kid, hid in comm_pairs.iter_rows() if hid in host.io}
    ev, creport, pgs = annotate_collectives(ev, prof.comm_args, prof, io=io, extra_pgs=host.process_groups)
    ev = ev.with_columns(attrs_column(ev, prof.comm_args)).drop("_rt_id", "cat")
    hn = host.nodes
    offset = int(hn["id"].max()) + 1 if hn.height else 0
    idmap = (
        ev.select("id")
        .join(pairs, on="id", how="left")
        .select("id", pl.coalesce("host_id", pl.col("id") + offset).alias("new"))
    )

    def remap(df: pl.DataFrame, col: str) -> pl.DataFrame:
        m = idmap.rename({"id": col, "new": "_new"})
        return (
            df.join(m, on=col, how="left", maintain_order="left")
            .with_columns(pl.col("_new").alias(col))
            .drop("_new")
        )

    linked = pairs["id"]
    ev = ev.with_columns(pl.col("id").is_in(linked.implode()).alias("_linked"))
    for col in ("parent", "launch_id"):
        ev = remap(ev, col)
    ev = remap(ev, "id")
    hsel = hn.select(
        pl.col("id"),
        pl.col("parent").alias("_hparent"),
        pl.col("rf_id").alias("_hrf"),
        pl.col("inputs").alias("_hin"),
        pl.col("outputs").alias("_hout"),
        pl.col("attrs").alias("_hattrs"),
    )
    # The host ET's parent is trusted only on the child's own thread: PyTorch's execution trace
    # makes an op a child of whatever op was open when it started, even one on another thread
    # (e.g. DDP's async gloo:all_reduce on a gloo worker). Across threads the Kineto nesting
    # parent (same thread, by time) stands. Host-only parents (thread roots) have no Kineto tid.
    # On its own thread, too, the host parent must be open when the child starts: the execution
    # trace can keep an op "open" after it ended (seen for a gloo worker's async all_reduce, which
    # then parented the worker's next collectives); such a parent is not trusted either.
    parent_tid = ev.select(
        pl.col("id").alias("_hparent"),
        pl.col("tid").alias("_ptid"),
        pl.col("start_ns").alias("_pstart"),
        (pl.col("start_ns") + pl.col("dur_ns")).alias("_pend"),
    )
    ev = (
        ev.join(hsel, on="id", how="left", maintain_order="left")
        .join(parent_tid, on="_hparent", how="left", maintain_order="left")
        .with_columns(
            pl.when(
                pl.col("_linked")
                & (pl.col("_ptid").is_null() | pl.col("tid").is_null() | (pl.col("_ptid") == pl.col("tid")))
                & (
                    pl.col("_pstart").is_null()
                    | pl.col("_pend").is_null()
                    | pl.col("start_ns").is_null()
                    | pl.col("start_ns").is_between(pl.col("_pstart"), pl.col("_pend"))
                )
            )
            .then(pl.col("_hparent"))
            .otherwise(pl.col("parent"))
            .alias("parent"),
            pl.coalesce("rf_id", "_hrf").alias("rf_id"),
            pl.col("_hin").alias("inputs"),
            pl.col("_hout").alias("outputs"),
            pl.when(pl.col("_hattrs").is_not_null() & (pl.col("_hattrs") != "{}"))
            .then(
                pl.concat_str(
                    [
                        pl.col("attrs").str.slice(0, pl.col("attrs").str.len_chars() - 1),
                        pl.lit(","),
                        pl.col("_hattrs").str.slice(1),
                    ]
                )
            )
            .otherwise(pl.col("attrs"))
            .alias("attrs"),
        )
        .drop("_hparent", "_ptid", "_pstart", "_pend", "_hrf", "_hin", "_hout", "_hattrs", "_linked")
    )
    # Host nodes with no Kineto op (thread roots, process-group init, ops outside the profile).
    # The host ET numbers threads its own way; put them on Kineto's numbering (the thread most of
    # the thread's linked ops ran on), keeping the host number only where no op was linked.
    ktid = (
        ev.select("id", "tid")
        .join(hn.select("id", "et_tid"), on="id")
        .group_by("et_tid")
        .agg(pl.col("tid").mode().min().alias("_ktid"))
    )
    rest = (
        hn.filter(~pl.col("id").is_in(pairs["host_id"].implode()))
        .join(ktid, on="et_tid", how="left", maintain_order="left")
        .with_columns(pl.coalesce("_ktid", "et_tid").alias("et_tid"))
    ).select(
        "id",
        "name",
        "parent",
        "rf_id",
        "kind",
        "inputs",
        "outputs",
        "attrs",
        pl.col("et_tid").alias("tid"),
        pl.lit(False).alias("on_gpu"),
        pl.when(pl.col("name") == "## process_group:init ##")
        .then(pl.lit("METADATA"))
        .otherwise(pl.lit("COMP"))
        .alias("node_type"),
    )
    nodes = pl.concat([ev, rest], how="diagonal_relaxed")
    nodes = _fill_times_from_descendants(nodes)
    deps = pl.concat([control_deps(nodes), data_deps(host)]).unique(maintain_order=True)
    meta = meta_from_profile(prof, ev, pgs)
    meta.source = "host_et+kineto"
    meta.source_schema = f"pytorch host ET {host.schema}; " + (meta.source_schema or "kineto")
    host_rest = rest.filter(
        ~pl.col("name").str.starts_with("[pytorch|profiler|execution_")
        & (pl.col("name") != "## process_group:init ##")
    )
    report: dict[str, Any] = {
        "source": "host_et+kineto",
        "host_et": host.path,
        "kineto": prof.path,
        "kineto_events": prof.n_raw_events,
        "nodes": nodes.height,
        "link_method": lk.method,
        "host_ops": lk.stats.get("host_ops"),
        "host_ops_linked": pairs.height,
        "host_ops_unlinked": host_rest.height,
        "kineto_ops_unlinked": lk.stats.get("kineto_ops", 0) - pairs.height,
        "link": lk.stats,
        **gstats,
        **creport,
        "data_deps": int((deps["kind"] == "data").sum()),
        "nodes_without_time": int(nodes["start_ns"].is_null().sum()),
    }
    meta.extra["convert"] = report
    meta.extra["link_method"] = lk.method
    return Trace(nodes=nodes, deps=deps, meta=meta), report
