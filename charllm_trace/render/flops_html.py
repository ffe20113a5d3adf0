"""The report's "FLOP/s and MFU" section (HTML parts). Formatting only: every number comes from
:class:`charllm_trace.analysis.flops_results.FlopsResult`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from charllm_trace.analysis.flops_results import FLOPS_OP_SCHEMA, FLOPS_SCHEMA, FlopsResult
from charllm_trace.render.coltable import Show
from charllm_trace.render.report_sections import html_layout, html_rows

TOP_OPS = 15
MAX_BAR_RANKS = 8


def _n(v: float | None, fmt: str) -> str:
    return "" if v is None or v != v else fmt.format(v)


def _f(fmt: str) -> Callable[[Any], str]:
    return lambda v: _n(v, fmt)


_TFLOP = Show("flop", "TFLOP", _f("{:,.3f}"), div=1e12)
_TIME = Show("kernel_ns", "time (ms)")
_OP_CLASS = Show("op_class", "op class")
PER_STEP = html_layout(
    FLOPS_SCHEMA,
    ["rank", Show("step", missing="all"), _OP_CLASS, "dtype", Show("n_ops", "ops"),
     Show("n_no_shapes", "ops without FLOPs"), _TFLOP, _TIME, Show("tflops", "TFLOP/s", _f("{:,.1f}")),
     Show("peak_tflops", "peak TFLOP/s", _f("{:,.1f}")), Show("mfu_pct", "MFU %"),
     Show("wall_tflops", "wall TFLOP/s", _f("{:,.2f}")), Show("wall_mfu_pct", "wall MFU %"),
     Show("mfu_why", "MFU not computed because")],
)  # fmt: skip
BY_OP = html_layout(
    FLOPS_OP_SCHEMA,
    ["rank", Show("name", "operator"), _OP_CLASS, "dtype", "count", _TFLOP, _TIME,
     Show("tflops", "TFLOP/s", _f("{:,.1f}")), Show("mfu_pct", "MFU %")],
)  # fmt: skip


def flops_parts(fl: FlopsResult | None, skipped: str | None, simulated: bool = False) -> list[str]:
    """The section's parts: an intro, MFU per op class (bars), the table per rank and step, the
    top operators."""
    from charllm_trace.render import html as H

    if fl is None:
        return [f'<p class="empty">{H.esc(skipped or "not computed")}</p>']
    time = "the GPU compute kernels each op launched" if fl.mode != "cpu" else "the ops' own CPU time"
    intro = (
        "ESTIMATES. FLOPs of GEMM, attention and convolution operators from their recorded input shapes "
        f"(formulas in docs/analyses.md), over {time}: achieved TFLOP/s, and MFU = the time the FLOPs "
        "would take at the device's dense datasheet peak for their data type / that time. Wall MFU: "
        "the same over the step's wall-clock window (whole trace: the span of GPU activity)."
        + (" SIMULATED timeline." if simulated else "")
    )
    parts = [f'<p class="note">{H.esc(intro)}</p>']
    whole = fl.per_step.filter(fl.per_step["step"].is_null())
    classes = [c for c in ("gemm", "attention", "conv", "all") if c in set(whole["op_class"].to_list())]
    ranks = sorted(set(whole["rank"].drop_nulls().to_list()))[:MAX_BAR_RANKS]
    if whole["mfu_pct"].is_not_null().any():
        values = {}
        for r in ranks:
            sub = {c: m for rr, c, m in whole.select("rank", "op_class", "mfu_pct").iter_rows() if rr == r}
            values[f"rank {r}"] = [float("nan") if sub.get(c) is None else sub[c] for c in classes]
        parts.append(
            H.bar_chart(
                classes, values, title="MFU per op class (whole trace)", x_label="MFU (%) over kernel time"
            )
        )
    parts.append(html_rows(PER_STEP, fl.per_step))
    ops = fl.by_op.sort("flop", "name", descending=[True, False], nulls_last=True).head(TOP_OPS)
    if ops.height:
        parts.append("<h3>Top operators by FLOPs (whole trace)</h3>")
        parts.append(html_rows(BY_OP, ops, scroll=False))
    dev = [
        f"rank {r['rank']}: {r['device_model'] or 'device unknown'}"
        + (f" → {r['peak_device']} ({r['peak_source']})" if r["peak_device"] else " (not in the peak table)")
        for r in fl.devices.iter_rows(named=True)
    ]
    if dev:
        parts.append('<ul class="notes">' + "".join(f"<li>{H.esc(d)}</li>" for d in dev[:8]) + "</ul>")
    return parts


def flops_section(data: Any, rep: Any) -> None:
    """The report's FLOP/s section (the analysis registry's HTML renderer of ``flops``): the
    result from ``data.results``, or the reason it was not computed."""
    fl = data.results.get("flops")
    rep.add("FLOP/s and MFU", *flops_parts(fl, data.skipped.get("flops"), data.simulated), sid="flops")
