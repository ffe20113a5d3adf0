"""notebooks/walkthrough.ipynb runs top to bottom on the shipped fixture and draws its two plots."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from tests.conftest import FIXTURES, ROOT

NOTEBOOK = ROOT / "notebooks" / "walkthrough.ipynb"
FIXTURE = FIXTURES / "cpu-2rank-gloo"

if TYPE_CHECKING:
    import nbformat


def _outputs(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def _profiler_steps(kineto: Path) -> set[int]:
    events = json.loads(gzip.decompress(kineto.read_bytes()))["traceEvents"]
    return {
        int(m.group(1))
        for e in events
        if (m := re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", "")))) and e.get("ph") == "X"
    }


def test_walkthrough_runs_top_to_bottom(spawn) -> None:
    """The notebook runs in a Jupyter kernel, a process of its own (``spawn`` marks it
    ``subprocess``); nbformat and nbclient are imported here, not when every worker collects."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # shipped without outputs, so that what the test sees is what it computed
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()  # raises CellExecutionError on the first failing cell

    outs = _outputs(nb)
    assert not [o for o in outs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outs if o.output_type == "stream")

    kinetos = sorted(FIXTURE.glob("rank-*.kineto.json.gz"))
    assert f"cpu-2rank-gloo: {len(kinetos)} ranks" in text

    # the two plots: SVG figures
    figures = [
        o.data["text/html"]
        for o in outs
        if o.output_type == "display_data" and "<svg" in o.get("data", {}).get("text/html", "")
    ]
    assert len(figures) == 2
    bars, scatter = figures
    # one group of 4 bars per (rank, ProfilerStep), steps counted from the Kineto files themselves
    n_groups = sum(len(_profiler_steps(k)) for k in kinetos)
    assert n_groups > 0
    assert bars.count('<rect class="bar"') == 4 * n_groups
    assert 'data-chart="scatter"' in scatter and "<circle" in scatter and "all_reduce" in scatter

    # the headline check against the fixture's baseline passes
    assert "check passes" in text
