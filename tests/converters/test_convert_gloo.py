"""A real 2-rank gloo job on CPU (torchrun) with host ET + Kineto: every collective comes out as a
communication node with the right type, size, dtype, group ranks, root / peer and sequence."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from charllm_trace.converters.run_dir import convert_pair, convert_run
from tests.conftest import HAVE_TORCH

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.skipif(not HAVE_TORCH, reason="needs torch")]

JOB = Path(__file__).resolve().parents[1] / "helpers" / "gloo_comm_job.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def run_dir(spawn, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gloo_run")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        str(JOB),
        str(out),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def _expected(sizes: dict) -> dict[str, tuple[str, int, str]]:
    """gloo op -> (coll_type, comm_bytes, dtype) by the nccl-tests convention, from the job's sizes."""
    w = sizes["world"]
    return {
        "all_reduce": ("all_reduce", sizes["all_reduce"] * 4, "float32"),
        "all_gather": ("all_gather", sizes["all_gather"] * w * 4, "float32"),  # whole output
        "all_gather_tensor": ("all_gather", sizes["all_gather_tensor"] * w * 8, "float64"),
        "broadcast": ("broadcast", sizes["broadcast"] * 8, "int64"),
        "all_to_all": (
            "all_to_all",
            sizes["all_to_all"] * w * 4,
            "float32",
        ),  # all one rank sends (N-8 + N+8)
        # gloo runs reduce_scatter_tensor as a gloo:all_reduce of the whole input: an all_reduce
        "reduce_scatter": ("all_reduce", sizes["reduce_scatter"] * w * 4, "float32"),
        "p2p": ("send", sizes["p2p"] * 4, "float32"),
    }


def _check_rank(t, rank: int, sizes: dict) -> None:
    comm = t.nodes.filter(pl.col("node_type").str.starts_with("COMM")).sort("coll_seq")
    exp = _expected(sizes)
    want = []
    for _step in range(2):  # the job's order, twice
        for k in (
            "all_reduce",
            "all_gather",
            "all_gather_tensor",
            "broadcast",
            "all_to_all",
            "reduce_scatter",
            "p2p",
        ):
            ct, nbytes, dt = exp[k]
            if k == "p2p" and rank == 1:
                ct = "recv"
            want.append((ct, nbytes, dt))
        want.append(("barrier", 0, None))
    got = list(
        zip(comm["coll_type"].to_list(), comm["comm_bytes"].to_list(), comm["dtype"].to_list(), strict=True)
    )
    assert got == want
    assert comm["coll_seq"].to_list() == list(range(len(want)))
    # node types, process group with its global ranks, root and peer
    assert set(comm.filter(pl.col("coll_type") == "send")["node_type"]) <= {"COMM_SEND"}
    assert set(comm.filter(pl.col("coll_type") == "recv")["node_type"]) <= {"COMM_RECV"}
    assert (comm["pg_name"] == "0").all()
    pg = t.meta.group("0")
    assert pg is not None and pg.ranks == (0, 1) and pg.desc == "default_pg"
    assert comm.filter(pl.col("coll_type") == "broadcast")["root"].to_list() == [1, 1]
    p2p = comm.filter(pl.col("coll_type").is_in(["send", "recv"]))["peer"].to_list()
    assert p2p == [1 - rank, 1 - rank]
    # uneven all-to-all splits (the job sends N-8 elements to rank 0 and N+8 to rank 1)
    n = sizes["all_to_all"]
    a2a = comm.filter(pl.col("coll_type") == "all_to_all")
    assert a2a["in_split"].to_list() == [[n - 8, n + 8]] * 2
    assert a2a["out_split"].to_list() == [[[n - 8, n + 8][rank]] * 2] * 2
    # the gloo op is launched by the c10d op that enqueued it
    launch = t.nodes.select(pl.col("id").alias("launch_id"), pl.col("name").alias("launcher"))
    names = comm.join(launch, on="launch_id", how="left")["launcher"].to_list()
    assert all(n is not None and n.startswith("c10d::") for n in names)
    # steps are kept
    assert t.steps().height == 2


def test_gloo_run_dir_host_et_and_kineto(run_dir: Path) -> None:
    sizes = json.loads((run_dir / "sizes.json").read_text())
    run = convert_run(run_dir, workers=1)
    assert run.ranks == [0, 1]
    for rank in run.ranks:
        t = run.traces[rank]
        rep = t.meta.extra["convert"]
        assert rep["link_method"] == "rf_id" and rep["host_ops_unlinked"] == 0
        hdoc = json.loads((run_dir / f"rank-{rank}.host_et.json").read_text())
        n_gloo = sum(1 for n in hdoc["nodes"] if n["name"].startswith("gloo:"))
        assert rep["comm_nodes"] == n_gloo == 16
        assert t.meta.source == "host_et+kineto" and t.meta.world_size == 2 and t.meta.rank == rank
        _check_rank(t, rank, sizes)
        # data edges from tensor ids exist and point to earlier host ops
        data = t.deps.filter(pl.col("kind") == "data")
        assert data.height > 0 and (data["dep"] < data["node"]).all()


def test_gloo_kineto_only(run_dir: Path) -> None:
    """Without the host ET, sizes come from Kineto's recorded input shapes."""
    sizes = json.loads((run_dir / "sizes.json").read_text())
    for rank in (0, 1):
        t, rep = convert_pair(None, run_dir / f"rank-{rank}.kineto.json")
        assert rep["link_method"].startswith("none")
        _check_rank(t, rank, sizes)
