"""``charllm-trace telemetry import``: power/temperature/clock logs of other tools (nvidia-smi,
dcgmi dmon, amd-smi, rocm-smi, Zeus) attached to a run directory or written into an ET
(:mod:`charllm_trace.telemetry_import`; docs/telemetry-import.md)."""

from __future__ import annotations

import os
import re

import click

from charllm_trace.telemetry_import import FORMATS

_OFFSET_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_clock_offset(text: str) -> int:
    """``250ms``, ``-1.5s``, ``1200us``, ``5000ns`` or a bare number of ms, as integer ns."""
    m = re.fullmatch(r"\s*([-+]?\d+(?:\.\d*)?)\s*(ns|us|ms|s)?\s*", text)
    if not m:
        raise click.BadParameter(
            f"{text!r}: a number with a unit ns, us, ms or s (e.g. -250ms)", param_hint="--clock-offset"
        )
    return round(float(m.group(1)) * _OFFSET_UNITS[m.group(2) or "ms"])


def parse_device_map(text: str | None) -> dict[int, int] | None:
    """``GPU=RANK[,GPU=RANK...]`` (the tool's GPU index, then the rank that used it)."""
    if text is None:
        return None
    out: dict[int, int] = {}
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*[=:]\s*(?:rank)?\s*(\d+)\s*", part)
        if not m:
            raise click.BadParameter(
                f"{part!r}: write GPU=RANK pairs, e.g. 0=0,1=1 or 4=0,5=1", param_hint="--device-map"
            )
        gpu, rank = int(m.group(1)), int(m.group(2))
        if gpu in out or rank in out.values():
            raise click.BadParameter(f"GPU {gpu} or rank {rank} is mapped twice", param_hint="--device-map")
        out[gpu] = rank
    return out


@click.group("telemetry")
def telemetry_group() -> None:
    """GPU telemetry recorded by other tools."""


@telemetry_group.command("import")
@click.argument("target", type=click.Path())
@click.argument("log", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True, help="The tool that wrote LOG.")
@click.option("--device-map", default=None, metavar="GPU=RANK,...",
              help="The tool's GPU index of each rank, e.g. 4=0,5=1 (default: the GPU each rank recorded).")  # fmt: skip
@click.option("--clock-offset", default="0", metavar="OFFSET",
              help="Added to every sample time to match the trace's clock: -250ms, 1.5s, 800us (bare number: ms).")  # fmt: skip
@click.option("--tz", default=None, metavar="ZONE",
              help="Time zone of the log's zone-less local times (IANA name: UTC, Europe/Berlin); "
                   "default: this machine's, with a warning.")  # fmt: skip
@click.option("--start", default=None, metavar="TIME",
              help="Logs whose rows carry no time (dcgmi dmon, rocm-smi): the first sample's time, "
                   "'YYYY-mm-dd HH:MM:SS.fff' (local, see --tz) or Unix seconds.")  # fmt: skip
@click.option("--interval-ms", type=float, default=None,
              help="With --start: the sampling interval in ms (dcgmi dmon: its -d, default 1000; rocm-smi: required).")  # fmt: skip
@click.option(
    "--host", default=None, help="Run directories of several nodes: the node the log was recorded on."
)
@click.option("-o", "--output", default=None,
              help="ET/Kineto input: the ET to write (default: <input>.telemetry.et beside it).")  # fmt: skip
@click.option("--force", is_flag=True, help="Replace an earlier import's files (never anything else).")
def import_cmd(
    target: str, log: str, fmt: str, device_map: str | None, clock_offset: str, tz: str | None,
    start: str | None, interval_ms: float | None, host: str | None, output: str | None, force: bool,
) -> None:  # fmt: skip
    """Attach LOG (power, temperature, clocks) to TARGET: a collected run directory (files added
    beside the sampler's) or an ET / ET directory / Kineto profile (a new ET with telemetry).

    \b
    charllm-trace telemetry import runs/r1 gpu.csv --format nvidia-smi --tz Europe/Berlin
    charllm-trace telemetry import trace.json.gz power.csv --format zeus -o trace.et
    charllm-trace telemetry import runs/r1 dmon.log --format dcgm --start '2024-04-03 14:25:51' --tz UTC
    """
    from charllm_trace.core.files import path_kind
    from charllm_trace.telemetry_import import read_log
    from charllm_trace.telemetry_import.attach import attach_to_run, write_with_telemetry
    from charllm_trace.telemetry_import.common import ParseOptions

    opts = ParseOptions(
        tz=tz, clock_offset_ns=parse_clock_offset(clock_offset), start=start, interval_ms=interval_ms
    )
    dmap = parse_device_map(device_map)
    kind = path_kind(target)
    imported = read_log(log, fmt, opts)
    run_dir = kind == "dir" and any(
        n.startswith("rank-") and n.endswith(".info.json") for n in os.listdir(target)
    )
    if run_dir:
        if output is not None:
            raise click.UsageError(
                "-o/--output is for ET and Kineto inputs; a run directory gets the files itself"
            )
        res = attach_to_run(target, imported, log, device_map=dmap, host=host, force=force)
    else:
        res = write_with_telemetry(target, imported, log, output, device_map=dmap, force=force)
    if imported.tz_assumed:
        click.echo(
            f"warning: {log}: timestamps have no time zone; read as {imported.tz} (this machine's). "
            "Pass --tz ZONE if the log was recorded elsewhere.",
            err=True,
        )
    if (start is not None or interval_ms is not None) and not imported.time_source.startswith("derived"):
        click.echo(f"note: --start/--interval-ms not used: the rows of {log} carry their own times", err=True)
    rate = imported.rate_hz()
    click.echo(
        f"{imported.tool} log {os.path.basename(log)}: {imported.samples.height:,} samples of GPUs "
        f"{imported.devices}, {f'{rate:g} Hz' if rate else 'unknown rate'}; "
        + ", ".join(f"rank {r} <- GPU {g}" for r, g in sorted(res.rank_gpus.items()))
    )
    for n in imported.notes + res.notes:
        click.echo(f"note: {n}", err=True)
    for p in res.paths:
        click.echo(f"wrote {p}")
