"""What kind of work a GPU operator does: the categories of the time breakdown.

The one place that names kernel categories (docs/analyses.md, "Time breakdown"). Communication,
memcpy and memset come from the node's class (:mod:`charllm_trace.core.classify`: NCCL/RCCL/
MSCCL kernels, Kineto memcpy/memset records, AMD ``__amd_rocclr_copy…``/``fill…`` blits); every
other GPU kernel (class ``compute``) gets the category of the first rule in
:data:`CATEGORY_RULES` whose regular expression matches its name, else ``other``.

The rules are ordered because names overlap: ``pytorch_flash::flash_fwd_kernel<… cutlass::…>``
is attention before it is a CUTLASS GEMM, ``sm80_xmma_fprop_implicit_gemm…`` is a convolution
before it is a GEMM, ``cudnn::bn_fw_tr…`` a batch norm before it is a cuDNN convolution helper,
``vectorized_elementwise_kernel<4, fbgemm_gpu::…>`` elementwise before ``fbgemm`` reads as GEMM.
A rule may map to ``other`` to stop a later rule from matching (embedding kernels).
"""

from __future__ import annotations

import polars as pl

#: The categories, in the order tables and charts list them.
CATEGORIES = (
    "gemm",
    "attention",
    "convolution",
    "elementwise",
    "reduction_norm",
    "communication",
    "memcpy_memset",
    "other",
)

#: Short labels for tables and the report (same order as ``CATEGORIES``).
CATEGORY_LABELS = {
    "gemm": "GEMM",
    "attention": "attention",
    "convolution": "convolution",
    "elementwise": "elementwise",
    "reduction_norm": "reduction/norm",
    "communication": "communication",
    "memcpy_memset": "memcpy/memset",
    "other": "other",
}

#: Compute kernels: (category, polars/Rust regex on the kernel name); the first match wins.
CATEGORY_RULES: tuple[tuple[str, str], ...] = (
    # fused attention: FlashAttention (pytorch_flash::flash_fwd_kernel), CUTLASS/xFormers fmha,
    # cuDNN SDPA, ROCm CK fmha (ck_tile::FmhaFwdKernel), Triton attn_fwd, paged attention
    ("attention", r"(?i)flash|fmha|attn|attention|sdpa|mha_(fwd|bwd|varlen)"),
    # normalisation and softmax: layer/RMS/group/batch norm (cuDNN bn_fw/bn_bw, MIOpenBatchNorm,
    # ATen LayerNorm/GammaBeta/RowwiseMoments), softmax (softmax_warp_forward, cunn_SoftMax…)
    (
        "reduction_norm",
        r"(?i)layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|normalization|bn_fw|bn_bw"
        r"|gammabeta|rowwisemoments|softmax|welford",
    ),
    # convolution: implicit-GEMM convolutions (xmma fprop/dgrad/wgrad, CUTLASS ImplicitGemmConvolution,
    # cutlass_tensorop_s1688fprop…), cuDNN engines and their layout/offset helpers, Winograd,
    # MIOpen (MIOpenConv…, miopenSp3AsmConv…, igemm_fwd/bwd/wrw…, naive_conv…), CK grouped conv
    (
        "convolution",
        r"(?i)convolution|conv[123]d|conv_|convfwd|convbwd|implicit_?gemm|fprop|dgrad|wgrad|winograd"
        r"|[sh]cudnn|cask_cudnn|cutlass_cudnn|cudnn::(ops|cnn|detail|winograd)|igemm_(fwd|bwd|wrw)|miopen.*conv",
    ),
    # PyTorch TensorIterator kernels (elementwise_kernel, vectorized_…, unrolled_…, index_…,
    # distribution_…), foreach / fused optimizers (multi_tensor_apply), copies and concatenation,
    # CK elementwise, Inductor pointwise Triton kernels
    (
        "elementwise",
        r"(?i)elementwise|multi_tensor_apply|catarraybatchedcopy|direct_copy|_copy_kernel|triton_poi_",
    ),
    # embedding lookups and their helpers (fbgemm_gpu, split_embedding_…, permute_pooled_embs): not
    # GEMMs, not pooling
    ("other", r"(?i)fbgemm|embedding|pooled_embs"),
    # matrix products: cuBLAS/cuBLASLt (…sgemm…, sm90_xmma_gemm…, nvjet…, gemv, splitKreduce,
    # epilogue kernels), CUTLASS, Tensile/hipBLASLt (Cijk_…), rocBLAS, CK gemm, Inductor templates
    (
        "gemm",
        r"(?i)gemm|gemv|cublas|cutlass|xmma|matmul|cijk_|hipblaslt|rocblas|nvjet|splitkreduce|dot_kernel"
        r"|triton_tem_",
    ),
    # reductions: ATen reduce_kernel, cub DeviceReduce, pooling (a windowed reduction), losses
    # that reduce, Inductor reduction / persistent-reduction Triton kernels
    (
        "reduction_norm",
        r"(?i)reduce|reduction|pool|argmax|argmin|nll_loss|cross_entropy|triton_red_|triton_per_",
    ),
    # other pointwise work named as such (activations, dropout, fill, casts, transposes, RoPE)
    (
        "elementwise",
        r"(?i)relu|gelu|silu|swiglu|sigmoid|tanh|dropout|fill|copy|cast|transpose|rotary|rope_",
    ),
)

#: Categories given by the node's class instead of its name.
CLASS_CATEGORY = {"comm": "communication", "memcpy": "memcpy_memset", "memset": "memcpy_memset"}


#: CPU operators that do the work themselves (CPU-only traces: no GPU kernel does it for them):
#: (category, regex on the operator name); the first match wins. ``aten::linear`` is a GEMM: its
#: children (``aten::t``, ``aten::addmm``) are part of it (``graph.classes``).
CPU_OP_RULES: tuple[tuple[str, str], ...] = (
    (
        "attention",
        r"^aten::(scaled_dot_product_attention|_scaled_dot_product_\w+|_flash_attention_\w+"
        r"|_efficient_attention_\w+)$",
    ),
    (
        "gemm",
        r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|addmv|mv|dot|vdot|einsum|tensordot"
        r"|_addmm_activation|mkldnn_linear|_mkldnn_linear\w*|mkldnn_matmul|_int_mm|_scaled_mm"
        r"|chain_matmul|linalg_multi_dot)$",
    ),
    (
        "elementwise",
        r"^aten::(add|sub|mul|div|relu|gelu|silu|sigmoid|tanh|exp|log|pow|sqrt|rsqrt|neg|abs|clamp"
        r"|where|dropout|native_dropout|threshold|threshold_backward|gelu_backward|silu_backward"
        r"|sigmoid_backward|tanh_backward|masked_fill|addcmul|addcdiv|lerp|maximum|minimum|sign"
        r"|fill|zero|hardtanh|leaky_relu)_?$",
    ),
    ("memcpy_memset", r"^aten::(copy_|clone|_to_copy|contiguous|cat|stack)$"),
)


def cpu_op_categories(names: pl.Series) -> pl.Series:
    """The category of each CPU operator name by :data:`CPU_OP_RULES` (null when none matches)."""
    return _by_rules(names, CPU_OP_RULES, None)


def name_categories(names: pl.Series) -> pl.Series:
    """The category of each compute-kernel name (``other`` when no rule matches; a null name is
    ``other``). Evaluates the rules once per distinct name."""
    return _by_rules(names, CATEGORY_RULES, "other")


def _by_rules(names: pl.Series, rules: tuple[tuple[str, str], ...], default: str | None) -> pl.Series:
    nm = names.cast(pl.String).fill_null("")
    u = nm.unique(maintain_order=True)
    expr: pl.Expr = pl.lit(default, dtype=pl.String)
    for cat, pattern in reversed(rules):
        expr = pl.when(pl.col("_nm").str.contains(pattern)).then(pl.lit(cat)).otherwise(expr)
    cats = pl.DataFrame({"_nm": u}).select(expr.alias("category"))["category"]
    codes = nm.cast(pl.Enum(u)).to_physical()
    return cats.gather(codes).alias("category")


def categorize(classified: pl.DataFrame) -> pl.Series:
    """The category of every row of ``classified`` (nodes with a ``cls`` column,
    :func:`charllm_trace.core.classify.classify`): communication / memcpy_memset by class,
    compute kernels by name; null for every other node (CPU nodes, annotations, sync records)."""
    cls = classified["cls"]
    out = cls.replace_strict(CLASS_CATEGORY, default=None, return_dtype=pl.String).alias("category")
    rows = (cls == "compute").arg_true()
    if rows.len():
        out = out.scatter(rows, name_categories(classified["name"].gather(rows)))
    return out
