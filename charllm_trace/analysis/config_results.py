"""The result type of the run's configuration (``analysis.runconfig``): one row, fixed columns.

Kept apart from ``analysis.results`` (which imports it, and re-exports its names) so that the
result types of other analyses can grow there without pushing that module past its size."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: The run's configuration, one row (``analysis/runconfig.py``): what ``compare`` lists per run.
CONFIG_SCHEMA: Columns = columns(
    Col("run_id", pl.String),
    Col("model", pl.String, "", "the manifest's workload.model"),
    Col("device", pl.String, "", 'the ranks\' device models, e.g. "NVIDIA A100-SXM4-40GB"'),
    Col("world_size", pl.Int64),
    Col("nodes", pl.Int64),
    Col("gpus", pl.Int64),
    *(Col(k, pl.Int64) for k in ("tp", "cp", "pp", "dp", "ep")),
    Col("micro_batch", pl.Int64),
    Col("global_batch", pl.Int64),
    Col("seq_len", pl.Int64),
    Col("tokens_per_step", pl.Int64, "", "workload.tokens_per_step, else global_batch * seq_len"),
)


@dataclass
class RunConfig:
    """The run's configuration (manifest, layout option, trace metadata); null where unknown."""

    table: pl.DataFrame  # CONFIG_SCHEMA, one row
    notes: list[str] = field(default_factory=list)
