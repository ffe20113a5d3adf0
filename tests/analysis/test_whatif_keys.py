"""What-if keys with known answers (``analysis.whatif_keys``, ``whatif_edges``, ``whatif_spread``).

- the parser: every key form, normalised, and what it refuses (tests/cli/test_cli_critical_path.py
  checks the CLI says it in one line, exit 2);
- CPU-only Kineto profiles (tests/helpers/kineto_builder.py) where ops run one after another on one
  thread: ``gemm=2`` adds exactly the time of each ``aten::linear`` (its children included),
  ``elementwise``/``memory`` theirs, ``cpu_op+=T`` adds T per CPU operator; the per-step range is
  the range of those exact answers;
- GPU kernels queued on one stream: ``gemm=2`` adds exactly the GEMM kernel's time;
- a collective of known bytes on two ranks: ``dp=10GB/s`` re-times its transfer to bytes x bus
  factor / bandwidth, ``dp=2`` doubles it, a dimension the run has no group for is refused;
- contradicting edges (a kernel before its launch call) are analysed with a note;
- property (hypothesis): random serial CPU chains, the prediction equals the arithmetic.
"""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from charllm_trace.analysis.whatif import what_if
from charllm_trace.analysis.whatif_keys import describe, parse_what_if, per_edge_keys
from charllm_trace.core.errors import UsageError
from charllm_trace.core.model import ProcessGroup, Run, Trace
from tests.helpers.fuzz_budget import examples
from tests.helpers.graph_traces import N, mk_trace
from tests.helpers.kineto_builder import trace_of, x

US = 1000  # ns per µs (the Kineto builder's times are µs)


def test_parse_every_key_form():
    got = parse_what_if(
        "gemm=2, Elementwise=1.5,memory=3,launch=0,dp=50GB/s,comm=100 gbps,tp=0.5,cpu_op+=50us"
    )
    assert got == {
        "gemm": 2.0, "elementwise": 1.5, "memory": 3.0, "launch": 0.0, "dp_gbps": 50.0, "comm_gbps": 100.0,
        "tp": 0.5, "cpu_op_add_ns": 50_000.0,
    }  # fmt: skip
    assert parse_what_if("cpu_op+=2ms") == {"cpu_op_add_ns": 2e6}
    assert parse_what_if("cpu_op+=1.5 s") == {"cpu_op_add_ns": 1.5e9}
    assert per_edge_keys(got) == ["dp_gbps", "comm_gbps", "tp", "cpu_op_add_ns"]
    assert describe(got) == (
        "gemm×2, elementwise×1.5, memory×3, launch×0, dp=50 GB/s, comm=100 GB/s, tp×0.5, cpu_op+=50 µs"
    )


@pytest.mark.parametrize(
    "bad",
    ["gemm=0", "comm=0", "gemm=-2", "launch=-1", "gemm=nan", "comm=inf", "comm=1e999", "disk=2", "dp=0GB/s",
     "dp=-5GB/s", "dp=infGB/s", "gemm=5GB/s", "cpu_op+=5", "cpu_op+=0us", "cpu_op+=nanus", "gemm+=5us",
     "cpu_op=2", "gemm=2,gemm=3", "dp=2,dp=10GB/s", "=2", "gemm==2", ",,", "gemm=2x"],
)  # fmt: skip
def test_parse_refuses(bad: str):
    with pytest.raises(UsageError) as e:
        parse_what_if(bad)
    assert "\n" not in str(e.value) and "--what-if" in str(e.value)


# ---------------------------------------------------------------------------
# CPU-only profiles: the ops of each step run back to back on one thread
# ---------------------------------------------------------------------------

#: per step: (aten::linear duration, aten::relu duration, aten::copy_ duration) in µs
STEPS = [(40, 10, 6), (80, 12, 8), (60, 14, 4)]
GAP = 3  # µs between ops


def cpu_doc() -> dict:
    ev, t = [], 0.0
    for k, (lin, relu, cp) in enumerate(STEPS):
        s0 = t
        t += GAP
        ev.append(x("aten::linear", "cpu_op", t, lin))
        ev.append(x("aten::t", "cpu_op", t + 1, 2))
        ev.append(x("aten::addmm", "cpu_op", t + 4, lin - 6))
        t += lin + GAP
        ev.append(x("aten::relu", "cpu_op", t, relu))
        t += relu + GAP
        ev.append(x("aten::copy_", "cpu_op", t, cp))
        t += cp + GAP
        ev.append(x(f"ProfilerStep#{k + 1}", "user_annotation", s0, t - s0))
    return {"traceEvents": ev, "distributedInfo": {"rank": 0, "world_size": 1}}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> Run:
    return Run.single(trace_of(tmp_path_factory.mktemp("cpu") / "rank0.json", cpu_doc()))


def _steps(res) -> list[tuple[int, int]]:
    rows = res.steps.filter(pl.col("step").is_not_null()).sort("step")
    return list(zip(rows["measured_ns"].to_list(), rows["predicted_ns"].to_list(), strict=True))


@pytest.mark.parametrize(
    ("key", "added"),
    [("gemm=2", lambda s: s[0]), ("elementwise=2", lambda s: s[1]), ("memory=3", lambda s: 2 * s[2]),
     ("gemm=0.5", lambda s: -s[0] / 2)],
)  # fmt: skip
def test_cpu_work_classes_add_exactly_their_time(cpu_run: Run, key: str, added):
    res = what_if(cpu_run, parse_what_if(key))
    got = _steps(res)
    assert len(got) == len(STEPS)
    for (meas, pred), s in zip(got, STEPS, strict=True):
        assert pred - meas == added(s) * US, (key, s)


def test_cpu_op_cost_is_added_once_per_operator(cpu_run: Run):
    res = what_if(cpu_run, parse_what_if("cpu_op+=7us"))
    for meas, pred in _steps(res):
        assert pred - meas == 5 * 7 * US  # linear, t, addmm, relu, copy_ (the step annotation is no op)


def test_per_step_range_is_the_range_of_the_exact_answers(cpu_run: Run):
    res = what_if(cpu_run, parse_what_if("gemm=2"))
    meas = [m for m, _ in _steps(res)]
    pred = [m + s[0] * US for m, s in zip(meas, STEPS, strict=True)]
    change = [100.0 * (p - m) / m for p, m in zip(pred, meas, strict=True)]
    assert res.n_steps == 3
    assert (res.predicted_low_ns, res.predicted_high_ns) == (min(pred), max(pred))
    assert res.predicted_median_ns == sorted(pred)[1] and res.measured_median_ns == sorted(meas)[1]
    assert res.change_low_pct == pytest.approx(min(change)) and res.change_high_pct == pytest.approx(
        max(change)
    )
    assert res.change_median_pct == pytest.approx(sorted(change)[1])
    # a serial chain on one thread: nothing inferred, nothing unexplained
    assert res.fixed_wait_pct == 0 and res.inferred_pct == 0


# ---------------------------------------------------------------------------
# GPU kernels queued on one stream
# ---------------------------------------------------------------------------


def gpu_chain() -> Trace:
    """CPU [0, 40] launches a GEMM (300 ns), an elementwise kernel (100) and another compute kernel
    (50): they run back to back on stream 7 from 20 (GPU-bound: queued behind each other)."""
    rows = [N(1, "ProfilerStep#1", "annotation", 0, 40)]
    names = ["ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel<4>", "reduce_kernel<512>"]
    t_gpu = 20
    for j, (name, d) in enumerate(zip(names, (300, 100, 50), strict=True)):
        rows.append(N(10 + j, "cudaLaunchKernel", "runtime", 2 + 10 * j, 5, parent=1, corr=100 + j))
        rows.append(N(20 + j, name, "kernel", t_gpu, d, gpu=True, stream=7, corr=100 + j))
        t_gpu += d
    return mk_trace(rows)


def _total(res) -> tuple[int, int]:
    row = res.steps.filter(pl.col("step").is_null()).row(0, named=True)
    return row["measured_ns"], row["predicted_ns"]


@pytest.mark.parametrize(
    ("key", "added"),
    [("gemm=2", 300), ("elementwise=2", 100), ("kernel=3", 100), ("gpu=2", 450), ("attention=5", 0)],
)
def test_gpu_kernel_classes_add_exactly_their_time(key: str, added: int):
    m, p = _total(what_if(Run.single(gpu_chain()), parse_what_if(key)))
    assert m == 470 and p - m == added


def test_kernel_before_its_launch_call_is_analysed_with_a_note():
    tr = gpu_chain()
    # the GEMM timestamped 10 ns before its launch call starts (at 2): a contradiction
    nodes = tr.nodes.with_columns(
        start_ns=pl.when(pl.col("id") == 20).then(pl.lit(-8, pl.Int64)).otherwise(pl.col("start_ns"))
    )
    res = what_if(Run.single(dataclasses.replace(tr, nodes=nodes)), parse_what_if("gemm=2"))
    assert any("1 GPU ops start before their launch call (0.000 ms in all)" in n for n in res.notes), (
        res.notes
    )
    assert res.steps.height > 0


# ---------------------------------------------------------------------------
# a collective of known bytes on two ranks
# ---------------------------------------------------------------------------


def coll_rank(r: int, launch_at: int, kdur: int, desc: str = "DATA_PARALLEL_GROUP") -> Trace:
    """One step [0, 80] launching one all-reduce of 1,000 bytes in group "0" (ranks 0, 1)."""
    c = dict(coll_type="all_reduce", pg_name="0", coll_seq=0)
    rows = [
        N(1, "ProfilerStep#1", "annotation", 0, 80),
        N(10, "c10d::allreduce_", "cpu_op", launch_at, 10, parent=1, **c),
        N(11, "cudaLaunchKernel", "runtime", launch_at + 2, 5, parent=10, corr=100),
        N(12, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", launch_at + 10, kdur, gpu=True, stream=20,
          corr=100, **c),
    ]  # fmt: skip
    tr = mk_trace(rows, rank=r, world=2)
    meta = dataclasses.replace(tr.meta, process_groups=(ProcessGroup(name="0", desc=desc, ranks=(0, 1)),))
    nodes = tr.nodes.with_columns(
        comm_bytes=pl.when(pl.col("id") == 12).then(pl.lit(1000, pl.Int64)).otherwise(pl.lit(None, pl.Int64))
    )
    return Trace(nodes=nodes, deps=tr.deps, meta=meta)


def coll_run(desc: str = "DATA_PARALLEL_GROUP") -> Run:
    """Rank 0's kernel [20, 120] waits for rank 1's [70, 120]: the transfer is 50 ns."""
    return Run(traces={0: coll_rank(0, 10, 100, desc), 1: coll_rank(1, 60, 50, desc)})


def _ends(res) -> list[tuple[int, int]]:
    return [
        (r["measured_ns"], r["predicted_ns"])
        for r in res.steps.filter(pl.col("step").is_null()).sort("rank").iter_rows(named=True)
    ]


@pytest.mark.parametrize(
    ("key", "transfer"),
    [("dp=10GB/s", 100), ("comm=10GB/s", 100), ("dp=40GB/s", 25), ("dp=2", 102), ("comm=2", 102),
     ("comm=2,dp=1", 50), ("comm=10GB/s,dp=0.5", 24), ("dp=10GB/s,comm=3", 104)],
)  # fmt: skip
def test_collective_transfer_is_retimed(key: str, transfer: int):
    """all_reduce on 2 ranks: bus factor 2(n-1)/n = 1, so 1,000 bytes at B GB/s take 1000/B ns;
    both kernels end at the last arrival (70) plus the transfer. A factor also scales the CPU side
    of the group's communication (``c10d::allreduce_`` spends 2 ns before its launch call: 4 at
    x2, 6 at x3, 1 at x0.5: the last arrival at 69); a bandwidth re-times the transfer alone."""
    res = what_if(coll_run(), parse_what_if(key))
    assert _ends(res) == [(120, 70 + transfer), (120, 70 + transfer)]


def test_a_dimension_without_a_group_is_refused():
    with pytest.raises(UsageError, match="the run has no tp process group"):
        what_if(coll_run(), parse_what_if("tp=2"))
    with pytest.raises(UsageError, match="the run has no dp process group"):
        what_if(coll_run(desc="world"), parse_what_if("dp=10GB/s"))


# ---------------------------------------------------------------------------
# the CLI on the 2-rank gloo fixture (CPU only)
# ---------------------------------------------------------------------------


def _cli(*args: str):
    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    return CliRunner().invoke(main, list(args))


def test_cli_gemm_on_a_cpu_run_is_predicted_with_its_range_in_json():
    """The first test on gloo CPU runs found gemm=2 predicted no change (GPU kernel names only):
    now every step gets longer, and the JSON carries the range over steps."""
    import json

    from tests.conftest import FIXTURES

    r = _cli(
        "analyze",
        str(FIXTURES / "cpu-2rank-gloo"),
        "--what-if",
        "gemm=2",
        "--per-step",
        "--format",
        "json",
        "--no-cache",
    )
    assert r.exit_code == 0, r.output
    j = json.loads(r.output)
    wi = j["what_if"]
    assert wi["factors"] == {"gemm": 2.0} and wi["predicted"] is True
    steps = [s for s in j["frames"]["what_if"] if s["step"] is not None]
    assert steps and all(s["predicted_ns"] > s["measured_ns"] for s in steps)
    lo, med, hi = wi["step_ns"]["low"], wi["step_ns"]["median"], wi["step_ns"]["high"]
    assert wi["n_steps"] == len(steps) and lo == min(s["predicted_ns"] for s in steps)
    assert hi == max(s["predicted_ns"] for s in steps) and lo <= med <= hi
    assert 0 < wi["change_pct"]["low"] <= wi["change_pct"]["median"] <= wi["change_pct"]["high"]
    assert 0 <= wi["fixed_wait_pct"] < 100 and 0 <= wi["inferred_pct"] < 100


def test_cli_dimension_without_a_group_is_one_line_exit_2():
    from tests.conftest import FIXTURES

    r = _cli("analyze", str(FIXTURES / "cpu-2rank-gloo"), "--what-if", "tp=2", "--no-cache")
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --what-if: tp: the run has no tp process group"), (
        r.output
    )


def test_bandwidth_retimes_collectives_without_a_group_name():
    """DLRM-like traces name no process group: the world is the group (2 ranks, bus factor 1)."""

    def anon(tr: Trace) -> Trace:
        nodes = tr.nodes.with_columns(pg_name=pl.lit(None, pl.String))
        return Trace(nodes=nodes, deps=tr.deps, meta=dataclasses.replace(tr.meta, process_groups=()))

    run = coll_run()
    run = Run(traces={r: anon(t) for r, t in run.traces.items()})
    assert _ends(what_if(run, parse_what_if("comm=10GB/s"))) == [(120, 170), (120, 170)]
    with pytest.raises(UsageError, match="the run has no dp process group"):
        what_if(run, parse_what_if("dp=2"))


def test_cli_table_says_predicted_with_its_range_and_basis():
    from tests.conftest import FIXTURES

    r = _cli(
        "analyze", str(FIXTURES / "cpu-2rank-gloo"), "--what-if", "gemm=2,cpu_op+=5us", "--no-cache", "--wide"
    )
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "What-if (PREDICTED): gemm×2, cpu_op+=5 µs" in flat
    assert (
        "PREDICTED step time " in flat
        and " (median; range " in flat
        and " over 4 steps; measured median " in flat
    )
    assert "rests on: " in flat and "% is on inferred edges (wake-ups, thread starts)" in flat


# ---------------------------------------------------------------------------
# property: random serial CPU chains, the answer by arithmetic
# ---------------------------------------------------------------------------

#: op name -> its what-if class on a CPU-only trace (kernel_category.CPU_OP_RULES)
_OPS = {"aten::mm": "gemm", "aten::linear": "gemm", "aten::add": "elementwise", "aten::copy_": "memory",
        "aten::foo": None}  # fmt: skip


@settings(max_examples=examples(40), deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(sorted(_OPS)), st.integers(1, 50), st.integers(0, 20)),
        min_size=1,
        max_size=12,
    ),
    key=st.sampled_from(["gemm", "elementwise", "memory"]),
    f=st.sampled_from([0.25, 0.5, 2.0, 3.0]),
    add=st.integers(0, 30),
)
def test_serial_cpu_chain_prediction_is_the_arithmetic(ops, key, f, add):
    """One thread runs the ops back to back (gaps between them): scaling a class by f changes the
    step by exactly (f - 1) x the class's time (an ``aten::linear``'s nested ``aten::t`` included),
    and ``cpu_op+=T`` adds T per operator."""
    rows, t, nid = [], 10, 2
    want = 0
    n_ops = 0
    for name, d4, gap in ops:
        d = 16 * d4  # multiples of 16 ns: every scaled part (d/4, d/2 at x0.25) is whole ns
        rows.append(N(nid, name, "cpu_op", t, d, parent=1))
        n_ops += 1
        if name == "aten::linear":  # a child in the middle: three edges, each scaled exactly
            rows.append(N(nid + 1, "aten::t", "cpu_op", t + d // 4, d // 2, parent=nid))
            n_ops += 1
        if _OPS[name] == key:
            want += int(d * f) - d
        nid += 2
        t += d + gap
    rows.insert(0, N(1, "ProfilerStep#1", "annotation", 0, t + 10))
    run = Run.single(mk_trace(rows))
    text = f"{key}={f:g}" + (f",cpu_op+={add}ns" if add else "")
    ((meas, pred),) = _steps(what_if(run, parse_what_if(text)))
    assert pred - meas == want + add * n_ops


def test_gpu_bound_fixture_gemm_x2_adds_about_the_gemm_time():
    """The H200 fixture (GPU busy 98 %) runs its GEMMs as cuBLAS ``nvjet_*`` kernels, which the old
    name patterns missed (gemm=2 predicted +0.0 %): the time-breakdown categories name them. On a
    GPU-bound run doubling every GEMM adds close to their whole time, and never more."""
    import charllm_trace as ct
    from charllm_trace.core.classify import classify
    from charllm_trace.core.kernel_category import categorize
    from tests.conftest import FIXTURES

    run = ct.load(str(FIXTURES / "h200-1rank-nccl"), cache=False)
    (r,) = run.ranks
    nodes = classify(run.traces[r].nodes)
    gemm_ns = int(nodes.filter(categorize(nodes) == "gemm")["dur_ns"].sum())
    assert gemm_ns > 0
    m, p = _total(what_if(run, parse_what_if("gemm=2")))
    assert 0.9 * gemm_ns <= p - m <= gemm_ns


@pytest.mark.parametrize("key", ["dp=2", "comm=100GB/s", "cpu_op+=5us"])
def test_cli_per_edge_keys_are_refused_with_a_scheduler_before_reading(monkeypatch, key: str):
    from charllm_trace import service
    from tests.conftest import FIXTURES

    def no_read(*a, **k):
        raise AssertionError("the run was read")

    monkeypatch.setattr(service, "analyze", no_read)
    r = _cli("analyze", str(FIXTURES / "cpu-2rank-gloo"), "--scheduler", "local:1", "--what-if", key)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "run it without --scheduler" in lines[0], r.output
