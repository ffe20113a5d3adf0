"""Achieved FLOP/s and MFU (analysis.flops, flops_formulas, peaks): formulas with hand-computed
counts, a built trace with known TFLOP/s and MFU, ops without shapes as null, real shared traces."""

from __future__ import annotations

import json

import orjson
import polars as pl
import pytest
from rich.console import Console

from charllm_trace.analysis import AnalyzeOptions, analyze_run, analyze_trace
from charllm_trace.analysis.flops import flops
from charllm_trace.analysis.flops_formulas import dtype_of, op_flops
from charllm_trace.analysis.peaks import peak_or_reason
from charllm_trace.core.model import Run
from tests.conftest import shared_trace
from tests.helpers.analysis_helpers import cpu, kernel, make_trace

# ---------------------------------------------------------------------------
# formulas, by hand
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shapes", "want"),
    [
        ("aten::mm", [[64, 128], [128, 32]], 524_288),  # 2·64·32·128
        ("aten::addmm", [[32], [64, 128], [128, 32], [], []], 524_288),
        ("aten::_addmm_activation", [[32], [64, 128], [128, 32]], 524_288),
        ("aten::bmm", [[4, 64, 128], [4, 128, 32]], 2_097_152),  # 4 · 524,288
        ("aten::baddbmm", [[4, 64, 32], [4, 64, 128], [4, 128, 32]], 2_097_152),
        ("aten::matmul", [[2, 3, 64, 128], [128, 32]], 3_145_728),  # batch 6 broadcast
        ("aten::matmul", [[128], [128, 32]], 8_192),  # a vector: M = 1
        ("aten::linear", [[16, 559, 1024], [1024, 1024], [1024]], 18_756_927_488),  # 2·8944·1024·1024
        ("aten::mm", [[64, 128], [127, 32]], None),  # inner dimensions differ
        ("aten::bmm", [[4, 64, 128], [3, 128, 32]], None),
    ],
)
def test_gemm_formulas(name: str, shapes: list, want: int | None) -> None:
    r = op_flops(name, shapes, ["c10::BFloat16"] * len(shapes))
    assert r.op_class == "gemm" and r.flops == want
    assert r.dtype == "bf16"
    if want is None:
        assert r.why == "operand shapes do not match"


def test_attention_formulas() -> None:
    q = [2, 8, 128, 64]
    sdpa = ["", "", "", "", "0.", "False", "0.125", "False"]  # Kineto Concrete Inputs
    full = 4 * 2 * 8 * 128 * 128 * 64
    assert full == 67_108_864
    r = op_flops("aten::scaled_dot_product_attention", [q, q, q], ["c10::Half"] * 3, sdpa)
    assert (r.flops, r.dtype, r.causal) == (67_108_864, "fp16", False)
    sdpa[5] = "True"
    r = op_flops("aten::scaled_dot_product_attention", [q, q, q], ["c10::Half"] * 3, sdpa)
    assert (r.flops, r.causal) == (33_554_432, True)
    # causal flag not recorded: counted in full
    r = op_flops("aten::scaled_dot_product_attention", [q, q, q], ["c10::Half"] * 3, None)
    assert (r.flops, r.causal) == (67_108_864, None)
    # the flash kernel's op: (B, S, H, D), key longer than query, is_causal at position 8 (host-ET JSON values)
    qs, ks = [2, 128, 8, 64], [2, 256, 8, 64]
    vals = json.dumps([None, None, None, None, None, 128, 256, 0.0, True, False])
    r = op_flops(
        "aten::_flash_attention_forward",
        json.dumps([qs, ks, ks]),
        json.dumps(["Tensor(c10::BFloat16)"] * 3),
        vals,
    )
    assert r.flops == 2 * (2 * 8 * 128) * 256 * (64 + 64) // 2 == 67_108_864 and r.dtype == "bf16"
    # backward: 2.5 x the forward (grad_out first, then q, k, v)
    g = [2, 8, 128, 64]
    r = op_flops("aten::_scaled_dot_product_flash_attention_backward", [g, q, q, q, g], ["float"] * 5)
    assert r.flops == 167_772_160 and r.dtype == "fp32"
    # grouped-query attention: 32 query heads, 8 key heads
    r = op_flops(
        "aten::scaled_dot_product_attention", [[1, 32, 16, 128], [1, 8, 16, 128], [1, 8, 16, 128]], []
    )
    assert r.flops == 2 * (32 * 16) * 16 * 256 == 4_194_304
    # efficient attention: custom_mask_type 1 (causal)
    vals = ["", "", "", "", "", "", "", "", "0.", "1"]
    r = op_flops("aten::_efficient_attention_forward", [qs, qs, qs], [], vals)
    assert r.flops == 2 * (2 * 8 * 128) * 128 * 128 // 2 == 33_554_432
    # packed variable-length input: not counted
    r = op_flops("aten::_flash_attention_forward", [[300, 8, 64], [300, 8, 64], [300, 8, 64]], [])
    assert r.flops is None and "variable-length" in (r.why or "")


def test_convolution_formulas() -> None:
    # the ResNet stem as the host ET records it: cudnn_convolution(input, weight, padding, stride, dilation, ...)
    x, w = [32, 3, 224, 224], [64, 3, 7, 7]
    vals = [
        [1, 2, 0, 1, 4, "cuda:0"],
        [3, 4, 0, 1, 4, "cuda:0"],
        [3, 3],
        [2, 2],
        [1, 1],
        1,
        False,
        False,
        True,
    ]
    r = op_flops("aten::cudnn_convolution", [x, w, [[], []], [[], []], [[], []], [], [], [], []],
                 ["Tensor(float)", "Tensor(float)"], vals)  # fmt: skip
    assert r.flops == 2 * 32 * 112 * 112 * 64 * 3 * 7 * 7 == 7_552_892_928 and r.dtype == "fp32"
    # conv2d: the output shape when recorded; stride etc. otherwise (Kineto's concrete text)
    r = op_flops("aten::conv2d", [x, w, []], ["float"] * 2, None, [[32, 64, 112, 112]])
    assert r.flops == 7_552_892_928
    r = op_flops(
        "aten::conv2d",
        [x, w, [], [], [], [], []],
        ["float"] * 2,
        ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "1"],
    )
    assert r.flops == 7_552_892_928
    r = op_flops("aten::conv2d", [x, w, []], ["float"] * 2)  # neither: null, with why
    assert r.flops is None and r.why == "stride/padding/dilation not recorded"
    # groups: the weight holds C/groups (depthwise 3x3, 32 groups)
    r = op_flops("aten::convolution", [[1, 32, 8, 8], [32, 1, 3, 3]], ["float"] * 2,
                 [None, None, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 32])  # fmt: skip
    assert r.flops == 2 * 1 * 64 * 32 * 1 * 9 == 36_864
    # backward: one forward per gradient the mask asks for (2 when not recorded)
    g, xi, wb = [32, 2048, 7, 7], [32, 512, 7, 7], [2048, 512, 1, 1]
    fwd = 2 * 32 * 49 * 2048 * 512
    assert fwd == 3_288_334_336
    bvals = [None, None, None, [0], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, False]]
    assert op_flops("aten::convolution_backward", [g, xi, wb], ["float"] * 3, bvals).flops == 6_576_668_672
    bvals[10] = [False, True, False]
    assert op_flops("aten::convolution_backward", [g, xi, wb], ["float"] * 3, bvals).flops == 3_288_334_336
    assert op_flops("aten::convolution_backward", [g, xi, wb], ["float"] * 3).flops == 6_576_668_672
    # transposed: the input positions count
    r = op_flops("aten::conv_transpose2d", [[1, 16, 8, 8], [16, 8, 3, 3]], ["float"] * 2)
    assert r.flops == 2 * 1 * 64 * 16 * 8 * 9 == 147_456


def test_dtypes_and_unknown_ops() -> None:
    assert [dtype_of(t) for t in ("Tensor(c10::BFloat16)", "c10::Half", "float", "double", "Scalar", None)] == [
        "bf16", "fp16", "fp32", "fp64", None, None,
    ]  # fmt: skip
    assert op_flops("aten::add", [[4]], ["float"]).op_class is None
    r = op_flops("aten::mm", None, None)
    assert r.flops is None and r.why == "input shapes not recorded"


def test_peak_table() -> None:
    assert peak_or_reason("NVIDIA H100 80GB HBM3", "bf16") == (989.5, None)
    assert peak_or_reason("NVIDIA H100 PCIe", "fp16") == (756.5, None)
    assert peak_or_reason("NVIDIA H200", "fp8") == (1979.0, None)
    assert peak_or_reason("NVIDIA A100-SXM4-80GB", "tf32") == (156.0, None)
    assert peak_or_reason("Tesla V100-SXM2-32GB", "fp32") == (15.7, None)
    assert peak_or_reason("AMD Instinct MI300X VF", "bf16") == (1307.4, None)
    assert peak_or_reason("AMD Instinct MI250X / MI250", "fp16") == (383.0, None)
    assert peak_or_reason("NVIDIA B200", "bf16") == (2250.0, None)
    assert peak_or_reason("NVIDIA B200", "tf32") == (1100.0, None)
    assert peak_or_reason("NVIDIA GB200", "bf16") == (2500.0, None)
    assert peak_or_reason("Tesla V100-SXM2-32GB", "bf16") == (None, "V100 SXM2 has no dense bf16 peak")
    assert peak_or_reason("AMD Radeon Graphics", "fp32")[0] is None
    assert peak_or_reason(None, "bf16") == (None, "device model unknown")
    assert peak_or_reason("NVIDIA H100 80GB HBM3", None) == (None, "data type unknown")


# ---------------------------------------------------------------------------
# a built trace: known TFLOP/s and MFU
# ---------------------------------------------------------------------------

LIN_FLOP = 2 * 1024 * 1024 * 1024  # linear [1024, 1024] x [1024, 1024]^T
ATT_FLOP = 4 * 1 * 8 * 512 * 512 * 64 // 2  # causal SDPA, q = k = v = [1, 8, 512, 64]


def _io(shapes: list, types: list) -> dict:
    return {"values": None, "shapes": json.dumps(shapes), "types": json.dumps(types)}


def _built(device: str | None = "NVIDIA H100 80GB HBM3"):
    bf = "Tensor(c10::BFloat16)"
    kin = {"cat": "cpu_op", "Input Dims": [[1, 8, 512, 64]] * 3, "Input type": ["c10::BFloat16"] * 3,
           "Concrete Inputs": ["", "", "", "", "0.", "True", "", "False"]}  # fmt: skip
    rows = [
        cpu(0, "ProfilerStep#1", 0, 1_000_000, kind="annotation"),
        # host-ET shapes on the linear; the addmm inside it is not counted again
        cpu(
            1,
            "aten::linear",
            1_000,
            50_000,
            parent=0,
            inputs=_io([[1024, 1024], [1024, 1024], [1024]], [bf] * 3),
        ),
        cpu(
            2,
            "aten::addmm",
            2_000,
            40_000,
            parent=1,
            inputs=_io([[1024], [1024, 1024], [1024, 1024]], [bf] * 3),
        ),
        cpu(3, "cudaLaunchKernel", 3_000, 5_000, kind="runtime", parent=2, correlation=7),
        kernel(4, "sm90_gemm_bf16", 100_000, 10_000, correlation=7),
        # Kineto shapes (attrs) on the attention op
        cpu(
            5,
            "aten::scaled_dot_product_attention",
            60_000,
            30_000,
            parent=0,
            attrs=orjson.dumps(kin).decode(),
        ),
        cpu(6, "cudaLaunchKernel", 61_000, 5_000, kind="runtime", parent=5, correlation=8),
        kernel(7, "flash_fwd_kernel", 120_000, 5_000, correlation=8),
        # an mm without shapes, and an elementwise op: neither counted
        cpu(8, "aten::mm", 200_000, 10_000, parent=0),
        cpu(9, "cudaLaunchKernel", 201_000, 5_000, kind="runtime", parent=8, correlation=9),
        kernel(10, "gemm_kernel", 300_000, 7_000, correlation=9),
        cpu(11, "aten::add", 400_000, 10_000, parent=0),
        cpu(12, "cudaLaunchKernel", 401_000, 5_000, kind="runtime", parent=11, correlation=10),
        kernel(13, "elementwise_kernel", 500_000, 2_000, correlation=10),
    ]
    return make_trace(rows, device_model=device)


def test_built_trace_tflops_and_mfu() -> None:
    res = flops(_built(), per_step=True)
    whole = {r["op_class"]: r for r in res.per_step.filter(pl.col("step").is_null()).iter_rows(named=True)}
    g, a, al = whole["gemm"], whole["attention"], whole["all"]
    assert (g["flop"], g["kernel_ns"], g["n_ops"], g["n_kernels"], g["n_no_shapes"]) == (
        LIN_FLOP,
        10_000,
        1,
        1,
        1,
    )
    assert g["tflops"] == pytest.approx(LIN_FLOP / 10_000 / 1e3)  # 214.75 TFLOP/s
    assert g["peak_tflops"] == 989.5 and g["dtype"] == "bf16"
    assert g["mfu_pct"] == pytest.approx(100 * LIN_FLOP / 989.5e12 / 10_000e-9)  # 21.70 %
    assert (a["flop"], a["kernel_ns"]) == (ATT_FLOP, 5_000) and ATT_FLOP == 268_435_456
    assert a["mfu_pct"] == pytest.approx(100 * ATT_FLOP / 989.5e12 / 5_000e-9)
    assert al["flop"] == LIN_FLOP + ATT_FLOP and al["kernel_ns"] == 15_000
    assert al["mfu_pct"] == pytest.approx(100 * (LIN_FLOP + ATT_FLOP) / 989.5e12 / 15_000e-9)
    # wall: the span of GPU activity (100,000 .. 502,000 ns) for the whole trace, the step's window
    # per step: its GPU-time window (step_windows), here the same span, not the 1 ms ProfilerStep
    assert al["wall_ns"] == 402_000
    assert al["wall_mfu_pct"] == pytest.approx(100 * (LIN_FLOP + ATT_FLOP) / 989.5e12 / 402_000e-9)
    step = res.per_step.filter((pl.col("step") == 1) & (pl.col("op_class") == "all")).row(0, named=True)
    assert step["wall_ns"] == 402_000 and step["flop"] == LIN_FLOP + ATT_FLOP
    ops = dict(zip(res.by_op["name"], res.by_op["flop"], strict=True))
    assert ops == {"aten::linear": LIN_FLOP, "aten::scaled_dot_product_attention": ATT_FLOP}
    assert any("1 of 3 GEMM/attention/convolution ops have no FLOP count" in n for n in res.notes)


def test_unknown_device_gives_null_mfu_with_the_reason() -> None:
    res = flops(_built(device=None))
    al = res.total().filter(pl.col("op_class") == "all").row(0, named=True)
    assert al["tflops"] == pytest.approx((LIN_FLOP + ATT_FLOP) / 15_000 / 1e3)
    assert al["mfu_pct"] is None and al["wall_mfu_pct"] is None and al["mfu_why"] == "device model unknown"
    assert res.by_op["mfu_pct"].is_null().all()


def test_ops_without_shapes_are_null() -> None:
    rows = [
        cpu(0, "aten::mm", 0, 10_000),
        cpu(1, "cudaLaunchKernel", 1_000, 5_000, kind="runtime", parent=0, correlation=1),
        kernel(2, "gemm_kernel", 20_000, 7_000, correlation=1),
    ]
    res = flops(make_trace(rows, device_model="NVIDIA A100-SXM4-80GB"))
    for r in res.per_step.iter_rows(named=True):
        assert (r["n_ops"], r["n_no_shapes"]) == (0, 1)
        assert r["flop"] is None and r["tflops"] is None and r["mfu_pct"] is None and r["kernel_ns"] is None
    assert res.by_op.height == 0


def test_analyze_run_wires_flops_into_frames_tables_store_and_report() -> None:
    from charllm_trace.render.report import render_report, report_data_from
    from charllm_trace.render.report_views import report_views
    from charllm_trace.render.tables import render_analysis
    from charllm_trace.store.results import read_results, results_bytes

    tr = _built()
    res = analyze_trace(tr, AnalyzeOptions(per_step=True, critical_path=False))
    assert res.flops is not None and "flops" in res.frames() and "flops_by_op" in res.frames()
    back = read_results("x.zip", results_bytes(res)).analysis
    assert back.flops is not None and back.flops.per_step.equals(res.flops.per_step)
    assert back.flops.notes == res.flops.notes
    con = Console(width=80, record=True)
    render_analysis(res, con)
    text = con.export_text()
    assert "Achieved FLOP/s and MFU" in text and "21.7" in text
    table = text[text.index("Achieved FLOP/s") :].split("\n")[:8]
    assert max(len(line.rstrip()) for line in table) <= 80
    page = render_report(report_data_from(report_views(Run.single(tr), res.classified), res))
    assert 'id="flops"' in page and "MFU per op class" in page
    # no counted op at all: skipped, with the reason
    plain = analyze_trace(make_trace([cpu(0, "aten::add", 0, 10)]), critical_path=False)
    assert plain.flops is None and "no GEMM" in plain.skipped["flops"]


# ---------------------------------------------------------------------------
# shared traces with shapes
# ---------------------------------------------------------------------------


def test_h100_inference_profile_kineto_shapes() -> None:
    """TraceLens' Qwen1.5-0.5B on H100, recorded with shapes: bf16 linears and causal SDPA."""
    import charllm_trace as ct

    run = ct.load(shared_trace("tracelens/h100_qwen1.5-0.5b_inference.json.gz"))
    tr = next(iter(run))
    res = flops(tr)
    whole = {r["op_class"]: r for r in res.total().iter_rows(named=True)}
    # 24 causal SDPA calls on q = k = v = [16, 16, 559, 64]: 4·16·16·559·559·64 / 2 each
    assert whole["attention"]["flop"] == 24 * (4 * 16 * 16 * 559 * 559 * 64 // 2) == 245_745_057_792
    assert whole["attention"]["n_ops"] == 24 and whole["attention"]["n_no_shapes"] == 0
    g = whole["gemm"]
    assert g["n_ops"] == 169 and g["n_no_shapes"] == 0
    assert 100 < g["tflops"] < 989.5  # achieved bf16 GEMM throughput below the H100's dense peak
    assert 10 < g["mfu_pct"] < 100 and 0 < whole["all"]["wall_mfu_pct"] < whole["all"]["mfu_pct"]
    lin = res.by_op.filter(pl.col("name") == "aten::linear").row(0, named=True)
    assert lin["dtype"] == "bf16" and lin["peak_tflops"] == 989.5


def test_dlrm_kineto_shapes_agree_with_the_host_et() -> None:
    """The V100 DLRM rank 0: FLOPs from the Kineto profile's Input Dims alone equal those from the
    linked host execution trace's input shapes; fp32 against the V100's 15.7 TFLOP/s."""
    import charllm_trace as ct

    d = shared_trace("param/dlrm_8ranks_v100")
    run = ct.load(d)
    linked = flops(run.traces[0])
    kineto = flops(next(iter(ct.load(d / "kineto_rank0.json.gz"))))
    a = linked.total().filter(pl.col("op_class") == "all").row(0, named=True)
    b = kineto.total().filter(pl.col("op_class") == "all").row(0, named=True)
    assert a["flop"] == b["flop"] == 60_487_168 and a["n_ops"] == b["n_ops"] == 23
    assert a["peak_tflops"] == 15.7 and 0 < a["mfu_pct"] < 100
    # the whole run: every rank, per step, the shared notes once with the ranks they hold for
    res = analyze_run(run, AnalyzeOptions(per_step=True, critical_path=False))
    fl = res.flops
    assert fl is not None and sorted(fl.per_step["rank"].unique().to_list()) == list(range(8))
    assert fl.per_step.filter(pl.col("step").is_not_null())["step"].unique().to_list() == [10]
    assert sorted(fl.devices["peak_device"].to_list()) == ["V100 SXM2"] * 8
    assert fl.notes[0].startswith("ranks 0-7: FLOPs are estimates")


def test_kineto_reader_keeps_the_shapes_of_flop_ops(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The converter keeps ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` of matrix, attention and
    convolution ops (not of other ops) in ``attrs``, in all three readers (C, msgspec, plain)."""
    import charllm_trace as ct
    from charllm_trace.converters import kineto_native
    from charllm_trace.converters.kineto import parse_kineto, read_kineto

    def op(name: str, ts: int, ext: int, dims: list) -> dict:
        args = {
            "External id": ext,
            "Input Dims": dims,
            "Input type": ["float"] * len(dims),
            "Concrete Inputs": [""] * len(dims),
        }
        return {
            "ph": "X",
            "cat": "cpu_op",
            "name": name,
            "pid": 1,
            "tid": 1,
            "ts": ts,
            "dur": 5,
            "args": args,
        }

    doc = {
        "traceEvents": [
            op("aten::mm", 10, 1, [[64, 128], [128, 32]]),
            op("aten::add", 20, 2, [[64, 32], [64, 32], []]),
            op("aten::cudnn_convolution", 30, 3, [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], [], [], []]),
        ]
    }
    p = tmp_path / "shapes.json"
    p.write_text(json.dumps(doc))
    native = read_kineto(p)
    with monkeypatch.context() as m:
        m.setattr(kineto_native, "decoder", lambda: None)
        plain_msgspec = read_kineto(p)
    plain = parse_kineto(doc, p)
    for prof in (native, plain_msgspec, plain):
        assert prof.comm_args[0]["Input Dims"] == [[64, 128], [128, 32]]
        assert prof.comm_args[2]["Input Dims"][1] == [4, 3, 3, 3]
        assert 1 not in prof.comm_args
    nodes = next(iter(ct.load(p))).nodes
    attrs = dict(zip(nodes["name"], nodes["attrs"], strict=True))
    assert json.loads(attrs["aten::mm"])["Input type"] == ["float", "float"]
    assert "Input Dims" not in attrs["aten::add"]
    r = op_flops("aten::mm", *(json.loads(attrs["aten::mm"])[k] for k in ("Input Dims", "Input type")))
    assert r.flops == 524_288


def testkernel_launchers_match_classify() -> None:
    """The kernel-only launcher lookup gives what ``classify.launcher_positions`` gives (Kineto and a
    host-ET-linked trace)."""
    import numpy as np

    import charllm_trace as ct
    from charllm_trace.analysis.flops import kernel_launchers
    from charllm_trace.core.classify import classify, launcher_positions

    for p in (
        shared_trace("tracelens/h100_qwen1.5-0.5b_inference.json.gz"),
        shared_trace("param/dlrm_8ranks_v100"),
    ):
        df = classify(next(iter(ct.load(p))).nodes)
        kern = (df["on_gpu"].fill_null(False) & (df["cls"] == "compute")).to_numpy()
        assert kern.sum() > 100
        assert np.array_equal(kernel_launchers(df, kern), launcher_positions(df)[kern])


# ---------------------------------------------------------------------------
# issue 27: a measured rate above a precision's peak is evidence of another precision
# ---------------------------------------------------------------------------

MM_FLOP = 2 * 4096**3  # aten::mm [4096, 4096] x [4096, 4096]


def _fp32_mm(device: str, kernel_ns: int, n: int = 2):  # noqa: ANN202
    """``n`` fp32 ``aten::mm`` calls on ``device``, each launching one kernel of ``kernel_ns``, in one
    ProfilerStep."""
    f = "Tensor(float)"
    rows = [cpu(0, "ProfilerStep#1", 0, 100_000_000, kind="annotation")]
    for i in range(n):
        t = 1_000 + i * 20_000_000
        rows += [
            cpu(
                10 + 3 * i, "aten::mm", t, 10_000, parent=0, inputs=_io([[4096, 4096], [4096, 4096]], [f, f])
            ),
            cpu(
                11 + 3 * i,
                "cudaLaunchKernel",
                t + 1_000,
                5_000,
                kind="runtime",
                parent=10 + 3 * i,
                correlation=i,
            ),
            kernel(12 + 3 * i, "ampere_sgemm_128x64_tn", t + 100_000, kernel_ns, correlation=i),
        ]
    return make_trace(rows, device_model=device)


def test_fp32_gemm_faster_than_the_fp32_peak_is_compared_with_tf32() -> None:
    """The A100 profile of issue 27: fp32 GEMMs at 25.5 TFLOP/s against the 19.5 fp32 peak printed
    MFU 131 %. Here 137.4 GFLOP in 5.39 ms = 25.5 TFLOP/s: compared with the tf32 peak (156)."""
    res = flops(_fp32_mm("NVIDIA A100-SXM4-80GB", 5_390_000))
    g = res.total().filter(pl.col("op_class") == "gemm").row(0, named=True)
    assert g["tflops"] == pytest.approx(MM_FLOP / 5_390_000 / 1e3) and 25.4 < g["tflops"] < 25.6
    assert g["mfu_pct"] == pytest.approx(100 * g["tflops"] / 156.0)  # 16.3 %, not 130.7 %
    assert "tf32 peak" in g["mfu_why"] and "above the 19.5 fp32 peak" in g["mfu_why"]
    assert res.by_op.row(0, named=True)["mfu_pct"] == pytest.approx(100 * g["tflops"] / 156.0)
    assert any("TF32 was in use" in n for n in res.notes)
    assert not any("TF32 use is not recorded" in n for n in res.notes)


def test_fp32_gemm_below_the_fp32_peak_keeps_it() -> None:
    """The same ops at 12.7 TFLOP/s (10.8 ms): no evidence against fp32, its peak stays."""
    res = flops(_fp32_mm("NVIDIA A100-SXM4-80GB", 10_800_000))
    g = res.total().filter(pl.col("op_class") == "gemm").row(0, named=True)
    assert g["mfu_pct"] == pytest.approx(100 * MM_FLOP / 10_800_000 / 1e3 / 19.5) and g["mfu_why"] is None
    assert any("TF32 use is not recorded" in n for n in res.notes)


def test_mfu_above_100_is_never_a_plain_figure() -> None:
    """Faster than every peak the device has (a V100 has no TF32): MFU stays what it measures, and
    every row above 100 % says why, as does a note."""
    res = flops(_fp32_mm("Tesla V100-SXM2-32GB", 5_390_000))
    over = res.per_step.filter(pl.col("mfu_pct") > 100)
    assert over.height > 0 and over["mfu_why"].str.starts_with("above 100 %").all()
    assert res.by_op["mfu_pct"][0] > 100
    assert any(n.startswith("MFU above 100 % for 1 operator(s) (aten::mm 25.5 > 15.7") for n in res.notes)


def test_mfu_above_100_is_marked_in_the_table() -> None:
    from charllm_trace.render.flops_table import render_flops

    res = analyze_trace(_fp32_mm("Tesla V100-SXM2-32GB", 5_390_000), AnalyzeOptions(critical_path=False))
    con = Console(width=80, record=True)
    render_flops(res, con)
    text = con.export_text()
    assert "162.4!" in text and "! MFU above 100 %" in text  # 25.5 / 15.7 TFLOP/s
