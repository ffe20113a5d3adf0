"""The execution graph as a ``networkx.DiGraph``, for exploring a rank's graph in a notebook.

Vertices are ``(node_id, "start" | "end")`` time points, with the node's ``name`` and the
point's measured ``time_ns``; edges carry ``kind`` (``points.EDGE_KINDS``), ``lag_ns`` (the
calibrated lag: replaying the graph honours ``time[v] >= time[u] + lag``) and ``category``.
``networkx.dag_longest_path(g, weight="lag_ns")`` on it gives a longest path; networkx is
imported only here (it walks Python objects: fine for thousands of nodes, slow for millions;
the analyses use the compiled kernel instead).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.core.model import Trace
from charllm_trace.graph import points as P


def to_networkx(trace: Trace, classified: pl.DataFrame | None = None) -> Any:
    """One rank's calibrated point graph as a ``networkx.DiGraph`` (module docstring)."""
    import networkx as nx

    g = P.build(trace, classified)
    names = trace.nodes["name"].gather(pl.Series(g.rows)).to_list() if len(g.rows) else []
    ids = g.ids.tolist()
    times = g.time.tolist()
    out = nx.DiGraph()
    for i, (nid, name) in enumerate(zip(ids, names, strict=True)):
        out.add_node((nid, "start"), name=name, time_ns=times[2 * i])
        out.add_node((nid, "end"), name=name, time_ns=times[2 * i + 1])
    lags = g.lags().tolist()
    for s, d, k, c, lag in zip(
        g.src.tolist(), g.dst.tolist(), g.kind.tolist(), g.cat.tolist(), lags, strict=True
    ):
        u = (ids[s // 2], "end" if s % 2 else "start")
        v = (ids[d // 2], "end" if d % 2 else "start")
        out.add_edge(u, v, kind=P.EDGE_KINDS[k], category=P.CATEGORIES[c], lag_ns=lag)
    return out
