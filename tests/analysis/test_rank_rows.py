"""``analysis/rank_rows.py`` against the merges it mirrors (no Dask): the ranks' parts with their
rank rows taken out (``take_rows``), the time breakdown summed part by part (``RowsFold``),
merged, then the rows put back (``RunAnalysis.with_rows``) give every frame of the merge of the
untouched parts, to the bit — on the shared DLRM set (8 ranks, and one rank alone) and the 2-rank
fixture run, with and without --per-step and --breakdown-top."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, shared_trace

from charllm_trace.analysis.api import run_dims
from charllm_trace.analysis.bandwidth import run_hosts
from charllm_trace.analysis.group_size import ranks_per_node
from charllm_trace.analysis.rank_parts import analyze_rank, merge_parts
from charllm_trace.analysis.rank_rows import BREAKDOWN_ROWS, RANK_ROWS, RowsFold, take_rows
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.inputs.loader import load

OPTIONS = [
    AnalyzeOptions(critical_path=False),
    AnalyzeOptions(critical_path=False, per_step=True, breakdown_top=3),
]


def _parts(run, options):
    dims, hosts, gpus = run_dims(run, options), run_hosts(run), ranks_per_node(run.manifest)
    return [analyze_rank(r, run.traces[r], options, dims, hosts, node_gpus=gpus) for r in run.ranks]


def _merge(run, parts, options):
    return merge_parts(
        parts, options, manifest=run.manifest, source=run.source, graph_step=lambda *a: (None, None)
    )


def _check(run, options) -> int:
    held = _merge(run, _parts(run, options), options)
    parts = _parts(run, options)
    rows = [dict(take_rows(p, options.breakdown_top)) for p in parts]
    fold = RowsFold(options.breakdown_top)
    for i in range(0, len(parts), 3):  # batches, as gathered
        fold.add(parts[i : i + 3])
    res = _merge(run, parts, options)
    files = [{k: f"{i}/{k}" for k in r} for i, r in enumerate(rows)]
    fold.apply(res, lambda i, name: files[i].pop(name, None))
    for name in {k for f in files for k in f}:
        ranks = [i for i, f in enumerate(files) if name in f]
        res.spilled[name] = lambda ranks=ranks, name=name: (rows[i][name] for i in ranks)
    taken = sum(res.frames()[name].height == 0 for name in res.spilled)
    res = res.with_rows()
    a, b = held.frames(), res.frames()
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].equals(b[name]), name
    assert held.notes() == res.notes() and held.skipped == res.skipped
    return taken


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "per-step-top3"])
def test_rank_rows_put_back_equal_the_merge_dlrm(options):
    run = load(shared_trace("param/dlrm_8ranks_v100"), cache=False)
    assert _check(run, options) >= 5  # most of the rank-row frames had rows to take


def test_rank_rows_of_one_rank_and_of_the_fixture():
    run = load(shared_trace("param/dlrm_8ranks_v100"), cache=False, ranks=[5])
    _check(run, OPTIONS[1])  # one rank: no all-ranks rows, its own breakdown rows kept
    _check(load(FIXTURES / "cpu-2rank-gloo", cache=False), OPTIONS[1])


def test_every_declared_frame_is_a_registered_frame():
    from charllm_trace.analysis.registry import ANALYSES

    names = {f.name for a in ANALYSES for f in a.frames}
    assert {rr.frame for rr in RANK_ROWS} | set(BREAKDOWN_ROWS) <= names
