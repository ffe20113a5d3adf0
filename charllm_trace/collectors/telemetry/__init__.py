"""GPU telemetry: the per-node sampler process, its backends (NVML, AMD SMI, replay) and readers.

``read_telemetry(run_dir)`` returns every node's samples in the model's ``TELEMETRY_SCHEMA`` plus a
``host`` column; ``telemetry_for_rank(run_dir, rank)`` the samples of the GPU one rank ran on.
"""

from charllm_trace.collectors.telemetry.reader import (
    HOST_COLUMN,
    rank_devices,
    read_samples,
    read_telemetry,
    telemetry_for_rank,
    telemetry_metas,
)

__all__ = [
    "HOST_COLUMN",
    "rank_devices",
    "read_samples",
    "read_telemetry",
    "telemetry_for_rank",
    "telemetry_metas",
]
