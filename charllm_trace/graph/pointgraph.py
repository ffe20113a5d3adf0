"""The point graph's container and vocabularies (edge kinds, time categories, what-if classes).

:mod:`charllm_trace.graph.points` builds a :class:`PointGraph` for one rank; ``graph.run``
merges ranks; ``graph.calibrate`` fits its lags to measured times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# What-if classes of the scalable part of a lag (``--what-if NAME=FACTOR``). GPU kernels get theirs
# from the time-breakdown categories (``core.kernel_category``: gemm, attention, elementwise;
# ``kernel`` is every other compute kernel); on a trace without GPU ops, CPU operators that do the
# work themselves get one too (``kernel_category.CPU_OP_RULES``, ``graph.classes``).
WHATIF_CLASSES = ("gemm", "attention", "elementwise", "kernel", "comm", "memcpy", "launch", "cpu", "idle")
WC = {c: i for i, c in enumerate(WHATIF_CLASSES)}
#: aliases accepted by ``--what-if``: name -> classes it scales
WHATIF_ALIASES = {
    "gpu": ("gemm", "attention", "elementwise", "kernel"),
    "compute": ("gemm", "attention", "elementwise", "kernel"),
    "memory": ("memcpy",),
    "network": ("comm",),
    "cpu_all": ("cpu", "launch"),
}
#: the what-if class of each time-breakdown category (``core.kernel_category.CATEGORIES``)
CATEGORY_WCLASS = {
    "gemm": "gemm",
    "attention": "attention",
    "elementwise": "elementwise",
    "convolution": "kernel",
    "reduction_norm": "kernel",
    "other": "kernel",
    "communication": "comm",
    "memcpy_memset": "memcpy",
}

# Edge kinds in the point graph (node-level kinds of model.EXEC_DEP_KINDS, plus a node's own span).
EDGE_KINDS = (
    "span",
    "thread_order",
    "nesting",
    "launch",
    "stream_order",
    "sync",
    "data",
    "collective",
    "wake",
)
EK = {k: i for i, k in enumerate(EDGE_KINDS)}

# What a path spends its time in (critical-path breakdown).
CATEGORIES = ("gpu_compute", "gpu_memory", "communication", "cpu_op", "launch", "sync_wait", "idle")
CAT = {c: i for i, c in enumerate(CATEGORIES)}

#: runtime calls that wait for the device: any accelerator's stream / device / event / context
#: synchronize (``cudaDeviceSynchronize``, ``hipStreamSynchronize``, ``mtiaDeviceSynchronize`` ...),
#: CUDA/HIP queries and blocking copies
SYNC_CALL_RE = (
    r"(?i)(Stream|Device|Event|Ctx|Context)_?Synchroni[sz]e$|^(cuda|hip)(Stream|Event)Query$"
    r"|^(cuda|hip)Memcpy(2D|3D)?$|^(cuda|hip)MemcpyDtoH$|^(cuda|hip)MemcpyFromSymbol$"
)

# Lane edge priorities on equal bounds (critical-path ties): the lane wins over a cross edge.
PRIO_LANE, PRIO_CROSS = 2, 1
PRIO_WAKE = 3  # an inferred wake-up (see wake_edges) binds before the lane on a tie

#: how far back a thread's first op looks for what started it (``kick_edges``)
KICK_NS = 1_000_000
#: a gap on a CPU thread at least WAKE_GAP_NS long that ends within max(WAKE_NS, WAKE_FRAC x gap)
#: of an op ending on another thread of the same process is taken as a wait for that op
#: (``wake_edges``)
WAKE_GAP_NS = 100_000
WAKE_NS = 50_000
WAKE_FRAC = 0.05


@dataclass
class PointGraph:
    """Points and edges of one rank (or a whole run once merged, see ``graph.run``)."""

    n_points: int
    time: np.ndarray  # measured (or, without timestamps, replayed) time of each point
    root: np.ndarray  # lower bound of each point's time (engine.NONE: none)
    src: np.ndarray  # int32 point indexes
    dst: np.ndarray
    base: np.ndarray  # scalable part of each edge's lag (ns)
    fixed: np.ndarray  # fixed part (ns), never scaled
    wclass: np.ndarray  # int8 what-if class of ``base`` (-1: none)
    kind: np.ndarray  # int8 EDGE_KINDS
    cat: np.ndarray  # int8 CATEGORIES of the edge's time
    owner: np.ndarray  # int32 node row (in ``rows``) the edge's time belongs to (-1: none)
    prio: np.ndarray  # int8
    # per node (rows of the active nodes, in trace.nodes order)
    rows: np.ndarray  # row position in trace.nodes of each active node
    ids: np.ndarray  # node id of each active node
    rank: int | None = None
    notes: list[str] = field(default_factory=list)
    measured: bool = True  # built from timestamps (else from recorded order)
    # per active node: its lane, its pre-order index in its lane's call tree and the index of the
    # last node of its subtree (descendants of i: same lane, pre in [pre[i], last[i]]), and the
    # active node that launched it (-1: none)
    lane: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pre: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    last: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    launcher: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def lags(self, factors: np.ndarray | None = None) -> np.ndarray:
        if factors is None:
            return self.base + self.fixed
        f = np.where(self.wclass >= 0, factors[np.maximum(self.wclass, 0)], 1.0)
        return np.rint(self.base * f).astype(np.int64) + self.fixed
