"""Reading a Kineto profile file as a stream: chunks, framing, batches.

The file is read in chunks of ``CHUNK`` bytes (a ``.json.gz`` decompressed as it is read, in a
thread, with the framing of the next chunk, while this one is decoded), so the whole document is
never in memory. :mod:`~charllm_trace.converters.jsonframe` reports the top-level structure and the
commas between the events of ``traceEvents``; the events of each chunk are decoded in place, in
batches of at most ``BATCH``, into columns (:mod:`~charllm_trace.converters.kineto_columns`).
Everything outside ``traceEvents`` is kept aside and decoded at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import msgspec
import numpy as np

from charllm_trace.converters.kineto_checks import check_name_value
from charllm_trace.converters.kineto_columns import Columns, decode_top
from charllm_trace.converters.kineto_profile import KinetoProfile
from charllm_trace.core.alloc import gc_paused, trim_heap
from charllm_trace.core.errors import InputError
from charllm_trace.core.event_limit import check_event_count, max_events

#: events decoded at a time
BATCH = 50_000


def _open_stream(path: str | os.PathLike[str]) -> Any:
    """The file as a binary stream of its JSON: plain files as they are, gzip decompressed on the
    fly (by ISA-L, ``isal.igzip``: 3x zlib's speed here, 0.08-0.09 s against 0.26-0.29 s for the
    213 MB of the V100 x263 benchmark profile; the same bytes and gzip format checks)."""
    from pathlib import Path

    from isal import igzip

    from charllm_trace.core.files import BoundedGzip, open_regular

    p = Path(path)
    fh = open_regular(p, "a Kineto profile file")  # closed by the caller (or below)
    head = fh.read(2)
    fh.seek(0)
    if not head:
        fh.close()
        raise InputError(p, "file is empty")
    if head == b"\x1f\x8b":
        # bounded: a gzip bomb is refused once it has expanded past limits.gzip_out_limit
        return BoundedGzip(igzip.IGzipFile(fileobj=fh, mode="rb"), p, _gzip_limit(fh)), fh
    return fh, fh


def _gzip_limit(fh: Any) -> int:
    from charllm_trace.core.limits import gzip_out_limit

    return gzip_out_limit(os.fstat(fh.fileno()).st_size)


#: bytes read (and, for gzip, decompressed) at a time; the events of a chunk are decoded
#: before the next chunk is read, so at most about one chunk of the JSON is in memory
CHUNK = 8 << 20
_COMMA, _OPEN_LIST, _CLOSE_LIST, _QUOTE, _COLON = (ord(c) for c in ',[]":')


def read_kineto(path: str | os.PathLike[str]) -> KinetoProfile:
    """Read a Kineto profile file (``.json`` / ``.json.gz``) into a :class:`KinetoProfile`.

    Same result as ``parse_kineto(load_json(path), path)``, in a fraction of the memory and time:
    the file is read in chunks of ``CHUNK`` bytes (gzip decompressed as it is read), the events
    of ``traceEvents`` are framed by :mod:`~charllm_trace.converters.jsonframe` and decoded in
    batches of at most ``BATCH`` events into columns; everything else in the file (the
    profile-level keys, wherever they are) is kept aside and decoded at the end.
    """
    import zlib

    from isal import isal_zlib

    stream, raw = _open_stream(path)
    try:
        with gc_paused():  # the batches' Python objects hold no cycle (core/alloc.py)
            return _read_stream(path, stream)
    except (EOFError, zlib.error, isal_zlib.error) as exc:
        raise InputError(path, f"corrupt or truncated gzip file ({exc})") from None
    except OSError as exc:
        if stream is not raw:  # gzip.BadGzipFile and friends
            raise InputError(path, f"corrupt or truncated gzip file ({exc})") from None
        raise InputError(path, f"cannot read the file ({exc})") from None
    finally:
        stream.close()
        raw.close()


def _read_stream(path: str | os.PathLike[str], stream: Any) -> KinetoProfile:
    cols = Columns(path)
    try:
        return _read_columns(path, stream, cols)
    finally:
        cols.close()
        # the batches' arrays and the concatenated columns' temporaries are freed: glibc keeps
        # such pages (its mmap threshold grows with the first big frees) unless asked
        trim_heap()


class _Splitter:
    """The scan of the document as its chunks come: the events of traceEvents are decoded into
    ``cols`` as their separators are framed; everything else goes to ``skel``."""

    def __init__(self, path: str | os.PathLike[str], cols: Columns) -> None:
        self.path = path
        self.cols = cols
        self.buf = bytearray()  # unprocessed bytes, from absolute offset buf_off
        self.buf_off = 0
        self.skel = bytearray()  # the document without the events of traceEvents
        self.skel_to = 0  # absolute offset up to which the bytes outside the events went to skel
        self.inside = False  # within the traceEvents list
        self.streamed = False
        self.ev_from = 0  # absolute offset of the "[" or "," before the events not decoded yet
        self.list_open = -1  # absolute offset of the "[" of traceEvents
        self.recent: list[tuple[int, int]] = []  # the last depth-1 events (position, byte)

    def scan(self, pos: np.ndarray, code: np.ndarray, dep: np.ndarray) -> None:
        """Handle the framing events of the chunk just appended to ``buf``, then drop the bytes
        that are done with."""
        i, m = 0, len(pos)
        while i < m:
            i = self._events(pos, code, i, m) if self.inside else self._outside(pos, code, dep, i)
        if self.inside:
            keep = self.ev_from - self.buf_off
        else:
            self.skel += self.buf[self.skel_to - self.buf_off :]
            keep = len(self.buf)
            self.skel_to = self.buf_off + keep
        if keep:  # a fresh buffer (the old one may still be exported to a dying view)
            self.buf = self.buf[keep:]
            self.buf_off += keep

    def append(self, chunk: bytes) -> None:
        """Add the next chunk to ``buf``: in place, so that an event still open (or a run of
        blanks between events, as in a gzip bomb of spaces) grows the buffer once, not by a copy
        of everything held at every chunk (quadratic time, twice the memory)."""
        try:
            self.buf += chunk
        except BufferError:  # still exported to a dying view: a fresh buffer
            self.buf = self.buf + chunk

    def _events(self, pos: np.ndarray, code: np.ndarray, i: int, m: int) -> int:
        """Decode the events up to the next non-comma (only the list's commas, at depth 2, and its
        closing bracket can come here); returns where the scan goes on."""
        rest = np.flatnonzero(code[i:] != _COMMA)
        j = i + int(rest[0]) if rest.size else m
        bounds = [self.ev_from, *pos[i:j].tolist()]
        close = int(pos[j]) if j < m else None
        if close is not None:
            if code[j] != _CLOSE_LIST:
                raise InputError(
                    self.path, "not valid JSON (truncated or corrupt?): mismatched brackets in traceEvents"
                )
            bounds.append(close)
        _decode_spans(self.path, self.cols, self.buf, self.buf_off, bounds, close is not None, self.list_open)
        if close is None:
            self.ev_from = bounds[-1]
            return m
        self.inside = False
        self.skel_to = close  # the "]" goes to skel
        return j + 1

    def _outside(self, pos: np.ndarray, code: np.ndarray, dep: np.ndarray, i: int) -> int:
        """A framing event outside traceEvents: the list opens after its key at depth 1."""
        p, c = int(pos[i]), int(code[i])
        d = int(dep[i])
        if d > 1:
            return i + 1
        if (
            c == _OPEN_LIST
            and d == 1
            and _is_trace_events_key(self.recent, self.skel, self.buf, self.buf_off, self.skel_to)
        ):
            if self.streamed:
                raise InputError(self.path, "unexpected Kineto profile layout: two traceEvents lists")
            self.skel += self.buf[self.skel_to - self.buf_off : p + 1 - self.buf_off]
            self.skel_to = p + 1
            self.inside = self.streamed = True
            self.ev_from = self.list_open = p
        self.recent.append((p, c))
        if len(self.recent) > 3:
            del self.recent[0]
        return i + 1


def _read_columns(path: str | os.PathLike[str], stream: Any, cols: Columns) -> KinetoProfile:
    from charllm_trace.converters import jsonframe

    sp = _Splitter(path, cols)
    got_any = False
    # closed here, not when an error's traceback lets go of it: the reading thread stops first
    with closing(_prefetched(_scanned_chunks(stream, jsonframe))) as chunks:
        for chunk, pos, code, dep in chunks:
            got_any = True
            sp.append(chunk)
            del chunk
            sp.scan(pos, code, dep)
    if not got_any:
        raise InputError(path, "file holds no data")
    trim_heap()  # the decoded events' Python objects are gone: give their pages back
    top = decode_top(sp.skel, path)
    sp.skel = bytearray()
    return _finish(path, cols, top, sp.streamed)


def _finish(path: str | os.PathLike[str], cols: Columns, top: Any, streamed: bool) -> KinetoProfile:
    """The profile from the columns and the document's other keys (``top``)."""
    if top.traceEvents is None:
        if len(top.nodes):
            raise InputError(path, "is a host execution trace, not a Kineto profile")
        raise InputError(path, "not a Kineto profile (no traceEvents list)")
    top.nodes = msgspec.Raw()
    if not streamed and top.traceEvents:  # a key spelled with escapes: the events came with the rest
        raws = top.traceEvents
        top.traceEvents = None
        for b in range(0, len(raws), BATCH):
            part = raws[b : b + BATCH]
            cols.add(b"[" + b",".join(part) + b"]", len(part))
        del raws
    check_event_count(path, cols.row0, max_events())
    check_name_value(path, cols.names.odd, None in cols.names.index)
    return cols.finish(top)


def _scanned_chunks(
    stream: Any, jsonframe: Any
) -> Iterator[tuple[bytes, np.ndarray, np.ndarray, np.ndarray]]:
    """The stream's chunks with the framing events the scanner reports in each."""
    st = jsonframe.State()
    base = 0
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            return
        pos, code, dep = jsonframe.scan(np.frombuffer(chunk, dtype=np.uint8), st, base)
        base += len(chunk)
        yield chunk, pos, code, dep


_END = object()


def _prefetched(items: Iterator[Any]) -> Iterator[Any]:
    """``items``, produced one ahead in a thread: reading, decompressing and scanning the next
    chunk (none of which holds the GIL) overlap the decoding of this one."""
    import queue
    import threading

    q: queue.Queue[Any] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(x: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for x in items:
                if not put((x, None)):
                    return
            put((_END, None))
        except BaseException as exc:  # handed to the reader, raised there
            put((None, exc))

    t = threading.Thread(target=run, name="charllm-kineto-read", daemon=True)
    t.start()
    try:
        while True:
            x, exc = q.get()
            if exc is not None:
                raise exc
            if x is _END:
                return
            yield x
            del x
    finally:
        stop.set()
        t.join()


def _is_trace_events_key(
    recent: list[tuple[int, int]], skel: bytearray, buf: bytearray, buf_off: int, skel_to: int
) -> bool:
    """Whether the depth-1 "[" about to open follows the key ``"traceEvents":``."""
    if len(recent) < 3 or recent[-1][1] != _COLON or recent[-2][1] != _QUOTE or recent[-3][1] != _QUOTE:
        return False
    q0, q1 = recent[-3][0], recent[-2][0]
    if q1 - q0 != len("traceEvents") + 1:
        return False
    if q0 >= buf_off:
        key = bytes(buf[q0 - buf_off : q1 + 1 - buf_off])
    else:  # the key was in an earlier chunk, already copied to skel (nothing was left out of it yet)
        key = bytes(skel[q0 : q1 + 1]) if skel_to == len(skel) else b""
    return key == b'"traceEvents"'


def _decode_spans(
    path: str | os.PathLike[str],
    cols: Columns,
    buf: bytearray,
    buf_off: int,
    bounds: list[int],
    closed: bool,
    list_open: int,
) -> None:
    """Decode the events between consecutive separators ``bounds`` (absolute offsets of the "[",
    the commas and, when ``closed``, the "]"), at most ``BATCH`` events at a time, in place."""
    last = len(bounds) - 1
    if last <= 0:
        return
    k = 0
    while k < last:
        e = min(k + BATCH, last)
        a, z = bounds[k] - buf_off, bounds[e] - buf_off
        buf[a] = _OPEN_LIST  # the separators around the slice become the brackets of a list
        buf[z] = _CLOSE_LIST
        with memoryview(buf) as view:
            data = view[a : z + 1]
            n = cols.add(data, e - k)
            data.release()
        check_event_count(path, cols.row0, max_events())  # refused as it passes, not at the end
        if n != e - k and not (n == 0 and closed and last == 1 and bounds[0] == list_open):
            # an empty element (",," or a trailing comma) decodes as nothing; only "[]" may be empty
            raise InputError(path, "not valid JSON (truncated or corrupt?): an empty element in traceEvents")
        k = e
