"""Terminal tables (rich) for ``charllm-trace analyze``. Formatting only: every number
comes from :class:`charllm_trace.analysis.results.RunAnalysis`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import polars as pl
from rich.console import Console

from charllm_trace.analysis.registry import resolve, shown
from charllm_trace.analysis.results import (
    BANDWIDTH_SUMMARY_SCHEMA,
    CAN_SIMULATE,
    CP_CATEGORIES,
    CRITICAL_OPS_SCHEMA,
    ENERGY_SCHEMA,
    ENERGY_TOTAL_SCHEMA,
    MATCHED_SCHEMA,
    NO_PEAK,
    NO_STEPS,
    OVERLAP_GROUP_SCHEMA,
    OVERLAP_SCHEMA,
    POWER_SCHEMA,
    STRAGGLER_SCHEMA,
    THROTTLE_SCHEMA,
    WARNING,
    RunAnalysis,
)
from charllm_trace.analysis.whatif_results import WHATIF_SCHEMA
from charllm_trace.render.breakdown_table import render_breakdown
from charllm_trace.render.categories import CP_SHORT
from charllm_trace.render.coltable import Layout, Show, fit_table, new_table
from charllm_trace.render.fit import FitTable, table_console
from charllm_trace.render.table_style import dim_line, simulated_label
from charllm_trace.render.tables_spread import render_rank_spread
from charllm_trace.render.tables_streams import render_streams

TOP = 10
MAX_RANK_OPS = 4  # with more ranks, the top operators of the job's critical path only

#: The CLI's own words for what a library note says can be done: (part of the note, hint).
#: The library says what is true; the command line names its flags.
CLI_HINTS: tuple[tuple[str, str], ...] = (
    (CAN_SIMULATE, "rerun with --simulate"),
    (NO_PEAK, "give one with --peak-gbps"),
    (NO_STEPS, "--step-marker NAME splits it by a repeated range"),
    ("the parallel layout given", "give one with --parallel tp=N,pp=N,dp=N"),
    (
        "convert it together with its Kineto profile",
        "charllm-trace convert KINETO.json --host-et HOST_ET.json -o DIR",
    ),
)


def cli_hint(text: str) -> str:
    """``text`` (a note or a skip reason of the analyses) with the CLI's hint, where one fits."""
    for part, hint in CLI_HINTS:
        if part in text and hint not in text:
            text = f"{text}; {hint}"
    return text


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return fmt.format(v)


def _ms(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def _step(v: Any) -> str:
    return "all" if v is None else str(v)


#: Text columns that may be shortened with an ellipsis (names; never numbers or keys).
SHRINKABLE = frozenset({"operator", "kernel", "launching CPU op", "process group", "key"})


def _shrink(heads: Iterable[tuple[str, str]]) -> int | None:
    return next((i for i, (name, just) in enumerate(heads) if just == "left" and name in SHRINKABLE), None)


def _table(title: str, cols: Iterable[tuple[str, str]], keys: int = 2) -> FitTable:
    """A table that splits into parts (repeating its first ``keys`` columns) rather than cut a
    number when the console is narrower than it (:mod:`charllm_trace.render.fit`)."""
    cols = list(cols)
    return new_table(title, cols, keys=keys, shrink=_shrink(cols))


def _fit(title: str, layout: Layout, df: pl.DataFrame, keys: int = 2) -> FitTable:
    """:func:`_table` of ``df``'s rows under ``layout``."""
    return fit_table(title, layout, df, keys=keys, shrink=_shrink(layout.heads))


#: the tables' own formats: numbers with two decimals, NaN and infinities as nulls
_OPTS: dict[str, Any] = {
    "formats": {"%": "{:.2f}", "GB/s": "{:.2f}", "J": "{:.2f}", "W": "{:.1f}"},
    "finite": True,
}
_STEP = Show("step", missing="all")
OVERLAP = Layout(
    OVERLAP_SCHEMA,
    ["rank", _STEP, "span_ns", "compute_ns", "comm_ns", "overlap_pct", Show("exposed_comm_ns", "exposed ms"),
     Show("memory_ns", "mem ms"), "idle_ns"],
    **_OPTS,
)  # fmt: skip


def _overlap_by(name: str, label: Show) -> Layout:
    return Layout(
        OVERLAP_GROUP_SCHEMA,
        ["rank", _STEP, label, "dim", "comm_ns", "overlap_pct", Show("exposed_comm_ns", "exposed ms"),
         Show("n_comm", "n")],
        **_OPTS,
    )  # fmt: skip


def _pg_label(r: dict[str, Any]) -> str:
    return str(f"{r['pg_name']} ({r['pg_desc']})" if r["pg_desc"] else r["pg_name"])


OVERLAP_BY = {
    "pg_name": _overlap_by("process group", Show("pg_name", "process group", just="left", cell=_pg_label)),
    "dim": _overlap_by("dimension", Show("dim", "dimension", just="left", cell=lambda r: str(r["dim"]))),
}
_MB = {"head": "MB", "fmt": "{:.2f}", "div": 1e6}
BANDWIDTH = Layout(
    BANDWIDTH_SUMMARY_SCHEMA,
    [Show("coll_type", "type", missing="unknown"), Show("pg_name", "group"), "dim",
     Show("size_bucket", "size", missing="unknown"), "count", Show("bytes_total", **_MB),
     Show("dur_ns_total", "time ms", _ms), Show("algbw_time_weighted_gbps", "algbw"),
     Show("busbw_time_weighted_gbps", "busbw"), Show("busbw_max_gbps", "max busbw"),
     Show("peak_gbps", "peak", "{:.0f}"), Show("util_pct", "util %", "{:.1f}")],
    **_OPTS,
)  # fmt: skip
MATCHED = Layout(
    MATCHED_SCHEMA,
    [Show("pg_name", "group"), Show("coll_seq", "seq"), Show("coll_type", "type", missing="unknown"),
     Show("bytes", **_MB), Show("n_ranks", "ranks"), Show("dur_min_ns", "min dur ms"),
     Show("dur_max_ns", "max dur ms"), Show("busbw_gbps", "busbw GB/s"), Show("skew_ns", "skew ms"), "late_rank"],
    **_OPTS,
)  # fmt: skip
STRAGGLERS = Layout(
    STRAGGLER_SCHEMA,
    [Show("pg_name", "group"), "dim", "rank", Show("n_matched", "matched"), Show("n_last", "last"),
     Show("last_pct", "last %", "{:.1f}"), Show("mean_late_ns", "mean late ms"), Show("max_late_ns", "max late ms")],
    **_OPTS,
)  # fmt: skip


def _window_s(r: dict[str, Any]) -> str:
    start, end = r["start_ns"], r["end_ns"]
    return _num(None if start is None or end is None else (end - start) / 1e9, "{:.3f}")


ENERGY = Layout(
    ENERGY_TOTAL_SCHEMA,
    ["rank", "device", Show("start_ns", "window s", cell=_window_s),
     Show("n_samples", "samples"), Show("sensor_period_ns", "sensor period ms", "{:.3g}", div=1e6),
     Show("integral_j", "∫P dt J"), "counter_j", Show("correction", fmt="{:.4f}"), "operators_j", "idle_j",
     Show("short_kernel_pct", "short-op time %", "{:.1f}")],
    **_OPTS,
)  # fmt: skip


def _key(r: dict[str, Any]) -> str:
    key = str(r["key"])
    return key if len(key) <= 70 else key[:67] + "..."


def _energy_by(what: str) -> Layout:
    return Layout(
        ENERGY_SCHEMA,
        ["rank", Show("key", what, cell=_key), "count", "busy_ns", Show("energy_j", "J"),
         Show("share_pct", "share %", "{:.1f}"), Show("short_pct", "short-op %", "{:.0f}")],
        **_OPTS,
    )  # fmt: skip


POWER = Layout(
    POWER_SCHEMA,
    ["rank", Show("device", "dev"), _STEP, "avg_w", "peak_w", "swing_w",
     Show("swing_rate_w_per_s", "max dP/dt W/s", "{:.0f}"), "above_limit_ns", Show("temp_rise_c", "temp rise °C", "{:.1f}"),
     Show("sm_clock_ratio", "SM clk/max", "{:.3f}"), "throttled_ns", Show("outlier_reason", "outlier", missing="")],
    **_OPTS,
)  # fmt: skip
THROTTLE = Layout(THROTTLE_SCHEMA, ["rank", Show("device", "dev"), "reason", Show("time_ns", "ms")])
WHAT_IF = Layout(
    WHATIF_SCHEMA,
    ["rank", _STEP, Show("measured_ns", "meas ms"), Show("predicted_ns", "pred ms"),
     Show("change_pct", "chg %", "{:+.1f}"), Show("measured_exposed_comm_ns", "meas exp"),
     Show("predicted_exposed_comm_ns", "pred exp"), Show("measured_overlap_pct", "meas ovl", "{:.1f}"),
     Show("predicted_overlap_pct", "pred ovl", "{:.1f}")],
    **_OPTS,
)  # fmt: skip


def _legend(console: Console, text: str) -> None:
    dim_line(console, f"  {text}")


def _notes(console: Console, notes: list[str]) -> None:
    for n in notes:
        if WARNING in n:  # a figure that is probably wrong: said loudly, not as a dim note
            console.print(f"  warning: {cli_hint(n.replace(WARNING, ''))}", style="bold yellow", markup=False,
                          highlight=False)  # fmt: skip
        else:
            dim_line(console, f"  note: {cli_hint(n)}")


def render_overlap(res: RunAnalysis, console: Console) -> None:
    ov = res.overlap
    assert ov is not None
    title = "Compute / communication overlap" + simulated_label(res)
    if ov.hta_compat:
        title += " (HTA convention)"
    if ov.mode == "cpu":
        title += " (CPU ops)"
    console.print(_fit(title, OVERLAP, ov.per_rank))
    for df, key, name in ((ov.per_group, "pg_name", "process group"), (ov.per_dim, "dim", "dimension")):
        if df.height:
            console.print(_fit(f"Overlap by {name}" + simulated_label(res), OVERLAP_BY[key], df))
    render_rank_spread(res, console)  # per dimension, over the ranks (issue 11)
    _legend(console, "exposed = communication not overlapped with compute; mem = memcpy and memset")
    _notes(console, ov.notes)


def render_bandwidth(res: RunAnalysis, console: Console) -> None:
    bw = res.bandwidth
    assert bw is not None
    title = "Collective bandwidth (GB/s) by type, group and message size" + simulated_label(res)
    console.print(_fit(title, BANDWIDTH, bw.summary, keys=4))
    for pg, lp in bw.peaks.items():
        if lp.gbps is None:
            continue  # an unknown peak is explained once, in the notes below
        dim_line(
            console,
            f"  group {pg if pg != 'None' else '-'}: peak {_num(lp.gbps, '{:.0f}')} GB/s per direction — {lp.link} ({lp.source})",
        )
    if bw.matched.height:
        m = bw.matched.sort("skew_ns", descending=True).head(TOP)
        mt = _fit(
            "Collectives matched across ranks, by arrival skew"
            + (f" (top {TOP} of {bw.matched.height})" if bw.matched.height > TOP else "")
            + simulated_label(res),
            MATCHED,
            m,
            keys=3,
        )
        console.print(mt)
    if bw.stragglers.height:
        sg = bw.stragglers.sort(["n_last", "mean_late_ns"], descending=True, nulls_last=True)
        more = f" (top {TOP} of {sg.height})" if sg.height > TOP else ""
        title = f"Stragglers: arrivals at collectives matched across ranks{more}" + simulated_label(res)
        t = _fit(title, STRAGGLERS, sg.head(TOP), keys=3)
        console.print(t)
    _notes(console, bw.notes)


def render_energy(res: RunAnalysis, console: Console) -> None:
    en = res.energy
    assert en is not None
    console.print(_fit(f"Energy ({en.method} integration)" + simulated_label(res), ENERGY, en.totals))
    titles = {"phase": "phase", "op": "launching CPU op", "kernel": "kernel", "coll_type": "collective type",
              "step": "step"}  # fmt: skip
    for group, what in titles.items():
        df = en.group(group)
        if df.height == 0:
            continue
        show = df if group in ("phase", "step", "coll_type") else df.head(TOP)
        more = "" if show.height == df.height else f" (top {TOP} of {df.height})"
        g = _fit(f"Energy by {what}{more}" + simulated_label(res), _energy_by(what), show)
        console.print(g)
    _notes(console, en.notes)


def render_power(res: RunAnalysis, console: Console) -> None:
    pw = res.power
    assert pw is not None
    console.print(_fit("Power and thermal per step" + simulated_label(res), POWER, pw.per_step, keys=3))
    if pw.throttle.height:
        th = pw.throttle.group_by(["rank", "device", "reason"], maintain_order=True).agg(
            pl.col("time_ns").filter(pl.col("step").is_null()).sum()
        )
        g = _fit("Time per throttle reason (whole window)", THROTTLE, th)
        console.print(g)
    _notes(console, pw.notes)


def _compact(title: str, cols: Iterable[tuple[str, str]], keys: int = 2) -> FitTable:
    """A table without vertical borders (the style of every table here)."""
    return _table(title, cols, keys)


def _steps_shown(res: RunAnalysis, df: pl.DataFrame) -> pl.DataFrame:
    """The rows a table shows: per step only with --per-step (like the other tables)."""
    return df if res.options.per_step else df.filter(pl.col("step").is_null())


def _pct1(v: Any) -> str:
    return _num(v, "{:.1f}")


def _cp_who(r: dict[str, Any]) -> str:
    return "job" if r["scope"] == "job" else "-" if r["rank"] is None else str(r["rank"])


CP_OPS = Layout(
    CRITICAL_OPS_SCHEMA,
    [Show("rank", cell=_cp_who), Show("name", "operator"),
     Show("category", "what", lambda cat: CP_SHORT.get(cat, (cat,))[0] if cat else "-"), Show("time_ns", "ms"),
     Show("pct", "% path", "{:.1f}"), Show("count", "n")],
    finite=True,
)  # fmt: skip


def render_critical_path(res: RunAnalysis, console: Console) -> None:
    cp = res.critical_path
    assert cp is not None
    paths = _steps_shown(res, cp.paths)
    # categories that are 0 on every path are left out (the JSON keeps every column)
    shown = [c for c in CP_CATEGORIES if paths.height and (paths[f"{c}_ns"].fill_null(0) != 0).any()]
    hidden = [CP_SHORT[c][0] for c in CP_CATEGORIES if c not in shown]
    t = _compact(
        "Critical path: share of the path by category" + simulated_label(res),
        [("rank", "right"), ("step", "right"), ("span ms", "right"), ("path ms", "right")]
        + [(f"{CP_SHORT[c][0]} %", "right") for c in shown],
    )
    m = _compact(
        "Critical path: time by category (ms)" + simulated_label(res),
        [("rank", "right"), ("step", "right")] + [(f"{CP_SHORT[c][0]} ms", "right") for c in shown],
    )
    for r in paths.iter_rows(named=True):
        who, step = _cp_who(r), _step(r["step"])
        length = r["length_ns"]
        t.add_row(
            who, step, _ms(r["span_ns"]), _ms(length),
            *[_pct1(100.0 * r[f"{c}_ns"] / length if length else None) for c in shown],
        )  # fmt: skip
        m.add_row(who, step, *[_ms(r[f"{c}_ns"]) for c in shown])
    console.print(t)
    console.print(m)
    legend = ", ".join(f"{CP_SHORT[c][0]} = {CP_SHORT[c][1]}" for c in shown)
    dim_line(
        console,
        f"  {legend}; % of the path's length" + (f"; 0 on every path: {', '.join(hidden)}" if hidden else ""),
    )
    ops = cp.top_ops.filter(pl.col("step").is_null()).sort(
        pl.col("scope") == "job", "rank", maintain_order=True
    )  # ranks first, then the job
    only_job = False
    if ops["rank"].n_unique() > MAX_RANK_OPS and (ops["scope"] == "job").any():
        ops, only_job = ops.filter(pl.col("scope") == "job"), True  # many ranks: the job's path only
    if ops.height:
        title = "Top operators on the critical path (whole trace" + (", job path" if only_job else "") + ")"
        o = new_table(title + simulated_label(res), CP_OPS.heads, keys=2, shrink=1, max_width=44)
        last = None
        for r in ops.iter_rows(named=True):
            who = _cp_who(r)
            if last is not None and who != last:
                o.add_section()
            last = who
            o.add_row(*CP_OPS.row(r))
        console.print(o)
        if only_job:
            dim_line(
                console,
                "  each rank's own list: --format json (frame critical_path_ops)",
            )
    _notes(console, cp.notes)


def render_what_if(res: RunAnalysis, console: Console, printed: list[str] | None = None) -> None:
    from charllm_trace.render.whatif_text import basis, headline, keys_text

    wi = res.what_if
    assert wi is not None
    title = f"What-if (PREDICTED): {keys_text(wi)}" + simulated_label(res)
    console.print(_fit(title, WHAT_IF, _steps_shown(res, wi.steps)))
    dim_line(console, "  " + headline(wi), style="bold")
    dim_line(
        console,
        "  meas = measured, pred = PREDICTED by replaying the execution graph with scaled durations; "
        "exp = exposed communication (ms), ovl = communication overlapped with compute (%)",
    )
    rests = basis(wi)
    if rests is not None:
        dim_line(console, "  " + rests)
    _notes(console, [n for n in wi.notes if n not in (printed or [])])


def render_analysis(res: RunAnalysis, console: Console | None = None, wide: bool = False) -> None:
    """Print the four analyses, or one plain line saying why one was not computed. Tables wider
    than the console are split into parts, never cut (``wide``: every table whole)."""
    if console is None:
        console = table_console(wide)
    if res.simulated:
        console.print(
            "SIMULATED: this trace has no timestamps; the timeline was rebuilt from dependencies and "
            "durations (analyze --simulate). Every time below is simulated, not measured.",
            style="bold yellow", markup=False,
        )  # fmt: skip
    for _, ref in shown("table"):  # each analysis' table, in the registry's order
        resolve(ref)(res, console)


def _four(name: str, fn: Callable[[RunAnalysis, Console], None], res: RunAnalysis, console: Console) -> None:
    """One of the first four tables, or one line saying why it was not computed (power's reason is
    said once, with energy's, when they are the same), and a blank line."""
    if getattr(res, name) is not None:
        fn(res, console)
    elif name in res.skipped and not (name == "power" and res.skipped.get("energy") == res.skipped[name]):
        dim_line(console, f"{name}: {cli_hint(res.skipped[name])}", style=None)
    console.print()


def overlap_table(res: RunAnalysis, console: Console) -> None:
    _four("overlap", render_overlap, res, console)


def bandwidth_table(res: RunAnalysis, console: Console) -> None:
    _four("bandwidth", render_bandwidth, res, console)


def energy_table(res: RunAnalysis, console: Console) -> None:
    _four("energy", render_energy, res, console)


def power_table(res: RunAnalysis, console: Console) -> None:
    _four("power", render_power, res, console)


def _skipped_line(res: RunAnalysis, console: Console, name: str, label: str) -> None:
    if name in res.skipped:
        dim_line(console, f"{label}: {cli_hint(res.skipped[name])}", style=None)
        console.print()


def breakdown_table(res: RunAnalysis, console: Console) -> None:
    if res.breakdown is None:
        return _skipped_line(res, console, "breakdown", "time breakdown")
    render_breakdown(res.breakdown, console, per_step=res.options.per_step, label=simulated_label(res))
    console.print()


def critical_path_table(res: RunAnalysis, console: Console) -> None:
    if res.critical_path is None:
        return _skipped_line(res, console, "critical_path", "critical path")
    render_critical_path(res, console)
    console.print()


def what_if_table(res: RunAnalysis, console: Console) -> None:
    if res.what_if is None:
        return _skipped_line(res, console, "what_if", "what-if")
    render_what_if(res, console, list(res.critical_path.notes) if res.critical_path is not None else [])
    console.print()


def streams_table(res: RunAnalysis, console: Console) -> None:
    """Idle time per GPU stream and launch statistics (one section for both analyses)."""
    render_streams(res, console, cli_hint)
