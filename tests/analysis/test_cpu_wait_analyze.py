"""Is the CPU starving the GPU? in ``analyze`` (issue 24 item 4): the launching thread's scheduler
state over each GPU idle interval blamed on the host and over each phase, against a constructed
trace whose answer is known, the frames in analyze's JSON only when the run has CPU telemetry,
and the Perfetto thread-state slices."""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.analysis.api import analyze_run
from charllm_trace.analysis.cpu_wait import rank_cpu_wait, thread_states
from charllm_trace.converters.cpu_sched import CGROUP_SCHEMA
from charllm_trace.core.classify import classify
from charllm_trace.core.model import Run
from charllm_trace.render.export import to_document
from tests.collectors.test_cpu_sched import _samples
from tests.helpers.analysis_helpers import T0, cpu, kernel, make_trace

US = 1000


def _trace():
    """One ProfilerStep 0-2000 µs; phases prefill 0-400 µs and decode 400-1000 µs on the launching
    thread (tid 11). Kernels: k0 0-200 µs (launched at 0), k1 600-1000 µs launched at 500 µs (after
    the GPU went idle at 200: the host is blamed, 300 µs late), k2 1000-1400 µs (launched at 20
    µs, no gap), k3 1500-1600 µs launched at 30 µs (a gap 1400-1500 µs, not the host's: launched
    long before)."""
    rows = [
        cpu(1, "ProfilerStep#0", 0, 2000 * US, tid=11, pid=5),
        cpu(2, "prefill", 0, 400 * US, tid=11, pid=5),
        cpu(3, "decode", 400 * US, 600 * US, tid=11, pid=5),
        cpu(4, "cudaLaunchKernel", 0, 5 * US, kind="runtime", tid=11, pid=5, correlation=1),
        cpu(5, "cudaLaunchKernel", 500 * US, 5 * US, kind="runtime", tid=11, pid=5, correlation=2),
        cpu(6, "cudaLaunchKernel", 20 * US, 5 * US, kind="runtime", tid=11, pid=5, correlation=3),
        cpu(7, "cudaGraphLaunch", 30 * US, 5 * US, kind="runtime", tid=11, pid=5, correlation=4),
        kernel(8, "k0", 0, 200 * US, correlation=1),
        kernel(9, "k1", 600 * US, 400 * US, correlation=2),
        kernel(10, "k2", 1000 * US, 400 * US, correlation=3),
        kernel(11, "k3", 1500 * US, 100 * US, correlation=4),
    ]
    return make_trace(rows)


def _threads() -> pl.DataFrame:
    """The launching thread waits at 0.5 ns/ns until 500 µs, then runs at 1 ns/ns; sampled every 100 µs."""
    times = list(range(0, 2_000_001, 100_000))
    return _samples(11, 5, times, [max(t - 500_000, 0) for t in times], [min(t, 500_000) // 2 for t in times])


def _cgroup() -> pl.DataFrame:
    """Throttled 1 µs per µs from 300 to 700 µs; a quota of half a core."""
    times = list(range(0, 2_000_001, 100_000))
    thr = [min(max(t - 300_000, 0), 400_000) // 1000 for t in times]
    n = len(times)
    return pl.DataFrame({"time_ns": [T0 + t for t in times], "nr_periods": list(range(n)), "nr_throttled": [0] * n,
                         "throttled_usec": thr, "quota_us": [50_000] * n, "period_us": [100_000] * n},
                        schema=CGROUP_SCHEMA)  # fmt: skip


def test_host_blamed_idle_and_phases_known_answer() -> None:
    tr = _trace()
    steps, idle, phases, notes = rank_cpu_wait(0, tr, classify(tr.nodes), _threads(), _cgroup())
    assert notes == []
    # one interval blamed on the host: 200-600 µs, 300 µs late; the thread's wait there is
    # 100 -> 250 µs of its counter (150 µs), its run 0 -> 100 µs; throttled 300-600 µs
    got = idle.select("step", "phase", "tid", "start_ns", "dur_ns", "late_ns", "call_name", "run_ns", "wait_ns",
                      "other_ns", "throttled_ns").rows()  # fmt: skip
    assert got == [(0, "prefill", 11, T0 + 200 * US, 400 * US, 300 * US, "cudaLaunchKernel", 100 * US, 150 * US,
                    150 * US, 300 * US)]  # fmt: skip
    # prefill 0-400 µs: wait 200, run 0; decode 400-1000 µs: wait 250-200 = 50, run 500
    rows = (
        phases.filter(pl.col("step") == 0)
        .select("phase", "n", "cpu_ns", "run_ns", "wait_ns", "other_ns", "host_idle_ns", "host_idle_wait_ns")
        .rows()
    )
    assert rows == [("decode", 1, 600 * US, 500 * US, 50 * US, 50 * US, 0, 0),
                    ("prefill", 1, 400 * US, 0, 200 * US, 200 * US, 400 * US, 150 * US)]  # fmt: skip
    whole = phases.filter(pl.col("step").is_null())
    assert whole.drop("step").equals(phases.filter(pl.col("step") == 0).drop("step"))
    # the step: GPU window 0-1600 µs; GPU idle 200-600 and 1400-1500: 500 µs, wait in it 150 µs
    s = steps.row(0, named=True)
    assert (s["gpu_idle_ns"], s["idle_wait_ns"], s["throttled_ns"]) == (500 * US, 150 * US, 400 * US)


def test_analyze_has_the_frames_only_with_cpu_telemetry() -> None:
    tr = _trace()
    plain = to_document(analyze_run(Run.single(tr)))
    assert not any(k.startswith("cpu_wait") for k in plain["frames"])
    assert "cpu_wait" not in plain["notes"] and "cpu_wait" not in plain["skipped"]
    res = analyze_run(Run(traces={0: tr}, cpu_sched=(_threads(), _cgroup(), ["a reader note"])))
    doc = to_document(res)
    assert [r["late_ns"] for r in doc["frames"]["cpu_wait_idle"]] == [300 * US]
    assert doc["frames"]["cpu_wait"][0]["idle_wait_ns"] == 150 * US
    assert {r["phase"] for r in doc["frames"]["cpu_wait_phases"]} == {"prefill", "decode"}
    assert doc["notes"]["cpu_wait"] == ["a reader note"]
    assert res.cpu_wait is not None and res.cpu_wait.quota == {
        "quota_us": 50_000,
        "period_us": 100_000,
        "cores": 0.5,
    }
    # every other frame is as without the telemetry
    assert {k: v for k, v in doc["frames"].items() if not k.startswith("cpu_wait")} == plain["frames"]


def test_thread_states_cut_each_period_by_the_counters() -> None:
    tr = _trace()
    st = thread_states(tr.nodes, _threads())
    first = st.filter(pl.col("start_ns") < T0 + 100 * US)  # 0-100 µs: waited 50 µs, ran 0
    assert first.select("state", "start_ns", "end_ns").rows() == [
        ("runnable", T0, T0 + 50 * US), ("sleeping", T0 + 50 * US, T0 + 100 * US)]  # fmt: skip
    late = st.filter(pl.col("start_ns") >= T0 + 500 * US)
    assert set(late["state"]) == {"running"} and int((late["end_ns"] - late["start_ns"]).sum()) == 1500 * US
    assert set(st["tid"]) == {11}


def test_saved_results_keep_the_cpu_wait(tmp_path) -> None:
    from charllm_trace.store.results import load_results, save_results

    res = analyze_run(Run(traces={0: _trace()}, cpu_sched=(_threads(), _cgroup(), [])))
    save_results(res, tmp_path / "r.zip")
    back = load_results(tmp_path / "r.zip")
    assert back.cpu_wait is not None and back.cpu_wait.quota == res.cpu_wait.quota
    for name, df in res.cpu_wait.frames().items():
        assert back.cpu_wait.frames()[name].equals(df), name
    plain = load_results(save_results(analyze_run(Run.single(_trace())), tmp_path / "p.zip"))
    assert plain.cpu_wait is None and "cpu_wait" not in plain.skipped


def test_report_has_the_finding_and_the_section() -> None:
    from charllm_trace.analysis.findings import findings
    from charllm_trace.render.report import render_report, report_data_from
    from charllm_trace.render.report_views import drawn_run, report_views

    run = Run(traces={0: _trace()}, cpu_sched=(_threads(), _cgroup(), []))
    res = analyze_run(run)
    f = [x for x in findings(res) if x.section == "cpu-wait"]
    # the step: GPU window 0-1600 µs, idle 500 µs (31 %); the thread's wait in it 150 µs; throttled 400 µs
    assert [x.text for x in f] == [
        "Rank 0, step 0: GPU idle 31 % of the step (1.6 ms); the launching thread (tid 11) waited for a core "
        "0.1 ms of it, and its cgroup was throttled 0.4 ms of the step."
    ]
    doc = to_document(res)
    for fact in f[0].facts:  # each number is the JSON's
        row = [r for r in doc["frames"][fact.frame] if all(r[k] == v for k, v in fact.where)]
        assert len(row) == 1 and row[0][fact.column] == fact.value
    html = render_report(report_data_from(report_views(drawn_run(run, res), res.classified), res, title="t"))
    assert 'id="cpu-wait"' in html and "Is the CPU starving the GPU?" in html and "0.50 cores" in html
    assert f[0].text.split(";")[0] in html
    plain = analyze_run(Run.single(_trace()))
    html0 = render_report(report_data_from(report_views(drawn_run(Run.single(_trace()), plain), plain.classified),
                                           plain, title="t"))  # fmt: skip
    assert "cpu-wait" not in html0 and not [x for x in findings(plain) if x.section == "cpu-wait"]


def test_run_and_wait_never_exceed_the_interval() -> None:
    """A sampler reads each thread a little after its sample time: counters may grow by more than
    the period (run 80 + wait 60 over 100 ns). The split is bounded by the interval."""
    from charllm_trace.analysis.cpu_wait import Samples

    sm = Samples(_samples(11, 5, [0, 100, 200], [0, 80, 80], [0, 60, 60]), None)
    st = sm.state(np.array([T0, T0 + 50]), np.array([T0 + 100, T0 + 60]))
    assert (
        st["run_ns"].tolist() == [80, 8]
        and st["wait_ns"].tolist() == [20, 2]
        and st["other_ns"].tolist() == [0, 0]
    )
