"""A toy analysis for tests/test_registry.py, written as docs/architecture.md says an analysis is
added: this one module (result type, columns, per-rank function, merge, renderers) and one
``registry.register`` call. Its answer is known: each rank's count of nodes and of GPU kernels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns
from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.registry import Analysis, Frame, Merge, merge_notes
from charllm_trace.analysis.results import AnalyzeOptions

NODES_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("n_nodes", pl.Int64, "", "nodes of the rank's trace"),
    Col("n_kernels", pl.Int64, "", "GPU kernels among them (class compute or comm)"),
)


@dataclass
class NodeCountResult:
    per_rank: pl.DataFrame  # NODES_SCHEMA
    notes: list[str] = field(default_factory=list)


def rank_part(ctx: RankContext, options: AnalyzeOptions) -> tuple[pl.DataFrame, list[str]]:
    cls = ctx.classified["cls"]
    row = {
        "rank": [ctx.rank],
        "n_nodes": [ctx.trace.nodes.height],
        "n_kernels": [int(cls.is_in(["compute", "comm"]).sum())],
    }
    return pl.DataFrame(row, schema=NODES_SCHEMA), ["counted by the toy analysis"]


def merge(m: Merge) -> NodeCountResult | None:
    got = [(p.rank, p.parts["node_count"]) for p in m.parts]
    if not got:
        m.skipped["node_count"] = "no rank"
        return None
    return NodeCountResult(
        per_rank=pl.concat([f for _, (f, _) in got]),
        notes=merge_notes([(r, ns) for r, (_, ns) in got], m.multi),
    )


def table(res: Any, console: Any) -> None:
    if res.node_count is not None:
        total = int(res.node_count.per_rank["n_nodes"].sum())
        console.print(f"node count: {total} nodes", markup=False, highlight=False)


def section(data: Any, rep: Any) -> None:
    r = data.results.get("node_count")
    if r is not None:
        rep.add("Node count", f"<p>{int(r.per_rank['n_nodes'].sum())} nodes</p>", sid="node-count")


ENTRY = Analysis(
    "node_count",
    "tests.helpers.registry_toy:NodeCountResult",
    (Frame("node_count", "per_rank", "tests.helpers.registry_toy:NODES_SCHEMA"),),
    step=11,
    rank="tests.helpers.registry_toy:rank_part",
    merge="tests.helpers.registry_toy:merge",
    added=True,
    table="tests.helpers.registry_toy:table",
    table_at=12,
    html="tests.helpers.registry_toy:section",
    html_at=12,
    doc="nodes and GPU kernels per rank (a test's)",
)
