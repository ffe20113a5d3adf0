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
    CAN_SIMULATE,
    CP_CATEGORIES,
    NO_PEAK,
    NO_STEPS,
    WARNING,
    RunAnalysis,
)
from charllm_trace.render.breakdown_table import render_breakdown
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


def _table(title: str, cols: Iterable[tuple[str, str]], keys: int = 2) -> FitTable:
    """A table that splits into parts (repeating its first ``keys`` columns) rather than cut a
    number when the console is narrower than it (:mod:`charllm_trace.render.fit`)."""
    t = FitTable(title, keys=keys)
    for name, just in cols:
        t.add_column(name, just, shrink=just == "left" and name in SHRINKABLE)
    return t


#: Text columns that may be shortened with an ellipsis (names; never numbers or keys).
SHRINKABLE = frozenset({"operator", "kernel", "launching CPU op", "process group", "key"})


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
    t = _table(
        title,
        [("rank", "right"), ("step", "right"), ("span ms", "right"), ("compute ms", "right"),
         ("comm ms", "right"), ("overlap %", "right"), ("exposed ms", "right"),
         ("mem ms", "right"), ("idle ms", "right")],
    )  # fmt: skip
    for r in ov.per_rank.iter_rows(named=True):
        t.add_row(
            str(r["rank"]), _step(r["step"]), _ms(r["span_ns"]), _ms(r["compute_ns"]), _ms(r["comm_ns"]),
            _num(r["overlap_pct"]), _ms(r["exposed_comm_ns"]), _ms(r["memory_ns"]), _ms(r["idle_ns"]),
        )  # fmt: skip
    console.print(t)
    for df, key, name in ((ov.per_group, "pg_name", "process group"), (ov.per_dim, "dim", "dimension")):
        if df.height == 0:
            continue
        g = _table(
            f"Overlap by {name}" + simulated_label(res),
            [("rank", "right"), ("step", "right"), (name, "left"), ("dim", "left"), ("comm ms", "right"),
             ("overlap %", "right"), ("exposed ms", "right"), ("n", "right")],
        )  # fmt: skip
        for r in df.iter_rows(named=True):
            label = (
                r[key]
                if key == "dim"
                else f"{r['pg_name']} ({r['pg_desc']})"
                if r["pg_desc"]
                else r["pg_name"]
            )
            g.add_row(
                str(r["rank"]), _step(r["step"]), str(label), r["dim"] or "-", _ms(r["comm_ns"]),
                _num(r["overlap_pct"]), _ms(r["exposed_comm_ns"]), str(r["n_comm"]),
            )  # fmt: skip
        console.print(g)
    render_rank_spread(res, console)  # per dimension, over the ranks (issue 11)
    _legend(console, "exposed = communication not overlapped with compute; mem = memcpy and memset")
    _notes(console, ov.notes)


def render_bandwidth(res: RunAnalysis, console: Console) -> None:
    bw = res.bandwidth
    assert bw is not None
    t = _table(
        "Collective bandwidth (GB/s) by type, group and message size" + simulated_label(res),
        [("type", "left"), ("group", "left"), ("dim", "left"), ("size", "left"), ("count", "right"),
         ("MB", "right"), ("time ms", "right"), ("algbw", "right"), ("busbw", "right"),
         ("max busbw", "right"), ("peak", "right"), ("util %", "right")],
        keys=4,
    )  # fmt: skip
    for r in bw.summary.iter_rows(named=True):
        t.add_row(
            r["coll_type"] or "unknown", r["pg_name"] or "-", r["dim"] or "-", r["size_bucket"] or "unknown", str(r["count"]),
            _num(None if r["bytes_total"] is None else r["bytes_total"] / 1e6), _ms(r["dur_ns_total"]),
            _num(r["algbw_time_weighted_gbps"]), _num(r["busbw_time_weighted_gbps"]), _num(r["busbw_max_gbps"]),
            _num(r["peak_gbps"], "{:.0f}"), _num(r["util_pct"], "{:.1f}"),
        )  # fmt: skip
    console.print(t)
    for pg, lp in bw.peaks.items():
        if lp.gbps is None:
            continue  # an unknown peak is explained once, in the notes below
        dim_line(
            console,
            f"  group {pg if pg != 'None' else '-'}: peak {_num(lp.gbps, '{:.0f}')} GB/s per direction — {lp.link} ({lp.source})",
        )
    if bw.matched.height:
        m = bw.matched.sort("skew_ns", descending=True).head(TOP)
        mt = _table(
            "Collectives matched across ranks, by arrival skew"
            + (f" (top {TOP} of {bw.matched.height})" if bw.matched.height > TOP else "")
            + simulated_label(res),
            [("group", "left"), ("seq", "right"), ("type", "left"), ("MB", "right"), ("ranks", "right"),
             ("min dur ms", "right"), ("max dur ms", "right"), ("busbw GB/s", "right"),
             ("skew ms", "right"), ("late rank", "right")],
            keys=3,
        )  # fmt: skip
        for r in m.iter_rows(named=True):
            mt.add_row(
                r["pg_name"] or "-", "-" if r["coll_seq"] is None else str(r["coll_seq"]), r["coll_type"] or "unknown",
                _num(None if r["bytes"] is None else r["bytes"] / 1e6), str(r["n_ranks"]),
                _ms(r["dur_min_ns"]), _ms(r["dur_max_ns"]), _num(r["busbw_gbps"]), _ms(r["skew_ns"]),
                str(r["late_rank"]),
            )  # fmt: skip
        console.print(mt)
    if bw.stragglers.height:
        sg = bw.stragglers.sort(["n_last", "mean_late_ns"], descending=True, nulls_last=True)
        more = f" (top {TOP} of {sg.height})" if sg.height > TOP else ""
        t = _table(
            f"Stragglers: arrivals at collectives matched across ranks{more}" + simulated_label(res),
            [("group", "left"), ("dim", "left"), ("rank", "right"), ("matched", "right"), ("last", "right"),
             ("last %", "right"), ("mean late ms", "right"), ("max late ms", "right")],
            keys=3,
        )  # fmt: skip
        for r in sg.head(TOP).iter_rows(named=True):
            t.add_row(
                r["pg_name"] or "-", r["dim"] or "-", str(r["rank"]), str(r["n_matched"]), str(r["n_last"]),
                _num(r["last_pct"], "{:.1f}"), _ms(r["mean_late_ns"]), _ms(r["max_late_ns"]),
            )  # fmt: skip
        console.print(t)
    _notes(console, bw.notes)


def render_energy(res: RunAnalysis, console: Console) -> None:
    en = res.energy
    assert en is not None
    t = _table(
        f"Energy ({en.method} integration)" + simulated_label(res),
        [("rank", "right"), ("device", "right"), ("window s", "right"), ("samples", "right"),
         ("sensor period ms", "right"), ("∫P dt J", "right"), ("counter J", "right"), ("correction", "right"),
         ("operators J", "right"), ("idle J", "right"), ("short-op time %", "right")],
    )  # fmt: skip
    for r in en.totals.iter_rows(named=True):
        t.add_row(
            str(r["rank"]), str(r["device"]), _num((r["end_ns"] - r["start_ns"]) / 1e9, "{:.3f}"),
            str(r["n_samples"]), _num(r["sensor_period_ns"] / 1e6, "{:.3g}"), _num(r["integral_j"]),
            _num(r["counter_j"]), _num(r["correction"], "{:.4f}"), _num(r["operators_j"]), _num(r["idle_j"]),
            _num(r["short_kernel_pct"], "{:.1f}"),
        )  # fmt: skip
    console.print(t)
    titles = {"phase": "phase", "op": "launching CPU op", "kernel": "kernel", "coll_type": "collective type",
              "step": "step"}  # fmt: skip
    for group, what in titles.items():
        df = en.group(group)
        if df.height == 0:
            continue
        show = df if group in ("phase", "step", "coll_type") else df.head(TOP)
        more = "" if show.height == df.height else f" (top {TOP} of {df.height})"
        g = _table(
            f"Energy by {what}{more}" + simulated_label(res),
            [("rank", "right"), (what, "left"), ("count", "right"), ("busy ms", "right"), ("J", "right"),
             ("share %", "right"), ("short-op %", "right")],
        )  # fmt: skip
        for r in show.iter_rows(named=True):
            key = str(r["key"])
            g.add_row(
                str(r["rank"]), key if len(key) <= 70 else key[:67] + "...", str(r["count"]), _ms(r["busy_ns"]),
                _num(r["energy_j"]), _num(r["share_pct"], "{:.1f}"), _num(r["short_pct"], "{:.0f}"),
            )  # fmt: skip
        console.print(g)
    _notes(console, en.notes)


def render_power(res: RunAnalysis, console: Console) -> None:
    pw = res.power
    assert pw is not None
    t = _table(
        "Power and thermal per step" + simulated_label(res),
        [("rank", "right"), ("dev", "right"), ("step", "right"), ("avg W", "right"), ("peak W", "right"),
         ("swing W", "right"), ("max dP/dt W/s", "right"), ("above limit ms", "right"), ("temp rise °C", "right"),
         ("SM clk/max", "right"), ("throttled ms", "right"), ("outlier", "left")],
        keys=3,
    )  # fmt: skip
    for r in pw.per_step.iter_rows(named=True):
        t.add_row(
            str(r["rank"]), str(r["device"]), _step(r["step"]), _num(r["avg_w"], "{:.1f}"),
            _num(r["peak_w"], "{:.1f}"), _num(r["swing_w"], "{:.1f}"), _num(r["swing_rate_w_per_s"], "{:.0f}"),
            _ms(r["above_limit_ns"]), _num(r["temp_rise_c"], "{:.1f}"), _num(r["sm_clock_ratio"], "{:.3f}"),
            _ms(r["throttled_ns"]), r["outlier_reason"] or "",
        )  # fmt: skip
    console.print(t)
    if pw.throttle.height:
        th = pw.throttle.group_by(["rank", "device", "reason"], maintain_order=True).agg(
            pl.col("time_ns").filter(pl.col("step").is_null()).sum()
        )
        g = _table("Time per throttle reason (whole window)", [("rank", "right"), ("dev", "right"),
                   ("reason", "left"), ("ms", "right")])  # fmt: skip
        for r in th.iter_rows(named=True):
            g.add_row(str(r["rank"]), str(r["device"]), r["reason"], _ms(r["time_ns"]))
        console.print(g)
    _notes(console, pw.notes)


#: Short column labels of the critical-path categories (``CP_CATEGORIES``), and what they mean.
CP_SHORT = {
    "gpu_compute": ("gpu", "GPU compute kernels"),
    "gpu_memory": ("mem", "GPU memcpy/memset"),
    "communication": ("comm", "communication"),
    "cpu_op": ("cpu", "CPU op self time"),
    "launch": ("launch", "runtime calls and launch latency"),
    "sync_wait": ("wait", "synchronisation wait"),
    "idle": ("idle", "gaps between CPU ops"),
}
assert tuple(CP_SHORT) == CP_CATEGORIES


def _compact(title: str, cols: Iterable[tuple[str, str]], keys: int = 2) -> FitTable:
    """A table without vertical borders (the style of every table here)."""
    return _table(title, cols, keys)


def _steps_shown(res: RunAnalysis, df: pl.DataFrame) -> pl.DataFrame:
    """The rows a table shows: per step only with --per-step (like the other tables)."""
    return df if res.options.per_step else df.filter(pl.col("step").is_null())


def _pct1(v: Any) -> str:
    return _num(v, "{:.1f}")


def _cp_who(r: dict[str, Any]) -> str:
    return "job" if r["scope"] == "job" else str(r["rank"])


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
        o = _compact(
            "Top operators on the critical path (whole trace"
            + (", job path" if only_job else "")
            + ")"
            + simulated_label(res),
            [("rank", "right"), ("operator", "left"), ("what", "left"), ("ms", "right"), ("% path", "right"),
             ("n", "right")],
        )  # fmt: skip
        o.columns[1].shrink = True
        o.columns[1].max_width = 44
        last = None
        for r in ops.iter_rows(named=True):
            who = _cp_who(r)
            if last is not None and who != last:
                o.add_section()
            last = who
            cat = r["category"]
            o.add_row(
                who, str(r["name"]), CP_SHORT.get(cat, (cat,))[0] if cat else "-", _ms(r["time_ns"]),
                _pct1(r["pct"]), str(r["count"]),
            )  # fmt: skip
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
    t = _compact(
        f"What-if (PREDICTED): {keys_text(wi)}" + simulated_label(res),
        [("rank", "right"), ("step", "right"), ("meas ms", "right"), ("pred ms", "right"), ("chg %", "right"),
         ("meas exp", "right"), ("pred exp", "right"), ("meas ovl", "right"), ("pred ovl", "right")],
    )  # fmt: skip
    for r in _steps_shown(res, wi.steps).iter_rows(named=True):
        t.add_row(
            str(r["rank"]), _step(r["step"]), _ms(r["measured_ns"]), _ms(r["predicted_ns"]),
            _num(r["change_pct"], "{:+.1f}"), _ms(r["measured_exposed_comm_ns"]),
            _ms(r["predicted_exposed_comm_ns"]), _pct1(r["measured_overlap_pct"]),
            _pct1(r["predicted_overlap_pct"]),
        )  # fmt: skip
    console.print(t)
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
