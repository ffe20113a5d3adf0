"""The driver's compaction of gathered rank parts (``engine/compact.py``, issue 11): each part's
frames equal what arrived, and the run's analysis from compacted parts is the same, byte for byte
in ``analyze --format json``."""

from __future__ import annotations

import dataclasses
import pickle

import polars as pl

from charllm_trace.analysis.api import dims_of
from charllm_trace.analysis.bandwidth import hosts_of
from charllm_trace.analysis.rank_parts import merge_parts
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.engine.compact import HeldParts, compact_batch
from charllm_trace.engine.plan import plan
from charllm_trace.engine.tasks import analyze_task, load_rank, rank_meta
from charllm_trace.render.export import to_json
from tests.conftest import FIXTURES, shared_trace


def _parts(path, opts):
    p = plan(str(path))
    loaded = [load_rank(s) for s in p.specs]
    metas = [rank_meta(x) for x in loaded]
    dims = dims_of([m.groups for m in metas], p.manifest, opts)
    hosts = hosts_of(p.manifest, {m.rank: m.hostname for m in metas})
    return [analyze_task(x, opts, dims, hosts) for x in loaded], p.manifest


def _frames(obj, path=()):
    if isinstance(obj, pl.DataFrame):
        yield path, obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _frames(getattr(obj, f.name), (*path, f.name))
    elif isinstance(obj, tuple | list):
        for i, x in enumerate(obj):
            yield from _frames(x, (*path, i))
    elif isinstance(obj, dict):  # RankPart.parts: each registered analysis' part, by name
        for k, x in obj.items():
            yield from _frames(x, (*path, k))


def _merge(parts, opts, manifest):
    return merge_parts(parts, opts, manifest=manifest, source="x", graph_step=lambda s, n, sim: (None, None))


def test_compacted_parts_equal_and_merge_to_the_same_json() -> None:
    opts = AnalyzeOptions(per_step=True, critical_path=False)
    parts, manifest = _parts(shared_trace("param/dlrm_8ranks_v100"), opts)
    wire = [pickle.dumps(p) for p in parts]  # as gathered: each part unpickled on its own
    want = to_json(_merge([pickle.loads(b) for b in wire], opts, manifest))
    got = compact_batch([pickle.loads(b) for b in wire[:5]]) + compact_batch(
        [pickle.loads(b) for b in wire[5:]]
    )
    n = 0
    for a, b in zip(parts, got, strict=True):
        fa, fb = dict(_frames(a)), dict(_frames(b))
        assert fa.keys() == fb.keys()
        for k in fa:
            assert fa[k].equals(fb[k], null_equal=True), k
            assert fa[k].schema == fb[k].schema, k
            n += 1
    assert n >= 8 * 10  # a dozen frames per rank
    # one frame per place and schema: every rank's collective rows share one buffer
    assert (
        len({p.parts["bandwidth"].coll.to_arrow().column(0).chunks[0].buffers()[1].address for p in got[:5]})
        == 1
    )
    assert to_json(_merge(got, opts, manifest)) == want


def test_parts_without_some_frames_or_with_other_schemas_are_kept() -> None:
    """A rank whose frame is missing (None), empty or of another schema keeps it as it was."""
    opts = AnalyzeOptions(critical_path=False)
    parts, manifest = _parts(FIXTURES / "cpu-2rank-gloo", opts)
    wire = [pickle.dumps(p) for p in parts]
    want = to_json(_merge([pickle.loads(b) for b in wire], opts, manifest))
    a, b = (pickle.loads(x) for x in wire)
    b.parts["bandwidth"].coll = b.parts["bandwidth"].coll.head(0)  # empty: not concatenated
    a.parts["energy"].energy = None
    got = compact_batch([a, b])
    assert got[1].parts["bandwidth"].coll.height == 0 and got[0].parts["energy"].energy is None
    assert got[0].parts["bandwidth"].coll.equals(pickle.loads(wire[0]).parts["bandwidth"].coll)
    a2, b2 = (pickle.loads(x) for x in wire)
    bw2 = b2.parts["bandwidth"]
    bw2.coll = bw2.coll.with_columns(pl.col("bytes").cast(pl.Float64))  # another schema: alone
    got2 = compact_batch([a2, b2])
    assert got2[1].parts["bandwidth"].coll.schema["bytes"] == pl.Float64
    assert got2[0].parts["bandwidth"].coll.schema["bytes"] == pl.Int64
    assert to_json(_merge(compact_batch([pickle.loads(x) for x in wire]), opts, manifest)) == want


def test_held_parts_read_back_equal_and_merge_to_the_same_json() -> None:
    """``HeldParts`` (frames held as references into one frame per batch, place and schema;
    rebuilt on access) gives each part's frames as they arrived and the same merged JSON,
    across batches, as the parts held whole."""
    opts = AnalyzeOptions(per_step=True, critical_path=False)
    parts, manifest = _parts(shared_trace("param/dlrm_8ranks_v100"), opts)
    wire = [pickle.dumps(p) for p in parts]
    want = to_json(_merge([pickle.loads(b) for b in wire], opts, manifest))
    held = HeldParts()
    for lo, hi in ((0, 3), (3, 7), (7, 8)):  # the last batch of one: its frames held as they are
        held.add([pickle.loads(b) for b in wire[lo:hi]])
    assert len(held) == 8 and [p.rank for p in held] == [p.rank for p in parts]
    assert len(held.held) >= 2 * 10  # a frame per place in each batch of several, not one per rank
    n = 0
    for a, b in zip(parts, held, strict=True):
        fa = dict(_frames(a))
        fb = dict(_frames(dataclasses.replace(b, parts=dict(b.parts))))
        assert fa.keys() == fb.keys()
        for k in fa:
            assert fa[k].equals(fb[k], null_equal=True) and fa[k].schema == fb[k].schema, k
            n += 1
    assert n >= 8 * 10
    assert [p.rank for p in held[2:5]] == [2, 3, 4]
    assert to_json(_merge(held, opts, manifest)) == want
    assert to_json(_merge(held, opts, manifest)) == want  # read again: the held parts are unchanged


def test_held_frames_are_the_ranks_rows_in_rank_order_in_one_piece_per_batch() -> None:
    """``HeldParts.frames`` (what the merges stack): the same rows as each rank's frame stacked
    in rank order, as one slice per batch frame, not a frame per rank; ``entries`` give the
    parts' other fields as they arrived without building their frames."""
    from charllm_trace.analysis.registry import Merge

    opts = AnalyzeOptions(per_step=True, critical_path=False)
    parts, _ = _parts(shared_trace("param/dlrm_8ranks_v100"), opts)
    wire = [pickle.dumps(p) for p in parts]
    held = HeldParts()
    for lo, hi in ((0, 3), (3, 7), (7, 8)):
        held.add([pickle.loads(b) for b in wire[lo:hi]])
    whole = Merge(parts, opts, False, True, {})
    kept = Merge(held, opts, False, True, {})
    places = [
        ("overlap", ("per_rank",)),
        ("bandwidth", ("coll",)),
        ("comm_wait", (0,)),
        ("flops", (1, "per_step")),
        ("flops", (1, "devices")),
        ("idle_time", (0, "streams")),
        ("idle_time", (1, "queue")),
    ]
    for name, path in places:
        want, got = whole.frames(name, path), kept.frames(name, path)
        assert len(want) == 8 and len(got) <= 3, (name, path, len(got))  # batches of 3, 4 and 1
        a, b = pl.concat(want), pl.concat(got)
        assert a.height > 0 and a.equals(b, null_equal=True) and a.schema == b.schema, (name, path)
    assert len(kept.frames("flops", (1, "per_step"), {2, 5})) == 2  # a batch's run cut by the ranks asked
    assert pl.concat(kept.frames("flops", (1, "per_step"), {2, 5})).equals(
        pl.concat(whole.frames("flops", (1, "per_step"), {2, 5}))
    )
    assert [r for r, _ in kept.entries("overlap")] == list(range(8))
    assert [(r, e[1].notes) for r, e in kept.timed("idle_time")] == [
        (r, e[1].notes) for r, e in whole.timed("idle_time")
    ]
    assert [o.notes for _, o in kept.entries("overlap")] == [o.notes for _, o in whole.entries("overlap")]


def test_held_parts_wait_on_disk_and_keep_empty_frames_shared() -> None:
    """The held parts are on the driver's disk, not in its memory (issue 26 item 3): nothing of a
    batch is kept once added but its place on the shelf; read back, the parts' empty frames are
    the one frame per place and schema again (not a copy per rank), and at most a few batch
    frames are kept read."""
    opts = AnalyzeOptions(per_step=True, critical_path=False)
    parts, _ = _parts(shared_trace("param/dlrm_8ranks_v100"), opts)
    wire = [pickle.dumps(p) for p in parts]
    held = HeldParts()
    for lo in range(0, 8, 2):
        held.add([pickle.loads(b) for b in wire[lo : lo + 2]])
    assert len(held.batches) == 4 and held.shelf.end > 0
    # held: each batch's places on the shelf and its count, each frame's place; nothing read yet
    assert all(isinstance(n, int) and "overlap" in entries for _, entries, n in held.batches)
    assert len(held.held.refs) == len(held.held) and not held.held.cache
    read: list[tuple[int, int]] = []
    get = held.shelf.get
    held.shelf.get = lambda ref: read.append(ref) or get(ref)  # type: ignore[method-assign]
    assert [r for r, _ in held.entries("overlap")] == list(range(8))
    assert read == [entries["overlap"] for _, entries, _ in held.batches]  # that analysis' entries alone
    held.shelf.get = get  # type: ignore[method-assign]
    empty_ids = {id(df) for df in held.empties.values()}
    assert empty_ids, "the DLRM parts have empty frames"
    seen: dict[str, set[int]] = {}
    for p in held:
        for path, df in _frames(dataclasses.replace(p, parts=dict(p.parts))):
            if df.height == 0:
                seen.setdefault(str(path), set()).add(id(df))
    assert seen and all(len(ids) == 1 and ids <= empty_ids for ids in seen.values())
    assert len(held.held.cache) <= held.held.KEEP
    held.close()
