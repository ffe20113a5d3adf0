"""The frames of an analysis' machine output, by their stable names, with their columns.

``RunAnalysis.frames()`` gives the frames a result holds; this table names every frame the
JSON document of ``analyze`` always carries (empty, with the reason in ``skipped``, when an
analysis was not computed) and is the source of ``docs/schema/analyze.schema.json``
(``charllm_trace.render.contract``)."""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.comm_wait_results import (
    COMM_WAIT_DIM_SCHEMA,
    COMM_WAIT_RANK_SCHEMA,
    COMM_WAIT_SCHEMA,
)
from charllm_trace.analysis.config_results import CONFIG_SCHEMA
from charllm_trace.analysis.cpu_wait_results import (  # noqa: F401 - named here for the schema's comments
    CPU_WAIT_IDLE_SCHEMA,
    CPU_WAIT_PHASE_SCHEMA,
    CPU_WAIT_SCHEMA,
)
from charllm_trace.analysis.dims_results import DIM_SIZES_SCHEMA, DIMS_SCHEMA
from charllm_trace.analysis.flops_results import FLOPS_DEVICE_SCHEMA, FLOPS_OP_SCHEMA, FLOPS_SCHEMA
from charllm_trace.analysis.graph_launch_results import (  # noqa: F401 - named here for the schema's comments
    GRAPH_KERNEL_SCHEMA,
    GRAPH_LAUNCH_SCHEMA,
)
from charllm_trace.analysis.idle_results import IDLE_TIME_SCHEMA, LAUNCH_SCHEMA, QUEUE_SCHEMA
from charllm_trace.analysis.iterations_results import ITERATION_SCHEMA, PHASE_SCHEMA, REQUEST_SCHEMA
from charllm_trace.analysis.optional_results import OPTIONAL_FRAMES  # noqa: F401 - re-exported (below)
from charllm_trace.analysis.phase_power_results import POWER_EXCURSION_SCHEMA, POWER_PHASE_SCHEMA
from charllm_trace.analysis.pipeline_results import PIPELINE_MB_SCHEMA, PIPELINE_STAGE_SCHEMA
from charllm_trace.analysis.results import (
    BANDWIDTH_SUMMARY_SCHEMA,
    COLLECTIVE_SCHEMA,
    CRITICAL_OPS_SCHEMA,
    CRITICAL_PATH_SCHEMA,
    ENERGY_SCHEMA,
    ENERGY_TOTAL_SCHEMA,
    MATCHED_SCHEMA,
    OVERLAP_GROUP_SCHEMA,
    OVERLAP_SCHEMA,
    POWER_SCHEMA,
    STRAGGLER_SCHEMA,
    THROTTLE_SCHEMA,
    WHATIF_SCHEMA,
)
from charllm_trace.analysis.results_breakdown import BREAKDOWN_SCHEMA, BREAKDOWN_TOTAL_SCHEMA
from charllm_trace.analysis.spread_results import RANK_SPREAD_SCHEMA

#: frame name -> (the RunAnalysis field whose result holds it, its columns)
FRAME_SCHEMAS: dict[str, tuple[str, dict[str, pl.DataType]]] = {
    "overlap": ("overlap", OVERLAP_SCHEMA),
    "overlap_by_group": ("overlap", OVERLAP_GROUP_SCHEMA),
    "overlap_by_dim": ("overlap", OVERLAP_GROUP_SCHEMA),
    "rank_spread": ("overlap", RANK_SPREAD_SCHEMA),
    "collectives": ("bandwidth", COLLECTIVE_SCHEMA),
    "bandwidth": ("bandwidth", BANDWIDTH_SUMMARY_SCHEMA),
    "collectives_matched": ("bandwidth", MATCHED_SCHEMA),
    "stragglers": ("bandwidth", STRAGGLER_SCHEMA),
    "energy_totals": ("energy", ENERGY_TOTAL_SCHEMA),
    "energy": ("energy", ENERGY_SCHEMA),
    "power": ("power", POWER_SCHEMA),
    "throttle": ("power", THROTTLE_SCHEMA),
    "critical_path": ("critical_path", CRITICAL_PATH_SCHEMA),
    "critical_path_ops": ("critical_path", CRITICAL_OPS_SCHEMA),
    "what_if": ("what_if", WHATIF_SCHEMA),
    "idle_time": ("idle_time", IDLE_TIME_SCHEMA),
    "launch_stats": ("launch", LAUNCH_SCHEMA),
    "launch_queue": ("launch", QUEUE_SCHEMA),
    "config": ("config", CONFIG_SCHEMA),
    "breakdown": ("breakdown", BREAKDOWN_SCHEMA),
    "breakdown_totals": ("breakdown", BREAKDOWN_TOTAL_SCHEMA),
    "flops": ("flops", FLOPS_SCHEMA),
    "flops_by_op": ("flops", FLOPS_OP_SCHEMA),
    "flops_devices": ("flops", FLOPS_DEVICE_SCHEMA),
    "pipeline_microbatches": ("pipeline", PIPELINE_MB_SCHEMA),
    "pipeline_stages": ("pipeline", PIPELINE_STAGE_SCHEMA),
    "comm_wait": ("comm_wait", COMM_WAIT_SCHEMA),
    "comm_wait_by_dim": ("comm_wait", COMM_WAIT_DIM_SCHEMA),
    "comm_wait_by_rank": ("comm_wait", COMM_WAIT_RANK_SCHEMA),
    "iterations": ("iterations", ITERATION_SCHEMA),
    "phases": ("iterations", PHASE_SCHEMA),
    "requests": ("iterations", REQUEST_SCHEMA),
    "dims": ("dims", DIMS_SCHEMA),
    "dim_msg_sizes": ("dims", DIM_SIZES_SCHEMA),
    "power_phases": ("phase_power", POWER_PHASE_SCHEMA),
    "power_excursions": ("phase_power", POWER_EXCURSION_SCHEMA),
}

#: The modules whose ``*_SCHEMA`` tables (with a comment beside each column) are imported above.
DEFINED_IN = (
    "charllm_trace.analysis.results",
    "charllm_trace.analysis.whatif_results",  # WHATIF_SCHEMA (re-exported by results)
    "charllm_trace.analysis.idle_results",
    "charllm_trace.analysis.config_results",
    "charllm_trace.analysis.results_breakdown",
    "charllm_trace.analysis.flops_results",
    "charllm_trace.analysis.iterations_results",
    "charllm_trace.analysis.spread_results",
    "charllm_trace.analysis.pipeline_results",
    "charllm_trace.analysis.comm_wait_results",
    "charllm_trace.analysis.cpu_wait_results",
    "charllm_trace.analysis.graph_launch_results",
    "charllm_trace.analysis.dims_results",
    "charllm_trace.analysis.phase_power_results",
)

# OPTIONAL_FRAMES (analysis/optional_results.py): frames in the document only when their analysis
# ran on data the run has (not in every document, unlike FRAME_SCHEMAS)

#: Why a frame is empty when its analysis was not asked for (no entry in ``skipped``).
NOT_REQUESTED = "not requested"
