"""Typed result of the waiting/transfer split of matched communication (``analysis/comm_wait.py``).
Definitions in docs/analyses.md, "Waiting and transferring"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Columns, frame_columns
from charllm_trace.analysis.registry import Framed

COMM_WAIT_SCHEMA: Columns = frame_columns("comm_wait")
COMM_WAIT_DIM_SCHEMA: Columns = frame_columns("comm_wait_by_dim")
COMM_WAIT_RANK_SCHEMA: Columns = frame_columns("comm_wait_by_rank")


@dataclass
class CommWaitResult(Framed):
    """Waiting vs transferring of every matched communication op (docs/analyses.md)."""

    ops: pl.DataFrame  # COMM_WAIT_SCHEMA
    by_dim: pl.DataFrame  # COMM_WAIT_DIM_SCHEMA
    by_rank: pl.DataFrame  # COMM_WAIT_RANK_SCHEMA, the stragglers by the waiting they caused
    simulated: bool = False
    notes: list[str] = field(default_factory=list)
