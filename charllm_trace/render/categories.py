"""How the critical path's categories (``analysis.results.CP_CATEGORIES``) are named: one row per
category with the terminal's short column head, its meaning in the terminal's legend, the report's
label and the report's colour. Formatting only."""

from __future__ import annotations

from charllm_trace.analysis.results import CP_CATEGORIES

#: category -> (short head, meaning, report label, report colour)
CP_LABELS: dict[str, tuple[str, str, str, str]] = {
    "gpu_compute": ("gpu", "GPU compute kernels", "GPU compute", "#4c78a8"),
    "gpu_memory": ("mem", "GPU memcpy/memset", "GPU memcpy/memset", "#72b7b2"),
    "communication": ("comm", "communication", "communication", "#f58518"),
    "cpu_op": ("cpu", "CPU op self time", "CPU op (self time)", "#54a24b"),
    "launch": ("launch", "runtime calls and launch latency", "launch / runtime call", "#b279a2"),
    "sync_wait": ("wait", "synchronisation wait", "synchronisation wait", "#e45756"),
    "idle": ("idle", "gaps between CPU ops", "idle", "#bab0ac"),
}
assert tuple(CP_LABELS) == CP_CATEGORIES

#: the terminal's (short head, meaning) of each category
CP_SHORT = {c: (short, meaning) for c, (short, meaning, _, _) in CP_LABELS.items()}
#: the report's (label, colour) of each category
CP_STYLE = {c: (label, colour) for c, (_, _, label, colour) in CP_LABELS.items()}
