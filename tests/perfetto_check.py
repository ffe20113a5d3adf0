"""A strict checker of the Chrome-trace JSON that ``export perfetto`` writes (a test helper).

It reads the file as Perfetto's JSON importer does and reports every place where Perfetto would
drop, mis-nest or mis-bind something, plus our own contract (exact ns literals, launch flows that
run from the launching runtime call to the GPU op it launched):

- **strict JSON**: exact decimals (no float rounding), no NaN/Infinity literals, required fields
  and types per phase (``M``, ``X``, ``B``/``E``, ``C``, ``s``/``f``), ``ts`` and ``dur`` >= 0 and
  whole nanoseconds.
- **nesting**: the events are replayed in Perfetto's import order (by ``ts``; at equal ``ts`` the
  ``E`` events first, then ``X`` events longest first, then the rest in file order, as Perfetto's
  trace sorter orders JSON events) on a slice stack per track (``pid``, ``tid``), closing slices as
  Perfetto's slice tracker does (a slice that ends at or before the next begin is popped, except
  that two zero-length slices at one time stack). A complete event that starts inside the open
  slice and ends after it is a *partial overlap* (Perfetto drops it); an ``E`` that does not close
  the innermost open ``B`` of its name, or a ``B`` left open, is a problem too.
- **flows** (v1, ``s``/``f`` with ``bp: "e"``): each is bound, as Perfetto binds it, to the
  innermost slice on the stack of its track when it is processed (Perfetto does not close ended
  slices first, so a flow event that falls after its slice ended binds to a stale slice: reported).
  Each id has exactly one ``s`` and one ``f``, the ``f`` is not earlier than the ``s``, both bound
  slices contain their flow event, and the bound start slice begins no later than the bound end
  slice (otherwise the arrow runs backwards). With ``launch_flows=True`` (our exports: a slice's
  ``cat`` is the node kind): the end slice is a GPU op (``kernel``, ``memcpy``, ``memset``; never a
  ``gpu_annotation`` range) and the start slice is the call that launched it: the ``runtime`` call
  with the op's ``correlation`` or, where the op has no runtime call, the CPU op named by its
  ``launch_id``.
- **counters** (``C``): every value finite and numeric, the samples of each counter track
  (``pid``, name, key) in strictly increasing time in file order.
- **names**: every track with an event has a ``thread_name``, every process a ``process_name``.

Pure Python on the parsed events: about 2-3 s per million events.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

#: Kinds a launch flow may end on.
GPU_OP_KINDS = frozenset({"kernel", "memcpy", "memset"})
_PHASES = frozenset({"M", "X", "B", "E", "C", "s", "f"})


@dataclass
class Checked:
    """What the checker saw, and every problem (empty: the file is valid)."""

    slices: int = 0  # X events + B/E pairs
    flows: int = 0  # s/f pairs
    counter_samples: int = 0  # one per value of a C event
    tracks: int = 0  # (pid, tid) with slices
    processes: int = 0
    problems: list[str] = field(default_factory=list)
    #: (s time, the slice it binds to, f time, the slice it binds to) of each flow, in ns; a slice
    #: is its event's dict plus _ts/_end (ns)
    flow_slices: list[tuple[int, dict, int, dict]] = field(default_factory=list)

    def problem(self, msg: str) -> None:
        self.problems.append(msg)


def load(path: str | Path) -> dict:
    """The document, parsed strictly: decimals kept exact, NaN/Infinity refused."""
    p = Path(path)
    raw = p.read_bytes()
    if p.name.endswith(".gz"):
        raw = gzip.decompress(raw)

    def bad(x: str) -> None:
        raise ValueError(f"non-JSON constant {x}")

    return json.loads(raw, parse_float=Decimal, parse_constant=bad)


def _num(v: object) -> bool:
    return (
        isinstance(v, (int, Decimal))
        and not isinstance(v, bool)
        and (not isinstance(v, Decimal) or v.is_finite())
    )


def _ns(v: Decimal | int) -> int:
    return int(Decimal(v) * 1000)


def _fields(e: dict, i: int, out: Checked) -> bool:
    """Required fields and types of event ``i``; False when it cannot be replayed."""
    ph = e.get("ph")
    if ph not in _PHASES:
        out.problem(f"event {i}: phase {ph!r} is not one we write")
        return False
    if not isinstance(e.get("name"), str) or not isinstance(e.get("pid"), int):
        out.problem(f"event {i}: name must be a string and pid an integer: {e}")
        return False
    if ph == "M":
        return True
    ts = e.get("ts")
    if not _num(ts) or ts < 0 or Decimal(ts) * 1000 != _ns(ts):
        out.problem(f"event {i}: ts {ts!r} is not a whole number of ns >= 0")
        return False
    if ph in ("X", "B", "E", "s", "f") and not isinstance(e.get("tid"), int):
        out.problem(f"event {i}: {ph} event without an integer tid")
        return False
    if ph == "X":
        d = e.get("dur")
        if not _num(d) or d < 0 or Decimal(d) * 1000 != _ns(d):
            out.problem(f"event {i}: dur {d!r} is not a whole number of ns >= 0")
            return False
    if ph in ("s", "f") and not isinstance(e.get("id"), (int, str)):
        out.problem(f"event {i}: flow event without an id")
        return False
    if ph == "f" and e.get("bp") != "e":
        out.problem(f"event {i}: flow end without bp 'e' (binds to the next slice, not the enclosing one)")
    if ph == "C":
        args = e.get("args")
        if not isinstance(args, dict) or not args:
            out.problem(f"event {i}: counter without values")
            return False
        for k, v in args.items():
            if not _num(v):
                out.problem(f"event {i}: counter {e['name']} {k} = {v!r} is not a finite number")
    return True


def _sort_key(item: tuple[int, dict]) -> tuple:
    """Perfetto's import order of JSON events: ts, then E, then X by duration descending, then rest."""
    i, e = item
    ph = e["ph"]
    k = -(1 << 62) if ph == "E" else (-_ns(e["dur"]) if ph == "X" else 1 << 62)
    return (_ns(e["ts"]), k, i)


def check(path_or_doc: str | Path | dict, *, launch_flows: bool = True) -> Checked:
    """Check a Chrome-trace JSON file (or its parsed document); see the module doc."""
    doc = path_or_doc if isinstance(path_or_doc, dict) else load(path_or_doc)
    out = Checked()
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        out.problem("no traceEvents list")
        return out
    ok = [(i, e) for i, e in enumerate(events) if isinstance(e, dict) and _fields(e, i, out)]
    tnames = {(e["pid"], e.get("tid")) for _, e in ok if e["ph"] == "M" and e["name"] == "thread_name"}
    pnames = {e["pid"] for _, e in ok if e["ph"] == "M" and e["name"] == "process_name"}

    # counters: strictly increasing time per track, in file order
    last_ts: dict[tuple, int] = {}
    for i, e in ok:
        if e["ph"] != "C":
            continue
        for k in e["args"]:
            key = (e["pid"], e["name"], k)
            t = _ns(e["ts"])
            if key in last_ts and t <= last_ts[key]:
                out.problem(
                    f"event {i}: counter {e['name']} {k} of pid {e['pid']} goes back in time ({t} ns)"
                )
            last_ts[key] = t
            out.counter_samples += 1

    # replay in Perfetto's order
    stacks: dict[tuple, list[dict]] = defaultdict(list)
    starts: dict[object, tuple[dict, dict]] = {}
    ends: dict[object, tuple[dict, dict]] = {}
    seen_tracks: set[tuple] = set()
    for i, e in sorted(((i, e) for i, e in ok if e["ph"] != "M"), key=_sort_key):
        ph = e["ph"]
        if ph == "C":
            continue
        track = (e["pid"], e["tid"])
        st = stacks[track]
        ts = _ns(e["ts"])
        if ph in ("X", "B"):
            dur = _ns(e["dur"]) if ph == "X" else None
            while st:
                top = st[-1]
                if top["_end"] is None:  # an open B: closed only by its E
                    break
                if top["_end"] < ts or (top["_end"] == ts and not (top["_dur"] == 0 and dur == 0)):
                    st.pop()
                    continue
                break
            if st and dur is not None and st[-1]["_end"] is not None and ts + dur > st[-1]["_end"]:
                top = st[-1]
                out.problem(
                    f"partial overlap on pid {track[0]} tid {track[1]}: {e['name']!r} [{ts}, {ts + dur}] "
                    f"starts inside {top['name']!r} [{top['_ts']}, {top['_end']}] and ends after it"
                )
                continue  # Perfetto drops it
            s = dict(e, _ts=ts, _dur=dur, _end=None if dur is None else ts + dur, _i=i)
            st.append(s)
            seen_tracks.add(track)
            if ph == "X":
                out.slices += 1
        elif ph == "E":
            while st and st[-1]["_end"] is not None and st[-1]["_end"] <= ts:
                st.pop()
            if not st or st[-1]["_end"] is not None or st[-1]["name"] != e["name"] or st[-1]["_ts"] > ts:
                out.problem(
                    f"event {i}: E {e['name']!r} at {ts} does not close the innermost open B of its track"
                )
                continue
            b = st.pop()
            b["_end"], b["_dur"] = ts, ts - b["_ts"]
            out.slices += 1
        else:  # s / f: bound to the top of the stack, as it is (not closed first)
            fid = (e.get("cat"), e["name"], e["id"])
            if not st:
                out.problem(f"event {i}: flow {ph} id {e['id']} at {ts} has no enclosing slice on its track")
                continue
            bound = st[-1]
            end = bound["_end"]
            if bound["_ts"] > ts or (end is not None and end < ts):
                out.problem(
                    f"event {i}: flow {ph} id {e['id']} at {ts} binds to {bound['name']!r} "
                    f"[{bound['_ts']}, {end}], which does not contain it"
                )
            table = starts if ph == "s" else ends
            if fid in table:
                out.problem(f"event {i}: a second flow {ph} with id {e['id']}")
                continue
            table[fid] = (e, bound)
    for track, st in stacks.items():
        for s in st:
            if s["_end"] is None:
                out.problem(f"B {s['name']!r} on pid {track[0]} tid {track[1]} is never closed")
    for track in seen_tracks:
        if track not in tnames:
            out.problem(f"track pid {track[0]} tid {track[1]} has slices but no thread_name")
    out.tracks = len(seen_tracks)
    out.processes = len({p for p, _ in seen_tracks} | pnames)
    for p in {p for p, _ in seen_tracks} - pnames:
        out.problem(f"pid {p} has slices but no process_name")

    # flows: pairs, direction, endpoints
    for fid in starts.keys() - ends.keys():
        out.problem(f"flow {fid} starts but never ends")
    for fid in ends.keys() - starts.keys():
        out.problem(f"flow {fid} ends but never starts")
    for fid in starts.keys() & ends.keys():
        (se, ss), (fe, fs) = starts[fid], ends[fid]
        out.flows += 1
        out.flow_slices.append((_ns(se["ts"]), ss, _ns(fe["ts"]), fs))
        if _ns(fe["ts"]) < _ns(se["ts"]) or fs["_ts"] < ss["_ts"]:
            out.problem(
                f"flow {fid} runs backwards: from {ss['name']!r} at {ss['_ts']} ({_ns(se['ts'])}) "
                f"to {fs['name']!r} at {fs['_ts']} ({_ns(fe['ts'])})"
            )
        if launch_flows:
            _check_launch(fid, ss, fs, out)
    return out


def _check_launch(fid: object, ss: dict, fs: dict, out: Checked) -> None:
    if fs.get("cat") not in GPU_OP_KINDS:
        out.problem(f"launch flow {fid} ends on {fs['name']!r} of kind {fs.get('cat')!r}, not a GPU op")
        return
    sa, fa = ss.get("args") or {}, fs.get("args") or {}
    if ss.get("cat") == "runtime":
        if fa.get("correlation") is None or sa.get("correlation") != fa.get("correlation"):
            out.problem(
                f"launch flow {fid} starts on runtime call {ss['name']!r} (correlation "
                f"{sa.get('correlation')}) but ends on {fs['name']!r} (correlation {fa.get('correlation')})"
            )
    elif fa.get("launch_id") is None or sa.get("id") != fa.get("launch_id"):
        out.problem(
            f"launch flow {fid} starts on {ss['name']!r} (id {sa.get('id')}, kind {ss.get('cat')!r}), "
            f"neither a runtime call nor the op's launching op {fa.get('launch_id')}"
        )


def assert_valid(path_or_doc: str | Path | dict, *, launch_flows: bool = True, show: int = 10) -> Checked:
    """:func:`check`, failing with the first ``show`` problems when there are any."""
    res = check(path_or_doc, launch_flows=launch_flows)
    if res.problems:
        head = "\n".join(res.problems[:show])
        raise AssertionError(f"{len(res.problems)} problems in the Perfetto export, first {show}:\n{head}")
    return res
