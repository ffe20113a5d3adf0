"""The result type of the per-iteration analysis (``analysis.iterations``, issue 24): iterations
(steps from ``ProfilerStep`` or ``--step-marker``), their phases, and per-request latency.

Kept apart from ``analysis.results`` so that loading saved results imports no analysis. Times are
integer ns (Unix epoch for instants); docs/analyses.md, "Iterations without an optimizer".
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import Result
from charllm_trace.analysis.schemas import ITERATION_SCHEMA, PHASE_SCHEMA, REQUEST_SCHEMA  # noqa: F401 - re-exported

#: The phase names recognised in range names (case-insensitive): the name itself, or the name
#: followed by ``#``, ``_``, ``:``, ``.``, a space or ``(`` (``decode#3``, ``prefill_step``).
PHASES = ("prefill", "decode", "forward", "backward", "tokenize", "detokenize")
#: Request markers: a range ``request#ID`` starts when request ``ID`` arrives; a range ``token#ID``
#: ends when one of its tokens reaches the host.
REQUEST_MARKER, TOKEN_MARKER = "request#", "token#"


@dataclass
class IterationsResult(Result):
    iterations: pl.DataFrame
    phases: pl.DataFrame
    requests: pl.DataFrame
