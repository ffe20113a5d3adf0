"""Inference / serving profiles (issue 24): a decode profile built here, shaped as an SGLang one is
(decode batches, GEMMs launched outside every ``ProfilerStep``)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from tests.conftest import invoke
from tests.helpers.kineto_builder import x as _x

BF = ["c10::BFloat16", "c10::BFloat16"]


def _gemm(ev: list, ts: float, corr: int, m: int = 32) -> None:
    """An ``aten::mm`` [m, 4096] x [4096, 4096] at ``ts`` µs, its launch and its 20 µs kernel."""
    ev.append(_x("aten::mm", "cpu_op", ts, 8, **{"Input Dims": [[m, 4096], [4096, 4096]], "Input type": BF}))
    ev.append(_x("cudaLaunchKernel", "cuda_runtime", ts + 1, 5, correlation=corr))
    ev.append(_x("sm90_gemm_bf16", "kernel", ts + 10, 20, pid=0, tid=7, device=0, stream=7, correlation=corr))


def _decode_doc(n_gemm: int = 4) -> dict:
    """GEMMs of decode batches, then one ``ProfilerStep`` holding only an elementwise op."""
    ev: list = []
    for i in range(n_gemm):
        _gemm(ev, 100 * i, i + 1)
    t = 100 * n_gemm
    ev.append(_x("ProfilerStep#7", "user_annotation", t, 50))
    ev.append(_x("aten::add", "cpu_op", t + 5, 5))
    ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 6, 3, correlation=999))
    ev.append(
        _x("elementwise_kernel", "kernel", t + 12, 4, pid=0, tid=7, device=0, stream=7, correlation=999)
    )
    return {
        "traceEvents": ev,
        "distributedInfo": {"rank": 0, "world_size": 1},
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
    }


def test_per_step_with_no_flop_op_in_any_step(tmp_path: Path) -> None:
    """Was exit 3 (ShapeError in analysis/flops.py): FLOP rows for the whole trace, none per step."""
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(_decode_doc()))
    r = invoke("analyze", str(p), "--per-step")
    assert r.exit_code == 0, r.output
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.converters.build import kineto_trace
    from charllm_trace.converters.kineto import read_kineto
    from charllm_trace.core.model import Run

    trace, _ = kineto_trace(read_kineto(p))
    res = analyze_run(Run.single(trace), AnalyzeOptions(per_step=True, critical_path=False))
    f = res.flops.per_step
    whole = f.filter(pl.col("step").is_null() & (pl.col("op_class") == "gemm")).row(0, named=True)
    assert whole["flop"] == 4 * 2 * 32 * 4096 * 4096 and whole["kernel_ns"] == 4 * 20_000
    assert f.filter(pl.col("step").is_not_null()).height == 0
    assert any("no GEMM/attention/convolution op in any step window" in n for n in res.flops.notes)


# ---------------------------------------------------------------------------
# --step-marker on a decode profile with known answers
# ---------------------------------------------------------------------------


def _marked_doc() -> dict:
    """Three ``decode`` ranges (0-100, 200-300, 400-500 µs), a fourth nested in the first; each
    launches one 40 µs kernel 30 µs after it opens. Request ``a`` arrives at 0, ``b`` at 150; both
    get a token at the end of every decode range they are in; ``c`` has a token and no arrival."""
    ev: list = [
        _x("request#a", "user_annotation", 0, 3),
        _x("request#b", "user_annotation", 150, 3),
        _x("decode", "user_annotation", 10, 40),  # nested in the first: part of it
        _x("token#c", "user_annotation", 60, 1),
    ]
    for i, t in enumerate((0, 200, 400)):
        ev.append(_x("decode", "user_annotation", t, 100))
        ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 5, 3, correlation=i + 1))
        ev.append(
            _x(
                "fused_decode_kernel",
                "kernel",
                t + 30,
                40,
                pid=0,
                tid=7,
                device=0,
                stream=7,
                correlation=i + 1,
            )
        )
        ev.append(_x("token#a", "user_annotation", t + 90, 5))
        if t > 0:
            ev.append(_x("token#b", "user_annotation", t + 90, 5))
    return {"traceEvents": ev, "distributedInfo": {"rank": 0, "world_size": 1}}


def _analysed(tmp_path: Path, marker: str | None = "decode"):  # noqa: ANN202
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.core.model import Run
    from tests.helpers.kineto_builder import trace_of

    t = trace_of(tmp_path / "rank0.json", _marked_doc())
    return analyze_run(Run.single(t), AnalyzeOptions(per_step=True, critical_path=False, step_marker=marker))


def test_step_marker_splits_a_profile_without_profiler_steps(tmp_path: Path) -> None:
    res = _analysed(tmp_path)
    it = res.iterations
    assert it is not None
    rows = it.iterations.select("step", "start_ns", "cpu_ns", "window_ns").rows()
    t0 = rows[0][1]
    # CPU ranges 100 µs; GPU windows from each step's first kernel start: 30..230, 230..430, 430..470 µs
    assert [(s, a - t0, c, w) for s, a, c, w in rows] == [
        (0, 0, 100_000, 200_000),
        (1, 200_000, 100_000, 200_000),
        (2, 400_000, 100_000, 40_000),
    ]
    dec = (
        it.phases.filter(pl.col("phase") == "decode")
        .select("step", "n", "cpu_ns", "n_gpu_ops", "gpu_ns")
        .rows()
    )
    assert dec == [(0, 1, 100_000, 1, 40_000), (1, 1, 100_000, 1, 40_000), (2, 1, 100_000, 1, 40_000),
                   (None, 3, 300_000, 3, 120_000)]  # fmt: skip
    assert any("1 ranges named 'decode' start inside another one" in n for n in it.notes)
    # per-step figures of the other analyses use the same steps
    assert res.overlap is not None and sorted(res.overlap.per_rank["step"].drop_nulls().to_list()) == [
        0,
        1,
        2,
    ]


def test_time_to_first_token_and_per_output_token(tmp_path: Path) -> None:
    req = {r["request"]: r for r in _analysed(tmp_path).iterations.requests.iter_rows(named=True)}
    a, b, c = req["a"], req["b"], req["c"]
    assert (a["n_tokens"], a["ttft_ns"], a["tpot_ns"]) == (3, 95_000, 200_000.0)  # 0 -> 95, 295, 495 µs
    assert (b["n_tokens"], b["ttft_ns"], b["tpot_ns"]) == (2, 145_000, 200_000.0)  # 150 -> 295, 495 µs
    assert c["arrival_ns"] is None and c["ttft_ns"] is None and c["tpot_ns"] is None and c["n_tokens"] == 1


def test_request_markers_without_a_step_marker(tmp_path: Path) -> None:
    """Phases and requests are reported where the trace marks them, steps or not."""
    it = _analysed(tmp_path, marker=None).iterations
    assert it is not None and it.iterations.height == 0 and it.requests.height == 3
    assert it.phases.filter(pl.col("step").is_null() & (pl.col("phase") == "decode"))["n"].to_list() == [3]


def test_step_marker_cli_and_bad_markers(tmp_path: Path) -> None:
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(_marked_doc()))
    r = invoke("analyze", str(p), "--step-marker", "decode", "--per-step", "--no-cache")
    assert r.exit_code == 0, r.output
    assert "Iterations (ms)" in r.output and "time to first token" in r.output
    r = invoke("analyze", str(p), "--step-marker", "prefill", "--no-cache")
    assert r.exit_code == 2
    line = r.output.strip()
    assert "\n" not in line and "--step-marker 'prefill': no range of that name" in line
    assert "repeated ranges: decode (4)" in line


def test_a_module_forward_as_marker_on_the_tracelens_inference_profile() -> None:
    """Qwen1.5-0.5B has 24 decoder layers: its layer's forward (a Python-stack range of the
    profile) splits the one forward pass into 24 iterations whose GPU windows tile the layers."""
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.inputs.loader import load
    from tests.conftest import shared_trace

    run = load(str(shared_trace("tracelens/h100_qwen1.5-0.5b_inference.json.gz")))
    marker = "transformers/models/qwen2/modeling_qwen2.py(243): forward"
    res = analyze_run(run, AnalyzeOptions(per_step=True, critical_path=False, step_marker=marker))
    it = res.iterations.iterations
    assert it["step"].to_list() == list(range(24))
    w0, w = it["window_start_ns"].to_numpy(), it["window_ns"].to_numpy()
    assert (w0[1:] == w0[:-1] + w[:-1]).all()  # disjoint and contiguous
    assert (it["start_ns"].to_numpy()[1:] >= (it["start_ns"] + it["cpu_ns"]).to_numpy()[:-1]).all()


def test_per_step_without_steps_says_so(tmp_path: Path) -> None:
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.analysis.results import NO_STEPS
    from charllm_trace.core.model import Run
    from tests.helpers.kineto_builder import trace_of

    doc = _decode_doc()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    res = analyze_run(
        Run.single(trace_of(tmp_path / "r.json", doc)), AnalyzeOptions(per_step=True, critical_path=False)
    )
    assert NO_STEPS in res.overlap.notes and res.overlap.per_rank["step"].is_null().all()


def test_iterations_survive_a_results_file(tmp_path: Path) -> None:
    from charllm_trace.store.results import read_results, results_bytes

    res = _analysed(tmp_path)
    back = read_results("x.zip", results_bytes(res)).analysis
    assert back.options.step_marker == "decode" and back.iterations is not None
    for name, df in res.iterations.frames().items():
        assert back.iterations.frames()[name].equals(df, null_equal=True), name
    assert back.iterations.notes == res.iterations.notes
