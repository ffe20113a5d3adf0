"""What varies between runs or machines at the same code, taken out of the recorded outputs.

- absolute paths: the commands run in a scratch directory with the input linked in under its own
  name and relative paths only; should an absolute path still appear, the scratch directory, the
  cache directory, the shared traces and the repository are replaced by <work>, <cache>, <shared>,
  <repo> (so a checkout anywhere gives the same bytes);
- the report's heat-map gradient ids (``hm`` + Python's salted ``hash()``, different in every
  process: render/heatmap.py) become ``hm#``;
- floats in the JSON outputs (analyze, info, the stored small JSON files) are compared within a
  relative 1e-9, not bit for bit: polars sums floats in parallel, and the last bits of a sum depend
  on its thread count (POLARS_MAX_THREADS=1 against 2 changed ``tflops``/``wall_tflops`` of
  ``analyze --per-step`` on the TraceLens profiles, e.g. 367.7855873436868 against
  367.78558734368676); the stored files keep the exact bytes of the recording machine;
- the report HTML is also reduced to an outline (sections, headings, tables, figures), the view a
  reader diffs.

Nothing else is normalised: the outputs hold no tool version and no wall-clock time (checked by
recording twice, in two processes with different hash seeds and polars thread counts, and
comparing: tests/golden/README.md). ETs, the Perfetto trace and the ASTRA-sim files are compared
by the SHA-256 of their exact bytes.
"""

from __future__ import annotations

import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

_GRADIENT_ID = re.compile(rb'(id="|url\(#)hm\d+')


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def paths(data: bytes, replacements: list[tuple[Path, str]]) -> bytes:
    """``data`` with each absolute directory replaced by its token (longest first)."""
    for d, token in sorted(replacements, key=lambda r: -len(str(r[0]))):
        data = data.replace(str(d).encode(), token.encode())
    return data


def report_html(data: bytes) -> bytes:
    return _GRADIENT_ID.sub(rb"\1hm#", data)


class _Outline(HTMLParser):
    """Sections of the report page: id, heading, sub-headings, tables (headers, rows, a hash of the
    cell texts), figure captions, the number of SVG marks, and a hash of all the visible text."""

    _MARKS = frozenset({"rect", "path", "line", "circle", "polyline", "polygon", "text"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.head: dict[str, Any] = {"title": "", "nav": []}
        self.sections: list[dict[str, Any]] = []
        self._stack: list[str] = []
        self._text: list[str] | None = None  # text being gathered for the current heading/cell
        self._table: dict[str, Any] | None = None
        self._cells: list[str] = []
        self._in_head_row = False
        self._section_text: list[str] = []

    # -- helpers
    def _sec(self) -> dict[str, Any] | None:
        return self.sections[-1] if self.sections else None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self._stack.append(tag)
        if tag == "section":
            self.sections.append(
                {
                    "id": a.get("id"),
                    "heading": "",
                    "subheadings": [],
                    "tables": [],
                    "figures": [],
                    "svg_marks": 0,
                }
            )
            self._section_text = []
        elif tag in ("h1", "h2", "h3", "figcaption", "th", "td", "a"):
            self._text = []
        elif tag == "table" and self._sec() is not None:
            self._table = {"headers": [], "rows": 0}
            self._cells = []
        elif tag == "thead":
            self._in_head_row = True
        elif tag == "tbody":
            self._in_head_row = False
        elif tag == "tr" and self._table is not None and not self._in_head_row:
            self._table["rows"] += 1
        elif tag in self._MARKS and "svg" in self._stack and self._sec() is not None:
            self._sec()["svg_marks"] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self._stack:
            while self._stack and self._stack.pop() != tag:
                pass
        text = " ".join("".join(self._text).split()) if self._text is not None else ""
        sec = self._sec()
        if tag == "h1":
            self.head["title"] = text
        elif tag == "a" and "nav" in self._stack:
            self.head["nav"].append(text)
        elif tag == "h2" and sec is not None:
            sec["heading"] = text
        elif tag == "h3" and sec is not None:
            sec["subheadings"].append(text)
        elif tag == "figcaption" and sec is not None:
            sec["figures"].append(text)
        elif tag == "th" and self._table is not None and self._in_head_row:
            self._table["headers"].append(text)
        elif tag in ("td", "th") and self._table is not None:
            self._cells.append(text)
        elif tag == "table" and self._table is not None and sec is not None:
            self._table["cells_sha256"] = sha256("\x1f".join(self._cells).encode())
            sec["tables"].append(self._table)
            self._table = None
        elif tag == "section" and sec is not None:
            sec["text_sha256"] = sha256(" ".join(" ".join(self._section_text).split()).encode())
        if tag in ("h1", "h2", "h3", "figcaption", "th", "td", "a"):
            self._text = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)
        if "section" in self._stack and not ({"style", "script"} & set(self._stack)):
            self._section_text.append(data)


def html_outline(data: bytes) -> dict[str, Any]:
    p = _Outline()
    p.feed(data.decode("utf-8"))
    p.close()
    return {"head": p.head, "sections": p.sections}


def perfetto_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """Counts a reader can compare: events by phase, slices per (process, thread) name, counter
    samples per name, and the trace's ``otherData``."""
    events = doc.get("traceEvents", [])
    procs: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e.get("pid")] = e.get("args", {}).get("name", "")
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e.get("pid"), e.get("tid"))] = e.get("args", {}).get("name", "")
    phases: dict[str, int] = {}
    slices: dict[str, int] = {}
    counters: dict[str, int] = {}
    for e in events:
        ph = str(e.get("ph"))
        phases[ph] = phases.get(ph, 0) + 1
        where = f"{procs.get(e.get('pid'), e.get('pid'))} / {threads.get((e.get('pid'), e.get('tid')), e.get('tid'))}"
        if ph == "X":
            slices[where] = slices.get(where, 0) + 1
        elif ph == "C":
            key = f"{procs.get(e.get('pid'), e.get('pid'))} / {e.get('name')}"
            counters[key] = counters.get(key, 0) + 1
    return {
        "otherData": doc.get("otherData"),
        "events_by_phase": dict(sorted(phases.items())),
        "slices_by_track": dict(sorted(slices.items())),
        "counter_samples": dict(sorted(counters.items())),
    }
