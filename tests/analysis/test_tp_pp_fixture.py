"""The 4-rank tensor x pipeline fixture (tests/fixtures/traces/cpu-4rank-tp2-pp2, README there):
gloo records no process group, the collector's ``charllm_pg:<name>`` ranges give every op its
group (collectors/pg_hook.py, converters/annotate.py), so the table by dimension shows tp and pp
apart; and the hook itself on a stand-in of ``torch.distributed``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest

from charllm_trace.analysis import AnalyzeOptions, analyze_run
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.converters.collectives import PG_MARK
from charllm_trace.inputs.loader import load
from tests.conftest import FIXTURES

RUN = FIXTURES / "cpu-4rank-tp2-pp2"
HOOK = Path(__file__).resolve().parents[2] / "charllm_trace" / "collectors" / "pg_hook.py"


@pytest.fixture(scope="module")
def res() -> RunAnalysis:
    return analyze_run(load(RUN), AnalyzeOptions(critical_path=False))


def test_every_communication_op_has_its_group_and_dimension(res: RunAnalysis) -> None:
    assert res.bandwidth is not None and res.comm_wait is not None
    c = res.bandwidth.collectives
    assert c["pg_name"].null_count() == 0 and c["dim"].null_count() == 0
    ar = c.filter(pl.col("coll_type") == "all_reduce")
    assert set(ar["dim"]) == {"tp"} and set(c.filter(pl.col("coll_type") != "all_reduce")["dim"]) == {"pp"}
    # per microbatch and layer: stage 0 all-reduces forward only in its first block (its input needs
    # no gradient), 2 forward + 1 backward; stage 1 2 + 2; x 4 microbatches x 2 steps
    per_rank = dict(ar.group_by("rank").len().iter_rows())
    assert per_rank == {0: 24, 1: 24, 2: 32, 3: 32}
    assert res.comm_wait.ops["dim"].null_count() == 0 and res.comm_wait.ops.height == 112 + 64


def test_the_table_by_dimension_shows_tp_and_pp_apart(res: RunAnalysis) -> None:
    assert res.dims is not None and res.pipeline is not None and res.bandwidth is not None
    d = {r["dim"]: r for r in res.dims.dims.iter_rows(named=True)}
    assert list(d) == ["all", "tp", "pp"]  # no unnamed communication
    assert d["tp"]["n_matched"] == 112 and d["pp"]["n_matched"] == 64
    assert d["tp"]["bubble_ns"] is None
    assert d["pp"]["bubble_ns"] == res.pipeline.stages["bubble_ns"].sum()
    for col in ("n_ops", "bytes_total", "n_matched", "wait_ns", "transfer_ns"):  # they partition the ops
        assert d["tp"][col] + d["pp"][col] == d["all"][col], col
    assert res.dims.sizes["count"].sum() == res.bandwidth.collectives.height
    # 1F1B with 2 stages and 4 microbatches on every rank and step
    assert set(res.pipeline.stages["schedule"]) == {"1f1b"}


class _Range:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def __enter__(self) -> None:
        self.log.append(f"enter {self.name}")

    def __exit__(self, *exc: Any) -> None:
        self.log.append(f"exit {self.name}")


def test_the_hook_wraps_each_call_in_its_group_range(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("_pg_hook_test", HOOK)
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    assert hook.PREFIX == PG_MARK  # the collector writes what the converter reads
    log: list[str] = []
    world = SimpleNamespace(group_name="0")

    def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> str:
        log.append("all_reduce")
        return "done"

    def send(tensor: Any, dst: Any = None, group: Any = None, tag: int = 0) -> None:
        log.append("send")

    fake = SimpleNamespace(all_reduce=all_reduce, send=send,
                           group=SimpleNamespace(WORLD=world))  # fmt: skip
    import torch.distributed
    import torch.profiler

    for name in hook.FUNCTIONS:  # restored after the test, wrapped or not
        monkeypatch.setattr(torch.distributed, name, None, raising=False)
    for k, v in vars(fake).items():
        monkeypatch.setattr(torch.distributed, k, v, raising=False)
    monkeypatch.setattr(torch.profiler, "record_function", lambda name: _Range(log, name))
    assert hook.install() == 2 and hook.install() == 0  # once per process
    assert torch.distributed.all_reduce(1, None, SimpleNamespace(group_name="7")) == "done"
    torch.distributed.send(1, dst=1)
    assert log == ["enter charllm_pg:7", "all_reduce", "exit charllm_pg:7",
                   "enter charllm_pg:0", "send", "exit charllm_pg:0"]  # fmt: skip
