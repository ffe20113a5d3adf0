"""The telemetry sampler: one separate process per node, sampling every local GPU.

Run by the launcher (and the Python API) as
``python -m charllm_trace.collectors.telemetry.sampler --run-dir DIR --hz 100``; it is never a
thread of a training process.

Rate control is drift-free: tick ``k`` is due at ``start + k * period`` on the monotonic clock,
so late ticks do not push later ones back; a tick more than a full period late is skipped and
counted (``missed_ticks``) rather than bunched. Every sample is stamped with ``time.time_ns()``
(the Unix-epoch clock of Kineto) at the midpoint of its device read. Rows are flushed to the OS
every ``FLUSH_S`` seconds. A device that raises is retried once a second; only its own samples
are lost. SIGTERM or SIGINT ends sampling cleanly; so does the death of the parent process.

All time comes from the sampler's :class:`Clock` (the real clocks unless a test passes a fake
one), so the rate control is tested without depending on how busy the machine is; real-time
figures (achieved rate, missed ticks, CPU use) are measured by ``benchmarks/bench_collect.py``.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from charllm_trace.collectors.telemetry.backends import Backend, DeviceError, open_backend
from charllm_trace.collectors.telemetry.format import (
    CSV_COLUMNS,
    FLUSH_S,
    FORMAT,
    FORMAT_VERSION,
    META_EVERY_S,
    SampleWriter,
    csv_path,
    meta_path,
    write_meta,
)

RETRY_S = 1.0
READY_TIMEOUT_S = 30.0


class Clock:
    """Where the sampler's time comes from: the real clocks. Tests pass an object with the same
    three methods that advances time only when told to (or when ``sleep`` is called)."""

    @staticmethod
    def monotonic_ns() -> int:
        """The clock of the rate control (ticks, flushes, retries, deadline)."""
        return time.monotonic_ns()

    @staticmethod
    def time_ns() -> int:
        """The Unix-epoch clock the samples are stamped with (Kineto's clock)."""
        return time.time_ns()

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(seconds)


REAL_CLOCK = Clock()


class Sampler:
    def __init__(
        self,
        backend: Backend | None,
        run_dir: str,
        hz: float,
        *,
        host: str | None = None,
        no_source_reasons: list[str] | None = None,
        parent_pid: int | None = None,
        source_spec: str = "auto",
        clock: Clock = REAL_CLOCK,
    ) -> None:
        if hz <= 0:
            raise ValueError("rate must be positive")
        self.backend = backend
        self.run_dir = run_dir
        self.hz = hz
        self.host = host or socket.gethostname()
        self.reasons = no_source_reasons or []
        self.parent_pid = parent_pid
        self.source_spec = source_spec
        self.clock = clock
        self.ready_fd: int | None = None
        self.stop_requested = False
        self.ticks = 0
        self.missed = 0
        self.errors: list[dict[str, Any]] = []
        self.error_counts: dict[int, int] = {}
        self.start_ns: int | None = None
        self.grid_t0_unix_ns: int | None = None
        self.end_ns: int | None = None
        self.meta_path = meta_path(run_dir, self.host)
        self.csv_path = csv_path(run_dir, self.host)

    def meta(self, complete: bool) -> dict[str, Any]:
        b = self.backend
        elapsed = None
        if self.start_ns is not None:
            elapsed = ((self.end_ns or self.clock.time_ns()) - self.start_ns) / 1e9
        m: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "host": self.host,
            "pid": os.getpid(),
            "source": b.name if b is not None else None,
            "source_requested": self.source_spec,
            "no_source_reason": None if b is not None else "; ".join(self.reasons) or "no power source",
            "tried": self.reasons,
            "devices": b.devices if b is not None else [],
            "source_info": b.info if b is not None else {},
            "columns": list(CSV_COLUMNS),
            "file": os.path.basename(self.csv_path) if b is not None else None,
            "clock": "unix_ns",
            "clock_note": "time.time_ns() at the midpoint of each device read; the Unix-epoch clock of Kineto",
            "requested_hz": self.hz,
            "flush_s": FLUSH_S,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "grid_t0_unix_ns": self.grid_t0_unix_ns,
            "period_ns": round(1e9 / self.hz),
            "ticks": self.ticks,
            "missed_ticks": self.missed,
            "achieved_hz": (self.ticks / elapsed) if elapsed else None,
            "errors": self.errors[:1000],
            "error_counts": {str(k): v for k, v in self.error_counts.items()},
            "complete": complete,
        }
        return m

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_requested = True

    def run(self, duration_s: float | None = None) -> dict[str, Any]:
        """Sample until stopped (signal, parent death, or ``duration_s``); return the final metadata."""
        os.makedirs(self.run_dir, exist_ok=True)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self._run(duration_s)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self, duration_s: float | None) -> dict[str, Any]:
        if self.backend is None:
            self.start_ns = self.end_ns = self.clock.time_ns()
            m = self.meta(complete=True)
            write_meta(self.meta_path, m)
            self._ready()
            return m
        b = self.backend
        ndev = len(b.devices)
        writer = SampleWriter(self.csv_path)
        period = round(1e9 / self.hz)
        self.start_ns = self.clock.time_ns()
        write_meta(self.meta_path, self.meta(complete=False))
        t0 = self.clock.monotonic_ns()
        self.grid_t0_unix_ns = self.clock.time_ns()  # tick k is due at this + k * period (Unix clock)
        deadline = None if duration_s is None else t0 + int(duration_s * 1e9)
        next_flush = t0 + int(FLUSH_S * 1e9)
        next_meta = t0 + int(META_EVERY_S * 1e9)
        next_parent_check = t0 + 1_000_000_000
        retry_at = [0] * ndev
        k = 0
        try:
            while not self.stop_requested:
                due = t0 + k * period
                now = self.clock.monotonic_ns()
                if now < due:
                    self.clock.sleep((due - now) / 1e9)
                    if self.stop_requested:
                        break
                    now = self.clock.monotonic_ns()
                elif now - due >= period:  # more than a period late: skip, do not bunch
                    skip = (now - due) // period
                    self.missed += skip
                    k += skip
                if deadline is not None and now >= deadline:
                    break
                self._sample_devices(b, writer, now, retry_at)
                self.ticks += 1
                k += 1
                if self.ticks == 1:  # ready once the first sample is taken: a window stopped at
                    self._ready()  # once (a loaded machine, a short step) still holds a sample
                if now >= next_flush:
                    writer.flush()
                    next_flush = now + int(FLUSH_S * 1e9)
                if now >= next_meta:
                    write_meta(self.meta_path, self.meta(complete=False))
                    next_meta = now + int(META_EVERY_S * 1e9)
                if now >= next_parent_check:
                    next_parent_check = now + 1_000_000_000
                    if self.parent_pid is not None and os.getppid() != self.parent_pid:
                        break  # the launcher died: do not sample forever
        finally:
            self._ready()  # (stopped before the first sample: never leave a launcher waiting)
            self.end_ns = self.clock.time_ns()
            writer.close()
            b.close()
        m = self.meta(complete=True)
        m.update(self._stats())
        write_meta(self.meta_path, m)
        return m

    def _sample_devices(self, b: Any, writer: SampleWriter, now: int, retry_at: list[int]) -> None:
        """One sample of every device not waiting to retry after an error."""
        for i in range(len(b.devices)):
            if retry_at[i] and now < retry_at[i]:
                continue
            a = self.clock.time_ns()
            try:
                vals = b.read(i)
            except DeviceError as exc:
                self._device_error(i, str(exc))
                retry_at[i] = now + int(RETRY_S * 1e9)
                continue
            except Exception as exc:  # a backend bug must not lose other devices
                self._device_error(i, f"{type(exc).__name__}: {exc}")
                retry_at[i] = now + int(RETRY_S * 1e9)
                continue
            retry_at[i] = 0
            writer.add((a + self.clock.time_ns()) // 2, b.devices[i]["index"], vals)

    def _ready(self) -> None:
        """Tell a waiting launcher that the signal handlers are in place and the first sample is taken."""
        if self.ready_fd is not None:
            try:
                os.write(self.ready_fd, b"ready\n")
                os.close(self.ready_fd)
            except OSError:
                pass
            self.ready_fd = None

    def _device_error(self, i: int, msg: str) -> None:
        dev = self.backend.devices[i]["index"] if self.backend else i
        self.error_counts[dev] = self.error_counts.get(dev, 0) + 1
        if len(self.errors) < 1000:
            self.errors.append({"time_ns": self.clock.time_ns(), "device": dev, "error": msg})

    def _stats(self) -> dict[str, Any]:
        """Per-device achieved rate and detected sensor update period, from the file written."""
        from charllm_trace.collectors.telemetry.reader import read_samples
        from charllm_trace.core.telemetry_stats import achieved_rate_hz, sensor_update_period_ns

        try:
            df = read_samples(self.csv_path)
        except Exception as exc:
            return {"stats_error": str(exc)}
        rates = achieved_rate_hz(df)
        per = sensor_update_period_ns(df)
        return {
            "rows": df.height,
            "achieved_hz_per_device": {str(k): v for k, v in rates.items()},
            "sensor_update_period_ms": {str(k): (None if v is None else v / 1e6) for k, v in per.items()},
        }


# ---------------------------------------------------------------------------
# Process management (used by the launcher and the Python API)
# ---------------------------------------------------------------------------


def start_sampler_process(run_dir: str, hz: float, source: str = "auto") -> subprocess.Popen[bytes]:
    """Start the sampler as a separate process in its own session (a Ctrl-C at the terminal
    reaches the training command, not the sampler; the launcher stops the sampler itself)."""
    cmd = [
        sys.executable,
        "-m",
        "charllm_trace.collectors.telemetry.sampler",
        "--run-dir",
        os.path.abspath(run_dir),
        "--hz",
        str(hz),
        "--source",
        source,
        "--parent-pid",
        str(os.getpid()),
    ]
    env = dict(os.environ)
    env.pop("CHARLLM_TRACE_CONFIG", None)
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(
            [*cmd, "--ready-fd", str(w)],
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            pass_fds=(w,),
        )
    finally:
        os.close(w)
    # Wait until the sampler can be stopped cleanly (its SIGTERM handler is installed) and has
    # begun sampling, so that the telemetry covers the start of the training command.
    try:
        ready, _, _ = select.select([r], [], [], READY_TIMEOUT_S)
        if ready:
            os.read(r, 64)
    finally:
        os.close(r)
    return proc


def stop_sampler_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """Ask the sampler to finish (SIGTERM), wait, kill it if it hangs; return its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="charllm-trace-sampler", description="GPU telemetry sampler (one per node)"
    )
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--hz", type=float, default=100.0)
    ap.add_argument("--source", default="auto", help="auto, nvml, amdsmi, none or replay:PATH")
    ap.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--parent-pid", type=int, default=None, help="stop when this parent process exits")
    ap.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--host", default=None, help="host name for the file names (default: this host)")
    args = ap.parse_args(argv)
    backend, reasons = open_backend(args.source)
    s = Sampler(
        backend,
        args.run_dir,
        args.hz,
        host=args.host,
        no_source_reasons=reasons,
        parent_pid=args.parent_pid,
        source_spec=args.source,
    )
    s.ready_fd = args.ready_fd
    m = s.run(args.duration)
    if backend is None and args.parent_pid is None:  # a launcher reports this itself
        print(
            f"charllm-trace: telemetry: no power source on {s.host} ({m['no_source_reason']})",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
