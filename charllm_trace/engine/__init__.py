"""Many ranks on a Dask cluster, and inputs where labs keep them (fsspec URLs); docs/scale.md.

With a scheduler (``--scheduler ADDRESS`` or ``CHARLLM_TRACE_SCHEDULER``; ``local:N`` starts a
``distributed.LocalCluster`` of N process workers) each rank is read, converted and analysed on
a worker, and only per-rank summaries travel to the driver, which computes what needs every rank
(matching collectives across ranks, skew, the run's notes). Without one, local paths take the
same code path as before and nothing of Dask is imported; a URL input is read by the same engine
in this process.

This module holds the process-wide settings only: importing it imports neither Dask nor fsspec.
"""

from __future__ import annotations

import os

from charllm_trace.inputs.urls import is_url

ENV = "CHARLLM_TRACE_SCHEDULER"

_scheduler: str | None = None
_keep_going = False


def set_scheduler(address: str | None) -> None:
    """Use the Dask scheduler at ``address`` for this process (None: the environment's choice)."""
    global _scheduler
    _scheduler = address or None


def scheduler() -> str | None:
    """The scheduler address in force: ``set_scheduler``'s, else ``CHARLLM_TRACE_SCHEDULER``."""
    return _scheduler or os.environ.get(ENV) or None


def set_keep_going(on: bool) -> None:
    """``--keep-going``: a rank that fails on a worker is left out (noted) instead of failing the job."""
    global _keep_going
    _keep_going = bool(on)


def keep_going() -> bool:
    return _keep_going


def distributed_for(path: object) -> bool:
    """Whether ``path`` is read through the engine: a scheduler is set, or it is a URL."""
    return scheduler() is not None or is_url(path)
