"""FLOP counts of one operator from its input shapes, types and values (estimates).

The one place where an operator's floating-point operations are counted (docs/analyses.md,
"FLOP/s and MFU"). A multiply-add is 2 FLOPs. Conventions:

- **GEMM** (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``addbmm``, ``matmul``, ``linear``,
  ``_addmm_activation``, ``_scaled_mm``): ``2·batch·M·N·K``; the bias and the epilogue are not
  counted. ``linear(x, w)``: ``M`` = the elements of ``x`` over its last dimension, ``K`` its last
  dimension, ``N`` = ``w.shape[0]``; ``matmul`` broadcasts its batch dimensions as PyTorch does.
- **attention** (``scaled_dot_product_attention`` and the flash / efficient / cuDNN kernels' ops,
  forward and backward): forward ``4·B·H·S_q·S_k·D`` (the two matrix products ``QKᵀ`` and ``PV``;
  with ``D_v ≠ D_qk``: ``2·B·H·S_q·S_k·(D_qk + D_v)``); softmax, masking and dropout are not
  counted. **Causal**: halved when the op's ``is_causal`` (or ``custom_mask_type`` ≠ 0) is recorded
  true; counted in full when it is not recorded. **Backward**: 2.5 × the forward (five matrix
  products instead of two, FlashAttention's convention). Variable-length (3-D, packed) inputs:
  null (the sequence lengths are in tensors the trace does not record).
- **convolution** (``aten::convolution``, ``_convolution``, ``conv1d/2d/3d``,
  ``conv_transpose1d/2d/3d``, ``cudnn_convolution(_transpose)``, ``miopen_convolution(_transpose)``,
  ``mkldnn_convolution``): forward ``2·N·K·(C/groups)·R·S·P·Q`` = ``2 · N · (output positions) ·
  (weight elements)``, output positions from the recorded output shape, else from stride, padding
  and dilation (``P = ⌊(H + 2·pad − dil·(R−1) − 1)/stride⌋ + 1``); transposed convolutions count the
  input positions instead. ``convolution_backward``: 1 × the forward for each gradient its
  ``output_mask`` asks for (input, weight), 2 × when the mask is not recorded.

Data type: that of the op's first matrix operand (``Tensor(c10::BFloat16)``, ``c10::BFloat16`` ...
as ``bf16``, ``fp16``, ``fp32``, ``fp64``, ``fp8``, ``int8``).

Everything here works on one op's parsed IO lists; :mod:`charllm_trace.analysis.flops` calls it once
per distinct (name, shapes, types, values), not per event.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "_addmm_activation", "_scaled_mm")
#: attention ops: name -> (q position, layout "bhsd" | "bshd", causal position, causal is a mask type, backward)
ATTENTION_OPS: dict[str, tuple[int, str, int, bool, bool]] = {
    "scaled_dot_product_attention": (0, "bhsd", 5, False, False),
    "_scaled_dot_product_flash_attention": (0, "bhsd", 4, False, False),
    "_scaled_dot_product_flash_attention_for_cpu": (0, "bhsd", 4, False, False),
    "_scaled_dot_product_efficient_attention": (0, "bhsd", 6, False, False),
    "_scaled_dot_product_cudnn_attention": (0, "bhsd", 6, False, False),
    "_flash_attention_forward": (0, "bshd", 8, False, False),
    "_efficient_attention_forward": (0, "bshd", 9, True, False),
    "_scaled_dot_product_flash_attention_backward": (1, "bhsd", 11, False, True),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (1, "bhsd", 7, False, True),
    "_scaled_dot_product_efficient_attention_backward": (1, "bhsd", 11, False, True),
    "_scaled_dot_product_cudnn_attention_backward": (1, "bhsd", 14, False, True),
    "_flash_attention_backward": (1, "bshd", 11, False, True),
    "_efficient_attention_backward": (1, "bshd", 14, True, True),
}
#: convolution ops: name -> (stride, padding, dilation positions (None: not an argument), transposed
#: position or a fixed bool, groups position)
CONV_OPS: dict[str, tuple[int, int, int | None, int | bool]] = {
    "convolution": (3, 4, 5, 6),
    "_convolution": (3, 4, 5, 6),
    "_convolution_mode": (3, 4, 5, False),
    "conv1d": (3, 4, 5, False),
    "conv2d": (3, 4, 5, False),
    "conv3d": (3, 4, 5, False),
    "conv_transpose1d": (3, 4, 7, True),
    "conv_transpose2d": (3, 4, 7, True),
    "conv_transpose3d": (3, 4, 7, True),
    "cudnn_convolution": (3, 2, 4, False),
    "cudnn_convolution_transpose": (4, 2, 5, True),
    "miopen_convolution": (4, 3, 5, False),
    "miopen_convolution_transpose": (5, 3, 6, True),
    "mkldnn_convolution": (4, 3, 5, False),
}
OP_CLASSES = ("gemm", "attention", "conv")

#: ``aten::`` op names this module counts, as a regex (polars / re) on node names.
FLOP_OP_RE = (
    r"^aten::("
    + "|".join(re.escape(n) for n in (*GEMM_OPS, *ATTENTION_OPS, *CONV_OPS, "convolution_backward"))
    + r")$"
)

_DTYPES = {
    "float": "fp32", "c10::Half": "fp16", "half": "fp16", "c10::BFloat16": "bf16", "bfloat16": "bf16",
    "double": "fp64", "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8", "c10::complex<float>": "fp32",
}  # fmt: skip


@dataclass(frozen=True)
class OpFlops:
    """The count of one op: FLOPs (None when they cannot be counted, ``why`` says why), its class,
    data type and whether a causal flag halved it (None: not recorded)."""

    op_class: str | None
    flops: int | None
    dtype: str | None
    why: str | None = None
    causal: bool | None = None


def op_class(name: str) -> str | None:
    """``gemm``, ``attention`` or ``conv`` for an op this module counts, else None."""
    short = name[6:] if name.startswith("aten::") else None
    if short is None:
        return None
    if short in GEMM_OPS:
        return "gemm"
    if short in ATTENTION_OPS:
        return "attention"
    if short in CONV_OPS or short == "convolution_backward":
        return "conv"
    return None


def dtype_of(t: Any) -> str | None:
    """``bf16``, ``fp16``, ``fp32`` ... of a recorded tensor type (host ET ``Tensor(float)``, Kineto
    ``float``); None for anything else."""
    if not isinstance(t, str):
        return None
    if t.startswith("Tensor(") and t.endswith(")"):
        t = t[7:-1]
    return _DTYPES.get(t)


def _load(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            return None
    return v


def _shape(shapes: list[Any], i: int) -> list[int] | None:
    s = shapes[i] if 0 <= i < len(shapes) else None
    if isinstance(s, list) and s and all(type(x) is int and x >= 0 for x in s):
        return s
    return None


def _value(values: list[Any], i: int) -> Any:
    """The recorded value at position ``i`` (host ET values are JSON; Kineto's ``Concrete Inputs``
    are strings: ``"True"``, ``"1"``, ``"[1, 1]"``); None when not recorded."""
    v = values[i] if 0 <= i < len(values) else None
    if isinstance(v, str):
        s = v.strip()
        if s in ("", "<None>"):
            return None
        if s in ("True", "False"):
            return s == "True"
        try:
            return orjson.loads(s)
        except orjson.JSONDecodeError:
            return s
    return v


def _ints(v: Any, n: int) -> list[int] | None:
    """An int list of length ``n`` (a single int repeated), or None."""
    if type(v) is int:
        return [v] * n
    if isinstance(v, list) and all(type(x) is int for x in v):
        if len(v) == n:
            return v
        if len(v) == 1:
            return v * n
    return None


def matmul_flops(a: list[int], b: list[int], batch: int) -> int:
    """FLOPs of ``batch`` matrix products of ``a[-2]×a[-1]`` by ``a[-1]×b[-1]`` (a multiply-add is 2)."""
    return 2 * batch * a[-2] * a[-1] * b[-1]


def _gemm(short: str, shapes: list[Any]) -> tuple[int | None, str | None, int]:
    """(FLOPs, why None, position of the first matrix operand)."""
    off = 1 if short in ("addmm", "baddbmm", "addbmm", "_addmm_activation") else 0
    a, b = _shape(shapes, off), _shape(shapes, off + 1)
    if a is None or b is None:
        return None, "operand shapes not recorded", off
    if short == "linear":
        if len(b) not in (1, 2) or a[-1] != b[-1]:
            return None, "operand shapes do not match", off
        n = b[0] if len(b) == 2 else 1
        return 2 * math.prod(a[:-1]) * n * a[-1], None, off
    if short == "matmul":
        a2 = [1, *a] if len(a) == 1 else a
        b2 = [*b, 1] if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            return None, "operand shapes do not match", off
        batch = _broadcast(a2[:-2], b2[:-2])
        if batch is None:
            return None, "operand shapes do not match", off
        return matmul_flops(a2, b2, batch), None, off
    want = 3 if short in ("bmm", "baddbmm", "addbmm") else 2
    if len(a) != want or len(b) != want or a[-1] != b[-2] or (want == 3 and a[0] != b[0]):
        return None, "operand shapes do not match", off
    batch = a[0] if want == 3 else 1
    return matmul_flops(a, b, batch), None, off


def _broadcast(x: list[int], y: list[int]) -> int | None:
    n = max(len(x), len(y))
    x, y = [1] * (n - len(x)) + x, [1] * (n - len(y)) + y
    out = 1
    for p, q in zip(x, y, strict=True):
        if p != q and 1 not in (p, q):
            return None
        out *= max(p, q)
    return out


def _attention(
    short: str, shapes: list[Any], values: list[Any]
) -> tuple[int | None, str | None, int, bool | None]:
    qpos, layout, cpos, mask_type, backward = ATTENTION_OPS[short]
    q, k, v = _shape(shapes, qpos), _shape(shapes, qpos + 1), _shape(shapes, qpos + 2)
    if q is None or k is None or v is None:
        return None, "query/key/value shapes not recorded", qpos, None
    if len(q) < 3 or len(k) < 3 or (layout == "bshd" and (len(q) != 4 or len(k) != 4)):
        return None, "variable-length (packed) attention: sequence lengths not recorded", qpos, None
    sk = k[-2] if layout == "bhsd" else k[-3]
    d_qk, d_v = q[-1], v[-1]
    if d_qk == 0:
        return 0, None, qpos, None
    rows = math.prod(q) // d_qk  # B·H·S_q in either layout
    fwd = 2 * rows * sk * (d_qk + d_v)
    c = _value(values, cpos)
    causal = (c != 0) if (mask_type and type(c) is int) else (c if isinstance(c, bool) else None)
    if causal:
        fwd //= 2
    return (fwd * 5 // 2 if backward else fwd), None, qpos, causal


def _conv_out(
    inp: list[int], w: list[int], values: list[Any], pos: tuple[int, int, int | None, int | bool]
) -> list[int] | None:
    nd = len(w) - 2
    spos, ppos, dpos, _ = pos
    stride = _ints(_value(values, spos), nd)
    pad_v = _value(values, ppos)
    dil = _ints(_value(values, dpos), nd) if dpos is not None else [1] * nd
    if stride is None or dil is None:
        return None
    if pad_v in ("same", "valid"):
        if pad_v == "same":
            return inp[2:]
        pad = [0] * nd
    else:
        pad = _ints(pad_v, nd)
        if pad is None:
            return None
    out = [
        (h + 2 * p - d * (r - 1) - 1) // s + 1
        for h, p, d, r, s in zip(inp[2:], pad, dil, w[2:], stride, strict=True)
    ]
    return out if all(o > 0 for o in out) and all(s > 0 for s in stride) else None


def _conv(
    short: str, shapes: list[Any], values: list[Any], out_shapes: list[Any]
) -> tuple[int | None, str | None, int]:
    if short == "convolution_backward":
        g, x, w = _shape(shapes, 0), _shape(shapes, 1), _shape(shapes, 2)
        if g is None or x is None or w is None or len(w) < 3 or len(g) != len(w) or len(x) != len(w):
            return None, "grad/input/weight shapes not recorded", 1
        transposed = _value(values, 7)
        positions = x[2:] if transposed is True else g[2:]
        fwd = 2 * g[0] * math.prod(positions) * math.prod(w)
        mask = _value(values, 10)
        passes = int(bool(mask[0])) + int(bool(mask[1])) if isinstance(mask, list) and len(mask) >= 2 else 2
        return fwd * passes, None, 1
    pos = CONV_OPS[short]
    x, w = _shape(shapes, 0), _shape(shapes, 1)
    if x is None or w is None or len(w) < 3 or len(x) != len(w):
        return None, "input/weight shapes not recorded", 0
    tpos = pos[3]
    transposed = tpos if isinstance(tpos, bool) else _value(values, tpos)
    if transposed is True:
        return 2 * x[0] * math.prod(x[2:]) * math.prod(w), None, 0
    o = _shape(out_shapes, 0)
    if o is not None and len(o) == len(x):
        spatial = o[2:]
    else:
        sp = _conv_out(x, w, values, pos) if transposed is not None or isinstance(tpos, bool) else None
        if sp is None:
            return None, "stride/padding/dilation not recorded", 0
        spatial = sp
    return 2 * x[0] * math.prod(spatial) * math.prod(w), None, 0


def op_flops(name: str, shapes: Any, types: Any, values: Any = None, out_shapes: Any = None) -> OpFlops:
    """The FLOPs of one op ``name`` from its recorded input ``shapes``, ``types``, ``values`` (lists,
    or their JSON text) and output shapes (for convolutions); see the module docstring."""
    cls = op_class(name)
    if cls is None:
        return OpFlops(None, None, None, "not a counted op")
    sh, ty, va, os_ = _load(shapes), _load(types), _load(values), _load(out_shapes)
    if not isinstance(sh, list) or not sh:
        return OpFlops(cls, None, None, "input shapes not recorded")
    ty = ty if isinstance(ty, list) else []
    va = va if isinstance(va, list) else []
    os_ = os_ if isinstance(os_, list) else []
    short = name[6:]
    causal = None
    if cls == "gemm":
        f, why, tpos = _gemm(short, sh)
    elif cls == "attention":
        f, why, tpos, causal = _attention(short, sh, va)
    else:
        f, why, tpos = _conv(short, sh, va, os_)
    dt = dtype_of(ty[tpos]) if tpos < len(ty) else None
    return OpFlops(cls, f, dt, why, causal)
