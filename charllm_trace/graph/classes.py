"""What-if class and time category of every node of a point graph (``--what-if NAME=FACTOR``).

A GPU node's class follows its time-breakdown category (:mod:`charllm_trace.core.kernel_category`,
the one place that names them): GEMM, attention and elementwise kernels have their own class,
every other compute kernel is ``kernel``, NCCL/gloo work ``comm``, copies and fills ``memcpy``.
Runtime calls (``cudaLaunchKernel``, ``cudaGraphLaunch`` ...) are ``launch``; other CPU time ``cpu``.

On a trace without GPU ops the CPU does the work itself: a CPU operator named by
``kernel_category.CPU_OP_RULES`` (``aten::mm``, ``aten::linear``, ``aten::scaled_dot_product_attention``,
``aten::add`` ...) and every op nested in it (``aten::linear`` -> ``aten::t``, ``aten::addmm``) take
that operator's class; where matches nest, attention wins over GEMM over elementwise over memory
(an attention's matrix products are the attention's, a GEMM's copies the GEMM's).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.core.kernel_category import cpu_op_categories, name_categories
from charllm_trace.graph.pointgraph import CAT, CATEGORY_WCLASS, SYNC_CALL_RE, WC

#: CPU classes in the order they are assigned (the last assigned wins where subtrees nest)
_CPU_ORDER = ("memcpy", "elementwise", "gemm", "attention")


def _wclass_codes(cats: pl.Series, default: int) -> np.ndarray:
    code = {c: WC[w] for c, w in CATEGORY_WCLASS.items()}
    return cats.replace_strict(code, default=default, return_dtype=pl.Int8).to_numpy()


def node_classes(nodes: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(what-if class, category of own time, is a runtime call, is a synchronising runtime call,
    CPU work class or -1) per row of ``nodes`` (classified); names are matched once per distinct
    name. The last array is the class a CPU operator's subtree takes on a CPU-only trace
    (:func:`cpu_subtree_classes`)."""
    # string columns compared in polars, only the boolean masks to numpy (object arrays of 854 k
    # Python strings cost 0.16 s against 0.04 s, and raised the peak by ~56 MiB: nccl-noargs)
    cls = nodes["cls"]
    kind = nodes["kind"].fill_null("other")

    def mask(x: pl.Series) -> np.ndarray:
        return x.fill_null(False).to_numpy()

    names = nodes["name"].fill_null("")
    u = names.unique(maintain_order=True)
    codes = names.cast(pl.Enum(u)).to_physical().to_numpy()  # each distinct name matched once
    kcat = _wclass_codes(name_categories(u), WC["kernel"])[codes]
    sync_call = u.str.contains(SYNC_CALL_RE).to_numpy()[codes]
    cpu_work = _wclass_codes(cpu_op_categories(u), -1)[codes]
    del codes
    runtime = mask(kind == "runtime")
    wc = np.full(len(cls), WC["cpu"], dtype=np.int8)
    cat = np.full(len(cls), CAT["cpu_op"], dtype=np.int8)
    gpu_compute = mask(cls == "compute")
    wc[gpu_compute] = kcat[gpu_compute]
    cat[gpu_compute] = CAT["gpu_compute"]
    mem = mask(cls.is_in(["memcpy", "memset"]))
    wc[mem] = WC["memcpy"]
    cat[mem] = CAT["gpu_memory"]
    comm = mask(cls.is_in(["comm", "cpu_comm"]))
    wc[comm] = WC["comm"]
    cat[comm] = CAT["communication"]
    wc[runtime] = WC["launch"]
    cat[runtime] = CAT["launch"]
    cpu_work = np.where(mask(kind == "cpu_op") & ~comm, cpu_work, -1).astype(np.int8)
    return wc, cat, runtime, sync_call & runtime, cpu_work


def cpu_subtree_classes(
    wc: np.ndarray, cpu_work: np.ndarray, pre: np.ndarray, last: np.ndarray, gpu: np.ndarray
) -> np.ndarray:
    """``wc`` with the CPU work classes of a CPU-only rank applied to each matching operator's
    subtree (``pre``/``last``: pre-order index of each node and of the last node of its subtree,
    unique over the rank). Communication and runtime nodes keep their class."""
    if gpu.any() or not (cpu_work >= 0).any():
        return wc
    n = len(wc)
    out = wc.copy()
    keep = (wc == WC["comm"]) | (wc == WC["launch"])
    for name in _CPU_ORDER:
        top = np.flatnonzero(cpu_work == WC[name])
        if not len(top):
            continue
        d = np.zeros(n + 1, dtype=np.int64)
        np.add.at(d, pre[top], 1)
        np.add.at(d, last[top] + 1, -1)
        inside = np.cumsum(d)[:n] > 0  # by pre-order index
        out[inside[pre] & ~keep] = WC[name]
    return out


def early_launch_notes(delta: np.ndarray) -> list[str]:
    """The note on GPU ops timestamped before their launch call (``delta``: op start minus launch
    call start, per launched op): edges the times contradict, kept as measured by calibration."""
    early = delta < 0
    if not early.any():
        return []
    return [
        f"{int(early.sum())} GPU ops start before their launch call ({-int(delta[early].sum()) / 1e6:.3f} ms "
        "in all): those launch edges were kept as measured and never scaled"
    ]
