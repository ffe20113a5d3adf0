"""Findings of the pipeline view and of the waiting/transfer split (the sentences of
``analysis/findings.py``, same rules: every number a :class:`Fact` of a JSON frame's row).

7. pipeline: the stage with the largest bubble fraction of a step, against the theory of its
   recognised schedule;
8. waiting: the communication (dimension, type) that waits the most, its share of waiting and its
   bus bandwidth over the whole ops and over transfer alone; the rank that caused the most
   waiting in that dimension by arriving last.
"""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.finding_types import Fact, Finding, top_row
from charllm_trace.analysis.finding_types import fact as _fact
from charllm_trace.analysis.results import RunAnalysis


def pipeline_findings(an: RunAnalysis) -> list[Finding]:
    if an.pipeline is None or an.pipeline.stages.height == 0:
        return []
    r = top_row(an.pipeline.stages.filter(pl.col("bubble_pct").is_not_null()), "bubble_pct", ("rank", "step"))
    if r is None:
        return []
    keys = ("rank", "step")
    pct = _fact("pipeline_stages", r, keys, "bubble_pct", f"{r['bubble_pct']:.1f} %")
    win = _fact("pipeline_stages", r, keys, "window_ns", f"{r['window_ns'] / 1e6:,.1f} ms")
    text = f"Stage {r['stage']} (rank {r['rank']}) idled {pct.text} of its pipeline's {win.text} in step {r['step']}"
    facts = [pct, win]
    if r["theory_pct"] is not None:
        th = _fact("pipeline_stages", r, keys, "theory_pct", f"{r['theory_pct']:.1f} %")
        text += (
            f", against {th.text} for {r['schedule'].upper()} with {r['n_stages']} stages and "
            f"{r['n_microbatches']} microbatches"
        )
        facts.append(th)
    else:
        text += " (its schedule was not recognised)"
    return [Finding("pipeline", text + ".", facts)]


def waiting_findings(an: RunAnalysis) -> list[Finding]:
    if an.comm_wait is None or an.comm_wait.by_dim.height == 0:
        return []
    d = an.comm_wait.by_dim.sort(["wait_ns", "coll_type"], descending=[True, False], nulls_last=True).row(
        0, named=True
    )
    if not d["wait_ns"]:
        return []
    keys = ("dim", "coll_type")
    wp = _fact("comm_wait_by_dim", d, keys, "wait_pct", f"{d['wait_pct']:.1f} %")
    tm = _fact("comm_wait_by_dim", d, keys, "dur_ns", f"{d['dur_ns'] / 1e6:,.1f} ms")
    facts: list[Fact] = [wp, tm]
    what = f"{d['coll_type'] or 'communication'}" + (f" ({d['dim']})" if d["dim"] else "")
    text = f"Matched {what} ops spent {wp.text} of their {tm.text} waiting for the last participant"
    if d["busbw_gbps"] is not None and d["transfer_busbw_gbps"] is not None:
        bw = _fact("comm_wait_by_dim", d, keys, "busbw_gbps", f"{d['busbw_gbps']:.3g} GB/s")
        tb = _fact("comm_wait_by_dim", d, keys, "transfer_busbw_gbps", f"{d['transfer_busbw_gbps']:.3g} GB/s")
        text += f"; over their transfer time alone the bus bandwidth is {tb.text}, not {bw.text}"
        facts += [tb, bw]
    ranks = an.comm_wait.by_rank.filter(
        (pl.col("dim") == d["dim"]) if d["dim"] is not None else pl.col("dim").is_null()
    ).filter(pl.col("caused_wait_ns") > 0)
    r = top_row(ranks, "caused_wait_ns", ("rank",))
    if r is not None:
        cw = _fact(
            "comm_wait_by_rank", r, ("dim", "rank"), "caused_wait_ns", f"{r['caused_wait_ns'] / 1e6:,.1f} ms"
        )
        where = f"in {d['dim']} " if d["dim"] else ""
        text += f"; {where}rank {r['rank']}, arriving last, caused {cw.text} of the others' waiting"
        facts.append(cw)
    return [Finding("comm-wait", text + ".", facts)]
