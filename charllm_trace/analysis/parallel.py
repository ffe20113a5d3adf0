"""Naming process groups by parallelism dimension (TP / CP / EP / DP / PP).

A process group gets a dimension from, in order of preference:

1. a layout (``--parallel tp=..,cp=..,pp=..,dp=..,ep=..`` or the manifest's
   ``parallel`` entry): global ranks are laid out in Megatron-LM's default order
   ``tp-cp-ep-dp-pp`` — tensor-parallel rank varies fastest, then context-parallel,
   then data-parallel, pipeline stage slowest::

       rank = tp_i + tp * (cp_i + cp * (dp_i + dp * pp_i))

   Expert-parallel groups are carved out of the combined context·data-parallel index
   ``m = cp_i + cp * dp_i``: each EP group is ``ep`` consecutive values of ``m``
   (same ``tp_i`` and ``pp_i``), as Megatron's expert rank generator does. A group
   whose ranks equal the rank's group in some dimension is named after it (several
   equal dimensions are joined with ``+``, e.g. ``ep+dp`` when ``ep == dp``);
2. otherwise the process group's description (``TENSOR_MODEL_PARALLEL_GROUP``,
   ``tp``, ``DATA_PARALLEL_GROUP``, ``pp``, ``expert…``, ``context…`` ...);
3. otherwise no dimension (null).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from charllm_trace.core.errors import UsageError
from charllm_trace.core.model import ProcessGroup

DIMS = ("tp", "cp", "ep", "dp", "pp")

_DESC_RULES = (
    ("ep", re.compile(r"(?i)expert_model|expert_parallel|expt_mp|(^|[^a-z])ep([^a-z]|$)")),
    ("tp", re.compile(r"(?i)tensor|(^|[^a-z])tp([^a-z]|$)")),
    ("cp", re.compile(r"(?i)context|(^|[^a-z])cp([^a-z]|$)")),
    ("pp", re.compile(r"(?i)pipeline|(^|[^a-z])pp([^a-z]|$)")),
    ("dp", re.compile(r"(?i)data_parallel|data parallel|(^|[^a-z])dp([^a-z]|$)")),
)


def parse_parallel(text: str) -> dict[str, int]:
    """Parse ``tp=2,pp=2,dp=4,ep=1`` (any subset; missing sizes are 1)."""
    out: dict[str, int] = {}
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        key, sep, val = part.partition("=")
        key = key.lower()
        if not sep or key not in DIMS:
            raise UsageError(f"--parallel: expected dim=size with dim in {', '.join(DIMS)}, got {part!r}")
        if not (val.isascii() and val.lstrip("+-").isdigit()):
            raise UsageError(f"--parallel: size of {key} must be an integer, got {val!r}")
        n = int(val)
        if n < 1:
            raise UsageError(f"--parallel: size of {key} must be >= 1, got {n}")
        out[key] = n
    if not out:
        raise UsageError("--parallel: no dimension given (e.g. tp=2,pp=2,dp=2)")
    check_world(out, "--parallel")
    return out


def check_world(layout: Mapping[str, int], what: str) -> None:
    """UsageError (``what``: the option) when the layout's world size is past the largest job
    charllm-trace reads (:data:`charllm_trace.core.limits.MAX_RANK` ranks): its groups are built rank
    by rank, so a mistyped size would exhaust memory."""
    from charllm_trace.core.limits import MAX_RANK

    world = 1
    for d in ("tp", "cp", "dp", "pp"):
        world *= int(layout.get(d, 1) or 1)
    if world > MAX_RANK or int(layout.get("ep", 1) or 1) > MAX_RANK:
        raise UsageError(
            f"{what}: a layout of {world:,} ranks, past the largest job read ({MAX_RANK:,} ranks)"
        )


def _sizes(layout: Mapping[str, int]) -> dict[str, int]:
    s = {d: int(layout.get(d, 1) or 1) for d in DIMS}
    if (s["cp"] * s["dp"]) % s["ep"]:
        raise UsageError(f"--parallel: ep={s['ep']} must divide cp*dp={s['cp'] * s['dp']}")
    return s


def world_of(layout: Mapping[str, int]) -> int:
    s = _sizes(layout)
    return s["tp"] * s["cp"] * s["dp"] * s["pp"]


def groups_of_rank(layout: Mapping[str, int], rank: int) -> dict[str, tuple[int, ...]]:
    """The global ranks of ``rank``'s group in each dimension, under the Megatron order."""
    s = _sizes(layout)
    tp, cp, dp, pp, ep = s["tp"], s["cp"], s["dp"], s["pp"], s["ep"]
    tp_i = rank % tp
    cp_i = (rank // tp) % cp
    dp_i = (rank // (tp * cp)) % dp
    pp_i = rank // (tp * cp * dp)

    def r(t: int, c: int, d: int, p: int) -> int:
        return t + tp * (c + cp * (d + dp * p))

    m = cp_i + cp * dp_i
    m0 = (m // ep) * ep
    return {
        "tp": tuple(r(t, cp_i, dp_i, pp_i) for t in range(tp)),
        "cp": tuple(r(tp_i, c, dp_i, pp_i) for c in range(cp)),
        "dp": tuple(r(tp_i, cp_i, d, pp_i) for d in range(dp)),
        "pp": tuple(r(tp_i, cp_i, dp_i, p) for p in range(pp)),
        "ep": tuple(sorted(tp_i + tp * (mm + cp * dp * pp_i) for mm in range(m0, m0 + ep))),
    }


def dim_from_desc(desc: str | None) -> str | None:
    if not desc:
        return None
    for dim, rx in _DESC_RULES:
        if rx.search(desc):
            return dim
    return None


def name_groups(
    groups: Iterable[ProcessGroup], layout: Mapping[str, int] | None = None
) -> dict[str, str | None]:
    """Map each process group name to its dimension (or None)."""
    out: dict[str, str | None] = {}
    for pg in groups:
        dim: str | None = None
        if layout and pg.ranks:
            ranks = tuple(sorted(pg.ranks))
            if max(ranks) < world_of(layout):
                mine = groups_of_rank(layout, ranks[0])
                hits = [d for d in DIMS if len(mine[d]) > 1 and tuple(sorted(mine[d])) == ranks]
                if hits:
                    dim = "+".join(hits)
        if dim is None:
            dim = dim_from_desc(pg.desc) or dim_from_desc(pg.name)
        out[pg.name] = dim
    return out
