"""Process and thread ids in CSV tables (the CPU scheduler telemetry ``cpusched-<host>.csv``:
``time_ns,pid,tid,...``): the columns whose header name is an id key (``rules.ID_KEYS``) are
learnt in pass 1 and remapped in pass 2 with the run's one map, so a thread keeps the same
pseudonym in the telemetry as in the traces (the CPU-wait join still finds it). Every line is
also scrubbed as text (``Scrubber.text``). Standard ``csv`` parsing; a line whose fields do
not parse is scrubbed as text only."""

from __future__ import annotations

import csv
import io

from charllm_trace.sanitize.rules import ID_KEYS, Scrubber


def _id_columns(header: str) -> list[int]:
    cols = next(csv.reader([header]), [])
    return [i for i, c in enumerate(cols) if c.strip().lower() in ID_KEYS]


def _rows(text: str) -> tuple[list[int], list[str]]:
    lines = text.splitlines(keepends=True)
    return (_id_columns(lines[0]) if lines else []), lines


def csv_collect(sc: Scrubber, data: bytes) -> None:
    """Pass 1: learn the ids of the id columns."""
    idx, lines = _rows(data.decode("utf-8", errors="surrogateescape"))
    if not idx:
        return
    for row in csv.reader(ln for ln in lines[1:]):
        for i in idx:
            if i < len(row) and row[i].strip().isdigit():
                sc.add_id(int(row[i]))


def _remap(sc: Scrubber, line: str, idx: list[int]) -> str:
    row = next(csv.reader([line]), None)
    if not row or not any(i < len(row) and row[i].strip().isdigit() for i in idx):
        return line
    for i in idx:
        if i < len(row) and row[i].strip().isdigit():
            row[i] = str(sc.id_of(int(row[i])))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(row)
    end = line[len(line.rstrip("\r\n")) :]
    return buf.getvalue() + end


def csv_clean(sc: Scrubber, data: bytes) -> bytes:
    """Pass 2: each line scrubbed as text, then its id columns remapped."""
    idx, lines = _rows(data.decode("utf-8", errors="surrogateescape"))
    out = [sc.text(ln) for ln in lines]
    if idx:
        out = out[:1] + [_remap(sc, ln, idx) for ln in out[1:]]
    return "".join(out).encode("utf-8", errors="surrogateescape")
