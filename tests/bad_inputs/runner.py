"""Run corpus cases through the CLI in this process, under a memory cap and a time limit per case.

``python -m tests.bad_inputs.runner RESULTS.json [INPUT ...]`` runs the cases of the named inputs
(the part of a case name before "/"; all by default) and writes one record per case: exit code,
stderr lines, stdout tail, seconds. :func:`run_all` runs every input in its own such process
(a bomb's heap is not left to the next case), two at a time.
The address-space cap (``CORPUS_MEMORY_CAP``, default 3 GiB) makes a memory bomb fail its case
(a MemoryError, exit 3) instead of taking the machine down; a case still running after
``CORPUS_CASE_SECONDS`` (default 60) is stopped by an alarm and recorded as a hang.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path


class Hang(BaseException):
    """Raised by the alarm in a case that ran too long (not an Exception: the CLI must not catch it)."""


def _alarm(signum: int, frame: object) -> None:
    raise Hang()


def run_cases(inputs: list[str] | None) -> list[dict]:
    from click.testing import CliRunner

    from charllm_trace.cli.app import main
    from tests.bad_inputs.cases import CASES

    limit = int(os.environ.get("CORPUS_CASE_SECONDS", "60"))
    signal.signal(signal.SIGALRM, _alarm)
    out = []
    for case in CASES:
        if inputs and case.name.split("/")[0] not in inputs:
            continue
        with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
            d = Path(tmp)
            os.environ["CHARLLM_TRACE_CACHE_DIR"] = str(d / "cache")
            os.environ.pop("CHARLLM_TRACE_MAX_EVENTS", None)  # a case may set a small one
            rec: dict = {"name": case.name, "needles": list(case.needles)}
            t = time.monotonic()
            try:
                argv = case.build(d)
                rec["argv"] = [a.replace(tmp, "TMP") for a in argv]
                signal.alarm(limit)
                try:
                    r = CliRunner().invoke(main, argv, catch_exceptions=True)
                finally:
                    signal.alarm(0)
                rec["exit"] = r.exit_code
                rec["stderr"] = r.stderr.replace(tmp, "TMP").strip().splitlines()
                rec["stdout_tail"] = r.stdout.replace(tmp, "TMP")[-300:]
                if r.exception is not None and not isinstance(r.exception, SystemExit):
                    rec["exception"] = f"{type(r.exception).__name__}: {r.exception}"[:300]
            except Hang:
                rec["exit"] = "hang"
            except MemoryError:
                rec["exit"] = "MemoryError"
            rec["seconds"] = round(time.monotonic() - t, 2)
        out.append(rec)
    return out


def run_all(workers: int = 2, timeout: float = 600) -> list[dict]:
    """Every case, each input's cases in a fresh ``python -m tests.bad_inputs.runner`` process."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from tests.bad_inputs.cases import CASES

    inputs = list(dict.fromkeys(c.name.split("/")[0] for c in CASES))
    root = Path(__file__).resolve().parents[2]

    def one(inp: str) -> list[dict]:
        with tempfile.TemporaryDirectory(prefix="corpus-out-") as tmp:
            out = Path(tmp) / "r.json"
            r = subprocess.run(
                [sys.executable, "-m", "tests.bad_inputs.runner", str(out), inp],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            if r.returncode != 0 or not out.exists():
                crash = f"runner exit {r.returncode}: {r.stderr.strip()[-300:]}"
                return [
                    {"name": c.name, "needles": list(c.needles), "exit": crash, "stderr": []}
                    for c in CASES
                    if c.name.split("/")[0] == inp
                ]
            return json.loads(out.read_text())

    with ThreadPoolExecutor(workers) as ex:
        return [rec for recs in ex.map(one, inputs) for rec in recs]


def main() -> None:
    cap = int(os.environ.get("CORPUS_MEMORY_CAP", str(3 << 30)))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    results = run_cases(sys.argv[2:] or None)
    Path(sys.argv[1]).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
