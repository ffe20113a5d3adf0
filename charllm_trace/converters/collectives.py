"""Collective communication: detection, type, message size, dtype, process group, sequence.

Message size (``comm_bytes``) follows nccl-tests' convention for each type:

================  ===================================================
all_reduce        bytes of the buffer (= input = output)
broadcast/reduce  bytes of the buffer
all_gather        bytes of the whole output (group size x per-rank input)
reduce_scatter    bytes of the whole input (group size x per-rank output)
all_to_all        bytes one rank sends in total (its whole input)
send / recv       bytes sent / received
gather            bytes of the whole output at the root
scatter           bytes of the whole input at the root
barrier           0
================  ===================================================

``num_elems`` is the element count that gives ``comm_bytes`` (``comm_bytes =
num_elems x element size``).
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import orjson

from charllm_trace.core.numbers import int_value

# Element sizes by every spelling we meet: Kineto ``dtype`` (c10 ScalarType names),
# Kineto ``Input type`` (C++ type names), host-ET ``Tensor(<type>)``.
#: The range the collector puts around a collective call, named after its process group
#: (``collectors/pg_hook.py`` writes the same prefix): ``charllm_pg:<group name>``.
PG_MARK = "charllm_pg:"
_ELEM_SIZE = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "c10::half": 2,
    "bfloat16": 2,
    "c10::bfloat16": 2,
    "int": 4,
    "int32": 4,
    "long": 8,
    "long int": 8,
    "int64": 8,
    "short": 2,
    "int16": 2,
    "char": 1,
    "signed char": 1,
    "int8": 1,
    "byte": 1,
    "unsigned char": 1,
    "uint8": 1,
    "bool": 1,
    "complexfloat": 8,
    "c10::complex<float>": 8,
    "complexdouble": 16,
    "c10::complex<double>": 16,
    "complexhalf": 4,
    "c10::complex<c10::half>": 4,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
    "c10::float8_e4m3fnuz": 1,
    "c10::float8_e5m2fnuz": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "unsigned int": 4,
    "unsigned long": 8,
    "long long": 8,
}

# Canonical dtype names (torch spelling) for the ``dtype`` column.
_DTYPE_NAME = {
    "float": "float32",
    "float32": "float32",
    "double": "float64",
    "float64": "float64",
    "half": "float16",
    "float16": "float16",
    "c10::half": "float16",
    "bfloat16": "bfloat16",
    "c10::bfloat16": "bfloat16",
    "int": "int32",
    "int32": "int32",
    "long": "int64",
    "long int": "int64",
    "int64": "int64",
    "short": "int16",
    "int16": "int16",
    "char": "int8",
    "signed char": "int8",
    "int8": "int8",
    "byte": "uint8",
    "unsigned char": "uint8",
    "uint8": "uint8",
    "bool": "bool",
}


def dtype_info(raw: Any) -> tuple[str | None, int | None]:
    """(canonical dtype name, element size in bytes) of a dtype spelling, or (raw, None)."""
    if not isinstance(raw, str) or not raw:
        return None, None
    s = raw.strip()
    m = re.fullmatch(r"(?:GenericList\[)?Tensor\((.+?)\)\]?", s)
    if m:
        s = m.group(1)
    key = s.lower()
    return _DTYPE_NAME.get(key, s), _ELEM_SIZE.get(key)


@functools.lru_cache(maxsize=4096)  # called per communication node and its ancestors; names repeat
def coll_type_of(text: str | None) -> str | None:
    """Collective type from a collective name, c10d op, ``nccl:``/``gloo:`` op or kernel name."""
    if not text:
        return None
    t = text.lower()
    for prefix in ("c10d::", "nccl:", "gloo:", "rccl:", "hccl:", "mpi:", "ucc:"):
        if t.startswith(prefix):
            t = t[len(prefix) :]
            break
    # kernel names: ncclKernel_AllReduce_..., ncclDevKernel_ReduceScatter_... (HCCL's hcclAllReduce...
    # come through the fragments below)
    m = re.search(r"(?:nccl|rccl|msccl|hccl)\w*?kernel_([a-z]+)", t)
    if m:
        t = m.group(1)
    return _coll_of_fragment(t.replace("_", "").replace(" ", ""))


#: (fragment found anywhere in the name, type), in order: the first that matches wins
_COLL_CONTAINS = (
    ("reducescatter", "reduce_scatter"),
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
)
#: (prefix of the name, type), tried after the fragments
_COLL_STARTS = (("reduce", "reduce"), ("gather", "gather"), ("scatter", "scatter"))


def _coll_of_fragment(t: str) -> str | None:
    """The collective type of a lower-case name without separators."""
    for frag, ct in _COLL_CONTAINS:
        if frag in t:
            return ct
    for prefix, ct in _COLL_STARTS:
        if t.startswith(prefix):
            return ct
    if t.startswith("send") and "recv" not in t:
        return "send"
    if t.startswith("recv"):
        return "recv"
    return None


def node_type_of(coll_type: str | None) -> str:
    if coll_type == "send":
        return "COMM_SEND"
    if coll_type == "recv":
        return "COMM_RECV"
    return "COMM_COLL"


def comm_nelems(coll_type: str | None, in_n: int | None, out_n: int | None) -> int | None:
    """Element count of the message by the nccl-tests convention, from input/output counts."""
    if coll_type == "barrier":
        return 0
    if coll_type in ("all_gather", "gather", "recv"):
        return out_n if out_n is not None else None
    if coll_type in ("reduce_scatter", "scatter", "all_to_all", "send"):
        return in_n
    return in_n if in_n is not None else out_n


def group_from_counts(coll_type: str | None, in_n: int | None, out_n: int | None) -> int | None:
    """The group size an all_gather's or reduce_scatter's own element counts imply: output /
    input (all_gather), input / output (reduce_scatter); None when a count is unknown or the
    ratio is not a whole number."""
    whole, part = (out_n, in_n) if coll_type == "all_gather" else (in_n, out_n)
    if coll_type not in ("all_gather", "reduce_scatter") or not whole or not part or whole % part:
        return None
    return whole // part


def parse_list(v: Any) -> list[int] | None:
    """``"[0, 1]"`` or ``[0, 1]`` -> [0, 1]; anything else -> None."""
    if isinstance(v, list):
        out = [int(x) for x in v if isinstance(x, (int, float)) and not isinstance(x, bool)]
        return out if len(out) == len(v) else None
    if isinstance(v, str):
        try:
            x = orjson.loads(v)
        except orjson.JSONDecodeError:
            return None
        return parse_list(x) if isinstance(x, list) else None
    return None


def as_int(v: Any) -> int | None:
    """An integer field of a collective's args: a bool is none, a string decimal."""
    return int_value(v)


def numel(shape: Any) -> int | None:
    """Element count of a shape like [4, 256]; None for non-shapes (lists of shapes, empty)."""
    if isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return math.prod(shape) if shape else None
    return None


def _leaf_total(shape: Any, depth: int = 0) -> int | None:
    """Total elements of a shape or (nested) list of shapes; None when there is no tensor shape."""
    n = numel(shape)
    if n is not None:
        return n
    if not isinstance(shape, list) or not shape or depth > 6:
        return None
    parts = [_leaf_total(s, depth + 1) for s in shape]
    vals = [p for p in parts if p is not None]
    return sum(vals) if vals else None


def first_tensor(shapes: Any, types: Any) -> tuple[int | None, str | None]:
    """(element count, dtype spelling) of the first tensor argument, given parallel shape/type
    lists; a list of tensors (``GenericList[Tensor(float)]``, Kineto ``TensorList``) counts all
    its elements."""
    if not isinstance(shapes, list):
        return None, None
    types = types if isinstance(types, list) else []
    for i, sh in enumerate(shapes):
        ty = types[i] if i < len(types) else None
        n = _leaf_total(sh)
        if n is None:
            continue
        if isinstance(ty, str) and "Tensor(" in ty:
            m = re.search(r"Tensor\(([^)]*)\)", ty)
            ty = m.group(1) if m else ty
        return n, ty
    return None, None


def has_collective_args(args: dict[str, Any] | None) -> bool:
    return bool(args) and ("Collective name" in args or "In msg nelems" in args)


def from_args(args: dict[str, Any], coll_type: str | None, own_type: str | None = None) -> dict[str, Any]:
    """Collective fields from Kineto comm args (NCCL kernel args or record_param_comms args).

    The type is ``own_type`` (the node's own, when the args are an enclosing op's: a
    ``gloo:all_reduce`` inside a reduce_scatter stays an all_reduce, sized by its rule), else the
    args' ``Collective name``, else ``coll_type``."""
    out: dict[str, Any] = {}
    ct = own_type or coll_type_of(args.get("Collective name")) or coll_type
    out["coll_type"] = ct
    dt, size = dtype_info(args.get("dtype"))
    out["dtype"] = dt
    in_n = as_int(args.get("In msg nelems"))
    out_n = as_int(args.get("Out msg nelems"))
    n = comm_nelems(ct, in_n, out_n)
    out["num_elems"] = n
    out["comm_bytes"] = n * size if (n is not None and size is not None) else (0 if ct == "barrier" else None)
    out["in_nelems"] = in_n
    out["out_nelems"] = out_n
    if isinstance(args.get("Process Group Name"), str):
        out["pg_name"] = args["Process Group Name"]
    if isinstance(args.get("Process Group Description"), str):
        out["pg_desc"] = args["Process Group Description"]
    ranks = parse_list(args.get("Process Group Ranks"))
    gs = as_int(args.get("Group size"))
    start, stride = as_int(args.get("Global rank start")), as_int(args.get("Global rank stride"))
    if not ranks and gs and start is not None and stride:
        ranks = list(range(start, start + stride * gs, stride))  # older torch: start/stride/size only
    if ranks:
        out["pg_ranks"] = ranks
    if gs is not None:
        out["group_size"] = gs
    ins = parse_list(args.get("In split size"))
    outs = parse_list(args.get("Out split size"))
    out["in_split"] = ins or None
    out["out_split"] = outs or None
    seq = as_int(args.get("Seq", args.get("seq")))
    if seq is not None:
        out["coll_seq"] = seq
    return out
