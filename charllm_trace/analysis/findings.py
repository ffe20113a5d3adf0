"""The few sentences that matter for a run, written from the numbers of its analyses.

Ties are broken by the row's keys, so the same analysis always gives the same sentences.
Each :class:`Finding` is one sentence for one report section, built only from values of the
analyses' frames; every number in it is a :class:`Fact` that names the frame, the row and the
column it comes from (what ``analyze --format json`` prints), so a test can check that the
sentence says exactly what the JSON does. Pure: no I/O.

Findings, in order (each only when its analysis was computed):

1. where the time goes: the rank with the most GPU (or CPU-op) idle time, its span, compute and
   idle time;
2. exposed communication: that rank's communication time, the exposed part and the overlap;
3. bus bandwidth against the link peak: the best aggregate (highest utilisation) and the
   collective furthest below the peak (lowest utilisation, among groups of at least 1 MiB);
   collectives of one-rank groups (bus factor 0) instead get their best algorithm bandwidth;
4. stragglers: the rank that arrived last most often, and the largest arrival skew;
5. power: the highest peak power and the throttled time of the whole window;
6. energy: the total energy of the window and the least and most that the operators of a traced
   step used (energy by step, without its ``(idle)`` and ``(outside steps)`` rows);
7. and 8., pipeline bubbles and waiting at communication: ``analysis/findings_pipeline.py``;
9. is the CPU starving the GPU (runs with CPU scheduler telemetry): ``analysis/findings_cpu.py``;
10. power excursions above the power limit: ``analysis/findings_power.py``.
"""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.finding_types import Fact, Finding, top_row  # noqa: F401 - Fact: this module's interface
from charllm_trace.analysis.finding_types import fact as _fact
from charllm_trace.analysis.finding_types import ms as _ms
from charllm_trace.analysis.findings_cpu import cpu_wait_findings
from charllm_trace.analysis.findings_pipeline import pipeline_findings, waiting_findings
from charllm_trace.analysis.findings_power import power_excursion_findings
from charllm_trace.analysis.results import RunAnalysis

MIB = 1 << 20


def _time(an: RunAnalysis) -> list[Finding]:
    if an.overlap is None:
        return []
    tot = an.overlap.per_rank.filter(pl.col("step").is_null() & (pl.col("span_ns") > 0))
    if tot.height == 0:
        return []
    r = tot.sort(pl.col("idle_ns") / pl.col("span_ns"), "rank", descending=[True, False]).row(0, named=True)
    keys = ("rank", "step")
    what = "GPU" if an.overlap.mode == "gpu" else "CPU ops"
    span, comp, idle, comm = (
        _fact("overlap", r, keys, c, _ms(r[c])) for c in ("span_ns", "compute_ns", "idle_ns", "comm_ns")
    )
    who = f"rank {r['rank']}" if r["rank"] is not None else "the trace"
    out = [
        Finding(
            "overlap",
            f"On {who}{' (the most idle of ' + str(tot.height) + ' ranks)' if tot.height > 1 else ''}, "
            f"the {what} computed for {comp.text} of {span.text} ({100 * r['compute_ns'] / r['span_ns']:.1f} %) "
            f"and was idle for {idle.text} ({100 * r['idle_ns'] / r['span_ns']:.1f} %).",
            [span, comp, idle],
        )
    ]
    if r["comm_ns"]:
        exp = _fact("overlap", r, keys, "exposed_comm_ns", _ms(r["exposed_comm_ns"]))
        ovl = _fact("overlap", r, keys, "overlap_pct", f"{r['overlap_pct']:.1f} %")
        out.append(
            Finding(
                "overlap",
                f"Communication took {comm.text}; {exp.text} of it "
                f"({100 * r['exposed_comm_ns'] / r['comm_ns']:.1f} %) was exposed, not overlapped with compute "
                f"(overlap {ovl.text}).",
                [comm, exp, ovl],
            )
        )
    return out


def _one_rank_groups(rows: pl.DataFrame) -> list[Finding]:
    """Collectives of one-rank groups (``rows``: their bandwidth summary rows): bus factor 0,
    nothing crosses a link (their busbw is 0 at any speed), so only their algorithm bandwidth says
    anything."""
    keys = ("coll_type", "pg_name", "size_bucket")
    rows = rows.filter(pl.col("algbw_time_weighted_gbps").is_not_null())
    if rows.height == 0:
        return []
    r = rows.sort(["algbw_time_weighted_gbps", *keys], descending=[True, False, False, False]).row(
        0, named=True
    )
    n = int(rows["count"].sum())
    ab = _fact("bandwidth", r, keys, "algbw_time_weighted_gbps", f"{r['algbw_time_weighted_gbps']:,.0f} GB/s")
    return [
        Finding(
            "collective-bandwidth",
            f"{n} collectives ran in groups of one rank: nothing crossed a link, so their bus bandwidth "
            f"is 0 by definition; as local copies and reductions they reached {ab.text} of algorithm "
            f"bandwidth ({r['coll_type']}, {r['size_bucket']}).",
            [ab],
        )
    ]


def _bandwidth(an: RunAnalysis) -> list[Finding]:
    if an.bandwidth is None:
        return []
    # groups whose every collective has bus factor 0 (one rank) are told apart from the rest
    solo = an.bandwidth.collectives.group_by("pg_name").agg((pl.col("bus_factor") == 0).all().alias("_one"))
    one_rank = pl.col("pg_name").is_in(solo.filter(pl.col("_one"))["pg_name"].implode()).fill_null(False)
    summary = an.bandwidth.summary
    return _one_rank_groups(summary.filter(one_rank)) + _bus_bandwidth(an, summary.filter(~one_rank))


def _bus_bandwidth(an: RunAnalysis, summary: pl.DataFrame) -> list[Finding]:
    assert an.bandwidth is not None
    s = summary.filter(pl.col("util_pct").is_not_null())
    keys = ("coll_type", "pg_name", "size_bucket")
    if s.height == 0:
        b = summary.filter(pl.col("busbw_time_weighted_gbps").is_not_null())
        if b.height == 0:
            return []
        r = b.sort(
            ["busbw_time_weighted_gbps", *keys], descending=[True, False, False, False], nulls_last=True
        ).row(0, named=True)
        f = _fact(
            "bandwidth", r, keys, "busbw_time_weighted_gbps", f"{r['busbw_time_weighted_gbps']:.2f} GB/s"
        )
        return [
            Finding(
                "collective-bandwidth",
                f"The best bus bandwidth is {f.text} ({r['coll_type']}, {r['size_bucket']}); the link peak is "
                "unknown for this device, so utilisation is not computed.",
                [f],
            )
        ]
    best = s.sort(["util_pct", *keys], descending=[True, False, False, False], nulls_last=True).row(
        0, named=True
    )
    big = s.filter(pl.col("bytes_total") >= MIB * pl.col("count"))
    worst = (big if big.height else s).sort(["util_pct", *keys], nulls_last=True).row(0, named=True)
    fb = _fact(
        "bandwidth", best, keys, "busbw_time_weighted_gbps", f"{best['busbw_time_weighted_gbps']:.2f} GB/s"
    )
    ub = _fact("bandwidth", best, keys, "util_pct", f"{best['util_pct']:.1f} %")
    pk = _fact("bandwidth", best, keys, "peak_gbps", f"{best['peak_gbps']:g} GB/s")
    link = an.bandwidth.peaks.get(str(best["pg_name"]))
    text = (
        f"Collectives reach at most {fb.text} of bus bandwidth ({best['coll_type']}, {best['size_bucket']}), "
        f"{ub.text} of the {pk.text} peak of {link.link if link is not None else 'the link'}"
    )
    facts = [fb, ub, pk]
    if worst != best:
        fw = _fact(
            "bandwidth",
            worst,
            keys,
            "busbw_time_weighted_gbps",
            f"{worst['busbw_time_weighted_gbps']:.2f} GB/s",
        )
        uw = _fact("bandwidth", worst, keys, "util_pct", f"{worst['util_pct']:.1f} %")
        text += (
            f"; furthest below it{' among messages of 1 MiB or more' if big.height else ''}: "
            f"{worst['coll_type']} {worst['size_bucket']} at {fw.text} ({uw.text})"
        )
        facts += [fw, uw]
    return [Finding("collective-bandwidth", text + ".", facts)]


def _stragglers(an: RunAnalysis) -> list[Finding]:
    if an.bandwidth is None or an.bandwidth.stragglers.height == 0:
        return []
    sg = an.bandwidth.stragglers
    r = sg.sort(
        ["n_last", "mean_late_ns", "pg_name", "rank"], descending=[True, True, False, False], nulls_last=True
    ).row(0, named=True)
    keys = ("pg_name", "rank")
    nl = _fact("stragglers", r, keys, "n_last", str(r["n_last"]))
    nm = _fact("stragglers", r, keys, "n_matched", str(r["n_matched"]))
    ml = _fact("stragglers", r, keys, "mean_late_ns", f"{r['mean_late_ns'] / 1e6:,.3f} ms")
    m = an.bandwidth.matched.sort(
        ["skew_ns", "pg_name", "coll_seq"], descending=[True, False, False], nulls_last=True
    ).row(0, named=True)
    sk = _fact("collectives_matched", m, ("pg_name", "coll_seq"), "skew_ns", f"{m['skew_ns'] / 1e6:,.3f} ms")
    group = f" of group {r['pg_name']}" if r["pg_name"] is not None else ""
    return [
        Finding(
            "stragglers",
            f"Rank {r['rank']} arrived last at {nl.text} of {nm.text} collectives{group} "
            f"(on average {ml.text} after the first rank); the largest arrival skew is {sk.text} "
            f"({m['coll_type'] or 'unknown type'} #{m['coll_seq']}, rank {m['late_rank']} last).",
            [nl, nm, ml, sk],
        )
    ]


def _power(an: RunAnalysis) -> list[Finding]:
    if an.power is None:
        return []
    w = an.power.per_step.filter(pl.col("step").is_null() & pl.col("peak_w").is_not_null())
    r = top_row(w, "peak_w", ("rank", "device"), nulls_last=True)
    if r is None:
        return []
    keys = ("rank", "device", "step")
    pk = _fact("power", r, keys, "peak_w", f"{r['peak_w']:.0f} W")
    av = _fact("power", r, keys, "avg_w", f"{r['avg_w']:.0f} W")
    th = _fact("power", r, keys, "throttled_ns", _ms(r["throttled_ns"] or 0))
    thr = f"it was throttled for {th.text}" if r["throttled_ns"] else "it was never throttled"
    return [
        Finding(
            "power-and-thermal",
            f"Power peaked at {pk.text} on rank {r['rank']} GPU {r['device']} (average {av.text}); {thr}.",
            [pk, av, th],
        )
    ]


def _energy(an: RunAnalysis) -> list[Finding]:
    if an.energy is None or an.energy.totals.height == 0:
        return []
    t = an.energy.totals.sort(
        ["total_j", "rank", "device"], descending=[True, False, False], nulls_last=True
    ).row(0, named=True)
    tot = _fact("energy_totals", t, ("rank", "device"), "total_j", f"{t['total_j']:,.1f} J")
    # the operators of each traced step (not the (idle) and (outside steps) rows of the group)
    steps = an.energy.by.filter(
        (pl.col("group") == "step") & (pl.col("rank") == t["rank"]) & ~pl.col("key").str.starts_with("(")
    ).sort("energy_j", "key")
    text = f"Rank {t['rank']} GPU {t['device']} used {tot.text} over the telemetry window"
    facts = [tot]
    keys = ("rank", "group", "key")
    if steps.height == 1:
        one = _fact("energy", steps.row(0, named=True), keys, "energy_j", f"{steps['energy_j'][0]:,.1f} J")
        text += f"; the operators of its one traced step used {one.text}"
        facts.append(one)
    elif steps.height > 1:
        lo, hi = steps.row(0, named=True), steps.row(-1, named=True)
        flo = _fact("energy", lo, keys, "energy_j", f"{lo['energy_j']:,.1f} J")
        fhi = _fact("energy", hi, keys, "energy_j", f"{hi['energy_j']:,.1f} J")
        text += f"; the operators of each of its {steps.height} traced steps used {flo.text} to {fhi.text}"
        facts += [flo, fhi]
    return [Finding("energy", text + ".", facts)]


def findings(an: RunAnalysis) -> list[Finding]:
    """The findings of ``an``, in the order of the module docstring."""
    return [*_time(an), *_bandwidth(an), *_stragglers(an), *_power(an), *_energy(an), *pipeline_findings(an),
            *waiting_findings(an), *cpu_wait_findings(an),
            *power_excursion_findings(an)]  # fmt: skip
