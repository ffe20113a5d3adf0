"""Which dense peak each counted op of the FLOP/s analysis (``analysis.flops``) is compared with,
and what a utilisation above 100 % means (docs/analyses.md, "FLOP/s and MFU").

- fp32 convolutions: the tf32 peak where the device has one (cuDNN's default);
- fp32 GEMM / attention: the fp32 peak (PyTorch's default: no TF32 for matmuls), unless the trace
  shows otherwise: when an fp32 GEMM/attention operator (all its calls together) ran faster than
  the device's fp32 peak, it cannot have run in fp32, and TF32 is the precision the evidence
  allows: every fp32 GEMM/attention op of the rank is then compared with the tf32 peak, and
  ``mfu_why`` (and a note) says so, with the rate that showed it;
- a rate still above its peak (no TF32 on the device, or faster even than TF32) is not hidden:
  the rows whose MFU is above 100 % say why in ``mfu_why`` (``OVER_PEAK``, set where the rows are
  aggregated), and a note names the operators.
"""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.peaks import DevicePeaks, peak_or_reason

#: The op classes that follow PyTorch's matmul precision setting.
MATMUL_CLASSES = ("gemm", "attention")

#: What a utilisation above 100 % says (the row's ``mfu_why``).
OVER_PEAK = (
    "above 100 %: faster than the peak of its recorded data type "
    "(the precision or the FLOP count is not what the trace records)"
)


def _base_dtype(cls: str, dtype: str | None, has_tf32: bool) -> str | None:
    return "tf32" if (cls == "conv" and dtype == "fp32" and has_tf32) else dtype


def _rates(ops: pl.DataFrame, which: pl.Expr) -> pl.DataFrame:
    """Achieved TFLOP/s per op name of the ops ``which`` selects (their calls summed), fastest first."""
    return (
        ops.filter(which & (pl.col("kernel_ns") > 0) & pl.col("flop").is_not_null())
        .group_by("name")
        .agg(tflops=pl.col("flop").sum() / pl.col("kernel_ns").sum() / 1e3)
        .sort("tflops", "name", descending=[True, False])
    )


def op_peaks(ops: pl.DataFrame, model: str | None, dp: DevicePeaks | None) -> pl.DataFrame:
    """``ops`` (the counted ops: name, op_class, dtype, flop, kernel_ns) with ``peak`` (TFLOP/s)
    and ``mfu_why``: why there is no peak, or (peak set) why it is not the recorded dtype's."""
    has_tf32 = bool(dp and dp.tflops.get("tf32"))
    fp32 = (pl.col("dtype") == "fp32") & pl.col("op_class").is_in(list(MATMUL_CLASSES))
    tf32_why = None
    fp32_peak = dp.tflops.get("fp32") if dp else None
    if has_tf32 and fp32_peak and ops.height:
        fast = _rates(ops, fp32).filter(pl.col("tflops") > fp32_peak)
        if fast.height:
            name, rate = fast.row(0)
            tf32_why = (
                f"compared with the tf32 peak ({dp.tflops['tf32']:g} TFLOP/s): fp32 {name} ran at "
                f"{rate:.1f} TFLOP/s, above the {fp32_peak:g} fp32 peak, so TF32 was in use"
            )
    kinds = ops.select("op_class", "dtype").unique(maintain_order=True)
    peak, why = [], []
    for c, d in kinds.iter_rows():  # each distinct (class, dtype) once, not each op
        evidence = bool(tf32_why and d == "fp32" and c in MATMUL_CLASSES)
        p, w = peak_or_reason(model, "tf32" if evidence else _base_dtype(c, d, has_tf32))
        peak.append(p)
        why.append(tf32_why if evidence and p is not None else w)
    kinds = kinds.with_columns(peak=pl.Series(peak, dtype=pl.Float64), mfu_why=pl.Series(why, dtype=pl.String))
    return ops.join(kinds, on=["op_class", "dtype"], how="left", nulls_equal=True, maintain_order="left")


def peak_notes(ops: pl.DataFrame) -> list[str]:
    """The notes on the peaks ``op_peaks`` chose: the TF32 evidence, and every operator (its calls
    summed) faster than the peak it is compared with."""
    notes = []
    if "peak" not in ops.columns or ops.height == 0:
        return notes
    tf32 = ops.filter(pl.col("peak").is_not_null())["mfu_why"].drop_nulls().unique()
    if tf32.len():
        notes.append(f"fp32 GEMM/attention {tf32[0]}")
    over = (
        ops.filter((pl.col("kernel_ns") > 0) & pl.col("peak").is_not_null())
        .group_by("name")
        .agg(tflops=pl.col("flop").sum() / pl.col("kernel_ns").sum() / 1e3, peak=pl.col("peak").max())
        .filter(pl.col("tflops") > pl.col("peak"))
        .sort("name")
    )
    if over.height:
        shown = ", ".join(f"{n} {r:.1f} > {p:g}" for n, r, p in over.head(3).iter_rows())
        notes.append(f"MFU {OVER_PEAK.replace(':', f' for {over.height} operator(s) ({shown} TFLOP/s):', 1)}")
    return notes
