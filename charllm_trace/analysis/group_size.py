"""The group size ``n`` of a collective's bus factor when its own tensors say otherwise.

The bandwidth analysis takes ``n`` from the collective's process group (its ranks), else the
kernel's ``Group size`` arg, else the world size. An all_gather's output holds ``n`` times its
input, a reduce_scatter's input ``n`` times its output: where the converter knew both element
counts it wrote their ratio into the node's ``attrs`` (:data:`~charllm_trace.core.model.ATTR_TENSOR_GROUP`).
When that ratio disagrees with the group's or world's size (a subgroup whose ranks the trace does
not record, read as the whole world), the tensors win: ``n`` is the ratio, and a note says how many
collectives it changed.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.core.model import ATTR_TENSOR_GROUP

#: the collectives whose element counts give their group size
TENSOR_SIZED = ("all_gather", "reduce_scatter")

#: (coll_type, group size by the tensors, group size otherwise) -> collectives
Tally = dict[tuple[str, int, int | None], int]


def tensor_group_sizes(inst: pl.DataFrame, tally: Tally | None = None) -> pl.DataFrame:
    """``inst`` (collective instances with ``coll_type``, ``group_size`` and ``attrs``) with
    ``group_size`` replaced by the tensors' ratio where the two disagree; the replacements are
    counted in ``tally``."""
    if "attrs" not in inst.columns or inst.height == 0:
        return inst
    ratio = pl.col("attrs").str.extract(rf'"{ATTR_TENSOR_GROUP}"\s*:\s*(\d+)', 1).cast(pl.Int64, strict=False)
    inst = inst.with_columns(_tn=pl.when(pl.col("coll_type").is_in(TENSOR_SIZED)).then(ratio))
    differs = pl.col("_tn").is_not_null() & pl.col("group_size").ne_missing(pl.col("_tn"))
    if tally is not None:
        changed = inst.filter(differs).group_by("coll_type", "_tn", "group_size").len()
        for ct, tn, gs, cnt in changed.iter_rows():
            key = (str(ct), int(tn), None if gs is None else int(gs))
            tally[key] = tally.get(key, 0) + int(cnt)
    return inst.with_columns(
        group_size=pl.when(differs).then(pl.col("_tn")).otherwise(pl.col("group_size"))
    ).drop("_tn")


def tensor_group_notes(tally: Tally) -> list[str]:
    """One note per (type, tensors' size, other size) the tally holds."""
    out = []
    for (ct, tn, gs), cnt in sorted(tally.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
        other = f"the {gs} of their process group or world" if gs is not None else "an unknown group size"
        out.append(
            f"{cnt} {ct} collectives: their own tensors imply a group of {tn} (the whole buffer's "
            f"elements over one rank's part), not {other}; the bus factor uses {tn}"
        )
    return out


def ranks_per_node(manifest: Any) -> int | None:
    """The run's ranks (GPUs) per node by its manifest: ``ranks_per_node``, else the most ranks
    of one host in ``ranks_by_host``; None when it does not say."""
    if not isinstance(manifest, dict):
        return None
    n = manifest.get("ranks_per_node")
    if type(n) is int and n > 0:
        return n
    by_host = manifest.get("ranks_by_host")
    if isinstance(by_host, dict):
        counts = [len(v) for v in by_host.values() if isinstance(v, list)]
        if counts and max(counts) > 0:
            return max(counts)
    return None
