"""Terminal tables (rich) of the FLOP/s and MFU analysis, for ``charllm-trace analyze``. Formatting
only: every number comes from :class:`charllm_trace.analysis.flops_results.FlopsResult`. Fits 80
columns."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from charllm_trace.analysis.flops_results import FLOPS_OP_SCHEMA, FLOPS_SCHEMA
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.coltable import Layout, Show, fit_table, number
from charllm_trace.render.table_style import dim_line, simulated_label

TOP_OPS = 8
SHORT = {"attention": "attn"}
_g3 = number("{:.3g}", finite=True)


def _mfu(v: Any) -> str:
    """An MFU figure; above 100 % marked ``!`` (its row's mfu_why and a note say why)."""
    return number("{:.1f}", finite=True)(v) + ("!" if isinstance(v, float) and v > 100.0 else "")


def _dim(console: Console, text: str) -> None:
    dim_line(console, text)


PER_STEP = Layout(
    FLOPS_SCHEMA,
    ["rank", Show("step", missing="all"), Show("op_class", "class", lambda v: "-" if v is None else SHORT.get(v, v)), "dtype",
     Show("n_ops", "ops"), Show("n_no_shapes", "unk"), Show("flop", "TFLOP", _g3, div=1e12),
     Show("kernel_ns", "ms", number("{:.3f}", finite=True), div=1e6), Show("tflops", "TFLOP/s", _g3),
     Show("mfu_pct", "MFU%", _mfu), Show("wall_mfu_pct", "wall%", number("{:.2f}", finite=True))],
)  # fmt: skip
BY_OP = Layout(
    FLOPS_OP_SCHEMA,
    ["rank", Show("name", "operator"), "dtype", Show("count", "n"), Show("flop", "TFLOP", _g3, div=1e12),
     Show("tflops", "TFLOP/s", _g3), Show("mfu_pct", "MFU %", _mfu)],
)  # fmt: skip


def render_flops(res: RunAnalysis, console: Console) -> None:
    fl = res.flops
    assert fl is not None
    console.print(
        fit_table("Achieved FLOP/s and MFU (estimates)" + simulated_label(res), PER_STEP, fl.per_step)
    )
    what = "GPU kernels the ops launched" if fl.mode != "cpu" else "the ops' own CPU time"
    span = "GPU activity" if fl.mode != "cpu" else "the CPU ops"
    _dim(
        console,
        f"  unk = ops without a FLOP count (no shapes); ms = {what}; MFU% = time at the dense peak / "
        f"that time; wall% = the same over the step (whole trace: span of {span})",
    )
    peaks = [
        f"rank {number('{}')(r['rank'])}: {r['peak_device']} ({r['peak_source']})"
        for r in fl.devices.iter_rows(named=True)
        if r["peak_device"]
    ]
    if peaks:
        shown = peaks[:2] + ([f"... {len(peaks) - 2} more ranks"] if len(peaks) > 2 else [])
        _dim(console, "  peaks: " + "; ".join(shown))
    ops = fl.by_op.sort("flop", "name", descending=[True, False], nulls_last=True).head(TOP_OPS)
    if ops.height:
        o = fit_table(
            "Top operators by FLOPs (whole trace)" + simulated_label(res), BY_OP, ops, shrink=1, max_width=44
        )
        console.print(o)
    over = fl.per_step["mfu_pct"].gt(100).any() or fl.by_op["mfu_pct"].gt(100).any()
    if over:
        _dim(console, "  ! MFU above 100 %: faster than the peak it is compared with (see the note)")
    for n in fl.notes:
        _dim(console, f"  note: {n}")


def flops_table(res: RunAnalysis, console: Console) -> None:
    """The FLOP/s tables and a blank line, or one line saying why they were not computed (the
    analysis registry's terminal renderer of ``flops``)."""
    if res.flops is not None:
        render_flops(res, console)
        console.print()
    elif "flops" in res.skipped:
        dim_line(console, f"FLOP/s: {res.skipped['flops']}", style=None)
        console.print()
