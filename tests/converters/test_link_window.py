"""A host ET over one iteration beside a Kineto profile of several is linked within the
iteration it covers, or refused in one line with both op counts (issue 27 item 4). Built from
the shared DLRM pair: its Kineto profile copied into three ProfilerSteps, the host ET's one
kept whole in the middle and the other two altered (every 5th CPU op dropped), as the first
iterations of a real run differ from the rest."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from charllm_trace.converters.build import linked_trace
from charllm_trace.converters.host_et import read_host_et
from charllm_trace.converters.kineto import read_kineto
from tests.conftest import shared_trace

DLRM = "param/dlrm_8ranks_v100/{}_rank0.json.gz"
GAP_US = 20_000  # the iteration spans 14.5 ms


def _copies(dst: Path, keep_middle: bool = True) -> Path:
    doc = json.load(gzip.open(shared_trace(DLRM.format("kineto"))))
    evs = doc["traceEvents"]
    out = [e for e in evs if e.get("ph") == "M"]
    for c in range(3):
        altered = c != 1 or not keep_middle
        n_cpu = 0
        for e in evs:
            if e.get("ph") != "X" or e.get("cat") == "Trace":
                continue
            if e.get("cat") == "cpu_op":
                n_cpu += 1
                if altered and n_cpu % 5 == 0:
                    continue
            e = json.loads(json.dumps(e))
            e["ts"] += c * GAP_US
            a = e.get("args", {})
            for k in ("External id", "correlation", "Ev Idx"):
                if k in a:
                    a[k] += c * 1_000_000
            if e["name"] == "ProfilerStep#10":
                e["name"] = f"ProfilerStep#{9 + c}"
            out.append(e)
    doc["traceEvents"] = out
    p = dst / "kineto_3steps.json.gz"
    with gzip.open(p, "wt") as fh:
        json.dump(doc, fh)
    return p


def test_host_et_linked_within_the_iteration_it_covers(tmp_path: Path) -> None:
    host = read_host_et(shared_trace(DLRM.format("host_et")))
    _, alone = linked_trace(host, read_kineto(shared_trace(DLRM.format("kineto"))))
    trace, rep = linked_trace(host, read_kineto(_copies(tmp_path)))
    assert rep["link_method"] == "name_order"
    assert rep["link"]["kineto_window"] == "ProfilerStep#10 (1 of the profile's 3 steps)"
    assert rep["host_ops_linked"] == alone["host_ops_linked"]
    # every linked host op took its time from the middle iteration
    t0 = int(trace.nodes.filter(trace.nodes["name"] == "ProfilerStep#9")["start_ns"].min())
    host_ids = set(host.nodes["id"].to_list())
    linked = trace.nodes.filter(
        trace.nodes["id"].is_in(list(host_ids)) & trace.nodes["start_ns"].is_not_null()
    )
    lo, hi = int(linked["start_ns"].min()) - t0, int(linked["start_ns"].max()) - t0
    assert GAP_US * 1000 <= lo and hi < 2 * GAP_US * 1000, (lo, hi)


def test_no_matching_window_says_so_with_both_op_counts(tmp_path: Path) -> None:
    host = read_host_et(shared_trace(DLRM.format("host_et")))
    _, rep = linked_trace(host, read_kineto(_copies(tmp_path, keep_middle=False)))
    assert rep["link_method"].startswith("none (Kineto only: the host ET (")
    n_host, n_kin = rep["link"]["host_ops"], rep["link"]["kineto_ops"]
    assert (
        f"the host ET ({n_host:,} ops) matches no window of the Kineto profile ({n_kin:,} CPU ops)"
        in (rep["link_method"])
    )
    assert n_host < n_kin


@pytest.mark.parametrize("name", ["kineto"])
def test_a_profile_of_the_host_ets_own_window_links_as_before(name: str) -> None:
    host = read_host_et(shared_trace(DLRM.format("host_et")))
    _, rep = linked_trace(host, read_kineto(shared_trace(DLRM.format(name))))
    assert rep["link_method"] == "name_order" and "kineto_window" not in rep["link"]


# ---------------------------------------------------------------------------
# a constructed pair (runs without the shared traces)
# ---------------------------------------------------------------------------

US = 1_000


def _host_one_iteration():  # noqa: ANN202
    """fwd{mm, add}, bwd{mul}: one iteration of a host ET (no record-function ids)."""
    import polars as pl

    from charllm_trace.converters.host_et import HostET

    nodes = pl.DataFrame(
        {
            "id": [1, 2, 3, 4, 5],
            "name": ["fwd", "aten::mm", "aten::add", "bwd", "aten::mul"],
            "parent": [None, 1, 1, None, 4],
            "rf_id": [None] * 5,
            "et_tid": [1] * 5,
        },
        schema={"id": pl.Int64, "name": pl.String, "parent": pl.Int64, "rf_id": pl.Int64, "et_tid": pl.Int64},
    )
    empty = pl.DataFrame({"node": [], "tensor": []}, schema={"node": pl.Int64, "tensor": pl.String})
    return HostET("host.json", None, None, nodes, {}, empty, empty)


def _kineto_three_iterations():  # noqa: ANN202
    """ProfilerStep#1..#3 of 1 ms each on one thread; #1 and #3 lack the aten::add (as warm-up and
    cut iterations differ), #2 is the host ET's iteration."""
    import polars as pl

    rows: list[tuple] = []
    for k in (1, 2, 3):
        t = (k - 1) * 1000 * US
        step = len(rows)
        rows.append((step, f"ProfilerStep#{k}", "user_annotation", t, 900 * US, None))
        fwd = len(rows)
        rows.append((fwd, "fwd", "cpu_op", t + 10 * US, 300 * US, step))
        rows.append((fwd + 1, "aten::mm", "cpu_op", t + 20 * US, 100 * US, fwd))
        if k == 2:
            rows.append((len(rows), "aten::add", "cpu_op", t + 150 * US, 100 * US, fwd))
        bwd = len(rows)
        rows.append((bwd, "bwd", "cpu_op", t + 400 * US, 300 * US, step))
        rows.append((bwd + 1, "aten::mul", "cpu_op", t + 410 * US, 100 * US, bwd))
    ids, names, cats, starts, durs, parents = zip(*rows, strict=True)
    n = len(rows)
    return pl.DataFrame(
        {"id": ids, "name": names, "cat": cats, "start_ns": starts, "dur_ns": durs, "parent": parents,
         "on_gpu": [False] * n, "pid": [7] * n, "tid": [7] * n, "rf_id": [None] * n},
        schema_overrides={"parent": pl.Int64, "rf_id": pl.Int64},
    )  # fmt: skip


def test_constructed_pair_links_within_its_iteration() -> None:
    from charllm_trace.converters.link import link

    ev = _kineto_three_iterations()
    lk = link(_host_one_iteration(), ev, "kineto.json")
    assert lk.method == "name_order"
    assert lk.stats["kineto_window"] == "ProfilerStep#2 (1 of the profile's 3 steps)"
    got = dict(zip(lk.pairs["host_id"].to_list(), lk.pairs["id"].to_list(), strict=True))
    step2 = ev.filter(ev["start_ns"].is_between(1000 * US, 2000 * US - 1))
    want = {h: step2.filter(step2["name"] == n)["id"][0] for h, n in
            [(1, "fwd"), (2, "aten::mm"), (3, "aten::add"), (4, "bwd"), (5, "aten::mul")]}  # fmt: skip
    assert got == want


def test_constructed_pair_without_its_iteration_says_so() -> None:
    from charllm_trace.converters.link import link

    ev = _kineto_three_iterations()
    ev = ev.filter(ev["name"] != "aten::add")  # the host ET's iteration is in no window
    lk = link(_host_one_iteration(), ev, "kineto.json")
    assert lk.method == "none"
    assert lk.stats["fallback_reason"].startswith(
        "the host ET (5 ops) matches no window of the Kineto profile (15 CPU ops) nor the whole of it"
    )
