"""CUDA/HIP graph launches (issue 24 item 2) against schedules whose answer is known
(``tests/schedgen``: a ``cudaGraphLaunch`` starts its kernels one after another on its stream,
the first ``latency`` after the call's start when the stream is free, each next ``gap`` after the
previous one ends; every kernel carries the call's correlation id). The launch statistics count
the graph's kernels apart from individually launched ones; without graph launches analyze's
JSON has none of the new frames."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from charllm_trace.analysis.api import analyze_run
from charllm_trace.inputs import loader
from charllm_trace.render.export import to_document
from tests import schedgen as G

N, DUR = 30, 40_000  # kernels per graph, each 40 µs
C = G.Costs()


def _graph_only(n_steps: int = 3) -> G.Schedule:
    return G.Schedule([[G.GraphLaunch(tuple([DUR] * N)), G.Sync()]] * n_steps)


@pytest.mark.parametrize("flavour", ["cuda", "hip"])
def test_per_launch_and_per_kernel_known_answer(tmp_path: Path, flavour: str) -> None:
    _graph_only().write(tmp_path, flavour)
    res = analyze_run(loader.load(tmp_path, cache=False))
    gl = res.graph_launches
    assert gl is not None and gl.notes == []
    lf = gl.launches
    assert lf.height == 3 and lf["step"].to_list() == [1, 2, 3]
    assert set(lf["call_name"]) == {"hipGraphLaunch" if flavour == "hip" else "cudaGraphLaunch"}
    span = N * DUR + (N - 1) * C.gap
    for r in lf.iter_rows(named=True):  # the stream is free at every launch (the step ends with a sync)
        assert (r["n_kernels"], r["call_dur_ns"], r["launch_to_first_ns"]) == (N, 20_000, C.latency)
        assert (r["span_ns"], r["busy_ns"], r["idle_ns"], r["kernel_ns"]) == (
            span,
            N * DUR,
            (N - 1) * C.gap,
            N * DUR,
        )
    k = gl.kernels.filter(pl.col("correlation") == lf["correlation"][0])
    assert k["index"].to_list() == list(range(N))
    assert k["since_call_ns"].to_list() == [C.latency + i * (DUR + C.gap) for i in range(N)]
    assert k["gap_ns"].to_list() == [None] + [C.gap] * (N - 1)


def test_launch_stats_count_graph_kernels_apart(tmp_path: Path) -> None:
    """The ``graphs`` regime: per step 5 eager kernels, then a graph of 30: 15 launches in all, not
    105 (nor 18), and the delays are those of the eager kernels only."""
    G.graphs().write(tmp_path)
    res = analyze_run(loader.load(tmp_path, cache=False))
    whole = res.launch.stats.filter(pl.col("step").is_null() & pl.col("stream").is_null()).row(0, named=True)
    assert (whole["n_ops"], whole["n_launched"]) == (15 + 3 * N, 15)
    assert whole["delay_max_ns"] < DUR  # a graph's 30th kernel starts 1.2 ms after its call
    assert any("90 GPU operators were started by 3 graph launches" in n for n in res.launch.notes)
    gaps = (N - 1) * 3
    assert any(f"{gaps} idle gaps, {gaps * C.gap:,} ns, lie between the operators of one graph launch" in n
               for n in res.idle_time.notes)  # fmt: skip
    assert res.graph_launches is not None and res.graph_launches.launches["n_kernels"].to_list() == [N] * 3


def test_no_graph_launches_no_frames(tmp_path: Path) -> None:
    G.gpu_bound().write(tmp_path)
    res = analyze_run(loader.load(tmp_path, cache=False))
    doc = to_document(res)
    assert res.graph_launches is None and not [k for k in doc["frames"] if k.startswith("graph_launch")]
    assert not [n for n in res.launch.notes + res.idle_time.notes if "graph launch" in n]


def test_table_lists_the_launches(tmp_path: Path) -> None:
    from tests.conftest import invoke

    _graph_only().write(tmp_path / "run")
    r = invoke("analyze", str(tmp_path / "run"), "--no-cache")
    assert r.exit_code == 0 and "Graph launches: 3, 90 GPU operators" in r.output
