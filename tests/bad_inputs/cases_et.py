"""Bad Chakra ETs, each given to every command that reads one."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bad_inputs import valid
from tests.bad_inputs.registry import (
    _raw,
    bad_input,
    gzip_bomb,
)

# --- Chakra ETs ---------------------------------------------------------------------------------


def _et_of(d: Path, change: Callable[[Any], Any], name: str = "rank-0.et") -> Path:
    """``small_trace()`` changed by ``change(trace) -> trace``, written as an ET."""
    from charllm_trace.et.writer import write_et
    from tests.helpers.et_traces import small_trace

    p = d / name
    write_et(change(small_trace()), p)
    return p


def _et_bytes(d: Path, name: str, change: Callable[[bytes], bytes]) -> Path:
    p = valid.et(d, "good.et")
    data = p.read_bytes()
    p.unlink()
    return _raw(d, name, change(data))


@bad_input("et", ("rank-0.et", "empty"))
def et_empty(d: Path) -> Path:
    return _raw(d, "rank-0.et", b"")


@bad_input("et", ("rank-0.et",))
def et_random_bytes(d: Path) -> Path:
    return _raw(d, "rank-0.et", bytes((i * 7919 + 13) % 256 for i in range(4000)))


@bad_input("et", ("rank-0.et", "truncated"))
def et_truncated_mid_message(d: Path) -> Path:
    return _et_bytes(d, "rank-0.et", lambda b: b[:-7])


@bad_input("et", ("rank-0.et",))
def et_json_text(d: Path) -> Path:
    return _raw(d, "rank-0.et", json.dumps(valid.kineto_doc()).encode())


@bad_input("et", ("rank-0.et.gz",))
def et_gzip_bomb_zeros(d: Path) -> Path:
    return _raw(d, "rank-0.et.gz", gzip_bomb(b"\0"))


@bad_input("et", ("rank-0.et.gz",))
def et_gzip_bomb_of_garbage(d: Path) -> Path:
    return _raw(d, "rank-0.et.gz", gzip_bomb(b"\xff\x01"))


@bad_input("et", ("rank-0.et.gz",))
def et_gzip_truncated(d: Path) -> Path:
    return _et_bytes(d, "rank-0.et.gz", lambda b: gzip.compress(b)[:-20])


@bad_input("et", ("rank-0.et", "FIFO"))
def et_fifo(d: Path) -> Path:
    os.mkfifo(d / "rank-0.et")
    return d / "rank-0.et"


@bad_input("et", ("rank-0.et", "dangling"))
def et_dangling_symlink(d: Path) -> Path:
    (d / "rank-0.et").symlink_to(d / "gone.et")
    return d / "rank-0.et"


@bad_input("et", ("rank-0.et", "loop"))
def et_symlink_loop(d: Path) -> Path:
    (d / "rank-0.et").symlink_to(d / "x.et")
    (d / "x.et").symlink_to(d / "rank-0.et")
    return d / "rank-0.et"


_GRAPH_CMDS = ("info", "analyze", "report", "perfetto", "astra-sim")  # sanitize copies, not reads, a graph


@bad_input("et", ("rank-0.et", "appears 2 times"), only=_GRAPH_CMDS)
def et_duplicate_node_ids(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.repeat_first_node(valid.et(d))


@bad_input("et", ("rank-0.et", "appears 2 times"), only=_GRAPH_CMDS)
def et_every_node_twice(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.every_node_twice(valid.et(d))


@bad_input("et", ("rank-0.et", "negative duration"), only=_GRAPH_CMDS)
def et_negative_duration(d: Path) -> Path:
    import polars as pl

    def change(t: Any) -> Any:
        t.nodes = t.nodes.with_columns(pl.Series("dur_ns", [-100_000, 2_000, 40_001, 499], dtype=pl.Int64))
        return t

    return _et_of(d, change)


@bad_input("et", ("rank-0.et", "beyond any real trace"), only=_GRAPH_CMDS)
def et_start_near_int64_max(d: Path) -> Path:
    import polars as pl

    def change(t: Any) -> Any:
        t.nodes = t.nodes.with_columns(pl.Series("start_ns", [2**63 - 10, 2**63 - 5, 2**63 - 3, 2**63 - 2]))
        return t

    return _et_of(d, change)


@bad_input("et", ("rank-0.et", "cycle"), only=_GRAPH_CMDS)
def et_dependency_cycle(d: Path) -> Path:
    import polars as pl

    def change(t: Any) -> Any:
        t.deps = pl.DataFrame({"node": [2, 3, 1], "dep": [1, 2, 3], "kind": ["ctrl", "ctrl", "ctrl"]})
        return t

    return _et_of(d, change)


@bad_input("et", ("rank-0.et",), only=_GRAPH_CMDS)
def et_dependency_on_missing_node(d: Path) -> Path:
    import polars as pl

    def change(t: Any) -> Any:
        t.deps = pl.DataFrame({"node": [2], "dep": [999], "kind": ["data"]})
        return t

    return _et_of(d, change)


@bad_input("et", ("rank-0.et", "99.0.0"), only=_GRAPH_CMDS)
def et_unsupported_schema_version(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.with_global_version(valid.et(d), "99.0.0")


@bad_input("et", ("rank-0.et", "999"), only=_GRAPH_CMDS)
def et_unsupported_model_version(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.with_global_attr(valid.et(d), "charllm.model_version", 999)


@bad_input("et", ("rank-0.et",), only=_GRAPH_CMDS)
def et_telemetry_rows_1e12(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.with_global_attr(valid.et(d), "charllm.telemetry.rows", 10**12)


@bad_input("et", ("rank-0.et", "truncated"), only=_GRAPH_CMDS)
def et_cut_at_message_boundary(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.drop_last_message(valid.et(d))


@bad_input("et", ("rank-0.et", "charllm.rank", "expected an integer"), only=_GRAPH_CMDS)
def et_rank_a_string(d: Path) -> Path:  # issue 28: polars' InvalidOperationError, exit 3
    from tests.bad_inputs import et_edit

    return et_edit.with_global_attr(valid.et(d), "charllm.rank", "zero")


@bad_input("et", ("rank-0.et", "charllm.rank", "not below"), only=_GRAPH_CMDS)
def et_rank_5_of_world_2(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.with_global_attr(
        et_edit.with_global_attr(valid.et(d), "charllm.world_size", 2), "charllm.rank", 5
    )


@bad_input("et", ("rank-0.et", "GlobalMetadata"))
def et_without_global_metadata(d: Path) -> Path:  # issue 28: sanitize's DecodeError, exit 3
    from tests.bad_inputs import et_edit

    p = valid.et(d)
    return et_edit._write(p, et_edit._messages(p)[1:])


@bad_input("et", ("rank-0.et", "charllm.run is not a JSON object"), only=_GRAPH_CMDS)
def et_manifest_a_list(d: Path) -> Path:  # issue 28: accepted silently
    from tests.bad_inputs import et_edit

    return et_edit.with_global_attr(valid.et(d), "charllm.run", "[1, 2]")


@bad_input("et", ("rank-0.et", "negative comm_size"), only=_GRAPH_CMDS)
def et_negative_comm_size(d: Path) -> Path:  # issue 28: accepted silently
    import polars as pl

    def change(t: Any) -> Any:
        t.nodes = t.nodes.with_columns(
            pl.Series("comm_bytes", [None, None, -(4 << 20), 1024], dtype=pl.Int64)
        )
        return t

    return _et_of(d, change)
