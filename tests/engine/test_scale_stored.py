"""A driver and workers whose memory does not grow with the ranks (issue 26 item 3, third round),
through a real LocalCluster of 2 process workers:

- with a spill location (``-o FILE``) each rank's share of the execution graph is stored there by
  its analysis task and read back per graph round (``engine/graph_step.py`` ``_Stored``), instead
  of the workers keeping every rank's trace and graph (``_Held``, still used without ``-o``): the
  JSON of a generated 16-rank run equals the local path's either way, critical path on and off,
  and with a what-if;
- tasks go to the cluster a window at a time (``DaskEngine.map_gather``): the results come back
  in order and the scheduler never holds more than the window's tasks;
- each process group arrives once per rank but is held once (``driver._share_groups``)."""

from __future__ import annotations

import pickle

import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.core.model import ProcessGroup
from charllm_trace.engine import ENV
from charllm_trace.engine.cluster import GATHER_BATCH, open_engine, window
from charllm_trace.engine.driver import _share_groups
from charllm_trace.engine.tasks import RankMeta
from tests.engine.test_scale_dask import dask_cluster  # noqa: F401  (the fixture)
from tests.engine.test_scale_generated import _same, generated_run

pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def run16(tmp_path_factory):
    return generated_run(16, tmp_path_factory.mktemp("gen") / "r16")


def _doc(args: list[str], out=None) -> dict:
    import json

    r = CliRunner().invoke(
        main, ["analyze", *args, "--no-cache", "--format", "json", *(["-o", str(out)] if out else [])]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text() if out else r.stdout)
    doc.pop("source", None)
    return doc


@pytest.mark.parametrize(
    "extra",
    [[], ["--no-critical-path"], ["--what-if", "comm=0.5"]],
    ids=["critical-path", "no-critical-path", "what-if"],
)
def test_stored_graphs_equal_the_local_path(spawn, run16, tmp_path, monkeypatch, dask_cluster, extra):  # noqa: F811
    local = _doc([str(run16), *extra], tmp_path / "local.json")
    monkeypatch.setenv(ENV, dask_cluster)
    stored = _doc([str(run16), *extra], tmp_path / "dist.json")  # -o: the graphs stored beside it
    assert not list(tmp_path.glob(".*rows-*")), "the spill location (and its graphs) is removed"
    assert len(local["ranks"]) == 16
    if "--no-critical-path" not in extra:
        assert len(local["frames"]["critical_path"]) >= 16  # the graph rounds ran
    if "--what-if" in extra:
        assert local["frames"]["what_if"], "the what-if rows are compared"
        # the distributed what-if does not report the inferred-edge share (docs/scale.md)
        local["what_if"]["inferred_pct"] = None
    assert _same(local, stored) > 1000
    if not extra:  # without -o: the graphs kept on the workers (the held path) give the same
        assert _same(local, _doc([str(run16)])) > 1000


def _square(x: int) -> int:
    return x * x


@pytest.mark.cluster  # a Dask scheduler and two thread workers in this process
def test_map_gather_keeps_order_and_a_bounded_window():
    n = 5 * GATHER_BATCH + 7
    with open_engine("local-threads:2") as eng:
        ahead = window(eng.threads())
        seen: list[int] = []

        def each(batch: list[int]) -> list[int]:
            seen.append(eng.client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)))
            return [-x for x in batch]

        got = eng.map_gather(_square, list(range(n)), each=each)
    assert got == [-(x * x) for x in range(n)]
    assert len(seen) == 6  # one call per batch of GATHER_BATCH
    # at most the window beyond the batch gathered (whose release may not have reached the
    # scheduler yet), not every task: n is well over it
    assert 0 < max(seen) <= GATHER_BATCH + ahead < n


@pytest.mark.cluster  # a Dask scheduler and two thread workers in this process
def test_task_names_are_not_memoised_for_every_task():
    """Dask memoises the split of each task key it sees (``dask.utils.key_split``, up to
    100,000): every task has a key of its own, so that memo grew with the tasks a job ran.
    The engine empties it as it releases what it gathered (``cluster.forget_keys``)."""
    from dask.utils import key_split

    if not hasattr(key_split, "cache_info"):
        pytest.skip("this Dask does not memoise key_split (forget_keys does nothing there)")
    n = 4 * GATHER_BATCH
    with open_engine("local-threads:2") as eng:
        handles = eng.map(_square, list(range(n)))
        assert eng.gather(handles) == [x * x for x in range(n)]
        grown = key_split.cache_info().currsize
        eng.release(handles)
        released = key_split.cache_info().currsize
        got = eng.map_gather(_square, list(range(n)))
        after = key_split.cache_info().currsize
    assert grown >= n, "without the engine's release, a key memoised per task"
    # emptied (a worker thread of this process may split a key or two as it ends a task)
    assert released < GATHER_BATCH and after < GATHER_BATCH, (released, after)
    assert got == [x * x for x in range(n)]


def _map_from_a_worker(n: int, hold_s: float) -> tuple[list[int], int]:
    """A task that maps ``n`` tasks of its own (``worker_engine``), gathers them without
    releasing them and waits ``hold_s``: their results, and the memo's size then."""
    import time

    from dask.utils import key_split

    from charllm_trace.engine.cluster import worker_engine

    with worker_engine() as eng:
        got = eng.gather(eng.map(_square, list(range(n))))
        time.sleep(hold_s)
        return got, key_split.cache_info().currsize


@pytest.mark.cluster  # a Dask scheduler and two thread workers in this process
def test_a_task_run_on_a_worker_maps_tasks_and_the_driver_forgets_their_names(monkeypatch):
    """``DaskEngine.run``: one task on a worker that maps tasks of its own (how the reduction
    of a run with a spill location runs: ``engine/driver.reduce_task``); its result comes back,
    and while it runs the driver empties the memo of task names (the scheduler, here with
    ``local:N``, splits every task's key), without waiting for the task to release them."""
    from dask.utils import key_split

    import charllm_trace.engine.cluster as cluster

    if not hasattr(key_split, "cache_info"):
        pytest.skip("this Dask does not memoise key_split (forget_keys does nothing there)")
    cleared: list[int] = []
    real = cluster.forget_keys

    def forget() -> None:
        cleared.append(key_split.cache_info().currsize)
        real()

    monkeypatch.setattr(cluster, "forget_keys", forget)
    monkeypatch.setattr(cluster, "FORGET_EVERY_S", 0.05)
    n = 4 * GATHER_BATCH
    with open_engine("local-threads:2") as eng:
        got, held = eng.run(_map_from_a_worker, n, 0.5)
    assert got == [x * x for x in range(n)]
    # the task released nothing: only the driver's waiting emptied the names its tasks left
    assert held < GATHER_BATCH, (held, cleared)
    assert sum(cleared) >= n and len(cleared) >= 3, cleared


_CALLS: list[int] = []  # the calls of _slow (thread workers: this process)


def _slow(x: int) -> int:
    import time

    time.sleep(0.02)
    _CALLS.append(x)
    return x


def _map_slowly(n: int) -> int:
    from charllm_trace.engine.cluster import worker_engine

    with worker_engine() as eng:
        return len(eng.map_gather(_slow, list(range(n))))


@pytest.mark.cluster  # a Dask scheduler and two thread workers in this process
def test_a_task_given_up_by_its_client_stops_mapping():
    """A task that maps tasks of its own stops once its client gives it up (a stopped command
    releases it): Dask does not interrupt a running task, so it asks between two batches."""
    import time

    _CALLS.clear()
    n = 40 * GATHER_BATCH  # 2,560 calls of 20 ms on two threads: ~26 s if nothing stopped it
    with open_engine("local-threads:2") as eng:
        fut = eng.client.submit(_map_slowly, n, pure=False)
        deadline = time.monotonic() + 60
        while len(_CALLS) < GATHER_BATCH and time.monotonic() < deadline:
            time.sleep(0.05)
        fut.cancel()
        seen, still = -1, 0.0
        while still < 1.0 and time.monotonic() < deadline:  # until no call for 1 s
            time.sleep(0.1)
            still = still + 0.1 if len(_CALLS) == seen else 0.0
            seen = len(_CALLS)
    assert GATHER_BATCH <= seen < n // 4, seen  # the batches in flight ended, no more was sent


def test_groups_of_every_rank_are_held_once():
    n = 300
    one = pickle.dumps([ProcessGroup("0", "default_pg", tuple(range(n))), ProcessGroup("1", None, (0, 1))])
    metas = [RankMeta(r, f"rank{r}", pickle.loads(one), None, n, None) for r in range(n)]
    shared: dict = {}
    _share_groups(metas[:100], shared)
    _share_groups(metas[100:], shared)  # a later batch shares the first one's groups
    assert all(m.groups[0] is metas[0].groups[0] and m.groups[1] is metas[0].groups[1] for m in metas)
    assert metas[5].groups == pickle.loads(one)  # equal to what arrived
    assert len(shared) == 2
