"""Waiting vs transferring (analysis/comm_wait.py) on hand-built runs whose answer is known, and on
the 4-rank pipeline fixture (every send/recv matched; waiting + transfer = the op's duration)."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from charllm_trace.analysis.api import analyze_run
from charllm_trace.analysis.comm_wait import NO_MATCH, PEER_VIA_PP
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.core.model import ProcessGroup, Run
from charllm_trace.inputs.loader import load
from tests.conftest import FIXTURES
from tests.helpers.analysis_helpers import kernel, make_trace

MS = 1_000_000
OPTS = AnalyzeOptions(critical_path=False)
DP = ProcessGroup(name="5", desc="dp", ranks=(0, 1))
PP = ProcessGroup(name="7", desc="pp", ranks=(0, 1))


def comm(id: int, ctype: str, start: int, dur: int, **kw: Any) -> dict[str, Any]:
    nt = {"send": "COMM_SEND", "recv": "COMM_RECV"}.get(ctype, "COMM_COLL")
    kw.setdefault("comm_bytes", 8 * MS)
    return kernel(id, f"nccl:{ctype}", start, dur, coll_type=ctype, node_type=nt, **kw)


def run_of(rows: dict[int, list[dict[str, Any]]], groups: tuple[ProcessGroup, ...] = (DP, PP)) -> Run:
    return Run(
        traces={
            r: make_trace(x, rank=r, world_size=len(rows), process_groups=groups) for r, x in rows.items()
        }
    )


def split(run: Run):  # type: ignore[no-untyped-def]
    res = analyze_run(run, OPTS)
    assert res.comm_wait is not None, res.skipped
    return res.comm_wait


def test_collective_waits_for_its_last_participant() -> None:
    # rank 1 arrives 4 ms late; both end together at 10 ms
    cw = split(
        run_of({
            0: [comm(1, "all_reduce", 0, 10 * MS, pg_name="5", coll_seq=0)],
            1: [comm(1, "all_reduce", 4 * MS, 6 * MS, pg_name="5", coll_seq=0)],
        })
    )  # fmt: skip
    ops = cw.ops.sort("rank")
    assert ops["wait_ns"].to_list() == [4 * MS, 0]
    assert ops["transfer_ns"].to_list() == [6 * MS, 6 * MS]
    assert ops["late_rank"].to_list() == [1, 1]
    # all_reduce of 2: bus factor 2(n-1)/n = 1; 8 MB over 10 ms and over the 6 ms of transfer
    assert ops["busbw_gbps"].to_list() == pytest.approx([0.8, 8e6 / 6e6])
    assert ops["transfer_busbw_gbps"].to_list() == pytest.approx([8e6 / 6e6] * 2)
    d = cw.by_dim.row(0, named=True)
    assert (d["dim"], d["coll_type"], d["count"], d["wait_ns"], d["transfer_ns"]) == (
        "dp",
        "all_reduce",
        2,
        4 * MS,
        12 * MS,
    )
    by_rank = {r["rank"]: r for r in cw.by_rank.iter_rows(named=True)}
    assert by_rank[1]["caused_wait_ns"] == 4 * MS and by_rank[1]["n_last"] == 1
    assert by_rank[0]["wait_ns"] == 4 * MS and by_rank[0]["caused_wait_ns"] == 0
    assert cw.by_rank["rank"][0] == 1  # the straggler first


def test_send_matched_with_its_recv_on_the_peer() -> None:
    # the k-th send 0->1 with the k-th recv on 1 from 0: two pairs, the receiver late then early
    cw = split(
        run_of({
            0: [comm(1, "send", 0, 3 * MS, pg_name="7", peer=1), comm(2, "send", 10 * MS, 2 * MS, pg_name="7", peer=1)],
            1: [comm(1, "recv", 1 * MS, 2 * MS, pg_name="7", peer=0), comm(2, "recv", 9 * MS, 3 * MS, pg_name="7", peer=0)],
        })
    )  # fmt: skip
    ops = cw.ops.sort("rank", "start_ns")
    assert ops["match_key"].to_list() == [0, 1, 0, 1]
    assert ops["peer"].to_list() == [1, 1, 0, 0]
    assert ops["wait_ns"].to_list() == [1 * MS, 0, 0, 1 * MS]
    assert ops["transfer_ns"].to_list() == [2 * MS, 2 * MS, 2 * MS, 2 * MS]
    assert cw.by_dim["coll_type"].to_list() == ["recv", "send"] and set(cw.by_dim["dim"]) == {"pp"}
    assert cw.by_dim["wait_ns"].to_list() == [1 * MS, 1 * MS]
    assert not cw.notes


def test_group_less_p2p_peer_is_read_in_the_pipeline_group() -> None:
    # gloo: no process group on the op, the peer is a rank of the (pipeline) group used: 1 -> global 2
    pp = ProcessGroup(name="1", desc="pp", ranks=(0, 2))
    rows = {
        0: [comm(1, "send", 0, 2 * MS, peer=1)],
        2: [comm(1, "recv", 0, 2 * MS, peer=0)],
    }
    run = Run(traces={r: make_trace(x, rank=r, world_size=4, process_groups=(pp,)) for r, x in rows.items()})
    cw = split(run)
    assert cw.ops.sort("rank")["peer"].to_list() == [2, 0]
    assert any(PEER_VIA_PP in n for n in cw.notes)


def test_unmatched_and_mismatched_ops_are_noted_with_their_time() -> None:
    cw = split(
        run_of({
            0: [
                comm(1, "send", 0, 2 * MS, pg_name="7", peer=1),
                comm(2, "send", 5 * MS, 3 * MS, pg_name="7", peer=1),  # its recv is missing
                comm(3, "all_reduce", 20 * MS, 1 * MS, pg_name="5", coll_seq=0),  # rank 1 lacks it
                comm(4, "all_reduce", 30 * MS, 1 * MS, coll_seq=1),  # no process group
            ],
            1: [comm(1, "recv", 0, 2 * MS, pg_name="7", peer=0, comm_bytes=4 * MS)],  # sizes differ
        })
    )  # fmt: skip
    notes = " | ".join(cw.notes)
    assert "1 sends/recvs without their peer's matching op" in notes and "(3.000 ms)" in notes
    assert "1 matched send/recv pairs whose sizes differ" in notes
    assert "1 collectives not seen on every rank of their group (1.000 ms)" in notes
    assert "1 collectives without a process group" in notes
    assert cw.ops.height == 2  # the one matched pair


def test_one_rank_matches_nothing_with_the_reason() -> None:
    res = analyze_run(run_of({0: [comm(1, "all_reduce", 0, MS, pg_name="5", coll_seq=0)]}), OPTS)
    assert res.comm_wait is None and res.skipped["comm_wait"] == NO_MATCH


def test_fixture_every_pipeline_send_meets_its_recv() -> None:
    res = analyze_run(load(FIXTURES / "cpu-4rank-pp2-dp2"), OPTS)
    cw = res.comm_wait
    assert cw is not None
    p2p = cw.ops.filter(pl.col("coll_type").is_in(["send", "recv"]))
    # 4 ranks x 2 steps x 4 microbatches x (1 send + 1 recv)
    assert p2p.height == 64 and set(p2p["dim"]) == {"pp"}
    assert (p2p["wait_ns"] + p2p["transfer_ns"] == p2p["dur_ns"]).all()  # exactly
    assert ((p2p["wait_ns"] >= 0) & (p2p["transfer_ns"] >= 0)).all()
    # pipelines {0, 2} and {1, 3}: every op's peer is the other stage of its pipeline
    assert dict(p2p.select("rank", "peer").unique().iter_rows()) == {0: 2, 2: 0, 1: 3, 3: 1}
    assert not any("without their peer" in n for n in cw.notes)


def test_analyze_table_and_report_show_the_split(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from charllm_trace.render.report import render_report, report_data
    from tests.conftest import invoke

    out = invoke("analyze", str(FIXTURES / "cpu-4rank-pp2-dp2"), "--no-critical-path").output
    assert "waiting vs transferring, by dimension" in out and "Stragglers by the waiting they caused" in out
    run = load(FIXTURES / "cpu-4rank-pp2-dp2")
    page = render_report(report_data(run, analyze_run(run, OPTS)))
    assert 'id="comm-wait"' in page and "transfer-only busbw GB/s" in page


def test_group_less_collective_is_matched_where_its_group_is_certain() -> None:
    # no process group named at all: the world; one group of several ranks: that group
    def rows(start1: int) -> dict[int, list[dict[str, Any]]]:
        return {
            0: [comm(1, "all_reduce", 0, 5 * MS, coll_seq=0)],
            1: [comm(1, "all_reduce", start1, 5 * MS - start1, coll_seq=0)],
        }

    world = split(run_of(rows(2 * MS), groups=()))
    assert world.ops.sort("rank")["wait_ns"].to_list() == [2 * MS, 0]
    assert world.ops["pg_name"].is_null().all() and not world.notes
    one = split(run_of(rows(1 * MS), groups=(DP,)))
    assert one.ops["pg_name"].to_list() == ["5", "5"] and one.ops["dim"].to_list() == ["dp", "dp"]
    assert one.ops.sort("rank")["wait_ns"].to_list() == [1 * MS, 0]


def test_dlrm_8_ranks_every_collective_is_split() -> None:
    from tests.conftest import shared_trace

    cw = split(load(shared_trace("param/dlrm_8ranks_v100")))
    # one process group (the world, named nowhere): 8 collectives on each of 8 ranks, all matched
    assert cw.ops.height == 64 and not cw.notes
    assert set(cw.ops["n_ranks"]) == {8}
    assert (cw.ops["wait_ns"] + cw.ops["transfer_ns"] == cw.ops["dur_ns"]).all()
