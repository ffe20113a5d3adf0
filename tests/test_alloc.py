"""``import charllm_trace`` loads polars with jemalloc returning freed pages after 100 ms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Allocates ~400 MiB in polars (in 2 MB columns, below jemalloc's size for returning memory at
# once), frees it, waits 0.3 s, and reports resident memory at each point.
PROBE = """
import json, os, sys, time
import charllm_trace
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
import polars as pl
before = rss()
parts = [pl.int_range(0, 250_000, eager=True) * k for k in range(200)]
full = rss()
del parts
time.sleep(0.3)
print(json.dumps({"before": before, "full": full, "after": rss(), "var": os.environ.get("_RJEM_MALLOC_CONF")}))
"""


def _probe(env: dict[str, str]) -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("_RJEM_MALLOC_CONF", "CHARLLM_TRACE_ALLOC")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**e, **env}, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")
def test_freed_polars_memory_goes_back_within_300_ms() -> None:
    r = _probe({})
    assert r["full"] - r["before"] > 300  # the 400 MB of columns were resident
    assert r["after"] - r["before"] < 0.15 * (r["full"] - r["before"])  # and were given back
    assert "dirty_decay_ms:100" not in (r["var"] or "")  # set for polars' import only
    # with polars' own settings (0.5 s before any page goes back) they are still resident
    d = _probe({"CHARLLM_TRACE_ALLOC": "default"})
    assert d["after"] - d["before"] > 0.15 * (d["full"] - d["before"])


def test_a_users_own_setting_or_opt_out_wins() -> None:
    code = (
        "import os, sys; import charllm_trace; from charllm_trace import _alloc; "
        "print(os.environ.get('_RJEM_MALLOC_CONF'), _alloc.tune_polars_allocator())"
    )
    e = {k: v for k, v in os.environ.items() if k not in ("_RJEM_MALLOC_CONF", "CHARLLM_TRACE_ALLOC")}
    mine = subprocess.run(
        [sys.executable, "-c", code],
        env={**e, "_RJEM_MALLOC_CONF": "dirty_decay_ms:5000"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # polars appends the user's value to its own; charllm-trace added nothing
    assert mine[0].endswith(",dirty_decay_ms:5000") and "dirty_decay_ms:100" not in mine[0]
    assert mine[1] == "False"  # nothing to do once polars is in
    off = subprocess.run(
        [sys.executable, "-c", "import polars, charllm_trace; from charllm_trace import _alloc; "
         "print(_alloc.tune_polars_allocator())"],
        env={**e, "CHARLLM_TRACE_ALLOC": "default"}, cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert off == ["False"]
