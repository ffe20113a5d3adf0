"""The Python API: trace chosen steps of a custom training loop.

::

    from charllm_trace.collectors.session import Session

    with Session("run-dir", steps="10-12") as s:
        for batch in loader:
            ...  # forward, backward, optimizer.step()
            s.step()  # the end of one training step

Step numbering is the launcher's (0-based; ``s.step()`` ends a step, entering the ``with``
begins step 0), so unlike the zero-code hook the API can trace step 0. Every rank runs the same
code; each writes its own ``rank-<N>.*`` files. The process with local rank 0 starts the node's
telemetry sampler (a separate process) unless ``telemetry_hz=0``; global rank 0 writes
``manifest.json`` as ``running`` when it enters the ``with`` and with the outcome when it leaves
it (a process killed inside leaves ``running`` with its pid: readers call the run interrupted).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from charllm_trace.collectors.hook import StepTracer, env_local_rank, env_rank, rank_file
from charllm_trace.core.errors import InputError, UsageError


def _launcher_active() -> bool:
    mod = sys.modules.get("_charllm_trace_hook")
    return mod is not None and getattr(mod, "_TRACER", None) is not None


def _api_run_id() -> str | None:
    """The run id of a Session: shared by the environment (``$CHARLLM_TRACE_RUN_ID``, Slurm,
    torchrun's ``$TORCHELASTIC_RUN_ID``), or a fresh one for a single process; None for several
    ranks with nothing to share (each rank could only make up its own)."""
    from charllm_trace.collectors.runstate import new_run_id, shared_run_id

    rid = shared_run_id([])
    if rid is None and os.environ.get("TORCHELASTIC_RUN_ID", "").strip():
        rid = shared_run_id(["--rdzv-id", os.environ["TORCHELASTIC_RUN_ID"].strip()])
    if rid is None and os.environ.get("WORLD_SIZE", "1").strip() in ("", "1"):
        rid = new_run_id()
    return rid


class Session:
    """Context manager that traces steps ``steps`` of the loop it wraps; call :meth:`step` per step."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        steps: str | tuple[int, int] = (1, 2),
        *,
        ranks: str | list[int] | None = None,
        telemetry_hz: float = 100.0,
        telemetry_source: str = "auto",
        record_shapes: bool = True,
        with_stack: bool = False,
        force: bool = False,
    ) -> None:
        from charllm_trace.collectors.launcher import parse_ranks, parse_steps

        self.run_dir = Path(run_dir).resolve()
        self.steps = (
            parse_steps(steps, allow_zero=True) if isinstance(steps, str) else (int(steps[0]), int(steps[1]))
        )
        if self.steps[0] < 0 or self.steps[1] < self.steps[0]:
            raise UsageError(f"steps {steps!r}: expected 0 <= first <= last")
        self.ranks = parse_ranks(ranks) if isinstance(ranks, str) else ranks
        self.telemetry_hz = telemetry_hz
        self.telemetry_source = telemetry_source
        self.force = force
        self.run_id = _api_run_id()
        self.tracer = StepTracer(
            str(self.run_dir),
            self.steps[0],
            self.steps[1],
            self.ranks,
            record_shapes=record_shapes,
            with_stack=with_stack,
            mode="api",
            run_id=self.run_id,
        )
        self._sampler: Any = None
        self._lock: Any = None
        self._started_ns: int | None = None

    def __enter__(self) -> Session:
        if _launcher_active():
            raise UsageError(
                "this process is already traced by `charllm-trace collect`; use one or the other, not both"
            )
        rank = env_rank() or 0
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise InputError(self.run_dir, "exists and is not a directory")
        mine = rank_file(str(self.run_dir), rank, "kineto")
        if os.path.exists(mine) and not self.force:
            raise InputError(mine, "already exists (pass force=True to replace it)")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._started_ns = time.time_ns()
        if rank == 0:
            self._write_manifest("running", exit_code=None)
        if self.telemetry_hz > 0 and (env_local_rank() or 0) == 0:
            from charllm_trace.collectors.launcher import _host_lock
            from charllm_trace.collectors.telemetry.sampler import start_sampler_process

            self._lock = _host_lock(self.run_dir)
            if self._lock is not None:
                self._sampler = start_sampler_process(
                    str(self.run_dir), self.telemetry_hz, self.telemetry_source
                )
        self.tracer.begin()
        return self

    def step(self) -> None:
        """Call once at the end of every training step (after ``optimizer.step()``)."""
        self.tracer.on_step_end()

    @property
    def current_step(self) -> int:
        return self.tracer.completed

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.tracer.finish()
        if self._sampler is not None:
            from charllm_trace.collectors.telemetry.sampler import stop_sampler_process

            stop_sampler_process(self._sampler)
            self._sampler = None
            from charllm_trace.collectors.launcher import _telemetry_note

            note = _telemetry_note(self.run_dir)
            if note:
                print(f"charllm-trace: {note}", file=sys.stderr, flush=True)
        if self._lock is not None:
            self._lock.close()
            try:
                os.remove(self._lock.name)
            except OSError:
                pass
            self._lock = None
        if (self.tracer.rank if self.tracer.rank is not None else env_rank() or 0) == 0:
            failed = exc_type is not None
            self._write_manifest(
                "failed" if failed else "finished",
                exit_code=1 if failed else 0,
                failure=f"rank 0 raised {exc_type.__name__}: {exc}"[:500] if failed else None,
            )

    def _write_manifest(self, status: str, exit_code: int | None, failure: str | None = None) -> None:
        """Rank 0's manifest and node file: ``running`` on entry (so that a process killed inside
        the ``with`` leaves a manifest readers recognise as interrupted), the outcome on exit."""
        from charllm_trace.collectors.manifest import write_manifest, write_node_info
        from charllm_trace.collectors.runstate import this_process

        me = this_process()
        write_node_info(
            self.run_dir, command=list(sys.argv), node_rank=0, run_id=self.run_id, status=status, launcher=me
        )
        write_manifest(
            self.run_dir,
            command=[sys.executable, *sys.argv],
            steps=self.steps,
            ranks=self.ranks,
            telemetry_hz=self.telemetry_hz,
            parallel=None,
            started_ns=self._started_ns or time.time_ns(),
            node_rank=0,
            exit_code=exit_code,
            finished_ns=None if status == "running" else time.time_ns(),
            run_id=self.run_id,
            launcher=me,
            status=status,
            failure=failure,
        )


def trace_steps(run_dir: str | os.PathLike[str], steps: str | tuple[int, int] = (1, 2), **kw: Any) -> Session:
    """``Session(...)``, under a name that reads well in a ``with`` statement."""
    return Session(run_dir, steps, **kw)
