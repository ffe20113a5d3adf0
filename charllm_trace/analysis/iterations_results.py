"""The result type of the per-iteration analysis (``analysis.iterations``, issue 24): iterations
(steps from ``ProfilerStep`` or ``--step-marker``), their phases, and per-request latency.

Kept apart from ``analysis.results`` so that loading saved results imports no analysis. Times are
integer ns (Unix epoch for instants); docs/analyses.md, "Iterations without an optimizer".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: The phase names recognised in range names (case-insensitive): the name itself, or the name
#: followed by ``#``, ``_``, ``:``, ``.``, a space or ``(`` (``decode#3``, ``prefill_step``).
PHASES = ("prefill", "decode", "forward", "backward", "tokenize", "detokenize")
#: Request markers: a range ``request#ID`` starts when request ``ID`` arrives; a range ``token#ID``
#: ends when one of its tokens reaches the host.
REQUEST_MARKER, TOKEN_MARKER = "request#", "token#"

#: One row per (rank, iteration).
ITERATION_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("start_ns", pl.Int64, "ns", "the iteration's CPU range (the marker's, or the ProfilerStep's)"),
    Col("cpu_ns", pl.Int64, "ns", "its duration"),
    Col("window_start_ns", pl.Int64, "ns", "its GPU-time window (analysis/step_windows.py); null: none"),
    Col("window_ns", pl.Int64, "ns"),
)

#: One row per (rank, iteration, phase); step null: every range of the phase in the trace.
PHASE_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("phase", pl.String, "", "one of PHASES (lower case)"),
    Col("n", pl.Int64, "", "outermost ranges of the phase starting in the iteration"),
    Col("cpu_ns", pl.Int64, "ns", "their summed durations (CPU time)"),
    Col("n_gpu_ops", pl.Int64, "", "GPU activity (kernels, copies, sets) launched from inside them"),
    Col("gpu_ns", pl.Int64, "ns", "its summed GPU durations"),
)

#: One row per (rank, request) that has a ``request#ID`` or a ``token#ID`` range.
REQUEST_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("request", pl.String, "", "the ID of its request#ID / token#ID ranges"),
    Col("arrival_ns", pl.Int64, "ns", "start of its first request#ID range; null: none"),
    Col("first_token_ns", pl.Int64, "ns", "end of its first token#ID range"),
    Col("last_token_ns", pl.Int64, "ns"),
    Col("n_tokens", pl.Int64),
    Col("ttft_ns", pl.Int64, "ns", "time to first token: first_token_ns - arrival_ns"),
    Col("tpot_ns", pl.Float64, "ns", "time per output token: (last - first) / (n_tokens - 1)"),
)


@dataclass
class IterationsResult:
    iterations: pl.DataFrame
    phases: pl.DataFrame
    requests: pl.DataFrame
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"iterations": self.iterations, "phases": self.phases, "requests": self.requests}
