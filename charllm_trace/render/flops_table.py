"""Terminal tables (rich) of the FLOP/s and MFU analysis, for ``charllm-trace analyze``. Formatting
only: every number comes from :class:`charllm_trace.analysis.flops_results.FlopsResult`. Fits 80
columns."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console

from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.table_style import dim_line, plain_table, simulated_label

TOP_OPS = 8
SHORT = {"attention": "attn"}


def _f(v: Any, fmt: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return fmt.format(v)


def _mfu(v: Any) -> str:
    """An MFU figure; above 100 % marked ``!`` (its row's mfu_why and a note say why)."""
    return _f(v, "{:.1f}") + ("!" if isinstance(v, float) and v > 100.0 else "")


def _dim(console: Console, text: str) -> None:
    dim_line(console, text)


def render_flops(res: RunAnalysis, console: Console) -> None:
    fl = res.flops
    assert fl is not None
    t = plain_table(
        "Achieved FLOP/s and MFU (estimates)" + simulated_label(res),
        [("rank", "right"), ("step", "right"), ("class", "left"), ("dtype", "left"), ("ops", "right"),
         ("unk", "right"), ("TFLOP", "right"), ("ms", "right"), ("TFLOP/s", "right"), ("MFU%", "right"),
         ("wall%", "right")],
    )  # fmt: skip
    for r in fl.per_step.iter_rows(named=True):
        t.add_row(
            _f(r["rank"], "{}"), "all" if r["step"] is None else str(r["step"]), SHORT.get(r["op_class"], r["op_class"]), r["dtype"] or "-",
            str(r["n_ops"]), str(r["n_no_shapes"]), _f(None if r["flop"] is None else r["flop"] / 1e12, "{:.3g}"),
            _f(None if r["kernel_ns"] is None else r["kernel_ns"] / 1e6, "{:.3f}"), _f(r["tflops"], "{:.3g}"),
            _mfu(r["mfu_pct"]), _f(r["wall_mfu_pct"], "{:.2f}"),
        )  # fmt: skip
    console.print(t)
    what = "GPU kernels the ops launched" if fl.mode != "cpu" else "the ops' own CPU time"
    span = "GPU activity" if fl.mode != "cpu" else "the CPU ops"
    _dim(
        console,
        f"  unk = ops without a FLOP count (no shapes); ms = {what}; MFU% = time at the dense peak / "
        f"that time; wall% = the same over the step (whole trace: span of {span})",
    )
    peaks = [
        f"rank {_f(r['rank'], '{}')}: {r['peak_device']} ({r['peak_source']})"
        for r in fl.devices.iter_rows(named=True)
        if r["peak_device"]
    ]
    if peaks:
        shown = peaks[:2] + ([f"... {len(peaks) - 2} more ranks"] if len(peaks) > 2 else [])
        _dim(console, "  peaks: " + "; ".join(shown))
    ops = fl.by_op.sort("flop", "name", descending=[True, False], nulls_last=True).head(TOP_OPS)
    if ops.height:
        o = plain_table(
            "Top operators by FLOPs (whole trace)" + simulated_label(res),
            [("rank", "right"), ("operator", "left"), ("dtype", "left"), ("n", "right"), ("TFLOP", "right"),
             ("TFLOP/s", "right"), ("MFU %", "right")], shrink=1, max_width=44,
        )  # fmt: skip
        for r in ops.iter_rows(named=True):
            o.add_row(
                _f(r["rank"], "{}"), str(r["name"]), r["dtype"] or "-", str(r["count"]),
                _f(r["flop"] / 1e12, "{:.3g}"), _f(r["tflops"], "{:.3g}"), _mfu(r["mfu_pct"]),
            )  # fmt: skip
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
