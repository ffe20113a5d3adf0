"""Pipeline bubbles: each microbatch's forward and backward span per stage and step, the bubble of
every stage within its pipeline's window, the schedule recognised (1F1B or GPipe) against its
theoretical bubble fraction (p-1)/(m+p-1), and its warm-up / steady / cool-down phases.

Microbatches are found by their ``record_function`` labels (:data:`LABEL`: ``forward_mb3``,
``bwd_microbatch_0`` ...); a rank's stage is its position in its pipeline-parallel process group
(the group whose dimension is ``pp``, analysis/parallel.py). Definitions: docs/analyses.md,
"Pipeline bubbles". Pure functions of the trace model; vectorised except per (rank, step) work.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from charllm_trace.analysis.pipeline_results import PIPELINE_MB_SCHEMA, PIPELINE_STAGE_SCHEMA, PipelineResult
from charllm_trace.analysis.results import frame
from charllm_trace.core.model import COMM_NODE_TYPES, ProcessGroup, Trace

#: A microbatch label: forward|fwd|backward|bwd, then mb|microbatch|micro_batch, then its number.
LABEL = r"(?i)^(forward|fwd|backward|bwd)[_ .:-]?(?:mb|microbatch|micro_batch)[_ .:=#-]?(\d+)$"
#: Host-side communication ops (besides the COMM_* node types) whose time inside a label is not work.
COMM_NAME = r"^(c10d::|gloo:|nccl:|record_param_comms)"
SCHEDULES = ("1f1b", "gpipe")
UNRECOGNISED = "unrecognised"
NO_LABELS = (
    "no microbatch labels (record_function forward_mb<k> / backward_mb<k>): pipeline view not computed"
)
NO_PP_GROUP = (
    "microbatch labels but no pipeline-parallel process group: each such rank is taken as a "
    "one-stage pipeline (a layout with pp can be given: parallel)"
)


def stage_of(
    rank: int, groups: tuple[ProcessGroup, ...], dims: Mapping[str, str | None]
) -> tuple[str, int, int]:
    """(pipeline group name, stage, number of stages) of ``rank``; ("", 0, 1) without a pp group."""
    for pg in groups:
        dim = dims.get(pg.name) or ""
        if "pp" in dim.split("+") and pg.ranks and rank in pg.ranks:
            ranks = sorted(pg.ranks)
            return pg.name, ranks.index(rank), len(ranks)
    return "", 0, 1


def _labels(nodes: pl.DataFrame) -> pl.DataFrame:
    lab = nodes.filter(
        pl.col("name").str.contains(LABEL) & pl.col("start_ns").is_not_null() & pl.col("dur_ns").is_not_null()
    )
    if lab.height and lab["on_gpu"].any():  # device-side annotations: the device's time
        lab = lab.filter(pl.col("on_gpu"))
    else:
        lab = lab.filter(~pl.col("on_gpu"))
    m = pl.col("name").str.extract_groups(LABEL)
    return lab.select(
        pl.col("id"),
        pl.when(m.struct.field("1").str.to_lowercase().is_in(["forward", "fwd"]))
        .then(pl.lit("forward"))
        .otherwise(pl.lit("backward"))
        .alias("kind"),
        m.struct.field("2").cast(pl.Int64, strict=False).alias("microbatch"),  # null past int64
        pl.col("start_ns"),
        (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        pl.when(pl.col("on_gpu"))
        .then(pl.col("device").cast(pl.Int64))
        .otherwise(pl.col("tid"))
        .alias("_lane"),
        pl.col("on_gpu"),
    )


def profiler_steps(nodes: pl.DataFrame) -> pl.DataFrame:
    """step, _s0, _s1: each ProfilerStep#N range of the host (the first of a repeated number)."""
    return (
        nodes.filter(~pl.col("on_gpu") & pl.col("name").str.starts_with("ProfilerStep#"))
        .select(
            pl.col("name").str.extract(r"ProfilerStep#(\d+)", 1).cast(pl.Int64, strict=False).alias("step"),
            pl.col("start_ns").alias("_s0"),
            (pl.col("start_ns") + pl.col("dur_ns")).alias("_s1"),
        )
        .drop_nulls()
        .unique("step", keep="first")
        .sort("_s0")
    )


def _nested_comm(nodes: pl.DataFrame, lab: pl.DataFrame) -> pl.DataFrame:
    """id -> comm_ns: the union of communication ops on the label's lane, clipped to the label."""
    comm = nodes.filter(
        (pl.col("node_type").is_in(COMM_NODE_TYPES) | pl.col("name").str.contains(COMM_NAME))
        & pl.col("start_ns").is_not_null()
        & pl.col("dur_ns").is_not_null()
    ).select(
        pl.when(pl.col("on_gpu"))
        .then(pl.col("device").cast(pl.Int64))
        .otherwise(pl.col("tid"))
        .alias("_lane"),
        pl.col("on_gpu"),
        pl.col("start_ns").alias("_c0"),
        (pl.col("start_ns") + pl.col("dur_ns")).alias("_c1"),
    )
    # each op to the last label of its lane that starts at or before it (labels of a lane follow
    # each other): sorted joins, not every label against every op of its lane
    lanes = lab.select("id", "start_ns", "end_ns", "_lane", "on_gpu").sort("start_ns")
    j = (
        comm.sort("_c0")
        .join_asof(  # both sides sorted on their key just above
            lanes, left_on="_c0", right_on="start_ns", by=["_lane", "on_gpu"], check_sortedness=False
        )
        .filter(  # nested: an async op's record that outlives the label (gloo's isend) is not inside it
            pl.col("id").is_not_null() & (pl.col("_c1") <= pl.col("end_ns"))
        )
        .sort("id", "_c0")
        .with_columns(_prev=pl.col("_c1").cum_max().shift(1).over("id"))
        .with_columns(_a=pl.max_horizontal("_c0", pl.col("_prev").fill_null(pl.col("_c0"))))
        .group_by("id")
        .agg((pl.col("_c1") - pl.col("_a")).clip(lower_bound=0).sum().alias("comm_ns"))
    )
    return j


def rank_microbatches(
    rank: int, trace: Trace, dims: Mapping[str, str | None]
) -> tuple[pl.DataFrame, list[str]]:
    """PIPELINE_MB_SCHEMA rows (phase null) of one rank, and notes; empty without labels."""
    nodes = trace.nodes
    if not trace.meta.has_timestamps or nodes.height == 0:
        return frame({}, PIPELINE_MB_SCHEMA), []
    lab = _labels(nodes)
    if lab.height == 0:
        return frame({}, PIPELINE_MB_SCHEMA), []
    pipe, stage, p = stage_of(rank, trace.meta.process_groups, dims)
    steps = profiler_steps(nodes)
    lab = lab.sort("start_ns")
    if steps.height:
        lab = lab.join_asof(steps, left_on="start_ns", right_on="_s0", strategy="backward").with_columns(
            step=pl.when(pl.col("start_ns") < pl.col("_s1")).then(pl.col("step"))
        )
    else:
        lab = lab.with_columns(step=pl.lit(None, pl.Int64))
    comm = _nested_comm(nodes, lab)
    out = lab.join(comm, on="id", how="left").with_columns(
        rank=pl.lit(rank, pl.Int64),
        pipeline=pl.lit(pipe),
        stage=pl.lit(stage, pl.Int64),
        dur_ns=pl.col("end_ns") - pl.col("start_ns"),
        comm_ns=pl.col("comm_ns").fill_null(0),
    )
    out = out.with_columns(
        busy_ns=pl.col("dur_ns") - pl.col("comm_ns"), _p=pl.lit(p, pl.Int64), _id=pl.col("id")
    )
    notes = [NO_PP_GROUP] if not pipe else []
    n_out = int(out["step"].null_count())
    if n_out:
        notes.append(f"{n_out} microbatch spans outside every ProfilerStep: not in the per-step bubbles")
    return frame(out, {**PIPELINE_MB_SCHEMA, "_p": pl.Int64, "_id": pl.Int64}), notes


def expected_order(schedule: str, stage: int, p: int, m: int) -> list[tuple[str, int]]:
    """The (kind, microbatch) order a stage runs under ``schedule`` ("1f1b" or "gpipe")."""
    if schedule == "gpipe":
        return [("forward", i) for i in range(m)] + [("backward", i) for i in range(m)]
    warm = min(p - stage - 1, m)
    order = [("forward", i) for i in range(warm)]
    for i in range(m - warm):
        order += [("forward", warm + i), ("backward", i)]
    return order + [("backward", i) for i in range(m - warm, m)]


def recognise(kinds: list[str], mbs: list[int], stage: int, p: int) -> tuple[str, int]:
    """(schedule, m) of one stage's ordered ops: the first of SCHEDULES whose order they follow."""
    m = kinds.count("forward")
    got = list(zip(kinds, mbs, strict=True))
    if m == 0 or kinds.count("backward") != m:
        return UNRECOGNISED, m
    for s in SCHEDULES:
        if got == expected_order(s, stage, p, m):
            return s, m
    return UNRECOGNISED, m


def _schedules(ops: pl.DataFrame) -> pl.DataFrame:
    """(rank, step) -> schedule, m, busy_ns; a pipeline whose stages disagree is unrecognised."""
    per = (
        ops.sort("start_ns")
        .group_by("rank", "step", maintain_order=True)
        .agg(
            pl.col("_pkey").first(),
            pl.col("pipeline").first(),
            pl.col("stage").first(),
            pl.col("_p").first(),
            pl.col("kind"),
            pl.col("microbatch"),
            pl.col("busy_ns").sum(),
        )
    )
    found = [  # one recognition per (rank, step): not per event
        recognise(k, mb, s, p)
        for k, mb, s, p in zip(
            per["kind"].to_list(), per["microbatch"].to_list(), per["stage"], per["_p"], strict=True
        )
    ]
    per = per.drop("kind", "microbatch").with_columns(
        schedule=pl.Series([f[0] for f in found], dtype=pl.String),
        n_microbatches=pl.Series([f[1] for f in found], dtype=pl.Int64),
    )
    agree = (
        (pl.col("schedule").n_unique().over("_pkey", "step") == 1)
        & (pl.col("n_microbatches").n_unique().over("_pkey", "step") == 1)
        & (pl.col("stage").n_unique().over("_pkey", "step") == pl.col("_p"))
    )
    return per.with_columns(schedule=pl.when(agree).then(pl.col("schedule")).otherwise(pl.lit(UNRECOGNISED)))


def _phase_expr() -> pl.Expr:
    warm = (
        pl.when(pl.col("schedule") == "gpipe")
        .then(pl.col("n_microbatches"))
        .otherwise(pl.min_horizontal(pl.col("_p") - pl.col("stage") - 1, pl.col("n_microbatches")))
    )
    idx = pl.int_range(pl.len()).over("rank", "step")
    n = 2 * pl.col("n_microbatches")
    return (
        pl.when(pl.col("schedule") == UNRECOGNISED)
        .then(pl.lit(None, pl.String))
        .when(idx < warm)
        .then(pl.lit("warmup"))
        .when(idx >= n - warm)
        .then(pl.lit("cooldown"))
        .otherwise(pl.lit("steady"))
    )


def _stage_rows(ops: pl.DataFrame, per: pl.DataFrame) -> pl.DataFrame:
    def first(phase: str, col: str, agg: str) -> pl.Expr:
        e = pl.col(col).filter(pl.col("phase") == phase)
        return (e.min() if agg == "min" else e.max()).alias(f"_{phase}_{agg}")

    def busy(phase: str) -> pl.Expr:
        return pl.col("busy_ns").filter(pl.col("phase") == phase).sum().alias(f"_{phase}_busy")

    b = ops.group_by("rank", "step").agg(
        first("steady", "start_ns", "min"),
        first("steady", "end_ns", "max"),
        first("cooldown", "start_ns", "min"),
        busy("warmup"),
        busy("steady"),
        busy("cooldown"),
    )
    known = pl.col("schedule") != UNRECOGNISED
    w_end = pl.coalesce("_steady_min", "_cooldown_min", "end_ns")
    c_start = pl.coalesce("_steady_max", w_end)
    p, m = pl.col("_p"), pl.col("n_microbatches")
    return (
        per.join(b, on=["rank", "step"])
        .with_columns(window_ns=pl.col("end_ns") - pl.col("start_ns"), n_stages=p)
        .with_columns(
            bubble_ns=pl.col("window_ns") - pl.col("busy_ns"),
            theory_pct=pl.when(known).then(100.0 * (p - 1) / (m + p - 1)),
            warmup_ns=pl.when(known).then(w_end - pl.col("start_ns")),
            steady_ns=pl.when(known).then(c_start - w_end),
            cooldown_ns=pl.when(known).then(pl.col("end_ns") - c_start),
        )
        .with_columns(
            bubble_pct=pl.when(pl.col("window_ns") > 0).then(
                100.0 * pl.col("bubble_ns") / pl.col("window_ns")
            ),
            warmup_bubble_ns=pl.col("warmup_ns") - pl.col("_warmup_busy"),
            steady_bubble_ns=pl.col("steady_ns") - pl.col("_steady_busy"),
            cooldown_bubble_ns=pl.col("cooldown_ns") - pl.col("_cooldown_busy"),
        )
        .sort("rank", "step")
    )


def pipeline_from(
    frames: list[pl.DataFrame], notes: list[str] | None = None, *, simulated: bool = False
) -> PipelineResult | None:
    """The run's pipeline view from every rank's :func:`rank_microbatches`; None without labels."""
    frames = [f for f in frames if f.height]
    if not frames:
        return None
    mb = pl.concat(frames, how="vertical").with_columns(
        _pkey=pl.when(pl.col("pipeline") != "")
        .then(pl.col("pipeline"))
        .otherwise(pl.format("rank:{}", pl.col("rank")))
    )
    ops = mb.filter(pl.col("step").is_not_null())
    win = ops.group_by("_pkey", "step").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    per = _schedules(ops).join(win, on=["_pkey", "step"])
    ops = ops.join(per.select("rank", "step", "schedule", "n_microbatches"), on=["rank", "step"])
    ops = ops.sort("rank", "step", "start_ns").with_columns(phase=_phase_expr())
    stages = _stage_rows(ops, per)
    out_notes = list(notes or [])
    bad = stages.filter(pl.col("schedule") == UNRECOGNISED)
    if bad.height:
        out_notes.append(
            f"{bad.height} (rank, step) pairs follow neither a 1F1B nor a GPipe order of their pipeline "
            f"({bad['window_ns'].sum() / 1e6:,.3f} ms of windows): bubbles measured, no theory or phases"
        )
    phased = mb.drop("phase").join(ops.select("_id", "rank", "phase"), on=["_id", "rank"], how="left")
    return PipelineResult(
        microbatches=frame(phased.sort("rank", "start_ns"), PIPELINE_MB_SCHEMA),
        stages=frame(stages, PIPELINE_STAGE_SCHEMA),
        simulated=simulated,
        notes=out_notes,
    )
