"""End to end on CPU: `charllm-trace collect` around a real 2-rank torchrun (gloo) training run."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HAVE_TORCH, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.skipif(not HAVE_TORCH, reason="needs torch")]

N = 1000  # --coll-elems: float32 elements per rank in the example's explicit collectives
WORLD = 2
STEPS = (2, 3)
TOTAL_STEPS = 6


def _collect(out: Path, *extra: str, steps: str = "2-3") -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "charllm_trace.cli.app",
        "collect",
        "--steps",
        steps,
        "-o",
        str(out),
        *extra,
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(WORLD),
        str(ROOT / "examples" / "train_tiny.py"),
        "--steps",
        str(TOTAL_STEPS),
        "--coll-elems",
        str(N),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def run_dir(spawn, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("collect") / "run"
    p = _collect(out)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def _kineto(run_dir: Path, rank: int) -> dict:
    with gzip.open(run_dir / f"rank-{rank}.kineto.json.gz") as f:
        return json.load(f)


def _host_et(run_dir: Path, rank: int) -> dict:
    with gzip.open(run_dir / f"rank-{rank}.host_et.json.gz") as f:
        return json.load(f)


# name in the trace -> expected input shapes (output first for the *_base_ ops), per rank
COLLECTIVES = {
    "c10d::_allgather_base_": [[WORLD * N], [N]],
    "c10d::_reduce_scatter_base_": [[N], [WORLD * N]],
    "c10d::alltoall_base_": [[N], [N]],
}


def test_files_and_manifest(run_dir: Path) -> None:
    for r in range(WORLD):
        for kind in ("host_et.json.gz", "kineto.json.gz", "info.json"):
            assert (run_dir / f"rank-{r}.{kind}").stat().st_size > 0
    assert not list(run_dir.glob(".tmp-*"))
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "finished" and m["exit_code"] == 0
    assert m["world_size"] == WORLD and m["ranks_per_node"] == WORLD
    assert m["ranks_traced"] == list(range(WORLD))
    assert m["steps"]["requested"] == list(STEPS)
    assert m["steps"]["traced"] == {str(r): list(STEPS) for r in range(WORLD)}
    assert m["versions"]["torch"]
    assert m["clock"]["base"] == "unix_epoch" and m["clock"]["unit"] == "ns"
    assert m["command"][-1] == str(N)
    tel = m["telemetry"]["nodes"]
    assert len(tel) == 1
    (node,) = tel.values()
    # This machine has no GPU: the manifest must say so plainly; with a GPU there is a source.
    assert node["source"] is not None or "no NVIDIA driver" in node["no_source_reason"]
    for r in range(WORLD):
        info = json.loads((run_dir / f"rank-{r}.info.json").read_text())
        assert info["rank"] == r and info["world_size"] == WORLD
        assert info["steps_completed"] == TOTAL_STEPS and len(info["step_end_ns"]) == TOTAL_STEPS
        assert info["trace_complete"] is True


@pytest.mark.parametrize("rank", range(WORLD))
def test_kineto_steps_and_collectives(run_dir: Path, rank: int) -> None:
    k = _kineto(run_dir, rank)
    assert k["distributedInfo"]["rank"] == rank and k["distributedInfo"]["world_size"] == WORLD
    assert k["distributedInfo"]["backend"] == "gloo"
    ev = [e for e in k["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(
        (e["name"], e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#")
    )
    assert [s[0] for s in steps] == [f"ProfilerStep#{s}" for s in STEPS]
    # Every collective of the example runs once per step, inside that step, with the right sizes.
    for name, dims in COLLECTIVES.items():
        hits = [e for e in ev if e["name"] == name]
        assert len(hits) == len(STEPS), name
        for e in hits:
            assert e["args"]["Input Dims"][:2] == dims, name
            assert e["args"]["Input type"][:2] == ["float", "float"]
        per_step = [sum(1 for e in hits if s[1] <= e["ts"] and e["ts"] + e["dur"] <= s[2]) for s in steps]
        assert per_step == [1] * len(STEPS), name
    bcast = [e for e in ev if e["name"] == "c10d::broadcast_" and e["args"]["Input Dims"][0] == [[N]]]
    assert len(bcast) == len(STEPS)
    assert all(e["args"]["Concrete Inputs"][2] == "0" for e in bcast)  # root rank 0
    assert sum(1 for e in ev if e["name"] == "c10d::allreduce_") >= len(STEPS)  # DDP gradients


@pytest.mark.parametrize("rank", range(WORLD))
def test_host_et_covers_same_steps(run_dir: Path, rank: int) -> None:
    et = _host_et(run_dir, rank)
    nodes = et["nodes"]
    names = [n["name"] for n in nodes]
    assert sorted(n for n in names if n.startswith("ProfilerStep#")) == [f"ProfilerStep#{s}" for s in STEPS]
    for name, dims in COLLECTIVES.items():
        hits = [n for n in nodes if n["name"] == name]
        assert len(hits) == len(STEPS), name
        assert all(n["inputs"]["shapes"][:2] == dims for n in hits)
    # The host ET and the Kineto profile link by record-function id.
    k_rf = {
        e["args"]["Record function id"]
        for e in _kineto(run_dir, rank)["traceEvents"]
        if e.get("name", "").startswith("c10d::") and "Record function id" in e.get("args", {})
    }

    def rf(n: dict) -> int:
        return next(a["value"] for a in n["attrs"] if a["name"] == "rf_id")

    et_rf = {rf(n) for n in nodes if n["name"] in COLLECTIVES}
    assert et_rf and et_rf <= k_rf


def test_refuses_existing_run_dir_and_force_replaces(run_dir: Path, tmp_path: Path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "charllm_trace.cli.app",
            "collect",
            "-o",
            str(run_dir),
            "--",
            sys.executable,
            "-c",
            "pass",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith(f"error: {run_dir}")
    assert (run_dir / "rank-0.kineto.json.gz").exists()  # untouched


# The example's explicit collectives with their nccl-tests message sizes, computed here from N and
# WORLD (float32 = 4 bytes): one of each per traced step and rank.
EXPECTED_BYTES = {
    ("all_gather", WORLD * N * 4),
    ("all_reduce", WORLD * N * 4),  # reduce_scatter: gloo runs it as an all_reduce of the whole input
    ("all_to_all", N * 4),
    ("broadcast", N * 4),
}


def _converted(run_dir: Path):  # noqa: ANN202
    from charllm_trace.converters.run_dir import convert_run

    return convert_run(run_dir, workers=1)


def test_convert(run_dir: Path) -> None:
    """The collected directory goes through the converter (issue 3): steps and collectives per step."""
    import polars as pl

    run = _converted(run_dir)
    assert run.ranks == list(range(WORLD))
    for r in range(WORLD):
        t = run.traces[r]
        steps = t.steps()
        assert steps["step"].to_list() == list(STEPS)
        coll = t.nodes.filter(pl.col("coll_type").is_not_null() & ~pl.col("on_gpu"))
        for ct, nbytes in EXPECTED_BYTES:
            hits = coll.filter((pl.col("coll_type") == ct) & (pl.col("comm_bytes") == nbytes))
            starts = hits["start_ns"].to_numpy()
            per_step = [
                int(((starts >= a) & (starts < b)).sum())
                for a, b in zip(steps["start_ns"], steps["end_ns"], strict=True)
            ]
            assert per_step == [1] * len(STEPS), (r, ct, per_step)
        assert coll.filter(pl.col("coll_type") == "all_reduce").height >= len(STEPS)  # DDP


def test_analyse(run_dir: Path) -> None:
    """...and through the analyses (issue 5)."""
    import polars as pl

    from charllm_trace.analysis.api import analyze_run

    run = _converted(run_dir)
    a = analyze_run(run)
    coll = a.bandwidth.collectives
    for r in range(WORLD):
        for ct, nbytes in EXPECTED_BYTES:
            hits = coll.filter(
                (pl.col("rank") == r) & (pl.col("coll_type") == ct) & (pl.col("bytes") == nbytes)
            )
            assert hits.height >= 1, (r, ct)
            assert set(hits["step"].to_list()) <= set(STEPS)
    assert a.overlap is not None and a.overlap.per_rank.height == WORLD
    # No GPU here: no telemetry, and the analyses say so instead of inventing energy.
    if all(t.telemetry.height == 0 for t in run):
        assert a.energy is None and "no telemetry" in a.skipped["energy"]


def test_analyse_every_collective_of_every_step(run_dir: Path) -> None:
    import polars as pl

    from charllm_trace.analysis.api import analyze_run

    coll = analyze_run(_converted(run_dir)).bandwidth.collectives
    for r in range(WORLD):
        for ct, nbytes in EXPECTED_BYTES:
            hits = coll.filter(
                (pl.col("rank") == r) & (pl.col("coll_type") == ct) & (pl.col("bytes") == nbytes)
            )
            assert sorted(hits["step"].to_list()) == list(STEPS), (r, ct)


def test_graph_replay_reproduces_the_collected_steps(run_dir: Path) -> None:
    """A freshly collected run, converted: replaying its execution graph with every factor 1.0
    gives each measured step time back (within 2 %), and the critical path of each step and rank
    is no longer than the step and spends its time in categories that add up to its length."""
    from charllm_trace.analysis.critical import critical_path
    from charllm_trace.analysis.whatif import what_if
    from charllm_trace.inputs.loader import load

    run = load(run_dir)
    wi = what_if(run, {"comm": 1.0})
    steps = wi.steps.filter(wi.steps["step"].is_not_null())
    assert sorted(set(steps["step"].to_list())) == list(STEPS) and set(steps["rank"].to_list()) == {0, 1}
    for row in steps.iter_rows(named=True):
        assert abs(row["predicted_ns"] - row["measured_ns"]) <= 0.02 * row["measured_ns"], row
    cp = critical_path(run)
    cats = [
        c
        for c in cp.paths.columns
        if c.endswith("_ns") and c not in ("start_ns", "end_ns", "span_ns", "length_ns")
    ]
    for row in cp.paths.iter_rows(named=True):
        assert 0 < row["length_ns"] <= row["span_ns"], row
        assert sum(row[c] for c in cats) == row["length_ns"], row
    # communication made free: no point of the replayed timeline is later than measured (a step's
    # duration may still grow, when its start moves earlier than its end)
    from charllm_trace.analysis.critical import retime
    from charllm_trace.analysis.whatif import factor_array
    from charllm_trace.graph.run import build_run_graph

    rg = build_run_graph(run)
    t, _ = retime(rg, factor_array({"comm": 0.0}))
    real = rg.point_rank >= 0
    assert (t[real] <= rg.g.time[real]).all()
