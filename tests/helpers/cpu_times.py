"""CPU seconds per test, less sensitive to the machine's load than pytest's ``--durations``.

    CHARLLM_TEST_CPU_LOG=/tmp/cpu.jsonl python -m pytest -q -n auto --fast -p tests.helpers.cpu_times
    python -m tests.helpers.cpu_times /tmp/cpu.jsonl          # totals, then the costliest files

Each worker appends one JSON line per test: ``[id, wall s, CPU s of the worker (setup + call +
teardown), worker, CPU s of the child processes it reaped meanwhile]``, and one ``"<collection>"``
line with the time the worker took to collect. On a shared machine the wall time of a test is
mostly waiting for a core; its CPU time is what the test costs (docs/benchmarks.md, "The test
suite in tiers")."""

from __future__ import annotations

import collections
import json
import os
import sys
import time

import pytest

_T0: dict[str, float] = {}


def _log(row: list) -> None:
    path = os.environ.get("CHARLLM_TEST_CPU_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def children_cpu() -> float:
    """CPU seconds of the child processes reaped so far (also conftest's fast-tier process check)."""
    t = os.times()
    return t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ANN201
    w0, c0, k0 = time.perf_counter(), time.process_time(), children_cpu()
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
    w, c, k = time.perf_counter() - w0, time.process_time() - c0, children_cpu() - k0
    _log([item.nodeid.split("@")[0], round(w, 4), round(c, 4), worker, round(k, 4)])


def pytest_sessionstart(session: pytest.Session) -> None:
    _T0["wall"], _T0["cpu"] = time.perf_counter(), time.process_time()


def pytest_collection_finish(session: pytest.Session) -> None:
    w, c = time.perf_counter() - _T0["wall"], time.process_time() - _T0["cpu"]
    _log(["<collection>", round(w, 4), round(c, 4), os.environ.get("PYTEST_XDIST_WORKER", "-"), 0.0])


def summary(path: str, top: int = 25) -> str:
    rows = [json.loads(line) for line in open(path)]
    tests = [r for r in rows if r[0] != "<collection>"]
    lines = [
        f"{len(tests)} tests: wall {sum(r[1] for r in tests):.1f} s, CPU {sum(r[2] for r in tests):.1f} s "
        f"(+ children {sum(r[4] for r in tests if len(r) > 4):.1f} s); collection CPU per worker "
        + ", ".join(f"{r[3]} {r[2]:.1f} s" for r in rows if r[0] == "<collection>")
    ]
    by: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in tests:
        f = by[r[0].split("::")[0]]
        f[0], f[1], f[2] = f[0] + r[2], f[1] + r[1], f[2] + 1
    for name, (cpu, wall, n) in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{cpu:7.1f} s CPU {wall:8.1f} s wall {n:4d} tests  {name}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(sys.argv[1]))
