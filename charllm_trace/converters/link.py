r"""Link host-ET ops to Kineto ops.

Methods, tried in order (the one used is reported as ``link_method``):

1. ``rf_id``: host ET ``rf_id`` = Kineto ``Record function id`` (PyTorch >= 2.1 writes both), and the
   names agree.
2. ``name_order``: profiles without ``Record function id`` (older PyTorch, e.g. the DLRM set):
   on each thread, the k-th host op named N (host ids are in call order) is the k-th Kineto op
   named N (in start order). Host threads are paired with Kineto threads by the most such
   matches. When the host ET is much smaller than a profile of several ``ProfilerStep``\ s, it is
   matched inside each window of consecutive steps too, and the best window is used
   (``link_window``; ``kineto_window`` in the stats). Accepted only if it is convincing: >= 90 %
   of host ops matched and >= 90 % of matched children sit under the matched parent. Otherwise
   the conversion falls back to the Kineto profile alone (``link_method`` = "none", with the
   reason in one line, both op counts in it).

A host ET and a Kineto profile of different processes (different pid) or with little overlap
(< 50 % of host ops found by ``rf_id``) are an ``InputError``: they are not a pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from charllm_trace.converters.host_et import PG_INIT, HostET
from charllm_trace.converters.link_window import best_window, no_window_reason
from charllm_trace.core.errors import InputError

#: host ET bookkeeping nodes with no Kineto counterpart
ROOT_PREFIX = "[pytorch|profiler|execution_"
KINETO_OP_CATS = ["cpu_op", "user_annotation", "operator"]
MIN_RF_OVERLAP = 0.5
MIN_ORDER_MATCH = 0.9
MIN_PARENT_AGREE = 0.9


@dataclass
class Link:
    method: str
    pairs: pl.DataFrame  # kineto id (row) -> host id
    stats: dict[str, Any] = field(default_factory=dict)


def host_ops(host: HostET) -> pl.DataFrame:
    return host.nodes.filter(~pl.col("name").str.starts_with(ROOT_PREFIX) & (pl.col("name") != PG_INIT))


def _by_rf_id(host: HostET, kin: pl.DataFrame) -> pl.DataFrame:
    h = host_ops(host).filter(pl.col("rf_id").is_not_null()).unique(subset="rf_id", keep="first")
    k = kin.filter(pl.col("rf_id").is_not_null()).unique(subset="rf_id", keep="first")
    j = k.select("id", "rf_id", "name").join(
        h.select(pl.col("id").alias("host_id"), "rf_id", pl.col("name").alias("host_name")), on="rf_id"
    )
    return j.filter(pl.col("name") == pl.col("host_name")).select("id", "host_id")


def _occurrence(df: pl.DataFrame, thread: str, order: list[str]) -> pl.DataFrame:
    return df.sort([thread, *order]).with_columns(
        pl.int_range(0, pl.len(), dtype=pl.Int64).over(thread, "name").alias("occ")
    )


def _by_name_order(host: HostET, kin: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, Any]]:
    h = _occurrence(
        host_ops(host).select(
            pl.col("id").alias("host_id"),
            "name",
            pl.col("et_tid").fill_null(-1).alias("ht"),
            pl.col("parent").alias("host_parent"),
        ),
        "ht",
        ["host_id"],
    )
    # dur descending as tie-break: the enclosing op first
    k = (
        kin.select(
            "id",
            "name",
            (pl.col("pid").cast(pl.String) + ":" + pl.col("tid").cast(pl.String)).fill_null("?").alias("kt"),
            "start_ns",
            pl.col("dur_ns"),
            "parent",
        )
        .sort(["kt", "start_ns", "dur_ns", "id"], descending=[False, False, True, False])
        .with_columns(pl.int_range(0, pl.len(), dtype=pl.Int64).over("kt", "name").alias("occ"))
    )
    cand = h.join(k, on=["name", "occ"])
    score = cand.group_by("ht", "kt").len().sort("len", descending=True)
    used_h, used_k, keep = set(), set(), []
    for ht, kt, _n in score.iter_rows():
        if ht in used_h or kt in used_k:
            continue
        used_h.add(ht)
        used_k.add(kt)
        keep.append((ht, kt))
    if not keep:
        return pl.DataFrame(schema={"id": pl.Int64, "host_id": pl.Int64}), {"threads_paired": 0}
    tp = pl.DataFrame(keep, schema={"ht": h["ht"].dtype, "kt": pl.String}, orient="row")
    pairs = cand.join(tp, on=["ht", "kt"])
    # parent agreement: the host parent of a matched op maps to the op's Kineto parent
    hmap = pairs.select(pl.col("host_id").alias("host_parent"), pl.col("id").alias("mapped_parent"))
    chk = pairs.join(hmap, on="host_parent", how="inner")
    agree = float((chk["mapped_parent"] == chk["parent"]).mean()) if chk.height else 0.0
    stats = {"threads_paired": len(keep), "parent_agreement": round(agree, 4)}
    return pairs.select("id", "host_id"), stats


def link(host: HostET, ev: pl.DataFrame, kineto_path: str) -> Link:
    """``ev``: the Kineto events with ids (rows), ``cat`` and time-nesting ``parent``."""
    kin = ev.filter(~pl.col("on_gpu") & pl.col("cat").is_in(KINETO_OP_CATS))
    n_host = host_ops(host).height
    pids = set(ev.filter(~pl.col("on_gpu"))["pid"].drop_nulls().unique().to_list())
    if host.pid is not None and pids and host.pid not in pids:
        raise InputError(
            kineto_path,
            f"does not belong with host ET {host.path}: they were recorded by different processes "
            f"(host ET pid {host.pid}, Kineto pids {sorted(pids)[:4]}), so not the same rank of the same run",
        )
    stats: dict[str, Any] = {"host_ops": n_host, "kineto_ops": kin.height}
    rf = kin["rf_id"].drop_nulls()
    if rf.len() and rf.n_unique() > max(1, rf.len() // 2):
        pairs = _by_rf_id(host, kin)
        frac = pairs.height / n_host if n_host else 0.0
        stats.update(linked_ops=pairs.height, linked_fraction=round(frac, 4))
        if n_host and frac < MIN_RF_OVERLAP:
            raise InputError(
                kineto_path,
                f"does not belong with host ET {host.path}: only {pairs.height} of {n_host} host ops "
                f"({frac:.0%}) match a Kineto op by record-function id and name (different runs?)",
            )
        return Link("rf_id", pairs, stats)
    pairs, s2 = _by_name_order(host, kin)
    frac = pairs.height / n_host if n_host else 0.0
    need = (MIN_ORDER_MATCH, MIN_PARENT_AGREE)
    # a host ET over fewer iterations than the profile: link within the window it covers
    win = best_window(kin, ev, n_host, lambda k: _by_name_order(host, k))
    if win is not None and (win[2], win[1].get("parent_agreement", 0.0)) >= (
        frac,
        s2.get("parent_agreement", 0.0),
    ):
        pairs, s2, frac = win
    stats.update(s2, linked_ops=pairs.height, linked_fraction=round(frac, 4))
    agree = s2.get("parent_agreement", 0.0)
    if frac >= need[0] and agree >= need[1]:
        return Link("name_order", pairs, stats)
    stats["fallback_reason"] = (
        no_window_reason(n_host, kin.height, frac, agree, need)
        if win is not None
        else f"no record-function ids; matching by name and order found {frac:.0%} of host ops with "
        f"{agree:.0%} parent agreement (need {need[0]:.0%} and {need[1]:.0%})"
    )
    return Link("none", pairs.clear(), stats)
