"""The result type of the FLOP/s and MFU analysis (``analysis.flops``): frames with fixed columns.

Kept apart from ``analysis.results`` (which imports it) so that loading saved results imports no
analysis. Every figure is an estimate: FLOPs come from the formulas in
``analysis.flops_formulas``, peaks from ``analysis.peaks`` (docs/analyses.md, "FLOP/s and MFU").
FLOPs are integers; times integer ns; TFLOP/s = 10^12 FLOP per second; percentages 0..100.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import TimelineResult
from charllm_trace.analysis.schemas import FLOPS_DEVICE_SCHEMA, FLOPS_OP_SCHEMA, FLOPS_SCHEMA  # noqa: F401 - re-exported

#: The skip reason when no op of a kind this analysis counts is in the trace.
NO_FLOP_OPS = "no GEMM, attention or convolution operators in this trace: FLOP/s and MFU not computed"


@dataclass
class FlopsResult(TimelineResult):
    """Achieved FLOP/s and MFU per rank, step and op class; per op name; the peaks used. Estimates."""

    per_step: pl.DataFrame  # FLOPS_SCHEMA
    by_op: pl.DataFrame  # FLOPS_OP_SCHEMA
    devices: pl.DataFrame  # FLOPS_DEVICE_SCHEMA
    mode: str = "gpu"  # "gpu": time = kernels launched; "cpu": the ops' own durations

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
