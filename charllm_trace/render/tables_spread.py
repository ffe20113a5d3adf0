"""Terminal table of the spread over ranks per parallelism dimension (``analyze``;
``analysis/rank_spread.py``). Formatting only: every number comes from
``RunAnalysis.overlap.rank_spread``; one row per dimension and measure, however many ranks."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.units import ms

MEASURES = {"exposed_comm_ns": "exposed comm", "step_ns": "step time", "span_ns": "trace span"}


_ms = ms


def render_rank_spread(res: RunAnalysis, console: Console) -> None:
    """The spread table, when the overlap analysis covers two ranks or more."""
    ov = res.overlap
    if ov is None or ov.rank_spread.height == 0 or ov.rank_spread["n_ranks"].max() < 2:  # type: ignore[operator]
        return
    t = Table(
        title="Spread over ranks by dimension (ms)", title_justify="left", title_style="bold",
        header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False,
        show_edge=False,
    )  # fmt: skip
    for name, just in (("dim", "left"), ("measure", "left"), ("ranks", "right"), ("min", "right"),
                       ("median", "right"), ("p90", "right"), ("max", "right"), ("worst rank", "right")):  # fmt: skip
        t.add_column(name, justify=just)  # type: ignore[arg-type]
    for r in ov.rank_spread.iter_rows(named=True):
        t.add_row(
            r["dim"], MEASURES.get(r["measure"], r["measure"]), str(r["n_ranks"]), _ms(r["min_ns"]),
            _ms(r["median_ns"]), _ms(r["p90_ns"]), _ms(r["max_ns"]), str(r["worst_rank"]),
        )  # fmt: skip
    console.print(t)
