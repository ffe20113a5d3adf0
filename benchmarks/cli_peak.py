"""Run ``charllm-trace ARGS...`` in this process and print its wall time and this process's peak
RSS (``VmHWM``): with ``--scheduler`` that is the driver's memory (the Dask workers are other
processes). Run it in a fresh process per measurement:

    python benchmarks/cli_peak.py analyze RUN --scheduler local:2 --no-cache --format json -o out.json
"""

import sys
import time

from click.testing import CliRunner

from charllm_trace.cli.app import main


def go() -> None:
    t0 = time.perf_counter()
    r = CliRunner().invoke(main, sys.argv[1:], catch_exceptions=False)
    wall = time.perf_counter() - t0
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1]
    print(f"exit={r.exit_code} wall_s={wall:.1f} driver_peak_MiB={int(hwm) / 1024:.0f}", file=sys.stderr)
    if r.exit_code:
        print(r.output[-2000:], file=sys.stderr)


if __name__ == "__main__":
    go()
