"""The ``--what-if`` vocabulary: parsing ``NAME=FACTOR``, ``NAME=BW GB/s`` and ``cpu_op+=TIME``.

Keys (docs/analyses.md, "What-if"):

- ``CLASS=FACTOR``: durations of a class scaled (``graph.pointgraph.WHATIF_CLASSES``: gemm,
  attention, elementwise, kernel, comm, memcpy, launch, cpu, idle; aliases gpu/compute, memory,
  network, cpu_all). A factor is a finite number > 0; ``launch=0`` (launches free, as with CUDA
  graphs) is the one 0 accepted.
- ``DIM=FACTOR`` (``tp``, ``cp``, ``dp``, ``pp``, ``ep``): the communication of the process
  groups of that parallel dimension (``analysis.parallel``) scaled; it wins over ``comm``.
- ``comm=BW GB/s`` / ``DIM=BW GB/s``: the transfer time of each collective re-timed as
  ``bytes x bus factor / BW`` (nccl-tests message size and bus factor, GB = 1e9 bytes).
- ``cpu_op+=TIME`` (``ns``, ``us``, ``ms``, ``s``): a fixed CPU cost added at the start of every
  CPU operator (each ``aten::`` op, nested ones included).

A parsed what-if is a ``{key: number}`` mapping (JSON- and results-file-friendly): a factor under
the key's name, a bandwidth under ``NAME_gbps``, the added time under ``cpu_op_add_ns``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from charllm_trace.analysis.parallel import DIMS
from charllm_trace.core.errors import UsageError
from charllm_trace.graph.pointgraph import WHATIF_ALIASES, WHATIF_CLASSES

CLASS_KEYS = tuple(WHATIF_CLASSES) + tuple(WHATIF_ALIASES)
DIM_KEYS = tuple(DIMS)
#: keys that take a bandwidth
BW_KEYS = ("comm", *DIM_KEYS)
#: keys that take an added time (``+=``)
ADD_KEYS = ("cpu_op",)
GBPS = "_gbps"
ADD_NS = "_add_ns"
#: the one factor 0 accepted
ZERO_OK = ("launch",)
_UNIT_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_PART = re.compile(r"^\s*([A-Za-z_]+)\s*(\+?=)\s*(.*?)\s*$")
_BW = re.compile(r"(?i)^(.*?)\s*(gb/s|gbps)$")
_TIME = re.compile(r"(?i)^(.*?)\s*(ns|us|µs|ms|s)$")


def _number(text: str, part: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise UsageError(f"--what-if: '{text}' is not a number (in '{part}')") from None
    if not math.isfinite(v):
        raise UsageError(f"--what-if: '{text}' is not a finite number (in '{part}')")
    return v


def _known() -> str:
    return (
        f"NAME=FACTOR with NAME one of {', '.join(CLASS_KEYS + DIM_KEYS)}; "
        "comm or a dimension =BW GB/s; cpu_op+=TIME (ns, us, ms, s)"
    )


def _factor(name: str, val: str, part: str) -> tuple[str, float]:
    bw = _BW.match(val)
    if bw:
        if name not in BW_KEYS:
            raise UsageError(
                f"--what-if: a bandwidth applies to comm or {', '.join(DIM_KEYS)}, not {name} (in '{part}')"
            )
        v = _number(bw.group(1), part)
        if v <= 0:
            raise UsageError(f"--what-if: the bandwidth of {name} must be > 0 GB/s, not {bw.group(1)}")
        return name + GBPS, v
    v = _number(val, part)
    if v < 0 or (v == 0 and name not in ZERO_OK):
        need = ">= 0" if name in ZERO_OK else "> 0"
        raise UsageError(f"--what-if: the factor of {name} must be a finite number {need}, not {val}")
    return name, v


def _added(name: str, val: str, part: str) -> tuple[str, float]:
    if name not in ADD_KEYS:
        raise UsageError(f"--what-if: '+=' applies to {', '.join(ADD_KEYS)}, not {name} (in '{part}')")
    m = _TIME.match(val)
    if not m:
        raise UsageError(f"--what-if: '{val}' is not a time with a unit (ns, us, ms, s) (in '{part}')")
    v = _number(m.group(1), part) * _UNIT_NS[m.group(2).lower()]
    if v <= 0:
        raise UsageError(f"--what-if: the time added by {name} must be > 0, not {val}")
    return name + ADD_NS, float(round(v))


def _one(part: str) -> tuple[str, float]:
    m = _PART.match(part)
    if not m or not m.group(3):
        raise UsageError(f"--what-if: '{part}' is not {_known()}")
    name, op, val = m.group(1).lower(), m.group(2), m.group(3)
    if op == "+=":
        return _added(name, val, part)
    if name not in CLASS_KEYS + DIM_KEYS:
        raise UsageError(f"--what-if: unknown key '{name}' (in '{part}'): {_known()}")
    return _factor(name, val, part)


def parse_what_if(text: str) -> dict[str, float]:
    """``"comm=0.5,gemm=2,dp=50GB/s,cpu_op+=50us"`` -> ``{"comm": 0.5, "gemm": 2.0,
    "dp_gbps": 50.0, "cpu_op_add_ns": 50000.0}``; anything else is a one-line UsageError."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, v = _one(part)
        base = key.removesuffix(GBPS)
        if key in out or (key.endswith(GBPS) and base in out) or base + GBPS in out:
            raise UsageError(f"--what-if: {base} is given twice")
        out[key] = v
    if not out:
        raise UsageError("--what-if: give at least one key, e.g. comm=0.5,gemm=2")
    return out


def class_factors(factors: Mapping[str, float]) -> dict[str, float]:
    """The ``CLASS=FACTOR`` entries alone."""
    return {k: v for k, v in factors.items() if k in CLASS_KEYS}


def per_edge_keys(factors: Mapping[str, float]) -> list[str]:
    """The keys that need the run's collectives or operators (not a class factor)."""
    return [k for k in factors if k not in CLASS_KEYS]


def describe(factors: Mapping[str, float]) -> str:
    """The what-if as the user wrote it: ``gemm×2, dp=50 GB/s, cpu_op+=50 µs``."""
    out = []
    for k, v in factors.items():
        if k.endswith(GBPS):
            out.append(f"{k.removesuffix(GBPS)}={v:g} GB/s")
        elif k.endswith(ADD_NS):
            out.append(f"{k.removesuffix(ADD_NS)}+={v / 1e3:g} µs")
        else:
            out.append(f"{k}×{v:g}")
    return ", ".join(out)
