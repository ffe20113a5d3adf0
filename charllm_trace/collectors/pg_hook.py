"""The process group of every collective, recorded where the backend records none (gloo).

NCCL's operators carry their process group in the profile (``Process Group Name``); gloo's do not,
so a gloo run's collectives cannot be given a parallel dimension. While a rank is traced, this
module wraps the ``torch.distributed`` collective and point-to-point functions so that each call
runs inside a ``record_function`` range named ``charllm_pg:<group name>`` (the name of the
``group=`` argument, the default group's when none is given); the converter gives that name to
the communication ops under the range that have none (``converters/annotate.py``).

Like :mod:`charllm_trace.collectors.hook` (which loads it from its file), this imports only the
standard library at module level; torch is imported by :func:`install`.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

#: The range name's prefix (the converter reads the group name after it).
PREFIX = "charllm_pg:"
#: The wrapped functions of ``torch.distributed`` (those that exist in the installed torch).
FUNCTIONS = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "barrier",
    "send", "recv", "isend", "irecv",
)  # fmt: skip
_MARK = "_charllm_pg_wrapped"


def _group_name(dist: Any, group: Any) -> str | None:
    try:
        g = group if group is not None else dist.group.WORLD
        name = getattr(g, "group_name", None)
        return str(name) if name else None
    except Exception:  # never break a collective because its name could not be read
        return None


def _wrap(dist: Any, record_function: Any, fn: Any) -> Any:
    try:
        pos = list(inspect.signature(fn).parameters).index("group")
    except (TypeError, ValueError):
        pos = None

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        group = kwargs.get("group", args[pos] if pos is not None and len(args) > pos else None)
        name = _group_name(dist, group)
        if name is None:
            return fn(*args, **kwargs)
        with record_function(PREFIX + name):
            return fn(*args, **kwargs)

    setattr(call, _MARK, True)
    return call


def install() -> int:
    """Wrap the functions of :data:`FUNCTIONS` once per process; returns how many were wrapped."""
    import torch.distributed as dist
    from torch.profiler import record_function

    n = 0
    for name in FUNCTIONS:
        fn = getattr(dist, name, None)
        if fn is None or getattr(fn, _MARK, False):
            continue
        setattr(dist, name, _wrap(dist, record_function, fn))
        n += 1
    return n
