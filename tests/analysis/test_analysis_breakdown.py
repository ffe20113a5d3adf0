"""Time breakdown (issue 13 item 1): kernel categories on real NVIDIA and AMD kernel names, the
breakdown's numbers on a trace built by hand, the totals on shared profiles, and the breakdown in
analyze's JSON and tables, saved results and the HTML report."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import orjson
import polars as pl
import pytest
from rich.console import Console

import charllm_trace as ct
from charllm_trace.analysis import analyze_trace
from charllm_trace.analysis.breakdown import run_breakdown, time_breakdown
from charllm_trace.core.classify import classify
from charllm_trace.core.kernel_category import CATEGORIES, categorize, name_categories
from charllm_trace.core.model import Trace, TraceMeta
from charllm_trace.render import export
from charllm_trace.render.report import render_report, report_data
from charllm_trace.render.tables import render_analysis
from charllm_trace.store.results import read_results, results_bytes
from tests.conftest import shared_trace
from tests.helpers.analysis_helpers import cpu, kernel, make_trace, node
from tests.helpers.results_helpers import differences

# (expected category, kernel name or its beginning, shared trace it was taken from). Every name is
# checked to occur in that trace (test_names_are_real) and categorised there in full.
NVIDIA = [
    # GEMM: cuBLAS (sm90 xmma, Ampere/Volta sgemm, gemv), CUTLASS
    ("gemm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "tracelens/h100_qwen1.5-0.5b_inference.json.gz"),
    ("gemm", "ampere_sgemm_128x64_nn", "hta/trace_filter_2ranks/rank-0.json.gz"),
    ("gemm", "volta_sgemm_64x64_nt", "param/resnet_kineto.json.gz"),
    ("gemm", "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)", "hta/a100_ddp_nccl_rank0.json.gz"),
    ("gemm", "void gemvNSP_kernel<float, float, float, float, 1, 16, 4, 1024, false, cublasGemvParams<", "param/dlrm_8ranks_v100/kineto_rank0.json.gz"),
    # attention: FlashAttention (its name holds "cutlass": attention comes first)
    ("attention", "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t", "tracelens/h100_qwen1.5-0.5b_inference.json.gz"),
    # convolution: implicit-GEMM convolutions (their names hold "gemm": convolution comes first), cuDNN
    ("convolution", "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_stage5_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn_infer", "hta/a100_ddp_nccl_rank0.json.gz"),
    ("convolution", "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageINS_4gemm9GemmShapeILi128ELi128ELi32EEE", "hta/a100_ddp_nccl_rank0.json.gz"),
    ("convolution", "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)", "param/resnet_kineto.json.gz"),
    ("convolution", "cudnn_volta_scudnn_128x64_relu_small_nn_v1", "param/resnet_kineto.json.gz"),
    # elementwise: TensorIterator kernels, foreach (multi_tensor_apply), one with an fbgemm functor
    ("elementwise", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", "hta/a100_ddp_nccl_rank0.json.gz"),
    ("elementwise", "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>", "hta/a100_ddp_nccl_rank0.json.gz"),
    ("elementwise", "void at::native::vectorized_elementwise_kernel<4, fbgemm_gpu::_float_to_hfp8_gpu", "hta/trace_filter_2ranks/rank-0.json.gz"),
    # reduction / norm: reduce_kernel, layer norm, softmax, cuDNN batch norm
    ("reduction_norm", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >", "hta/a100_ddp_nccl_rank0.json.gz"),
    ("reduction_norm", "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)", "hta/trace_filter_2ranks/rank-0.json.gz"),
    ("reduction_norm", "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int, int, bool const*, int, bool)", "hta/a100_ddp_nccl_rank0.json.gz"),
    ("reduction_norm", "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 32, true, 1, true>(cudnnTensorStruct", "param/resnet_kineto.json.gz"),
    # other: embedding lookups (fbgemm: not a GEMM)
    ("other", "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, false, long, 1ul, 8ul>", "param/dlrm_8ranks_v100/kineto_rank0.json.gz"),
    # communication (by class: NCCL kernels)
    ("communication", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "hta/a100_ddp_nccl_rank0.json.gz"),
    ("communication", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "hta/trace_filter_2ranks/rank-0.json.gz"),
]  # fmt: skip

AMD = [
    # Tensile / hipBLASLt GEMMs (MI300X bf16, MI250 fp32)
    ("gemm", "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1_AFC1", "tracelens/mi300_qwen1.5-0.5b_inference.json.gz"),
    ("gemm", "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1", "hta/mi250_minitoy_kineto.json.gz"),
    ("attention", "attn_fwd", "tracelens/mi300_qwen1.5-0.5b_inference.json.gz"),
    ("elementwise", "void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> >", "tracelens/mi300_qwen1.5-0.5b_inference.json.gz"),
    ("reduction_norm", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4> >", "tracelens/mi300_qwen1.5-0.5b_inference.json.gz"),
    # not in the shared traces: names as ROCm libraries and public ROCm profiles spell them (source)
    ("gemm", "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemmMultiD_ABScale_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor, c", "CK GEMM, a public vLLM-on-ROCm kernel table"),
    ("attention", "void ck_tile::kentry<256, 2, ck_tile::FmhaFwdKernel<", "CK fmha, a public PyTorch profiler table (ROCm SDPA)"),
    ("convolution", "miopenSp3AsmConv_v21_1_3_gfx9_fp32_f2x3_stride1", "MIOpen Winograd convolution (MIOpen solver ConvBinWinogradRxSf2x3)"),
    ("reduction_norm", "MIOpenBatchNormFwdTrainSpatial", "MIOpen batch norm (MIOpen batchnorm solver)"),
    ("reduction_norm", "LayernormFwdContiguous", "MIOpen layer norm (MIOpenLayerNorm.cpp)"),
    ("communication", "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "RCCL / NCCL generic device kernel, public ROCm profiles"),
]  # fmt: skip

#: memcpy / memset records and AMD blit kernels (by class): (kind, name, source)
MEMORY = [
    ("memcpy", "Memcpy HtoD (Pinned -> Device)", "hta/trace_filter_2ranks/rank-0.json.gz"),
    ("memset", "Memset (Device)", "hta/a100_ddp_nccl_rank0.json.gz"),
    ("kernel", "__amd_rocclr_copyBuffer", "ROCclr blit copy kernel, public ROCm profiles"),
    ("kernel", "__amd_rocclr_fillBufferAligned", "ROCclr blit fill kernel, public ROCm profiles"),
]


def _categorised(rows: list[tuple[str, str]]) -> list[str]:
    """Categories of GPU nodes of (kind, name) through classify + categorize, as the analysis does."""
    nodes = [kernel(i + 1, name, 100 * i, 10, kind=kind) for i, (kind, name) in enumerate(rows)]
    return categorize(classify(make_trace(nodes).nodes)).to_list()


@pytest.mark.parametrize("vendor", [NVIDIA, AMD], ids=["nvidia", "amd"])
def test_rules_on_real_kernel_names(vendor: list[tuple[str, str, str]]) -> None:
    got = _categorised([("kernel", name) for _, name, _ in vendor])
    for (want, name, src), cat in zip(vendor, got, strict=True):
        assert cat == want, f"{name} ({src}): {cat}, expected {want}"


def test_memory_operators_by_class() -> None:
    assert _categorised([(k, n) for k, n, _ in MEMORY]) == ["memcpy_memset"] * len(MEMORY)


def test_categories_cover_the_list_and_fall_back_to_other() -> None:
    assert {c for c, _, _ in NVIDIA + AMD} | {"memcpy_memset"} == set(CATEGORIES) - set()
    assert (
        name_categories(pl.Series(["my_custom_kernel", None, "convert_fp8_kernel"])).to_list()
        == ["other"] * 3
    )
    # CPU nodes and annotations on streams have no category
    tr = make_trace([cpu(1, "aten::mm", 0, 10), kernel(2, "gemm", 0, 5, kind="gpu_annotation")])
    assert categorize(classify(tr.nodes)).to_list() == [None, None]


def _kernel_names(rel: str) -> list[str]:
    doc = orjson.loads(gzip.decompress(shared_trace(rel).read_bytes()))
    cats = ("kernel", "gpu_memcpy", "gpu_memset")
    return sorted({e["name"] for e in doc["traceEvents"] if e.get("cat") in cats})


def test_names_are_real() -> None:
    """Each name of the lists said to come from a shared trace occurs there (as the beginning of a
    kernel name), and that full name falls in the same category."""
    by_trace: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for want, name, src in NVIDIA + AMD + [("memcpy_memset", n, s) for _, n, s in MEMORY]:
        if src.endswith(".json.gz"):
            by_trace[src].append((want, name))
    assert len(by_trace) == 7
    for src, items in by_trace.items():
        names = _kernel_names(src)
        for want, prefix in items:
            full = [n for n in names if n.startswith(prefix)]
            assert full, f"{prefix!r} not in {src}"
            if want not in ("communication", "memcpy_memset"):  # those two are by class
                assert name_categories(pl.Series(full[:1])).item() == want


# ---------------------------------------------------------------------------------------------
# Numbers on a trace built by hand
# ---------------------------------------------------------------------------------------------

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
COPY = "Memcpy HtoD (Pinned -> Device)"


def built(rank: int = 0) -> Trace:
    """Two steps. Step 1: a GEMM (400 ns, launched by aten::addmm under aten::linear), an add
    (100, aten::add_), an all-reduce on another stream (600, nccl:all_reduce). Step 2: a GEMM (200),
    a memcpy (30, aten::copy_), an add launched by a runtime call directly under the step's
    annotation (50) and an add with no launch record (20)."""
    rt = {"kind": "runtime"}
    rows = [
        cpu(1, "ProfilerStep#1", 0, 1000, kind="annotation"),
        cpu(2, "aten::linear", 10, 200, parent=1),
        cpu(3, "aten::addmm", 20, 100, parent=2),
        cpu(4, "cudaLaunchKernel", 30, 10, parent=3, correlation=100, **rt),
        cpu(5, "aten::add_", 300, 50, parent=1),
        cpu(6, "cudaLaunchKernel", 310, 5, parent=5, correlation=101, **rt),
        cpu(7, "nccl:all_reduce", 400, 50, parent=1),
        cpu(8, "cudaLaunchKernel", 410, 5, parent=7, correlation=102, **rt),
        cpu(9, "ProfilerStep#2", 1000, 1000, kind="annotation"),
        cpu(10, "aten::linear", 1010, 200, parent=9),
        cpu(11, "aten::addmm", 1020, 100, parent=10),
        cpu(12, "cudaLaunchKernel", 1030, 10, parent=11, correlation=103, **rt),
        cpu(13, "aten::copy_", 1300, 50, parent=9),
        cpu(14, "cudaMemcpyAsync", 1310, 10, parent=13, correlation=104, **rt),
        cpu(15, "cudaLaunchKernel", 1500, 5, parent=9, correlation=105, **rt),
        kernel(20, GEMM, 50, 400, correlation=100),
        kernel(21, ADD, 460, 100, correlation=101),
        kernel(22, NCCL, 420, 600, stream=9, correlation=102),
        kernel(23, GEMM, 1050, 200, correlation=103),
        kernel(24, COPY, 1320, 30, kind="memcpy", correlation=104),
        kernel(25, ADD, 1510, 50, correlation=105),
        kernel(26, ADD, 1400, 20),
    ]
    return make_trace(rows, rank=rank)


def _rows(df: pl.DataFrame, group: str, step: int | None = None, rank: int | None = 0) -> list[tuple]:
    sub = df.filter(
        (pl.col("group") == group) & pl.col("step").eq_missing(step) & pl.col("rank").eq_missing(rank)
    )
    return list(sub.select("key", "count", "total_ns", "max_ns").iter_rows())


def _pct(df: pl.DataFrame, group: str, step: int | None = None) -> dict:
    sub = df.filter((pl.col("group") == group) & pl.col("step").eq_missing(step))
    return dict(sub.select("key", "pct").iter_rows())


def test_breakdown_numbers_by_hand() -> None:
    res = time_breakdown(built())
    by, tot = res.by, res.totals
    # totals: whole trace 7 operators, 1400 ns (20 ns without a launcher); step 1: 1100; step 2: 300
    assert list(tot.iter_rows()) == [(0, None, 7, 1400, 20), (0, 1, 3, 1100, 0), (0, 2, 4, 300, 20)]
    assert _rows(by, "category") == [
        ("communication", 1, 600, 600),
        ("gemm", 2, 600, 400),
        ("elementwise", 3, 170, 100),
        ("memcpy_memset", 1, 30, 30),
    ]
    assert _pct(by, "category") == pytest.approx(
        {"communication": 600 / 14, "gemm": 600 / 14, "elementwise": 170 / 14, "memcpy_memset": 30 / 14}
    )
    assert _rows(by, "kernel") == [
        (NCCL, 1, 600, 600),
        (GEMM, 2, 600, 400),
        (ADD, 3, 170, 100),
        (COPY, 1, 30, 30),
    ]
    kern = by.filter((pl.col("group") == "kernel") & pl.col("step").is_null())
    assert kern["category"].to_list() == ["communication", "gemm", "elementwise", "memcpy_memset"]
    assert kern["mean_ns"].to_list() == pytest.approx([600, 300, 170 / 3, 30])
    # launching op: the op enclosing the runtime call; the add launched from the annotation is the
    # annotation's; the add without a launch record is unknown (null), last
    assert _rows(by, "op") == [
        ("aten::addmm", 2, 600, 400),
        ("nccl:all_reduce", 1, 600, 600),
        ("aten::add_", 1, 100, 100),
        ("ProfilerStep#2", 1, 50, 50),
        ("aten::copy_", 1, 30, 30),
        (None, 1, 20, 20),
    ]
    # top-level op: the outermost op above (aten::linear over aten::addmm)
    assert _rows(by, "top_op")[0] == ("aten::linear", 2, 600, 400)
    assert [k for k, *_ in _rows(by, "top_op")] == [
        "aten::linear", "nccl:all_reduce", "aten::add_", "ProfilerStep#2", "aten::copy_", None
    ]  # fmt: skip
    # per step: the GPU-time windows [50, 1050) and [1050, 1560) ns (the first GPU start each step
    # launched; the last end); the add without a launch record (an orphan) where it runs: step 2
    assert _rows(by, "category", 1) == [
        ("communication", 1, 600, 600),
        ("gemm", 1, 400, 400),
        ("elementwise", 1, 100, 100),
    ]
    assert _pct(by, "category", 1) == pytest.approx(
        {"communication": 600 / 11, "gemm": 400 / 11, "elementwise": 100 / 11}
    )
    assert _rows(by, "category", 2) == [
        ("gemm", 1, 200, 200),
        ("elementwise", 2, 70, 50),
        ("memcpy_memset", 1, 30, 30),
    ]
    assert _pct(by, "category", 2) == pytest.approx(
        {"gemm": 200 / 3, "elementwise": 70 / 3, "memcpy_memset": 10.0}
    )
    assert by["other_rows"].null_count() == by.height
    assert res.notes == [
        "1 GPU operators (0.000 ms) have no launching CPU call in the trace (orphans): each counts in the "
        "step window holding its GPU start",
        "1 GPU operators (0.000 ms, 1.4 % of GPU time) have no launching CPU op in the trace: their op "
        "and top-level op are unknown (null)",
    ]


def test_breakdown_top_n_sums_the_rest() -> None:
    by = time_breakdown(built(), top_n=2).by
    # ties (600 ns each) by name; the rest in one row that keeps every group adding up to 1400
    assert _rows(by, "kernel") == [(NCCL, 1, 600, 600), (GEMM, 2, 600, 400), ("(2 others)", 4, 200, 100)]
    assert _rows(by, "op") == [
        ("aten::addmm", 2, 600, 400),
        ("nccl:all_reduce", 1, 600, 600),
        ("(4 others)", 4, 200, 100),
    ]
    rest = by.filter((pl.col("key") == "(4 others)") & (pl.col("group") == "op"))
    assert rest["other_rows"].to_list() == [4] and rest["pct"].item() == pytest.approx(200 / 14)
    assert len(_rows(by, "category")) == 4  # categories are never folded
    for g in ("kernel", "op", "top_op", "category"):
        assert sum(t for _, _, t, _ in _rows(by, g)) == 1400
        assert sum(t for _, _, t, _ in _rows(by, g, 2)) == 300


def test_breakdown_all_ranks_and_no_per_step() -> None:
    res = run_breakdown({0: built(0), 1: built(1)}, per_step=False)
    assert res is not None
    assert list(res.totals.iter_rows()) == [
        (0, None, 7, 1400, 20),
        (1, None, 7, 1400, 20),
        (None, None, 14, 2800, 40),
    ]
    assert _rows(res.by, "category", rank=None)[1] == ("gemm", 4, 1200, 400)
    assert res.by["step"].null_count() == res.by.height
    assert res.notes[0].startswith("ranks 0-1: 1 GPU operators")


def test_launcher_from_ctrl_dependency_and_untimed() -> None:
    """A GPU node without launch_id or correlation takes the CPU op it has a ctrl dependency on
    (Chakra's converter records launches so); without timestamps there is no per-step breakdown."""
    nodes = pl.DataFrame(
        [
            node(1, "aten::conv2d", None, 90, on_gpu=False, kind="cpu_op", tid=1),
            node(2, "aten::cudnn_convolution", None, 80, on_gpu=False, kind="cpu_op", tid=1, parent=1),
            node(
                3, "cudnn_volta_scudnn_128x64_relu_small_nn_v1", None, 70, on_gpu=True, kind="kernel", tid=7
            ),
            node(4, "gemm_no_dep", None, 5, on_gpu=True, kind="kernel", tid=7),
        ]
    )
    deps = pl.DataFrame({"node": [3, 3, 4], "dep": [2, 4, 3], "kind": ["ctrl", "data", "ctrl"]})
    tr = Trace(nodes=nodes, deps=deps, meta=TraceMeta(rank=0, has_timestamps=False, clock="none"))
    by = time_breakdown(tr, per_step=True).by
    assert _rows(by, "op") == [("aten::cudnn_convolution", 1, 70, 70), (None, 1, 5, 5)]
    assert _rows(by, "top_op")[0] == ("aten::conv2d", 1, 70, 70)
    assert "no timestamps: no breakdown per step" in time_breakdown(tr).notes


def test_no_gpu_operators_is_skipped() -> None:
    res = analyze_trace(make_trace([cpu(1, "aten::mm", 0, 10)]))
    assert res.breakdown is None
    assert "time breakdown not computed" in res.skipped["breakdown"]


# ---------------------------------------------------------------------------------------------
# Outputs: JSON, tables, saved results, the report
# ---------------------------------------------------------------------------------------------


def test_json_tables_saved_results_and_report() -> None:
    tr = built()
    res = analyze_trace(tr, per_step=True)
    doc = json.loads(export.to_json(res))
    assert doc["options"]["breakdown_top"] is None
    frames = doc["frames"]
    assert {"breakdown", "breakdown_totals"} <= set(frames)
    cat = [r for r in frames["breakdown"] if r["group"] == "category" and r["step"] is None]
    assert [(r["key"], r["total_ns"]) for r in cat][:2] == [("communication", 600), ("gemm", 600)]
    assert frames["breakdown_totals"][0] == {
        "rank": 0,
        "step": None,
        "count": 7,
        "gpu_time_ns": 1400,
        "no_launcher_ns": 20,
    }
    assert any(r["key"] is None for r in frames["breakdown"])  # the unknown op stays null in JSON
    # saved results give the same breakdown back
    top3 = analyze_trace(tr, per_step=True, breakdown_top=3)
    for r in (res, top3):
        back = read_results("r.zip", results_bytes(r)).analysis
        assert differences(r, back) == []
        assert back.breakdown is not None and back.breakdown.by.equals(r.breakdown.by)
    # the tables: the category line and the top kernels, within 80 columns
    for r, want in ((res, "(unknown)"), (top3, "(3 others)")):
        con = Console(width=200, record=True)
        render_analysis(r, con)
        text = con.export_text()
        part = text[text.index("GPU time by kernel category") : text.index("all kernels and ops")]
        assert "   0     1   0.001  36.4   9.1  54.5" in part  # step 1: gemm, elem, comm %
        assert want in part
        assert max(len(line.rstrip()) for line in part.splitlines() if not line.startswith("  ")) <= 80
    assert "(1 other)" in top3.breakdown.group("kernel")["key"].to_list()
    # the report's section: a row per rank with the category shares as a stacked bar
    html = render_report(report_data(ct.Run.single(tr), res))
    sec = html[html.index('<section id="time-breakdown">') :]
    sec = sec[: sec.index("</section>")]
    assert "GEMM (ms / %)" in sec and "communication (ms / %)" in sec
    assert sec.count('<svg class="stack"') == 1 and sec.count('class="piece"') == 4
    assert "aten::addmm" in sec and "aten::linear" in sec and "(unknown: launcher not in the trace)" in sec


def test_report_says_why_without_breakdown() -> None:
    tr = make_trace([cpu(1, "aten::mm", 0, 10)])
    res = analyze_trace(tr)
    html = render_report(report_data(ct.Run.single(tr), res))
    sec = html[html.index('<section id="time-breakdown">') :]
    assert "time breakdown not computed" in sec[: sec.index("</section>")]


# ---------------------------------------------------------------------------------------------
# Shared profiles: the categories add up to the GPU time, the sum over every GPU operator
# ---------------------------------------------------------------------------------------------


def _event_durations(rel: str) -> dict[str, float]:
    """Summed durations (µs) of the profile's kernels, memcpys and memsets by name, read from the
    JSON directly."""
    doc = orjson.loads(gzip.decompress(shared_trace(rel).read_bytes()))
    out: dict[str, float] = defaultdict(float)
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X":
            out[e["name"]] += float(e.get("dur", 0))
    return out


@pytest.mark.parametrize(
    "rel",
    ["hta/a100_ddp_nccl_rank0.json.gz", "tracelens/mi300_qwen1.5-0.5b_inference.json.gz", "hta/trace_filter_2ranks/rank-0.json.gz"],
)  # fmt: skip
def test_shared_profile_adds_up(rel: str) -> None:
    run = ct.load(shared_trace(rel))
    res = analyze_trace(run.traces[run.ranks[0]], per_step=True, critical_path=False)
    bd = res.breakdown
    assert bd is not None
    want = _event_durations(rel)
    tot = bd.totals.filter(pl.col("step").is_null())
    gpu_ns = tot["gpu_time_ns"].item()
    assert gpu_ns == pytest.approx(sum(want.values()) * 1000, abs=tot["count"].item())  # ns from µs text
    for group in ("category", "kernel", "op", "top_op"):
        whole = bd.group(group).filter(pl.col("step").is_null())
        assert whole["total_ns"].sum() == gpu_ns
        assert whole["pct"].sum() == pytest.approx(100.0)
    kernels = dict(bd.group("kernel").filter(pl.col("step").is_null()).select("key", "total_ns").iter_rows())
    assert set(kernels) == set(want)
    for name, us in want.items():
        assert kernels[name] == pytest.approx(us * 1000, abs=2000)  # per name: within 1 ns per event
    # per step: each step's categories add up to its GPU time, the steps to the operators launched in steps
    steps = bd.totals.filter(pl.col("step").is_not_null())
    for s, t in steps.select("step", "gpu_time_ns").iter_rows():
        assert bd.group("category").filter(pl.col("step") == s)["total_ns"].sum() == t
    assert steps["gpu_time_ns"].sum() <= gpu_ns


def test_shared_a100_categories() -> None:
    """The A100 ResNet DDP profile: 28.4 % communication (all-reduce and broadcast), convolutions
    before GEMMs, no attention (a CNN)."""
    run = ct.load(shared_trace("hta/a100_ddp_nccl_rank0.json.gz"))
    bd = time_breakdown(run.traces[0], per_step=False)
    pct = dict(bd.group("category").select("key", "pct").iter_rows())
    assert set(pct) == {
        "communication",
        "convolution",
        "reduction_norm",
        "elementwise",
        "gemm",
        "memcpy_memset",
    }
    assert pct["communication"] == pytest.approx(28.378, abs=0.001)
    assert pct["convolution"] == pytest.approx(22.198, abs=0.001)
    assert bd.totals["no_launcher_ns"].item() == 0


def test_shared_a100_agrees_with_hta() -> None:
    """With HTA's conventions (kernels launched after the last step begins dropped, durations
    rounded inward to µs), every kernel's sum and maximum are HTA 0.5.0's
    ``get_gpu_kernel_breakdown(duration_ratio=1.0, num_kernels=1000, include_memory_kernels=True)``
    (its ``kernel_metrics_df``, read from HTA run on this file; 72 names, 100,462 µs in all)."""
    run = ct.load(shared_trace("hta/a100_ddp_nccl_rank0.json.gz"))
    bd = run_breakdown(run.traces, per_step=False, hta_compat=True)
    assert bd is not None
    assert bd.totals.select("count", "gpu_time_ns").row(0) == (2516, 100_462_000)
    kernels = {k: (t, m) for k, t, m in bd.group("kernel").select("key", "total_ns", "max_ns").iter_rows()}
    assert len(kernels) == 72
    hta_us = {  # name: (sum µs, max µs) from HTA
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": (24204, 3306),
        "Memcpy DtoD (Device -> Device)": (835, None),
        "Memset (Device)": (180, None),
    }
    for name, (total, mx) in hta_us.items():
        assert kernels[name][0] == total * 1000
        assert mx is None or kernels[name][1] == mx * 1000
    assert "1258 GPU operators launched after the last ProfilerStep began" in bd.notes[0]
    # analyze --hta-compat applies them to the breakdown too
    res = analyze_trace(run.traces[0], hta_compat=True, critical_path=False)
    assert res.breakdown is not None and res.breakdown.totals["gpu_time_ns"].item() == 100_462_000


def test_cli_json_on_shared_profile(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    out = tmp_path / "a.json"
    r = CliRunner().invoke(
        main,
        ["analyze", str(shared_trace("hta/a100_ddp_nccl_rank0.json.gz")), "--format", "json", "-o", str(out),
         "--no-critical-path", "--breakdown-top", "5", "--no-cache"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    frames = json.loads(out.read_text())["frames"]
    kern = [x for x in frames["breakdown"] if x["group"] == "kernel" and x["step"] is None]
    assert len(kern) == 6 and kern[-1]["key"] == "(67 others)"
    assert kern[0]["key"].startswith("ncclKernel_AllReduce") and kern[0]["count"] == 15


def test_rank_parts_carry_categorical_names_and_give_strings_back() -> None:
    """What a rank sends for the breakdown holds its names as categoricals (1,024 ranks repeat the
    same kernel names: issue 11, the driver's memory); the run's breakdown is the same as from the
    same rows as strings, and its frames hold strings."""
    from charllm_trace.analysis.breakdown import breakdown_from, rank_breakdown

    run = ct.load(shared_trace("param/dlrm_8ranks_v100"), cache=False)
    parts = [rank_breakdown(r, run.traces[r], per_step=True) for r in run.ranks]
    names = ["category", "name", "op", "top_op"]
    assert all(p[1] is not None and all(p[1][c].dtype == pl.Categorical for c in names) for p in parts)
    as_str = [(r, f.with_columns(pl.col(names).cast(pl.String)), n, s) for r, f, n, s in parts]
    for top in (None, 3):
        got, want = breakdown_from(parts, top_n=top), breakdown_from(as_str, top_n=top)
        assert got is not None and want is not None
        assert got.by["key"].dtype == pl.String and got.by["category"].dtype == pl.String
        assert got.by.equals(want.by, null_equal=True) and got.totals.equals(want.totals)
        assert got.notes == want.notes and got.by.height > 300
