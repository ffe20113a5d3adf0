"""The steps of building the trace model from a parsed Kineto profile's events: the CPU call
tree, GPU launches, node types, ``attrs``, control dependencies and the trace metadata."""

from __future__ import annotations

from typing import Any

import orjson
import polars as pl

from charllm_trace.converters import collectives as C
from charllm_trace.converters.kineto_profile import KinetoProfile
from charllm_trace.core.model import DEP_SCHEMA, ProcessGroup, TraceMeta
from charllm_trace.core.tree import nest_parents


def cpu_tree(ev: pl.DataFrame) -> pl.DataFrame:
    """Add ``parent`` to CPU rows by time nesting (GPU rows get null)."""
    cpu = ev.lazy().filter(~pl.col("on_gpu")).select("id", "pid", "tid", "start_ns", "dur_ns").collect()
    par = nest_parents(cpu)
    del cpu
    # scattered to the CPU rows' positions (a join on id would hash the whole table)
    pos = ev.select(pl.arg_where(~pl.col("on_gpu"))).to_series()
    return ev.with_columns(
        pl.repeat(None, ev.height, dtype=pl.Int64, eager=True).scatter(pos, par).alias("parent")
    )


def link_gpu(ev: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """Add ``launch_id`` (and a helper ``_rt_id``) to GPU rows by runtime correlation."""
    gpu_kinds = ["kernel", "memcpy", "memset"]
    # lazy: only the columns selected are gathered by the filters (eager filters copy every column)
    rt = (
        ev.lazy()
        .filter(
            (pl.col("kind") == "runtime") & pl.col("correlation").is_not_null() & (pl.col("correlation") != 0)
        )
        .select("correlation", pl.col("id").alias("_rt_id"), pl.col("parent").alias("_rt_parent"))
        .unique(subset="correlation", keep="first", maintain_order=True)
        .collect()
    )
    # Fallback: External id -> CPU op / annotation with that External id.
    ext = (
        ev.lazy()
        .filter(
            ~pl.col("on_gpu")
            & pl.col("external_id").is_not_null()
            & pl.col("kind").is_in(["cpu_op", "annotation"])
        )
        .sort("start_ns")
        .select("external_id", pl.col("id").alias("_ext_id"))
        .unique(subset="external_id", keep="first", maintain_order=True)
        .collect()
    )
    gpu = (
        ev.select("id", "kind", "correlation", "external_id", "on_gpu")
        .filter(pl.col("on_gpu"))
        .drop("on_gpu")
        .join(rt, on="correlation", how="left", maintain_order="left")
        .join(ext, on="external_id", how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("kind").is_in(gpu_kinds)).then(pl.col("_rt_id")).alias("_rt_id"),
        )
        .with_columns(
            pl.when(pl.col("kind").is_in(gpu_kinds))
            .then(pl.coalesce("_rt_parent", "_rt_id", "_ext_id"))
            .otherwise(pl.col("_ext_id"))
            .alias("launch_id"),
        )
    )
    # gpu holds the GPU rows in table order (the joins keep it and add no rows: rt and ext are
    # unique by key), so its columns scatter to those rows' positions (no join on id)
    pos = ev.select(pl.arg_where(pl.col("on_gpu"))).to_series()
    ev = ev.with_columns(
        pl.repeat(None, ev.height, dtype=pl.Int64, eager=True).scatter(pos, gpu[c]).alias(c)
        for c in ("_rt_id", "launch_id")
    )
    g = gpu.filter(pl.col("kind").is_in(gpu_kinds))
    stats = {
        "gpu_nodes": g.height,
        "gpu_linked_by_correlation": int(g["_rt_id"].is_not_null().sum()),
        "gpu_linked_by_external_id": int((g["_rt_id"].is_null() & g["launch_id"].is_not_null()).sum()),
        "gpu_unlinked": int(g["launch_id"].is_null().sum()),
    }
    return ev, stats


def meta_from_profile(prof: KinetoProfile, ev: pl.DataFrame, pgs: dict[str, dict[str, Any]]) -> TraceMeta:
    dev_idx = None
    gpu_dev = ev["device"].filter(ev["kind"] == "kernel").drop_nulls()
    if gpu_dev.len():
        dev_idx = int(gpu_dev.mode().sort()[0])
    model = None
    if prof.device_properties:
        match = [d for d in prof.device_properties if C.as_int(d.get("id")) == dev_idx]
        names = {d.get("name") for d in prof.device_properties}
        # No entry with that id (a process that sees one GPU under another index, e.g. a ROCm VF):
        # the name is still certain when every listed device has the same one.
        pick = match[0] if match else (prof.device_properties[0] if len(names) == 1 else None)
        if pick is not None and isinstance(pick.get("name"), str):
            model = pick["name"]
    groups = tuple(
        ProcessGroup(name=k, desc=v.get("desc"), ranks=tuple(int(x) for x in v.get("ranks") or ()))
        for k, v in sorted(pgs.items())
    )
    extra: dict[str, Any] = {}
    if model is None and prof.device_labels:
        # no device properties: the profile's own label of the kernels' device process ("NPU 0")
        pids = ev["pid"].filter(ev["kind"] == "kernel").drop_nulls()
        label = prof.device_labels.get(int(pids.mode().sort()[0])) if pids.len() else None
        if label is not None:
            extra["device_label"] = label
    return TraceMeta(
        rank=prof.rank,
        world_size=prof.world_size,
        device_model=model,
        device_index=dev_idx,
        hostname=prof.hostname,
        has_timestamps=True,
        clock="unix_ns",
        source="kineto",
        source_schema=f"kineto schemaVersion {prof.schema_version}"
        if prof.schema_version is not None
        else "kineto",
        process_groups=groups,
        extra=extra,
    )


def control_deps(nodes: pl.DataFrame) -> pl.DataFrame:
    nodes = nodes.select("id", "parent", "launch_id")  # filters below gather only these
    ctrl_parent = nodes.filter(pl.col("parent").is_not_null()).select(
        pl.col("id").alias("node"), pl.col("parent").alias("dep"), pl.lit("ctrl").alias("kind")
    )
    # launch edges that are not already the parent edge (a gloo send runs inside its c10d op)
    ctrl_launch = nodes.filter(
        pl.col("launch_id").is_not_null()
        & (pl.col("launch_id") != pl.col("id"))
        & (pl.col("parent").is_null() | (pl.col("launch_id") != pl.col("parent")))
    ).select(pl.col("id").alias("node"), pl.col("launch_id").alias("dep"), pl.lit("ctrl").alias("kind"))
    return pl.concat([ctrl_parent, ctrl_launch]).cast(DEP_SCHEMA)  # type: ignore[arg-type]


def node_types(ev: pl.DataFrame) -> pl.DataFrame:
    return ev.with_columns(
        pl.when(pl.col("kind") == "gpu_annotation")
        .then(pl.lit("METADATA"))
        .when(pl.col("name") == "## process_group:init ##")
        .then(pl.lit("METADATA"))
        .otherwise(pl.lit("COMP"))
        .alias("node_type")
    )


def attrs_column(ev: pl.DataFrame, comm_args: dict[int, dict[str, Any]]) -> pl.Series:
    """``attrs``: the Kineto category, plus the verbatim comm args of communication-related nodes."""
    cats = ev["cat"]
    # one string per distinct category, gathered by row: the rows share its bytes (16 B a row)
    distinct = cats.drop_nulls().unique(maintain_order=True)
    per_cat = pl.select(pl.concat_str([pl.lit('{"cat":"'), pl.lit(distinct), pl.lit('"}')])).to_series()
    base = per_cat.gather(cats.cast(pl.Enum(distinct)).to_physical()).alias("attrs")
    if not comm_args:
        return base
    hit = ev.select(pl.int_range(0, pl.len(), dtype=pl.Int64).alias("pos"), "id", "cat").filter(
        pl.col("id").is_in(list(comm_args))
    )
    if hit.height == 0:
        return base
    texts: dict[
        tuple[str, int], str
    ] = {}  # rows that share one args dict (the reader's shape args) share the text
    values = []
    for i, c in zip(hit["id"], hit["cat"], strict=True):
        d = comm_args[i]
        t = texts.get((c, id(d)))
        if t is None:
            t = texts[(c, id(d))] = orjson.dumps({"cat": c, **d}).decode()
        values.append(t)
    return base.scatter(hit["pos"], pl.Series(values, dtype=pl.String))
