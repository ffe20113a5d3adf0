"""``num_ops`` and ``tensor_size`` for ASTRA-sim's roofline mode, from operator shapes.

ASTRA-sim's roofline mode times a GPU compute node as ``num_ops / perf(num_ops /
tensor_size)`` (``Workload::issue_comp``): ``num_ops`` is floating-point operations and
``tensor_size`` the bytes the op moves. We know both only for matrix products whose
input shapes the host execution trace recorded: ``aten::mm``, ``addmm``, ``bmm``,
``baddbmm``, ``addbmm``, ``_addmm_activation`` and ``_scaled_mm`` — ``2·batch·M·K·N``
operations, and the bytes of every tensor input and output. On a GPU the numbers go to
the kernels the op launched (split by their measured durations); on a CPU run to the op.
Every other compute node gets 0 and 0 (ASTRA-sim's roofline mode then skips it; its
replay mode, the default, uses ``duration_micros``).
"""

from __future__ import annotations

import math

import numpy as np
import orjson
import polars as pl

GEMM_OPS_RE = r"^aten::(mm|addmm|bmm|baddbmm|addbmm|_addmm_activation|_scaled_mm)$"

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
    if not io or not io.get("shapes") or not io.get("types"):
        return []
    try:
        shapes, types = orjson.loads(io["shapes"]), orjson.loads(io["types"])
    except orjson.JSONDecodeError:
        return []
    out = []
    for s, t in zip(shapes, types, strict=False):
        if (
            isinstance(t, str)
            and t.startswith("Tensor")
            and isinstance(s, list)
            and all(isinstance(x, int) for x in s)
        ):
            out.append((s, _itemsize(t)))
    return out


def gemm_cost(inputs: dict | None, outputs: dict | None) -> tuple[int, int]:
    """(operations, bytes) of one matrix-product op from its IOInfo; (0, 0) when unknown."""
    ins = _tensors(inputs)
    mats = [s for s, _ in ins if len(s) >= 2]
    for a, b in zip(mats[-2::-1], mats[:0:-1], strict=False):  # the last pair (a, b) with a[-1] == b[-2]
        if a[-1] == b[-2]:
            batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
            ops = 2 * batch * a[-2] * a[-1] * b[-1]
            size = sum(math.prod(s) * k for s, k in ins + _tensors(outputs))
            return int(ops), int(size)
    return 0, 0


def roofline_columns(nodes: pl.DataFrame, sel: pl.DataFrame, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """``num_ops`` and ``tensor_size`` for each row of ``sel`` (a selection of ``nodes``)."""
    n = sel.height
    ops, size = np.zeros(n, np.int64), np.zeros(n, np.int64)
    gemm = nodes.filter(pl.col("name").fill_null("").str.contains(GEMM_OPS_RE)).select(
        "id", "inputs", "outputs"
    )
    if gemm.height == 0 or n == 0:
        return ops, size
    cost = [gemm_cost(i, o) for i, o in zip(gemm["inputs"].to_list(), gemm["outputs"].to_list(), strict=True)]
    g = pl.DataFrame(
        {"op": gemm["id"], "f": [c[0] for c in cost], "b": [c[1] for c in cost]},
        schema={"op": pl.Int64, "f": pl.Int64, "b": pl.Int64},
    ).filter(pl.col("f") > 0)
    rows = sel.select("id", "dur_ns", _r=pl.int_range(pl.len()))
    if mode == "gpu":  # kernel -> the op that launched it (or, for a runtime call, that call's parent)
        parent = nodes.select(pl.col("id").alias("launch_id"), up="parent")
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
    ops[r] = np.rint(hit["f"].to_numpy() * hit["w"].to_numpy()).astype(np.int64)
    size[r] = np.maximum(np.rint(hit["b"].to_numpy() * hit["w"].to_numpy()), 1).astype(np.int64)
    return ops, size
