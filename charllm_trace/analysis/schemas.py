"""The column tables of the analyses' frames, by the names the code imports them by.

The columns are declared as data, in ``analysis/analyses.toml`` (beside the analysis that fills
each frame); this module only names each table once (``frame_columns``), in the file's order. The
result types' modules re-export their tables (``from charllm_trace.analysis.results import
OVERLAP_SCHEMA`` keeps working).
"""

from __future__ import annotations

from charllm_trace.analysis.columns import Columns, frame_columns

# overlap
OVERLAP_SCHEMA: Columns = frame_columns("overlap")
OVERLAP_GROUP_SCHEMA: Columns = frame_columns("overlap_by_group")
RANK_SPREAD_SCHEMA: Columns = frame_columns("rank_spread")
# bandwidth
COLLECTIVE_SCHEMA: Columns = frame_columns("collectives")
BANDWIDTH_SUMMARY_SCHEMA: Columns = frame_columns("bandwidth")
MATCHED_SCHEMA: Columns = frame_columns("collectives_matched")
STRAGGLER_SCHEMA: Columns = frame_columns("stragglers")
# energy
ENERGY_TOTAL_SCHEMA: Columns = frame_columns("energy_totals")
ENERGY_SCHEMA: Columns = frame_columns("energy")
# power
POWER_SCHEMA: Columns = frame_columns("power")
THROTTLE_SCHEMA: Columns = frame_columns("throttle")
# critical_path
CRITICAL_PATH_SCHEMA: Columns = frame_columns("critical_path")
CRITICAL_OPS_SCHEMA: Columns = frame_columns("critical_path_ops")
CRITICAL_SEGMENT_SCHEMA: Columns = frame_columns("critical_path_segments")
# what_if
WHATIF_SCHEMA: Columns = frame_columns("what_if")
# idle_time
IDLE_TIME_SCHEMA: Columns = frame_columns("idle_time")
# launch
LAUNCH_SCHEMA: Columns = frame_columns("launch_stats")
QUEUE_SCHEMA: Columns = frame_columns("launch_queue")
# config
CONFIG_SCHEMA: Columns = frame_columns("config")
# breakdown
BREAKDOWN_SCHEMA: Columns = frame_columns("breakdown")
BREAKDOWN_TOTAL_SCHEMA: Columns = frame_columns("breakdown_totals")
# flops
FLOPS_SCHEMA: Columns = frame_columns("flops")
FLOPS_OP_SCHEMA: Columns = frame_columns("flops_by_op")
FLOPS_DEVICE_SCHEMA: Columns = frame_columns("flops_devices")
# pipeline
PIPELINE_MB_SCHEMA: Columns = frame_columns("pipeline_microbatches")
PIPELINE_STAGE_SCHEMA: Columns = frame_columns("pipeline_stages")
# comm_wait
COMM_WAIT_SCHEMA: Columns = frame_columns("comm_wait")
COMM_WAIT_DIM_SCHEMA: Columns = frame_columns("comm_wait_by_dim")
COMM_WAIT_RANK_SCHEMA: Columns = frame_columns("comm_wait_by_rank")
# iterations
ITERATION_SCHEMA: Columns = frame_columns("iterations")
PHASE_SCHEMA: Columns = frame_columns("phases")
REQUEST_SCHEMA: Columns = frame_columns("requests")
# cpu_wait
CPU_WAIT_SCHEMA: Columns = frame_columns("cpu_wait")
CPU_WAIT_IDLE_SCHEMA: Columns = frame_columns("cpu_wait_idle")
CPU_WAIT_PHASE_SCHEMA: Columns = frame_columns("cpu_wait_phases")
# graph_launches
GRAPH_LAUNCH_SCHEMA: Columns = frame_columns("graph_launches")
GRAPH_KERNEL_SCHEMA: Columns = frame_columns("graph_launch_kernels")
# dims
DIMS_SCHEMA: Columns = frame_columns("dims")
DIM_SIZES_SCHEMA: Columns = frame_columns("dim_msg_sizes")
# phase_power
POWER_PHASE_SCHEMA: Columns = frame_columns("power_phases")
POWER_EXCURSION_SCHEMA: Columns = frame_columns("power_excursions")
