"""The result type of the FLOP/s and MFU analysis (``analysis.flops``): frames with fixed columns.

Kept apart from ``analysis.results`` (which imports it) so that loading saved results imports no
analysis. Every figure is an estimate: FLOPs come from the formulas in
``analysis.flops_formulas``, peaks from ``analysis.peaks`` (docs/analyses.md, "FLOP/s and MFU").
FLOPs are integers; times integer ns; TFLOP/s = 10^12 FLOP per second; percentages 0..100.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: The skip reason when no op of a kind this analysis counts is in the trace.
NO_FLOP_OPS = "no GEMM, attention or convolution operators in this trace: FLOP/s and MFU not computed"

#: One row per (rank, step, op class); step null: the whole trace; op_class "all": every class.
FLOPS_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("op_class", pl.String, "", '"gemm" | "attention" | "conv" | "all"'),
    Col("dtype", pl.String, "", 'the ops\' data type ("bf16", "fp32" ...); "mixed"; null when unknown'),
    Col("n_ops", pl.Int64, "", "ops counted (FLOPs known)"),
    Col("n_no_shapes", pl.Int64, "", "ops of the class whose FLOPs could not be counted (no shapes ...)"),
    Col("flop", pl.Int64, "FLOP", "summed FLOPs of the counted ops"),
    Col("n_kernels", pl.Int64, "", "GPU compute kernels those ops launched"),
    Col("kernel_ns", pl.Int64, "ns", "their summed durations (in CPU mode: the ops' own durations)"),
    Col("tflops", pl.Float64, "TFLOP/s", "achieved: flop / kernel_ns"),
    Col(
        "peak_tflops",
        pl.Float64,
        "TFLOP/s",
        "dense peak of the device for the dtype (null when mixed or unknown)",
    ),
    Col("mfu_pct", pl.Float64, "%", "100 * (time the FLOPs take at peak) / kernel_ns"),
    Col("wall_ns", pl.Int64, "ns", "the step's window (whole trace: the span of GPU activity)"),
    Col("wall_tflops", pl.Float64, "TFLOP/s", "flop / wall_ns"),
    Col("wall_mfu_pct", pl.Float64, "%", "100 * (time at peak) / wall_ns: MFU over wall-clock time"),
    Col("mfu_why", pl.String, "", "why mfu_pct is null / the peak is not the dtype's (TF32) / above 100 %"),
)

#: One row per (rank, op name, op class, dtype) over the whole trace.
FLOPS_OP_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("name", pl.String),
    Col("op_class", pl.String),
    Col("dtype", pl.String),
    Col("count", pl.Int64),
    Col("flop", pl.Int64, "FLOP"),
    Col("n_kernels", pl.Int64),
    Col("kernel_ns", pl.Int64, "ns"),
    Col("tflops", pl.Float64, "TFLOP/s"),
    Col("peak_tflops", pl.Float64, "TFLOP/s"),
    Col("mfu_pct", pl.Float64, "%"),
)

#: One row per rank: the device and the peak table row used.
FLOPS_DEVICE_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("device_model", pl.String),
    Col("peak_device", pl.String, "", "the table's name for it; null when not in the table"),
    Col("peak_source", pl.String, "", "the datasheet the figures come from"),
)


@dataclass
class FlopsResult:
    """Achieved FLOP/s and MFU per rank, step and op class; per op name; the peaks used. Estimates."""

    per_step: pl.DataFrame  # FLOPS_SCHEMA
    by_op: pl.DataFrame  # FLOPS_OP_SCHEMA
    devices: pl.DataFrame  # FLOPS_DEVICE_SCHEMA
    mode: str = "gpu"  # "gpu": time = kernels launched; "cpu": the ops' own durations
    simulated: bool = False
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        #: One rank's counted ops, when they run (``t_ns``: CPU mode the op's start, GPU mode its
        #: first kernel's; -1 unknown) and their ``flop``: what power per microbatch phase sums in
        #: each span (analysis/phase_power.py). An input of another analysis, not a result: not a
        #: dataclass field (not saved, compared or exported); None after merging ranks.
        self.op_times: pl.DataFrame | None = None

    def total(self, rank: int | None = None) -> pl.DataFrame:
        """The whole-trace rows (step null), optionally of one rank."""
        df = self.per_step.filter(pl.col("step").is_null())
        return df if rank is None else df.filter(pl.col("rank") == rank)
