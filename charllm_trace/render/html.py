"""A self-contained HTML report: inline CSS and inline SVG, no script, nothing fetched.

:class:`HtmlReport` is the page (header, table of contents, sections, the stylesheet). The
charts and tables put in its sections are in :mod:`charllm_trace.render.charts` (built on the
SVG helpers of :mod:`charllm_trace.render.svg`) and importable from here too, as the report
builder uses them (``from charllm_trace.render import html as H``; ``H.line_chart`` ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from charllm_trace.render.charts import (
    PALETTE,
    STATE_COLORS,
    HLine,
    Html,
    Lane,
    LaneRow,
    Series,
    Span,
    bar_chart,
    lanes_chart,
    legend,
    line_chart,
    scatter_chart,
    stack_bar,
    table,
)
from charllm_trace.render.svg import empty, esc, fmt_bytes, fmt_num, fmt_time_ns, nice_ticks

__all__ = [
    "PALETTE",
    "STATE_COLORS",
    "HLine",
    "Html",
    "HtmlReport",
    "Lane",
    "LaneRow",
    "Series",
    "Span",
    "bar_chart",
    "empty",
    "esc",
    "fmt_bytes",
    "fmt_num",
    "fmt_time_ns",
    "lanes_chart",
    "legend",
    "line_chart",
    "nice_ticks",
    "scatter_chart",
    "stack_bar",
    "table",
]

#: ``H._esc``: the name the report builder (render/report.py) uses for :func:`esc`.
_esc = esc

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:16px 28px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#cfd8dc;font-size:13px}
main{padding:8px 28px 40px;max-width:1100px}
section{background:#fff;border:1px solid #e0e0e0;border-radius:6px;margin:18px 0;padding:10px 18px 16px}
section h2{font-size:17px;margin:8px 0 6px}
p.note{color:#555;font-size:13px;margin:4px 0}
p.empty{color:#8a6d3b;background:#fcf8e3;border:1px solid #faebcc;padding:8px 10px;border-radius:4px;font-size:13px}
figure.chart{margin:10px 0}
figure.chart figcaption{font-size:13px;font-weight:600;margin-bottom:2px}
svg{display:block;font-size:11px}
svg .axis line,svg .axis path{stroke:#888;shape-rendering:crispEdges}
svg .axis line.gridline{stroke:#eee}
svg text{fill:#333}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:2px 0 0 60px}
.legend span.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px;border-radius:2px}
table.data{border-collapse:collapse;font-size:12px;margin:8px 0}
table.data th,table.data td{border:1px solid #ddd;padding:3px 8px;text-align:right}
table.data th{background:#f2f2f2} table.data td:first-child,table.data th:first-child{text-align:left}
table.data td.left{text-align:left}
div.scroll{overflow-x:auto}
svg.stack{display:inline-block;vertical-align:middle}
nav.toc{font-size:13px;margin:12px 0 0} nav.toc a{color:#1f5f9e;margin-right:14px;text-decoration:none}
p.predicted{font-weight:600;color:#8a4b00}
"""


# ---------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------


@dataclass
class HtmlReport:
    title: str
    subtitle: str = ""
    sections: list[tuple[str, str, str]] = field(default_factory=list)  # (id, title, html)

    def add(self, title: str, *parts: str, note: str = "", sid: str | None = None) -> None:
        """A section; ``sid`` (default: from the title, e.g. ``critical-path``) is its anchor."""
        base = sid or "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-") or "section"
        base = "-".join(w for w in base.split("-") if w)
        taken = {x for x, _, _ in self.sections}
        sid, k = base, 2
        while sid in taken:
            sid, k = f"{base}-{k}", k + 1
        body = (f'<p class="note">{esc(note)}</p>' if note else "") + "".join(parts)
        self.sections.append((sid, title, body))

    def render(self) -> str:
        secs = "".join(
            f'<section id="{esc(sid)}"><h2>{esc(t)}</h2>{body}</section>' for sid, t, body in self.sections
        )
        sub = f"<p>{esc(self.subtitle)}</p>" if self.subtitle else ""
        toc = ""
        if len(self.sections) > 1:  # the page's section list, linking to each section
            links = "".join(f'<a href="#{esc(sid)}">{esc(t)}</a>' for sid, t, _ in self.sections)
            toc = f'<nav class="toc">{links}</nav>'
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(self.title)}</title><style>{_CSS}</style></head>"
            f"<body><header><h1>{esc(self.title)}</h1>{sub}</header><main>{toc}{secs}</main></body></html>\n"
        )
