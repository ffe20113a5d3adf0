"""Regenerate the baselines kept beside the fixture traces (tests never do this themselves).

    python tests/regen_baselines.py            # every fixture in tests/fixtures/traces/
    python tests/regen_baselines.py NAME ...   # only these

Each fixture ``tests/fixtures/traces/<name>`` gets ``<name>.baseline.json`` beside
it, made by ``charllm-trace baseline <fixture> -o <name>.baseline.json --force``.
Review the diff (``git diff tests/fixtures/traces``) before committing: a changed
number means an analysis changed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"
BASELINE_SUFFIX = ".baseline.json"


def fixture_traces() -> list[Path]:
    """Every trace in the fixtures folder: directories and trace files, not baselines or notes."""
    if not FIXTURES.is_dir():
        return []
    out = []
    for p in sorted(FIXTURES.iterdir()):
        if p.name.startswith(".") or p.name.endswith(BASELINE_SUFFIX) or p.suffix in (".md", ".txt"):
            continue
        out.append(p)
    return out


def baseline_path(fixture: Path) -> Path:
    return fixture.with_name(fixture.name + BASELINE_SUFFIX)


def main(names: list[str]) -> int:
    todo = [f for f in fixture_traces() if not names or f.name in names]
    unknown = set(names) - {f.name for f in todo}
    if unknown:
        print(f"no such fixture: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    rc = 0
    for f in todo:
        out = baseline_path(f)
        # relative paths: the baseline records only the file name, but keep commands readable
        cmd = [sys.executable, "-m", "charllm_trace.cli.app", "baseline", f.name, "-o", out.name, "--force"]
        print("$ charllm-trace", " ".join(cmd[4:]), flush=True)
        r = subprocess.run(cmd, cwd=FIXTURES)
        rc = rc or r.returncode
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
