"""`export perfetto` draws each rank's critical path on a track of its own (issue 10).

The track ``critical path (rank N)`` holds one slice per segment of the rank's whole-trace
critical path (B/E duration events, so that the complete events stay one per trace node).
Checked offline with a strict reading of the file: the slices are the analysis' segments,
in order, with their names, categories and node ids; they nest (no partial overlaps);
the node slices are unchanged; ``--no-critical-path`` leaves the track out."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from charllm_trace.analysis.critical import critical_path
from charllm_trace.exports.perfetto import write_chrome_trace
from charllm_trace.inputs import loader
from tests.conftest import invoke as _invoke


@pytest.fixture
def source(a100_or_gloo: Path) -> Path:
    return a100_or_gloo


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)

    def bad(x: str) -> None:
        raise ValueError(f"non-JSON constant {x}")

    return json.loads(raw, parse_float=Decimal, parse_constant=bad)


def _slices_from_b_e(events: list[dict]) -> list[tuple[Decimal, Decimal, str, dict]]:
    """(ts, end, name, args) of the slices that B/E events open and close, as a reader pairs them
    (an E closes the innermost open B of its track), in file order; asserts every E has its B."""
    out = []
    stack: list[dict] = []
    for e in events:
        if e["ph"] == "B":
            stack.append(e)
        elif e["ph"] == "E":
            assert stack, "an E without a B"
            b = stack.pop()
            assert e["name"] == b["name"] and e["ts"] >= b["ts"]
            out.append((b["ts"], e["ts"], b["name"], b["args"]))
    assert not stack, "a B without its E"
    return out


def _nests(spans: list[tuple[Decimal, Decimal]]) -> bool:
    stack: list[Decimal] = []
    for ts, end in sorted(spans, key=lambda x: (x[0], -x[1])):
        while stack and stack[-1] <= ts:
            stack.pop()
        if stack and end > stack[-1]:
            return False
        stack.append(end)
    return True


def test_critical_path_track_per_rank(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json.gz"
    r = _invoke("export", "perfetto", str(source), "-o", str(out))
    assert r.exit_code == 0, r.output
    run = loader.load(source)
    cp = critical_path(run)
    doc = _load(out)
    events = doc["traceEvents"]
    origin = int(doc["otherData"]["origin_unix_ns"])
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    n_segments = 0
    for rank in run.ranks:
        tracks = [k for k, v in tnames.items() if v == f"critical path (rank {rank})"]
        assert len(tracks) == 1 and tracks[0][0] == rank
        on_track = [e for e in events if (e["pid"], e["tid"]) == tracks[0] and e["ph"] != "M"]
        assert {e["ph"] for e in on_track} == {"B", "E"}
        assert all(e["cat"] == "critical_path" for e in on_track)
        slices = _slices_from_b_e(on_track)
        seg = cp.segments.filter(
            (pl.col("scope") == "rank") & (pl.col("rank") == rank) & pl.col("step").is_null()
        ).sort("start_ns")
        assert len(slices) == seg.height > 0
        n_segments += seg.height
        for (ts, end, name, args), row in zip(slices, seg.iter_rows(named=True), strict=True):
            assert origin + int(ts * 1000) == row["start_ns"] and origin + int(end * 1000) == row["end_ns"]
            exp = row["name"] or row["category"]
            if row["seg_rank"] is not None and row["seg_rank"] != rank:
                exp += f" [rank {row['seg_rank']}]"
            assert name == exp
            assert args == {
                "category": row["category"],
                "node_id": row["node_id"],
                "seg_rank": row["seg_rank"],
            }
        # one after the other: the slices nest (no partial overlap) and cover the path
        assert _nests([(a, b) for a, b, _, _ in slices])
        assert all(slices[i][1] <= slices[i + 1][0] for i in range(len(slices) - 1))
        path = cp.paths.filter(
            (pl.col("scope") == "rank") & (pl.col("rank") == rank) & pl.col("step").is_null()
        ).row(0, named=True)
        covered = sum(int((b - a) * 1000) for a, b, _, _ in slices)
        assert covered == path["length_ns"]
    assert f"{n_segments} critical-path segments" in r.output

    # the rest of the file is what it is without the critical path
    plain = tmp_path / "plain.json.gz"
    r2 = _invoke("export", "perfetto", str(source), "-o", str(plain), "--no-critical-path")
    assert r2.exit_code == 0, r2.output
    assert "critical-path" not in r2.output
    doc2 = _load(plain)
    assert not any(
        "critical path" in v for v in (e.get("args", {}).get("name", "") for e in doc2["traceEvents"])
    )
    assert not any(e["ph"] in ("B", "E") for e in doc2["traceEvents"])

    def xs(d: dict) -> Counter:
        return Counter(
            (e["pid"], e["tid"], e["name"], e["ts"], e["dur"]) for e in d["traceEvents"] if e["ph"] == "X"
        )

    assert xs(doc) == xs(doc2)


def test_write_chrome_trace_without_a_result_has_no_track(gloo_ets: Path, tmp_path: Path) -> None:
    run = loader.load(gloo_ets)
    stats = write_chrome_trace(run, tmp_path / "a.json")
    assert stats.critical_path_segments == 0
    cp = critical_path(run)
    stats2 = write_chrome_trace(run, tmp_path / "b.json", critical_path=cp)
    assert stats2.tracks == stats.tracks + len(run.ranks)
    assert stats2.slices == stats.slices  # complete events: the nodes, as before
    assert (
        stats2.critical_path_segments
        == cp.segments.filter((pl.col("scope") == "rank") & pl.col("step").is_null()).height
    )
