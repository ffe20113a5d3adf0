"""The execution graph: what must finish before what, on each rank and across ranks.

- :func:`execution_deps` / :func:`run_execution_deps` — the dependencies as a table
  (``model.EXEC_DEP_SCHEMA``);
- :func:`build_run_graph` — the calibrated time-point graph that the critical path and the
  what-if replay walk (``charllm_trace.analysis.critical``, ``analysis.whatif``);
- :func:`to_networkx` — a rank's graph for notebooks.

How it is built: ``graph/points.py`` (one rank) and ``graph/run.py`` (ranks joined at
collectives); the longest-path kernel is compiled C (``core/_dag.c``), built at install.
"""

from charllm_trace.graph.deps import execution_deps, run_execution_deps
from charllm_trace.graph.nx import to_networkx
from charllm_trace.graph.run import RunGraph, build_run_graph

__all__ = ["RunGraph", "build_run_graph", "execution_deps", "run_execution_deps", "to_networkx"]
