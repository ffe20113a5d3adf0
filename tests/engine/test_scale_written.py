"""The files the workers wrote, as the driver holds them (``engine/spill.Written``): each frame's
ranks, in the order gathered; a part's file dropped; a file elsewhere than where the driver reads
is refused."""

from __future__ import annotations

import polars as pl
import pytest

from charllm_trace.engine.spill import Written, rows_file


def test_written_gives_each_frames_files_in_order_and_drops_one(tmp_path) -> None:
    w = Written(str(tmp_path))
    for r in (4, 2, 7):
        df = pl.DataFrame({"rank": [r, r], "v": [r * 10, r * 10 + 1]})
        w.add(
            r,
            {"a": rows_file(str(tmp_path), "a", r)}
            | ({"b": rows_file(str(tmp_path), "b", r)} if r != 2 else {}),
        )
        for name in ("a", "b"):
            p = tmp_path / name / f"rank-{r}.arrow"
            p.parent.mkdir(exist_ok=True)
            df.with_columns(pl.lit(name).alias("f")).write_ipc(p)
    files = w.files()
    assert list(files["a"].ranks) == [4, 2, 7] and list(files["b"].ranks) == [4, 7]
    assert [d["v"].to_list() for d in files["a"]()] == [[40, 41], [20, 21], [70, 71]]
    w.drop(2, "b")  # the third part gathered (rank 7)
    w.drop(1, "b")  # rank 2 wrote no b: nothing to drop
    assert list(w.files()["b"].ranks) == [4]
    w.drop(0, "b")
    assert "b" not in w.files()


def test_written_refuses_a_file_elsewhere(tmp_path) -> None:
    w = Written(str(tmp_path))
    with pytest.raises(ValueError, match="rank 3 wrote its a rows"):
        w.add(3, {"a": str(tmp_path / "a" / "rank-4.arrow")})
