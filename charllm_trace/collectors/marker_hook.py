"""Iterations of any loop (issue 24): tracing by a ``record_function`` marker instead of
``optimizer.step()``, for inference and serving code that never steps an optimizer.

Like :mod:`charllm_trace.collectors.hook` (whose ``StepTracer`` it extends), this runs inside the
traced processes and imports only the standard library at module level: the injected
``sitecustomize`` loads it from its file when the collect configuration names a marker.

Iteration numbering (docs/collect.md): iteration ``N`` is the ``N``-th (0-based) outermost range
named exactly ``MARKER`` on any thread of the process (a range of that name inside another one
is part of it). Tracing iterations ``a..b`` starts the profiler just before iteration ``a``'s range
opens and stops it just after iteration ``b``'s range closes; each iteration's range begins a
``ProfilerStep#N`` (``N`` its number), so the profile splits by step without ``--step-marker``,
and with it by the marker ranges themselves.

A **time window** (``collect --window DELAY+DURATION``) traces the seconds ``DELAY`` to
``DELAY + DURATION`` after the process starts, whatever runs then (``ProfilerStep#0`` covers
it); the profiler is started and stopped by ``SIGALRM`` on the main thread (Kineto records the
operators of threads that have its callbacks, which a profiler started on another thread would not
give the main thread), so a program that handles ``SIGALRM`` itself is not traced (a message says so).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from typing import Any

ITERATION_NUMBERING = (
    "0-based; iteration N is the N-th outermost record_function range named {marker!r}; "
    "ProfilerStep#N begins where that range begins"
)


def tracer_class(base: type) -> type:
    """``base`` (hook.StepTracer, however it was loaded) counting marker ranges, not optimizer steps."""

    class MarkerTracer(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, marker: str, **kw: Any) -> None:
            super().__init__(*args, **kw)
            self.marker = marker
            self._depth = threading.local()

        def marker_begin(self) -> None:
            with self._lock:
                n = self.completed
                try:
                    if self.state == "idle" and n == self.first:
                        self._maybe_start(n)
                    elif self.state == "tracing" and n <= self.last:
                        self._prof.step()
                        self.traced.append(n)
                except Exception as exc:  # never break the program because tracing failed
                    self._fail(exc)

        def marker_end(self) -> None:
            with self._lock:
                if len(self.step_end_ns) < 100_000:
                    self.step_end_ns.append(time.time_ns())
                self.completed += 1
                try:
                    if self.state == "tracing" and self.completed > self.last:
                        self._stop(complete=True)
                except Exception as exc:
                    self._fail(exc)

        def enter(self) -> bool:
            """A range of the marker's name opens on this thread: True when it is outermost."""
            d = getattr(self._depth, "n", 0)
            self._depth.n = d + 1
            return d == 0

        def leave(self) -> bool:
            d = getattr(self._depth, "n", 1) - 1
            self._depth.n = max(d, 0)
            return d == 0

        def info(self) -> dict[str, Any]:
            d = super().info()
            d["step_numbering"] = ITERATION_NUMBERING.format(marker=self.marker)
            d["step_marker"] = self.marker
            return d

    return MarkerTracer


def patch_record_function(module: Any, tracer: Any) -> None:
    """Wrap ``record_function.__enter__``/``__exit__`` of ``torch.autograd.profiler`` so that the
    outermost range named ``tracer.marker`` begins and ends an iteration."""
    cls = module.record_function
    enter, exit_ = cls.__enter__, cls.__exit__
    pid = tracer._pid

    @functools.wraps(enter)
    def __enter__(self: Any) -> Any:
        if getattr(self, "name", None) == tracer.marker and _own(pid) and tracer.enter():
            tracer.marker_begin()
        return enter(self)

    @functools.wraps(exit_)
    def __exit__(self: Any, *exc: Any) -> Any:
        out = exit_(self, *exc)
        if getattr(self, "name", None) == tracer.marker and _own(pid) and tracer.leave():
            tracer.marker_end()
        return out

    cls.__enter__, cls.__exit__ = __enter__, __exit__


def _own(pid: int) -> bool:
    import os

    return os.getpid() == pid  # a forked child never counts


def install_window(tracer: Any, delay_s: float, duration_s: float) -> None:
    """Trace from ``delay_s`` to ``delay_s + duration_s`` seconds from now (SIGALRM, main thread)."""
    import signal

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGALRM) not in (
        signal.SIG_DFL,
        None,
    ):
        print("charllm-trace: --window: the program handles SIGALRM itself: nothing traced", file=sys.stderr)
        return

    def on_alarm(signum: int, frame: Any) -> None:
        # the program is still importing torch (or has not yet), or the tracer is busy: soon again
        if not _torch_ready() or not tracer._lock.acquire(blocking=False):
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        try:
            if tracer.state == "idle":
                tracer._maybe_start(0)
                signal.setitimer(signal.ITIMER_REAL, max(duration_s, 1e-3))
            elif tracer.state == "tracing":
                tracer.completed = 1  # the window is step 0, complete
                tracer.step_end_ns.append(time.time_ns())
                tracer._stop(complete=True)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
        except Exception as exc:
            tracer._fail(exc)
        finally:
            tracer._lock.release()

    tracer.mode = "window"  # rank-<N>.info.json: what step 0 is
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(delay_s, 1e-3))
    # a program that ends before its window does must not be killed by a timer that fires after the
    # interpreter has put SIGALRM back to its default action (exit 142): the window is then incomplete
    import atexit

    atexit.register(signal.setitimer, signal.ITIMER_REAL, 0)


def _torch_ready() -> bool:
    """torch is imported, and not half-way (a signal can arrive while its import runs)."""
    mod = sys.modules.get("torch.profiler")
    spec = getattr(sys.modules.get("torch"), "__spec__", None)
    return mod is not None and hasattr(mod, "profile") and not getattr(spec, "_initializing", False)


class _AfterImport:
    """Patches ``record_function`` as soon as the program imports ``torch.autograd.profiler``."""

    target = "torch.autograd.profiler"

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.target:
            return None
        import importlib.machinery

        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, original = spec.loader, spec.loader.exec_module
        tracer = self.tracer

        def exec_module(module: Any) -> None:
            original(module)
            try:
                patch_record_function(module, tracer)
            except Exception as exc:
                print(
                    f"charllm-trace: could not hook {tracer.marker!r} ranges: {exc}",
                    file=sys.stderr,
                    flush=True,
                )

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def invalidate_caches(self) -> None:
        pass


def install(tracer: Any) -> None:
    """Count ``tracer.marker`` ranges in this process (now, or once torch is imported)."""
    mod = sys.modules.get(_AfterImport.target)
    if mod is not None:
        patch_record_function(mod, tracer)
    else:
        sys.meta_path.insert(0, _AfterImport(tracer))  # type: ignore[arg-type]
