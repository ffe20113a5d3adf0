"""Progress by bytes of input on long conversions and analyses (issue 14, item 2): a long
conversion showed ``0/?`` and then nothing for 12 s."""

from __future__ import annotations

import io

from rich.console import Console

from charllm_trace.cli.progress import input_progress
from charllm_trace.converters.run_dir import convert_file, convert_run
from charllm_trace.core.progress import report, reporting
from tests.conftest import shared_trace


def test_nothing_is_reported_without_a_reporter() -> None:
    report("x", 1, 2)  # no reporter installed: a no-op, nothing printed


def test_a_run_reports_bytes_per_rank_up_to_the_total() -> None:
    d = shared_trace("param/dlrm_8ranks_v100")
    total = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
    calls: list[tuple[str, int, int]] = []
    with reporting(lambda what, done, tot: calls.append((what, done, tot))):
        convert_run(d, workers=1)
    assert calls[0] == ("8 ranks", 0, total)  # the total is known before the first rank is read
    done = [c[1] for c in calls]
    assert done == sorted(done) and done[-1] == total
    assert {c[0] for c in calls[1:]} == {f"rank {r}" for r in range(8)}


def test_a_single_profile_reports_its_size() -> None:
    p = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    calls: list[tuple[str, int, int]] = []
    with reporting(lambda *c: calls.append(c)):
        convert_file(p)
    size = p.stat().st_size
    assert calls == [(p.name, 0, size), (p.name, size, size)]


def test_the_terminal_shows_bytes_and_nothing_when_piped() -> None:
    buf = io.StringIO()
    term = Console(file=buf, force_terminal=True, width=120)
    with input_progress("converting", term):
        report("rank 0", 512 * 1024, 1024 * 1024)
    assert "converting" in buf.getvalue() and "MB" in buf.getvalue()
    piped = io.StringIO()
    with input_progress("converting", Console(file=piped, force_terminal=False)):
        report("rank 0", 1, 2)
    assert piped.getvalue() == ""
