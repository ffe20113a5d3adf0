"""The numpy decoder of Chakra ET nodes: the C scanner's test oracle, never a fallback.

Everything here decodes whole arrays at once (each *round* decodes the next field of every
message still open), with numpy and no per-node Python. It gives the same :class:`NodeScan`
as the C scanner (``et/nodescan.py``) and is used only when ``CHARLLM_TRACE_NATIVE=0``: the
tests set it to compare the two decoders (tests/test_et_decode.py and others). Without that
switch a missing scanner is an error (``et/_native.py``), not a slow path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from charllm_trace.et.scanned import Corrupt, NodeScan, as_int64

_U7F = np.uint64(0x7F)
_U80 = np.uint64(0x80)
#: the STEP of et/_arrow.py: view buffers are windows of the data every STEP bytes
_STEP = 1 << 30


def _window(data: np.ndarray, width: int) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(data, shape=(len(data) - width + 1, width), strides=(1, 1))


def varints(data: np.ndarray, pos: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value as uint64, byte count) of the varint at each position."""
    b = data[pos].astype(np.uint64)
    val = b & _U7F
    nb = np.ones(len(pos), dtype=np.int64)
    cont = np.flatnonzero(b & _U80)
    shift = 7
    while cont.size:
        if shift > 63:
            raise Corrupt(int(owner[cont[0]]), "a varint longer than 10 bytes")
        bb = data[pos[cont] + nb[cont]].astype(np.uint64)
        val[cont] |= (bb & _U7F) << np.uint64(shift)
        nb[cont] += 1
        cont = cont[(bb & _U80) != 0]
        shift += 7
    return val, nb


PACKED_CHUNK = 8 << 20


def packed_varints(
    data: np.ndarray, off: np.ndarray, ln: np.ndarray, owner: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Decode packed repeated varints: (owner of each value, value as uint64).

    Works through the fields in chunks of about ``PACKED_CHUNK`` bytes to bound memory.
    """
    keep = ln > 0
    off, ln, owner = off[keep], ln[keep], owner[keep]
    if len(ln) > 1 and int(ln.sum()) > PACKED_CHUNK:
        ends = np.cumsum(ln)
        cuts = np.searchsorted(ends, np.arange(PACKED_CHUNK, int(ends[-1]), PACKED_CHUNK), side="right")
        edges = [0, *sorted(set(cuts.tolist()) - {0, len(ln)}), len(ln)]
        parts = [
            _packed_once(data, off[a:b], ln[a:b], owner[a:b])
            for a, b in zip(edges[:-1], edges[1:], strict=True)
        ]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    return _packed_once(data, off, ln, owner)


def _packed_once(
    data: np.ndarray, off: np.ndarray, ln: np.ndarray, owner: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    total = int(ln.sum())
    if total == 0:
        return np.empty(0, np.int64), np.empty(0, np.uint64)
    first = np.cumsum(ln) - ln
    idx = np.repeat(off - first, ln) + np.arange(total, dtype=np.int64)
    b = data[idx].astype(np.uint64)
    is_end = (b & _U80) == 0
    last = first + ln - 1
    if not is_end[last].all():
        bad = int(np.flatnonzero(~is_end[last])[0])
        raise Corrupt(int(owner[bad]), "a packed varint runs past its field")
    vstart = np.flatnonzero(np.concatenate(([True], is_end[:-1])))
    vid = np.cumsum(np.concatenate(([0], is_end[:-1].astype(np.int64))))
    k = np.arange(total, dtype=np.int64) - vstart[vid]
    if (k > 9).any():
        raise Corrupt(int(owner[0]), "a varint longer than 10 bytes")
    contrib = (b & _U7F) << (np.uint64(7) * k.astype(np.uint64))
    values = np.bitwise_or.reduceat(contrib, vstart)
    byte_owner = np.repeat(owner, ln)
    return byte_owner[vstart], values


@dataclass
class Tokens:
    """One row per field occurrence, grouped by message in wire order."""

    msg: np.ndarray  # int64: index of the message
    field: np.ndarray  # int64
    wt: np.ndarray  # int8 wire type
    val: np.ndarray  # uint64: varint/fixed value, or payload length for wire type 2
    off: np.ndarray  # int64: payload offset (wire type 2)

    def select(self, mask: np.ndarray) -> Tokens:
        return Tokens(self.msg[mask], self.field[mask], self.wt[mask], self.val[mask], self.off[mask])


def tokenize(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, base: np.ndarray | None = None
) -> Tokens:
    """Split every message ``data[starts[i]:ends[i]]`` into its fields.

    ``base`` maps message i to the index reported in errors (the ET message number).
    """
    n = len(starts)
    where = np.arange(n, dtype=np.int64) if base is None else base
    pos = starts.astype(np.int64, copy=True)
    act = np.flatnonzero(pos < ends)
    parts: list[tuple[np.ndarray, ...]] = []
    win8 = _window(data, 8)
    while act.size:
        p = pos[act]
        tag, tl = varints(data, p, where[act])
        p = p + tl
        wt = (tag & np.uint64(7)).astype(np.int8)
        field = (tag >> np.uint64(3)).astype(np.int64)
        val = np.zeros(len(act), dtype=np.uint64)
        nxt = p.copy()
        bad = ~np.isin(wt, (0, 1, 2, 5)) | (field == 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise Corrupt(int(where[act[i]]), f"invalid field tag {int(tag[i])}")
        i02 = np.flatnonzero((wt == 0) | (wt == 2))
        if i02.size:
            v, vl = varints(data, p[i02], where[act[i02]])
            val[i02] = v
            nxt[i02] = p[i02] + vl
        off = nxt.copy()
        i2 = np.flatnonzero(wt == 2)
        if i2.size:
            big = val[i2] > np.uint64(1 << 40)
            if big.any():
                raise Corrupt(int(where[act[i2[np.flatnonzero(big)[0]]]]), "a field length beyond the file")
            nxt[i2] = nxt[i2] + val[i2].astype(np.int64)
        i1 = np.flatnonzero(wt == 1)
        if i1.size:
            val[i1] = win8[p[i1]].copy().view("<u8").ravel()
            nxt[i1] = p[i1] + 8
        i5 = np.flatnonzero(wt == 5)
        if i5.size:
            val[i5] = win8[p[i5]][:, :4].copy().view("<u4").ravel()
            nxt[i5] = p[i5] + 4
        over = nxt > ends[act]
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise Corrupt(
                int(where[act[i]]), "a field runs past the end of its message (truncated or corrupt)"
            )
        parts.append((act, field, wt, val, off))
        pos[act] = nxt
        act = act[nxt < ends[act]]
    if not parts:
        e = np.empty(0, np.int64)
        return Tokens(e, e, np.empty(0, np.int8), np.empty(0, np.uint64), e)
    msg = np.concatenate([q[0] for q in parts])
    order = np.argsort(msg, kind="stable")
    return Tokens(
        msg[order],
        np.concatenate([q[1] for q in parts])[order],
        np.concatenate([q[2] for q in parts])[order],
        np.concatenate([q[3] for q in parts])[order],
        np.concatenate([q[4] for q in parts])[order],
    )


def _last_per_msg(t: Tokens, field: int, wt: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a singular field: (present mask, value, offset) per message; the last occurrence wins."""
    sel = np.flatnonzero((t.field == field) & (t.wt == wt))
    present = np.zeros(n, dtype=bool)
    val = np.zeros(n, dtype=np.uint64)
    off = np.zeros(n, dtype=np.int64)
    if sel.size:
        m = t.msg[sel]
        present[m] = True
        val[m] = t.val[sel]  # numpy assigns in order: the last duplicate wins
        off[m] = t.off[sel]
    return present, val, off


def scan_attrs_numpy(
    data: np.ndarray, off: np.ndarray, ln: np.ndarray, where: np.ndarray
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(names, code per attribute, value field, wire type, value, payload offset)."""
    a = len(off)
    t = tokenize(data, off, off + ln, where)
    _, name_len, name_off = _last_per_msg(t, 1, 2, a)
    raw = _gather(data, name_off, name_len.astype(np.int64))
    try:
        names_s = pl.Series("name", raw).cast(pl.String)
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError) as exc:
        raise Corrupt(-1, "an attribute name is not valid UTF-8 text") from exc
    names = names_s.unique(maintain_order=True).to_list()
    code = names_s.cast(pl.Enum(names)).to_physical().to_numpy().astype(np.int32)
    # the value: the last oneof field present (fields 3..32)
    vsel = np.flatnonzero((t.field >= 3) & (t.field <= 32))
    vfield = np.zeros(a, dtype=np.int32)
    vval = np.zeros(a, dtype=np.uint64)
    voff = np.zeros(a, dtype=np.int64)
    vwt = np.zeros(a, dtype=np.int8)
    m = t.msg[vsel]
    vfield[m] = t.field[vsel]
    vval[m] = t.val[vsel]
    voff[m] = t.off[vsel]
    vwt[m] = t.wt[vsel]
    return names, code, vfield, vwt, vval, voff


def scan_numpy(data: np.ndarray, starts: np.ndarray, lens: np.ndarray, where: np.ndarray) -> NodeScan:
    n = len(starts)
    t = tokenize(data, starts, starts + lens, where)
    _, idv, _ = _last_per_msg(t, 1, 0, n)
    _, name_len, name_off = _last_per_msg(t, 2, 2, n)
    _, typev, _ = _last_per_msg(t, 3, 0, n)
    _, startv, _ = _last_per_msg(t, 6, 0, n)
    _, durv, _ = _last_per_msg(t, 7, 0, n)
    dn, dv, dk = [], [], []
    for k, field in enumerate((4, 5)):
        packed = np.flatnonzero((t.field == field) & (t.wt == 2))
        single = np.flatnonzero((t.field == field) & (t.wt == 0))
        owners = [t.msg[single]]
        values = [t.val[single]]
        if packed.size:
            o, v = packed_varints(data, t.off[packed], t.val[packed].astype(np.int64), t.msg[packed])
            owners.append(o)
            values.append(v)
        o = np.concatenate(owners)
        v = np.concatenate(values)
        order = np.argsort(o, kind="stable")
        dn.append(o[order])
        dv.append(v[order])
        dk.append(np.full(len(o), k, np.uint8))
    io_present = np.zeros((n, 2), bool)
    io_off = np.zeros((n, 6), np.int64)
    io_len = np.zeros((n, 6), np.int64)
    for w, field in enumerate((8, 9)):
        present, ln, off = _last_per_msg(t, field, 2, n)
        io_present[:, w] = present
        rows = np.flatnonzero(present)
        sub = tokenize(data, off[rows], off[rows] + ln[rows].astype(np.int64), where[rows])
        for f in (1, 2, 3):
            _, sl, so = _last_per_msg(sub, f, 2, len(rows))
            io_off[rows, w * 3 + f - 1] = so
            io_len[rows, w * 3 + f - 1] = sl.astype(np.int64)
    asel = np.flatnonzero((t.field == 10) & (t.wt == 2))
    attr_node = t.msg[asel]
    names, code, vfield, vwt, vval, voff = scan_attrs_numpy(
        data, t.off[asel], t.val[asel].astype(np.int64), where[attr_node]
    )
    return NodeScan(
        id=idv,
        type=typev,
        start_us=startv,
        dur_us=durv,
        name_off=name_off,
        name_len=name_len.astype(np.int64),
        io_present=io_present,
        io_off=io_off,
        io_len=io_len,
        dep_node=as_int64(idv)[np.concatenate(dn)],
        dep_val=as_int64(np.concatenate(dv)),
        dep_kind=np.concatenate(dk),
        attr_node=attr_node,
        attr_code=code,
        names=names,
        vfield=vfield,
        vwt=vwt,
        vval=vval,
        voff=voff,
    )


def _gather(data: np.ndarray, off: np.ndarray, ln: np.ndarray) -> pa.Array:
    """A (copied) large-binary array of the slices ``data[off[i] : off[i] + ln[i]]``."""
    offsets = np.zeros(len(off) + 1, np.int64)
    np.cumsum(ln, out=offsets[1:])
    idx = np.repeat(off - offsets[:-1], ln) + np.arange(int(offsets[-1]), dtype=np.int64)
    body = np.ascontiguousarray(data[idx])
    return pa.Array.from_buffers(
        pa.large_binary(), len(off), [None, pa.py_buffer(offsets), pa.py_buffer(body)]
    )


def views_numpy(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The 16-byte Arrow views of ``data`` slices (``data`` padded by 16 zero bytes)."""
    n = len(starts)
    views = np.zeros((n, 16), dtype=np.uint8)
    head = _window(data, 12)[starts]  # first 12 bytes of every string
    short = lengths <= 12
    # inline strings: zero the bytes past their end
    keep = np.arange(12)[None, :] < lengths[:, None]
    head[short] *= keep[short]
    views[:, 4:16] = head
    v32 = views.view(np.int32)
    v32[:, 0] = lengths
    long_ = ~short
    ls = starts[long_]
    v32[long_, 2] = ls // _STEP
    v32[long_, 3] = ls % _STEP
    return views


def first_invalid_utf8_numpy(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> int:
    """Index of the first slice that is not strict UTF-8, or -1 (needs a padded ``data``).

    Slices are checked together, 32 MiB at a time: each is followed by a NUL byte, so
    a sequence cut at a slice's end (or a continuation byte at its start) stays invalid.
    """
    n = len(starts)
    step = 32 << 20
    ends = np.cumsum(lengths + 1)
    cuts = np.searchsorted(ends, np.arange(step, int(ends[-1]) if n else 0, step), side="right")
    edges = sorted({0, n, *cuts.tolist()})
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        ln = lengths[a:b] + 1
        first = np.cumsum(ln) - ln
        idx = np.repeat(starts[a:b] - first, ln) + np.arange(int(ln.sum()), dtype=np.int64)
        chunk = data[idx]
        chunk[first + ln - 1] = 0
        try:
            chunk.tobytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            return a + int(np.searchsorted(first, exc.start, side="right")) - 1
    return -1
