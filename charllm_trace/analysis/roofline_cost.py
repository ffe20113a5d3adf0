"""``num_ops`` and ``tensor_size`` for ASTRA-sim's roofline mode, from operator shapes.

In roofline mode ASTRA-sim times a GPU compute node as ``num_ops / min(peak, bandwidth ·
num_ops / tensor_size)`` (``Workload::issue_comp``, ``Roofline::get_perf``): ``num_ops``
is operations, ``tensor_size`` the bytes the op moves. From the shapes and types the host
execution trace recorded:

- matrix products (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``addbmm``,
  ``_addmm_activation``, ``_scaled_mm``): ``2·batch·M·K·N`` operations and the bytes of
  every tensor input and output;
- any other op with tensor shapes: one operation per output element and the bytes of its
  tensors (a memory-bound estimate); in CPU runs only for ops with no child op (a parent's
  exclusive time is overhead, its tensors are its children's traffic).

On a GPU the numbers go to the kernels the op launched, split by their measured
durations; in a CPU run to the op itself. Every other compute node (no shapes, host gaps)
gets ``num_ops = 1``. ``tensor_size`` is at least ``MIN_TENSOR_SIZE`` (64 KiB): ASTRA-sim
skips a node with ``tensor_size`` 0 without issuing what depends on it (the rank stalls),
and truncates a roofline time below 1 ns to 0, which its event queue refuses (abort); 64
KiB keeps every time at 1 ns or more for memory bandwidths up to 65 TB/s, whatever the
peak. Replay mode (the default) uses ``duration_micros`` and ignores both.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from charllm_trace.analysis.flops_formulas import GEMM_OPS, matmul_flops
from charllm_trace.et.conventions import tensor_entries

MIN_TENSOR_SIZE = 1 << 16
#: the matrix products of :data:`flops_formulas.GEMM_OPS` but ``matmul`` and ``linear``, whose
#: products are their child ``mm`` / ``addmm`` ops (counted there)
GEMM_OPS_RE = "^aten::(" + "|".join(o for o in GEMM_OPS if o not in ("matmul", "linear")) + ")$"

_ITEMSIZE = {
    "double": 8, "long int": 8, "long": 8, "int64": 8, "c10::complex<float>": 8,
    "float": 4, "int": 4, "unsigned int": 4,
    "c10::Half": 2, "c10::BFloat16": 2, "short int": 2, "half": 2, "bfloat16": 2,
    "bool": 1, "unsigned char": 1, "signed char": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
}  # fmt: skip


def _itemsize(t: str) -> int:
    inner = t[t.find("(") + 1 : t.rfind(")")] if "(" in t else ""
    return _ITEMSIZE.get(inner, 4)


def _tensors(io: dict | None) -> list[tuple[list[int], int]]:
    return [
        (s, _itemsize(t))
        for s, t in tensor_entries(io, "shapes")
        if isinstance(s, list) and all(isinstance(x, int) for x in s)
    ]


def gemm_cost(inputs: dict | None, outputs: dict | None) -> tuple[int, int]:
    """(operations, bytes) of one matrix-product op from its IOInfo; (0, 0) when unknown."""
    ins = _tensors(inputs)
    mats = [s for s, _ in ins if len(s) >= 2]
    for a, b in zip(mats[-2::-1], mats[:0:-1], strict=False):  # the last pair (a, b) with a[-1] == b[-2]
        if a[-1] == b[-2]:
            batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
            ops = matmul_flops(a, b, batch)
            size = sum(math.prod(s) * k for s, k in ins + _tensors(outputs))
            return int(ops), int(size)
    return 0, 0


def op_cost(gemm: bool, inputs: dict | None, outputs: dict | None) -> tuple[int, int]:
    """(operations, bytes) of one op from its IOInfo (module docstring); (0, 0) when unknown."""
    if gemm:
        f, b = gemm_cost(inputs, outputs)
        if f:
            return f, b
    ins, outs = _tensors(inputs), _tensors(outputs)
    b = sum(math.prod(s) * k for s, k in ins + outs)
    return (max(sum(math.prod(s) for s, _ in outs), 1), b) if b > 0 else (0, 0)


def roofline_columns(classified: pl.DataFrame, sel: pl.DataFrame, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """``num_ops`` (>= 1) and ``tensor_size`` (>= ``MIN_TENSOR_SIZE``) for each row of ``sel``, a
    selection of the ``classified`` nodes (``core.classify``)."""
    n = sel.height
    ops, size = np.ones(n, np.int64), np.full(n, MIN_TENSOR_SIZE, np.int64)
    gemm = pl.col("name").fill_null("").str.contains(GEMM_OPS_RE)
    cand = classified.filter(
        ~pl.col("on_gpu").fill_null(False)
        & (pl.col("inputs").is_not_null() | pl.col("outputs").is_not_null())
        & (gemm | pl.lit(mode == "gpu") | (pl.col("cls") == "cpu_compute"))
    ).select(
        "id",
        _g=gemm,
        _is=pl.col("inputs").struct.field("shapes"),
        _it=pl.col("inputs").struct.field("types"),
        _os=pl.col("outputs").struct.field("shapes"),
        _ot=pl.col("outputs").struct.field("types"),
    )
    if cand.height == 0 or n == 0:
        return ops, size
    keys = ["_g", "_is", "_it", "_os", "_ot"]
    uniq = cand.select(keys).unique(maintain_order=True)  # traces repeat the same shapes every step
    cost = [
        op_cost(g, {"shapes": a, "types": b}, {"shapes": c, "types": d}) for g, a, b, c, d in uniq.iter_rows()
    ]
    uniq = uniq.with_columns(
        f=pl.Series([c[0] for c in cost], dtype=pl.Int64), b=pl.Series([c[1] for c in cost], dtype=pl.Int64)
    )
    g = cand.join(uniq, on=keys, nulls_equal=True).filter(pl.col("b") > 0).select(op="id", f="f", b="b")
    rows = sel.select("id", "dur_ns", _r=pl.int_range(pl.len()))
    if mode == "gpu":  # kernel -> the op that launched it (or, for a runtime call, that call's parent)
        parent = classified.select(pl.col("id").alias("launch_id"), up="parent")
        rows = rows.join(sel.select("id", "launch_id"), on="id").join(parent, on="launch_id", how="left")
        own = rows.join(g, left_on="launch_id", right_on="op")
        up = rows.join(own.select("id"), on="id", how="anti").join(g, left_on="up", right_on="op")
        hit = pl.concat(
            [
                own.select("_r", "dur_ns", "f", "b", op="launch_id"),
                up.select("_r", "dur_ns", "f", "b", op="up"),
            ]
        )
    else:
        hit = rows.join(g, left_on="id", right_on="op").select("_r", "dur_ns", "f", "b", op="id")
    hit = hit.with_columns(w=pl.col("dur_ns").clip(lower_bound=1).cast(pl.Float64))
    hit = hit.with_columns(w=pl.col("w") / pl.col("w").sum().over("op"))
    r = hit["_r"].to_numpy()
    ops[r] = np.maximum(np.rint(hit["f"].to_numpy() * hit["w"].to_numpy()), 1).astype(np.int64)
    size[r] = np.maximum(np.rint(hit["b"].to_numpy() * hit["w"].to_numpy()), MIN_TENSOR_SIZE).astype(np.int64)
    return ops, size
