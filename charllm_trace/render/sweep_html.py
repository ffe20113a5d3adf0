"""``compare ... --format html -o page.html``: the comparison page. Formatting only: every figure
comes from :class:`charllm_trace.regress.sweep.Sweep`.

One self-contained page (:class:`charllm_trace.render.html.HtmlReport`: inline CSS and SVG, no
script): the table of runs (best value per column marked ``*``), throughput against average power
per GPU (one point per run, its figures in the point's ``<title>`` tooltip), bus bandwidth per
parallelism dimension across runs, and bus bandwidth per message-size bucket across runs.
"""

from __future__ import annotations

from charllm_trace.regress.sweep import DIMS, Sweep
from charllm_trace.render import html as H
from charllm_trace.render.sweep import cell, cells, header, shown_columns


def _throughput(sw: Sweep) -> tuple[str, str]:
    """The throughput column drawn: tokens/s when every run with a power figure has it, else steps/s."""
    df = sw.table.filter(sw.table["avg_power_w"].is_not_null())
    if df.height and df["tokens_per_s"].null_count() == 0:
        return "tokens_per_s", "tokens/s"
    return "steps_per_s", "steps/s"


def scatter(sw: Sweep) -> str:
    title = "Throughput vs average power per GPU (one point per run)"
    col, unit = _throughput(sw)
    groups = []
    for i, row in enumerate(sw.table.iter_rows(named=True)):
        x, y = row["avg_power_w"], row[col]
        if x is None or y is None:
            continue
        c = sw.column(col)
        assert c is not None
        tip = (
            f"{row['run']}: {cell(c, y)} {unit} at {row['avg_power_w']:.1f} W average"
            + (f", {row['peak_power_w']:.1f} W peak" if row["peak_power_w"] is not None else "")
            + (f", step {row['step_time_ms']:.3f} ms" if row["step_time_ms"] is not None else "")
        )
        groups.append(H.Series(tip, [x], [y], color=H.PALETTE[i % len(H.PALETTE)]))
    if not groups:
        return H.empty(title, "no run has both a throughput and an average power (power needs telemetry)")
    return H.scatter_chart(
        groups, title=title, x_label="average power per GPU (W)", y_label=unit, log_x=False
    )


def busbw_bars(sw: Sweep, names: list[str], labels: list[str], title: str) -> str:
    values = {}
    for n, lab in zip(names, labels, strict=True):
        vals = sw.table[n].to_list()
        if any(v is not None for v in vals):
            values[lab] = [float("nan") if v is None else float(v) for v in vals]
    if not values:
        return H.empty(title, "no collective with a size in any run (or no group named by dimension)")
    runs = [str(r) for r in sw.table["run"].to_list()]
    return H.bar_chart(runs, values, title=title, x_label="bus bandwidth (GB/s)")


def render_page(sw: Sweep, title: str | None = None) -> str:
    cols, hidden = shown_columns(sw)
    text = cells(sw, cols)
    page = H.HtmlReport(
        title=title or f"charllm-trace compare: {sw.table.height} runs",
        subtitle="one row per run; * best in its column (↓ lower is better, ↑ higher is better); - unknown",
    )
    rows = [[text[c.name][i] for c in cols] for i in range(sw.table.height)]
    note = f"no value in any run (not shown): {', '.join(c.name for c in hidden)}" if hidden else ""
    page.add("Runs", H.table([header(c) for c in cols], rows, scroll=True), note=note, sid="runs")
    page.add("Throughput vs power", scatter(sw), sid="throughput-power")
    dims = list(DIMS)
    page.add(
        "Bus bandwidth per dimension",
        busbw_bars(
            sw,
            ["busbw_gbps"] + [f"busbw_{d}_gbps" for d in dims],
            ["all"] + dims,
            "Bus bandwidth per parallelism dimension (time-weighted)",
        ),
        sid="busbw-dim",
    )
    buckets = [c for c in sw.columns if c.group == "busbw by size"]
    page.add(
        "Bus bandwidth by message size",
        busbw_bars(
            sw,
            [c.name for c in buckets],
            [c.title.removeprefix("busbw ") for c in buckets],
            "Bus bandwidth per message-size bucket (time-weighted)",
        ),
        sid="busbw-size",
    )
    if sw.notes:
        items = "".join(f"<li>{H.esc(n)}</li>" for n in sw.notes)
        page.add("Notes", f"<ul>{items}</ul>", sid="notes")
    return page.render()
