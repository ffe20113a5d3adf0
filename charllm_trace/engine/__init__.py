"""Many ranks on a Dask cluster, and inputs where labs keep them (fsspec URLs); docs/scale.md.

With a scheduler (a :class:`Cluster`: the CLI's ``--scheduler ADDRESS``, default
``CHARLLM_TRACE_SCHEDULER``; ``local:N`` starts a
``distributed.LocalCluster`` of N process workers) each rank is read, converted and analysed on
a worker, and only per-rank summaries travel to the driver, which computes what needs every rank
(matching collectives across ranks, skew, the run's notes). Without one, local paths take the
same code path as before and nothing of Dask is imported; a URL input is read by the same engine
in this process.

This module holds no process-wide state: the cluster is a value passed down to the driver's
functions. Importing it imports neither Dask nor fsspec.
"""

from __future__ import annotations

from dataclasses import dataclass

from charllm_trace.inputs.urls import is_url  # noqa: F401 - re-exported (engine.is_url)

#: the environment variable the CLI's ``--scheduler`` defaults to (docs/scale.md); the library
#: never reads it: where work runs is an argument (:class:`Cluster`)
ENV = "CHARLLM_TRACE_SCHEDULER"


@dataclass(frozen=True)
class Cluster:
    """Where a job runs: the Dask scheduler at ``address`` (``tcp://host:8786``, ``local:N``,
    ``local-threads:N``); ``keep_going``: a rank whose files fail to read is left out (noted)
    instead of failing the job (``--keep-going``)."""

    address: str
    keep_going: bool = False


