"""Typed result of the waiting/transfer split of matched communication (``analysis/comm_wait.py``).
Definitions in docs/analyses.md, "Waiting and transferring"."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import TimelineResult
from charllm_trace.analysis.schemas import COMM_WAIT_DIM_SCHEMA, COMM_WAIT_RANK_SCHEMA, COMM_WAIT_SCHEMA  # noqa: F401 - re-exported


@dataclass
class CommWaitResult(TimelineResult):
    """Waiting vs transferring of every matched communication op (docs/analyses.md)."""

    ops: pl.DataFrame  # COMM_WAIT_SCHEMA
    by_dim: pl.DataFrame  # COMM_WAIT_DIM_SCHEMA
    by_rank: pl.DataFrame  # COMM_WAIT_RANK_SCHEMA, the stragglers by the waiting they caused
