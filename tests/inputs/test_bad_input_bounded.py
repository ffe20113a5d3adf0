"""Inputs that once took the machine down now stay within bounded memory (issue 15, item 1).
Each runs the real CLI in a subprocess whose address space is capped, so a regression fails the
test instead of exhausting the machine."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from tests.bad_inputs import valid

CAP = 2 << 30  # address space of the command (polars and numpy reserve a few hundred MB)


def _run(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    return subprocess.run(
        [sys.executable, "-m", "charllm_trace.cli.app", *args],
        capture_output=True, text=True, timeout=120, preexec_fn=cap,
        env={"CHARLLM_TRACE_CACHE_DIR": str(tmp / "cache"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_whitespace_inside_trace_events_is_read_in_bounded_memory(spawn, tmp_path: Path) -> None:
    """4 MB of whitespace inside traceEvents (legal JSON) grew past 5 GB and ran for 300 s; now
    the profile is read as the same events, within the cap."""
    doc = valid.kineto_doc()
    data = json.dumps(doc).encode()
    padded = data.replace(b'"traceEvents": [', b'"traceEvents": [' + b" \n\t" * ((4 << 20) // 3), 1)
    padded = padded.replace(b"}, {", b"}," + b"\n" * 4096 + b"{")
    p = tmp_path / "rank-0.json"
    p.write_bytes(padded)
    q = valid.kineto(tmp_path, "plain.json", doc)
    r = _run(["analyze", str(p), "--format", "json"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    plain = _run(["analyze", str(q), "--format", "json"], tmp_path)
    a, b = json.loads(r.stdout), json.loads(plain.stdout)
    assert a["frames"] == b["frames"]


def test_host_et_of_equal_ids_is_refused_before_any_join(spawn, tmp_path: Path) -> None:
    """A host ET whose node ids were all equal made convert grow to 24 GB (a many-to-many join
    on id); now it is one line naming the repeated id, within the cap."""
    run = valid.run_dir(tmp_path)
    p = run / "rank-0.host_et.json.gz"
    doc = valid.load(p)
    for n in doc["nodes"]:
        n["id"] = 7
    valid.dump(p, doc)
    r = _run(["convert", str(run), "-o", str(tmp_path / "ets")], tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert r.stderr.count("\n") == 1 and "node id 7 appears" in r.stderr, r.stderr
