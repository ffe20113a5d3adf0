"""Arrow buffers reach polars through pyarrow (issue 12 item 2): no hand-written Arrow C structures
or release callbacks in the package, no copy of the decoder's buffers, and a process that still
holds decoded or cached tables when it exits (with an audit hook, which made ctypes callbacks
crash at shutdown) exits cleanly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import charllm_trace
from charllm_trace.et._arrow import primitive_column, utf8_column, view_column
from charllm_trace.et.oracle import views_numpy

PKG = Path(charllm_trace.__file__).resolve().parent


def test_no_hand_written_arrow_structures() -> None:
    pattern = re.compile(r"ctypes\.Structure|CFUNCTYPE|PyCapsule_New|PyCapsule_GetPointer|arrow_array_stream")
    found = [
        f"{p.relative_to(PKG)}:{i}"
        for p in PKG.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []


def test_columns_share_the_numpy_buffers() -> None:
    values = np.arange(10, dtype=np.int64)
    present = np.ones(10, bool)
    present[3] = False
    s = primitive_column("x", values, present)
    values[5] = -7  # the series reads the same memory
    assert s[5] == -7 and s[3] is None and s.null_count() == 1
    data = np.frombuffer(bytearray(b"a short one and then a much longer string" + b"\0" * 16), np.uint8)
    starts = np.array([0, 12], np.int64)
    lengths = np.array([11, 26], np.int64)
    t = utf8_column(data, starts, lengths, "t")
    assert t.to_list() == ["a short one", "and then a much longer str"]
    data[12] = ord("A")  # the long string is not inlined: a view into data
    assert t[1] == "And then a much longer str"
    v = view_column(views_numpy(data, starts, lengths), data, "v", np.array([True, False]))
    assert v.to_list() == ["a short one", None]


def test_tables_alive_at_exit_with_an_audit_hook(spawn, tmp_path: Path, gloo_ets: Path) -> None:
    run = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"
    code = (
        "import sys\n"
        "sys.addaudithook(lambda event, args: None)\n"
        "import charllm_trace as ct\n"
        f"kept = [ct.load(p, cache=c) for p in ({str(gloo_ets)!r}, {str(run)!r}) for c in (False, True, True)]\n"
        "print(sum(t.nodes.height for r in kept for t in r.traces.values()))\n"
    )
    env = {"CHARLLM_TRACE_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.strip()) > 0
