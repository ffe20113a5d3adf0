"""The C scanner's pass over Chakra ET Node messages (``_etscan.c``) and what it finds.

:func:`scan_native` runs the resumable scan (growing its output arrays when the scanner asks),
:func:`split_point` finds where a second part can start; :class:`NodeScan` is the result, also
produced by the numpy oracle (``et/oracle.py``, the tests' switch ``CHARLLM_TRACE_NATIVE=0``);
both are in ``et/scanned.py``.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.et import _native
from charllm_trace.et._arrow import STEP, InvalidUtf8, alloc, first_invalid_utf8, utf8_column
from charllm_trace.et.scanned import PAD, TEXT_FIELDS, Corrupt, NodeScan, as_int64

__all__ = ["PAD", "TEXT_FIELDS", "Corrupt", "NodeScan", "as_int64", "scan_native", "scanner", "split_point"]


def check_text(data: np.ndarray, off: np.ndarray, ln: np.ndarray, where: str) -> None:
    """Raise :class:`Corrupt` unless every slice is strict UTF-8."""
    bad = first_invalid_utf8(data, off, ln.astype(np.int64))
    if bad >= 0:
        raise Corrupt(-1, f"{where} is not valid UTF-8 text")


def strings(
    data: np.ndarray, off: np.ndarray, ln: np.ndarray, name: str, where: str, *, validated: bool = False
) -> pl.Series:
    try:
        return utf8_column(data, off, ln.astype(np.int64), name, validated=validated)
    except InvalidUtf8 as exc:
        raise Corrupt(-1, f"{where} is not valid UTF-8 text") from exc
    except ValueError as exc:  # a string of 1 GiB or more
        raise Corrupt(-1, f"{where}: {exc}") from exc


#: the C scanner's error codes
NATIVE_ERRORS = {
    -1: "a varint longer than 10 bytes",
    -2: "a field runs past the end of its message (truncated or corrupt)",
    -3: "an invalid field tag",
    -4: "truncated: the message runs past the end of the file",
    -5: "truncated: a message length runs past the end of the file",
    -6: "not a Chakra ET: malformed message length",
    -12: "a text field of 1 GiB or more",
    -13: "more than 2^31 - 1 nodes",
}


#: slots of the scanner's first table of attribute names (it holds up to half as many names;
#: a trace with more is scanned again with a table four times larger)
NAME_TABLE = 16384


def scanner() -> Any:
    """The C scanner (ctypes); None only with ``CHARLLM_TRACE_NATIVE=0`` (see ``et/_native.py``)."""
    return _native.lib()


def ptr(a: np.ndarray | None) -> int | None:
    """The address of ``a``'s data (None for None), for the scanner's ctypes calls."""
    return None if a is None else a.ctypes.data


def _grow(arr: np.ndarray, used: int, cap: int) -> np.ndarray:
    new = alloc((cap,) + arr.shape[1:], arr.dtype)
    new[:used] = arr[:used]
    return new


def scan_native(
    so: Any, data: np.ndarray, begin: int, size: int, first_index: int = 1, stop: int | None = None
) -> NodeScan:
    """One resumable pass of the C scanner over the Node messages in ``data[begin:size]``.

    With ``stop``, the scan ends before the first message that starts at or after ``stop``.
    """
    stop = size if stop is None else stop
    body = min(size, stop) - begin
    caps = np.array([max(1024, body // 256), max(4096, body // 8), max(4096, body // 32), 4096], np.int64)
    ht = np.zeros(NAME_TABLE, np.int32)
    node_arrs = {
        "id": alloc(caps[0], np.uint64),
        "type": alloc(caps[0], np.uint64),
        "start_us": alloc(caps[0], np.uint64),
        "dur_us": alloc(caps[0], np.uint64),
        "io_present": alloc((caps[0], 2), np.uint8),
        **{f"view{k}": alloc((caps[0], 16), np.uint8) for k in range(7)},
    }
    dep_arrs = {
        "node": alloc(caps[1], np.int64),
        "val": alloc(caps[1], np.uint64),
        "kind": alloc(caps[1], np.uint8),
    }
    attr_arrs = {
        "node": alloc(caps[2], np.int32),
        "code": alloc(caps[2], np.int32),
        "vfield": alloc(caps[2], np.int8),
        "vwt": alloc(caps[2], np.int8),
        "vval": alloc(caps[2], np.uint64),
        "voff": alloc(caps[2], np.int64),  # the payload offset; for ints and bools the value
        "kind": alloc(caps[2], np.int8),
    }
    uname_off = np.zeros(caps[3], np.int64)
    uname_len = np.zeros(caps[3], np.int64)
    state = np.array([begin, 0, 0, 0, 0, 0, 0, 0, 0], np.int64)
    err = np.zeros(2, np.int64)
    while True:
        na_ = node_arrs
        views = (ctypes.c_void_p * 7)(*[na_[f"view{k}"].ctypes.data for k in range(7)])
        rc = so.et_scan(
            ptr(data), size, ptr(state), ptr(caps),
            ptr(na_["id"]), ptr(na_["type"]), ptr(na_["start_us"]), ptr(na_["dur_us"]),
            ctypes.addressof(views), ptr(na_["io_present"]),
            ptr(dep_arrs["node"]), ptr(dep_arrs["val"]), ptr(dep_arrs["kind"]),
            ptr(attr_arrs["node"]), ptr(attr_arrs["code"]), ptr(attr_arrs["vfield"]), ptr(attr_arrs["vwt"]),
            ptr(attr_arrs["vval"]), ptr(attr_arrs["voff"]), ptr(attr_arrs["kind"]),
            ptr(uname_off), ptr(uname_len), ptr(ht), len(ht), STEP, stop, ptr(err),
        )  # fmt: skip
        if rc == 0:
            break
        if rc == -11:  # more distinct attribute names than the table holds: a larger one, from the start
            caps[3] *= 4
            ht = np.zeros(len(ht) * 4, np.int32)
            uname_off = np.zeros(caps[3], np.int64)
            uname_len = np.zeros(caps[3], np.int64)
            state[0:6] = (begin, 0, 0, 0, 0, 0)  # the arrays' touched rows (state[6:9]) stay
            continue
        if rc < 0:
            raise Corrupt(int(err[0]) + first_index, NATIVE_ERRORS.get(rc, f"error {rc}"))
        # out of room: grow what is (nearly) full, everything if one message is just large
        n, nd, na = (int(x) for x in state[1:4])
        grew = False
        for i, used, group in ((0, n, node_arrs), (1, nd, dep_arrs), (2, na, attr_arrs)):
            if used + 1 >= caps[i] * 0.9:
                caps[i] *= 2
                for k in group:
                    group[k] = _grow(group[k], used, int(caps[i]))
                grew = True
        if not grew:
            for i, used, group in ((1, nd, dep_arrs), (2, na, attr_arrs)):
                caps[i] *= 2
                for k in group:
                    group[k] = _grow(group[k], used, int(caps[i]))
        state[6:9] = (n, nd, na)  # the new arrays hold (and have touched) only the used rows
    n, nd, na, nn, bad = (int(x) for x in state[1:6])
    names = strings(data, uname_off[:nn], uname_len[:nn], "name", "an attribute name").to_list()
    return NodeScan(
        id=node_arrs["id"][:n],
        type=node_arrs["type"][:n],
        start_us=node_arrs["start_us"][:n],
        dur_us=node_arrs["dur_us"][:n],
        name_off=None,
        name_len=None,
        io_present=node_arrs["io_present"][:n].view(bool),
        io_off=None,
        io_len=None,
        dep_node=dep_arrs["node"][:nd],
        dep_val=as_int64(dep_arrs["val"][:nd]),
        dep_kind=dep_arrs["kind"][:nd],
        attr_node=attr_arrs["node"][:na],
        attr_code=attr_arrs["code"][:na],
        names=names,
        vfield=attr_arrs["vfield"][:na],
        vwt=attr_arrs["vwt"][:na],
        vval=attr_arrs["vval"][:na],
        voff=attr_arrs["voff"][:na],
        kind=attr_arrs["kind"][:na],
        ival=attr_arrs["voff"][:na],  # meaningful where kind is K_INT or K_BOOL
        views=[node_arrs[f"view{k}"][:n] for k in range(7)],
        bad_text=bad,
        end=int(state[0]),
    )


def split_point(so: Any, data: np.ndarray, begin: int, size: int) -> int:
    """Where the second part starts: a message boundary near the middle, or -1.

    The boundary is guessed from the bytes around the middle (``et_resync``: a position from
    which two dozen plausible Node messages follow), which costs microseconds; walking the
    framing from the start costs a cache miss per message. The guess is checked against where
    the first part's scan stops (:func:`decode_nodes`). Without a guess, the framing is walked.
    """
    target = begin + (size - begin) // 2
    guess = int(so.et_resync(ptr(data), size, target, 24, 8, 4 << 20))
    if begin < guess < size:
        return guess
    out = np.zeros(2, np.int64)
    if so.et_walk(ptr(data), size, begin, target, ptr(out)) == 0 and begin < out[0] < size:
        return int(out[0])
    return -1
