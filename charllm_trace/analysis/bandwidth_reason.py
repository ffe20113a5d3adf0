"""Why the bandwidth analysis has nothing to measure, in one sentence that names what is
actually missing (docs/analyses.md, "Bandwidth").

Bandwidth divides a collective's bytes by its transfer time. Three inputs leave it without any:

- no collectives at all;
- collectives without durations: a host execution trace alone records none;
- collectives with durations that are CPU-side calls only (``c10d::allgather_``, ``barrier`` ...)
  in a profile whose devices ran work but no recorded collective kernel (an MTIA profile: 146
  ``c10d::`` ops, no device-side collective): the transfer happened on the device, unrecorded.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

from charllm_trace.core.model import COMM_NODE_TYPES, Trace

#: collective names shown in the reason
SHOWN = 4


def comm_facts(trace: Trace) -> tuple[int, int, Counter[str], bool]:
    """(collective nodes, those with a duration, their names counted, any device activity)."""
    n = trace.nodes
    comm = n.filter(pl.col("node_type").is_in(list(COMM_NODE_TYPES)))
    timed = int(comm["dur_ns"].is_not_null().sum()) if "dur_ns" in comm.columns else 0
    names = Counter(dict(comm.group_by("name").len().iter_rows())) if comm.height else Counter()
    device = bool(n["on_gpu"].fill_null(False).any()) if "on_gpu" in n.columns else False
    return comm.height, timed, names, device


def no_bandwidth_reason(n_comm: int, n_timed: int, names: Counter[str], device: bool) -> str:
    """The skip reason of the bandwidth analysis from the ranks' summed :func:`comm_facts`."""
    if not n_comm:
        return "no collectives in this trace: bandwidth not computed"
    if not n_timed:
        return (
            f"{n_comm:,} collectives, but none has a duration (a host execution trace alone records "
            "none; convert it together with its Kineto profile): bandwidth not computed"
        )
    ranked = sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))  # ties by name: stable output
    top = ", ".join(f"{c:,} {name}" for name, c in ranked[:SHOWN])
    more = f", {len(names) - SHOWN} more names" if len(names) > SHOWN else ""
    where = (
        "the profile's devices ran work but no recorded collective kernel"
        if device
        else "the profile has no device activity at all"
    )
    return (
        f"{n_comm:,} collectives ({top}{more}) are CPU-side calls only: {where}, so no transfer "
        "has a device time to divide its bytes by: bandwidth not computed"
    )
