"""Open an HTML file in a real headless Chromium (Debian's package) and report what it shows.

Used by the report tests. Needs ``/usr/bin/chromium`` (``apt-get install chromium``) and
the ``playwright`` Python package (its own browser download is never used).
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("CHARLLM_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

# For each figure: its kind, and for every drawn element of its plot group the bounding box.
_PROBE = """
() => Array.from(document.querySelectorAll('figure.chart')).map(f => {
  const svg = f.querySelector('svg');
  const marks = svg ? Array.from(svg.querySelectorAll('.plot path, .plot rect, .plot circle, .plot line')) : [];
  const boxes = marks.map(m => { const b = m.getBBox(); return [b.width, b.height]; });
  return {
    kind: f.dataset.chart || 'empty',
    title: f.querySelector('figcaption') ? f.querySelector('figcaption').textContent : '',
    marks: marks.length,
    rows: new Set(Array.from(f.querySelectorAll('.plot path.lane')).map(m => m.dataset.row)).size,
    series: f.querySelectorAll('.plot path.series').length,
    drawn: boxes.filter(([w, h]) => w > 0 || h > 0).length,
    svg_w: svg ? svg.getBoundingClientRect().width : 0,
    svg_h: svg ? svg.getBoundingClientRect().height : 0,
  };
})
"""


# What the page shows besides its figures: sections in order, the findings (text, visible box,
# where each links), and the scatter points' tooltips.
_PAGE = """
() => ({
  sections: Array.from(document.querySelectorAll('main > section')).map(s => s.id),
  findings: Array.from(document.querySelectorAll('ul.findings > li')).map(li => {
    const b = li.getBoundingClientRect();
    const a = li.querySelector('a');
    return {text: li.textContent, visible: b.width > 0 && b.height > 0,
            href: a ? a.getAttribute('href') : null,
            target: a ? !!document.querySelector(a.getAttribute('href')) : false};
  }),
  point_tooltips: Array.from(document.querySelectorAll('g.points > * > title')).map(t => t.textContent),
  marker_shapes: Array.from(document.querySelectorAll('g.points')).map(g => g.dataset.marker),
})
"""


# Standard deviation of the luminance and number of distinct colours of an image.
_PIXELS = """
async (url) => {
  const img = new Image();
  img.src = url;
  await img.decode();
  const c = document.createElement('canvas');
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext('2d');
  g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  let n = 0, s = 0, s2 = 0;
  const colors = new Set();
  for (let i = 0; i < d.length; i += 4) {
    const l = 0.299 * d[i] + 0.587 * d[i + 1] + 0.114 * d[i + 2];
    s += l; s2 += l * l; n++;
    if (colors.size < 100000) colors.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
  }
  const m = s / n;
  return {std: Math.sqrt(Math.max(s2 / n - m * m, 0)), colors: colors.size, w: c.width, h: c.height};
}
"""


@dataclass
class PageResult:
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    figures: list[dict] = field(default_factory=list)
    page: dict = field(default_factory=dict)  # sections, findings, scatter tooltips (_PAGE)
    screenshot: Path | None = None
    pixel_std: float = 0.0
    distinct_colors: int = 0


def have_browser() -> bool:
    if not Path(CHROMIUM).exists():
        return False
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


def require_browser() -> None:
    if not have_browser():
        pytest.skip(f"needs {CHROMIUM} (apt-get install chromium) and the playwright package")


def open_page(html_file: Path, screenshot: Path) -> PageResult:
    """Load ``html_file`` offline in headless Chromium; return console/page errors, requests,
    per-figure geometry and a full-page screenshot with its pixel statistics."""
    from playwright.sync_api import sync_playwright

    res = PageResult()
    profile = tempfile.mkdtemp(prefix="charllm-chromium-")
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=FLAGS,
                viewport={"width": 1100, "height": 900},
                offline=True,
            )
            try:
                page = ctx.new_page()
                page.on("console", lambda m: res.console_errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: res.page_errors.append(str(e)))
                page.on("request", lambda r: res.requests.append(r.url))
                page.goto(html_file.resolve().as_uri(), wait_until="load")
                page.wait_for_timeout(300)
                res.figures = page.evaluate(_PROBE)
                res.page = page.evaluate(_PAGE)
                png = page.screenshot(path=str(screenshot), full_page=True)
                # decode the screenshot in the browser itself: pixel statistics with no imaging library
                blank = ctx.new_page()
                stats = blank.evaluate(_PIXELS, "data:image/png;base64," + base64.b64encode(png).decode())
                res.pixel_std, res.distinct_colors = stats["std"], stats["colors"]
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    res.screenshot = screenshot
    return res
