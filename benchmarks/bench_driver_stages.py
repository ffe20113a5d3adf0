"""Where the driver's memory goes, stage by stage, in ``analyze RUN --scheduler ADDR`` (issue 26
item 3: a driver that does not grow with ranks). Runnable by hand, not in CI.

Runs the command in this process (the analysing process, the driver; with ``local:N`` the Dask
scheduler runs in it too, its workers do not count) with the engine's stages wrapped: reading the
ranks' metadata, gathering the parts, the graph rounds (matching the collectives, each round,
solving the virtual points, the walk, making the critical path's rows), each registered
analysis' merge and the JSON writer. A thread reads ``VmRSS`` every 0.2 s; printed per stage:
RSS when the stage began and its highest sample while it ran (MiB), then ``VmHWM`` (the peak).
With a spill location (``-o FILE``) the reduction runs as one task on a worker
(``engine/driver.reduce_task``): the driver's stages are then waiting for it, receiving its result
and writing the output; the stages inside it are not sampled (they run in a worker, whose peak is
printed at the end: the largest ended child process's ``ru_maxrss``). The printed output of the
command itself is unchanged (``-o FILE`` recommended). Polars is set up
as the command sets it up; ``--without-driver-arena`` first leaves out the driver's one jemalloc
arena (``core/alloc.one_arena_for_driver``), for an A/B against it.

    python benchmarks/make_many_ranks.py 1024 /tmp/many/dlrm_1024
    python benchmarks/bench_driver_stages.py analyze /tmp/many/dlrm_1024 --no-cache \\
        --format json -o /tmp/many/out.json --scheduler local:2 --force
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_stage = ["start"]
_first: dict[str, float] = {}
_high: dict[str, float] = {}
_order: list[str] = []


def _status(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return 0.0


def _enter(label: str) -> None:
    _stage[0] = label
    if label not in _first:
        _order.append(label)
        _first[label] = _status("VmRSS:")
        _high[label] = _first[label]


def _sample() -> None:
    while True:
        r, s = _status("VmRSS:"), _stage[0]
        _high[s] = max(_high.get(s, 0.0), r)
        time.sleep(0.2)


def _wrap(mod: Any, name: str, label: str) -> None:
    real = getattr(mod, name)

    def wrapped(*a: Any, **k: Any) -> Any:
        _enter(label)
        try:
            return real(*a, **k)
        finally:
            _enter(label + " done")

    setattr(mod, name, wrapped)


def _wrap_fold(cls: type, label: str) -> None:
    """A graph round's fold (called once per gathered batch): the stage begins at its first batch."""
    real: Callable[..., Any] = cls.__call__  # type: ignore[operator]

    def call(self: Any, got: Any) -> Any:
        if _stage[0] != label:
            _enter(label)
        return real(self, got)

    cls.__call__ = call  # type: ignore[operator]


def _instrument() -> None:
    import charllm_trace.analysis.graph_merge as gm
    import charllm_trace.analysis.rank_parts as rp
    import charllm_trace.engine.cluster as cl
    import charllm_trace.engine.driver as drv
    import charllm_trace.engine.graph_fold as gf
    import charllm_trace.engine.graph_step as gs
    import charllm_trace.render.export as ex

    for mod, name, label in (
        (cl.DaskEngine, "run", "reduce on a worker"),
        (drv, "_reduced", "result received"),
        (drv, "_read", "read metadata"),
        (drv, "_hold", "gather parts"),
        (gs, "graph_step", "graph rounds"),
        (gs, "match_instances", "rounds: match"),
        (gm, "solve_virtual", "rounds: solve"),
        (gm, "bind_virtual", "rounds: bind"),
        (gs, "_walk", "rounds: walk"),
        (gs, "_critical", "rounds: critical path rows"),
        (rp, "merge_parts", "merge"),
        (ex, "_write_json", "write json"),
    ):
        if hasattr(mod, name):  # the stages of this checkout's engine
            _wrap(mod, name, label)
    for cls, label in (
        (gf.Instances, "rounds: instances"),
        (gf.Contracted, "rounds: join"),
        (gf.Summaries, "rounds: finish"),
    ):
        _wrap_fold(cls, label)
    real_resolve = rp.resolve

    def resolve(ref: str) -> Any:  # each registered merge, as merge_parts looks it up
        f = real_resolve(ref)

        def merged(*a: Any, **k: Any) -> Any:
            _enter("merge: " + ref.rsplit(":", 1)[-1])
            return f(*a, **k)

        return merged

    rp.resolve = resolve


def _as_the_command(driver_arena: bool) -> None:
    """Polars loaded with the settings the command gives it (``core/alloc.py``), which it can only
    get before it is imported, here before :func:`_instrument` imports it: the command's own
    allocator setting, and with a scheduler (``--scheduler`` or its variable) its driver's one
    arena unless ``driver_arena`` is false. (Until the seventh round this harness ran with
    polars' defaults: docs/benchmarks.md, "seventh round".)"""
    from charllm_trace.core import alloc
    from charllm_trace.engine import ENV

    scheduler = os.environ.get(ENV) or any(
        a == "--scheduler" or a.startswith("--scheduler=") for a in sys.argv
    )
    if scheduler and driver_arena:
        alloc.one_arena_for_driver()
    alloc.tune_polars_allocator()
    alloc.trim_heap_after_reads()


def main() -> int:
    threading.Thread(target=_sample, daemon=True).start()
    arena = sys.argv[1:2] != ["--without-driver-arena"]
    if not arena:
        del sys.argv[1]
    _as_the_command(arena)
    _instrument()
    from charllm_trace.cli.front import main as cli

    t0 = time.time()
    code: Any = 0
    sys.argv = ["charllm-trace", *sys.argv[1:]]
    try:
        cli()
    except SystemExit as exc:
        code = exc.code
    _enter("end")
    time.sleep(0.3)
    err = sys.stderr
    print(f"wall {time.time() - t0:.1f} s, exit {code}, peak (VmHWM) {_status('VmHWM:'):.0f} MiB", file=err)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"largest worker's peak (ru_maxrss of the ended child processes) {kids:.0f} MiB", file=err)
    print(f"{'at start':>9} {'highest':>8}  stage (MiB)", file=err)
    for s in _order:
        print(f"{_first[s]:9.0f} {_high[s]:8.0f}  {s}", file=err)
    return int(code) if isinstance(code, int) else 1


if __name__ == "__main__":  # the Dask workers are spawned: they import this module, not run it
    sys.exit(main())
