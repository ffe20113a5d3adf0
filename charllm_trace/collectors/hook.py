"""Per-rank tracing of chosen training steps: the code that runs inside the training processes.

This module is loaded in two ways:

- by the launcher's injected ``sitecustomize`` (``charllm_trace/collectors/_inject``), from its
  file path and under a private name, so that a training process never imports the rest of
  charllm-trace (polars and friends) just because it is being traced;
- by :mod:`charllm_trace.collectors.session` (the Python API), as an ordinary module.

It therefore imports only the standard library at module level; torch is imported when the first
traced step begins.

Step numbering (documented in ``docs/collect.md``): steps are counted from 0 and step ``N`` is the
work between the return of the ``N``-th and the ``(N+1)``-th call of ``optimizer.step()`` (step 0
is everything up to and including the first ``optimizer.step()``). Equivalently, the number of
a step is the number of optimizer steps completed before it began. Only the first optimizer
instance that steps in the process drives the count (models with several optimizers, or an
optimizer wrapping another, count once per iteration). Tracing steps ``a..b`` starts the profiler
and the execution-trace observer when step ``a`` begins and stops them when step ``b`` ends, so the
Kineto profile holds exactly ``ProfilerStep#a`` .. ``ProfilerStep#b`` and the host execution trace
covers the same window. The zero-code hook only sees ``optimizer.step()`` return, so it cannot
trace step 0 (it begins before any hook runs); the Python API can.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import json
import os
import socket
import sys
import threading
import time
import weakref
from typing import Any

ENV_CONFIG = "CHARLLM_TRACE_CONFIG"
#: Set by a rank process for its children ("<pid>:<RANK>"): a child with the same RANK (a data
#: loader worker, a compiler) is not the rank and does not announce itself.
ENV_RANK_OWNER = "CHARLLM_TRACE_RANK_OWNER"
PR_SET_PDEATHSIG = 1
INFO_VERSION = 1
STEP_NUMBERING = (
    "0-based; step N runs from the return of the N-th to the return of the (N+1)-th "
    "optimizer.step() call of the first optimizer that steps"
)
# Keep at most this many step end times per rank (for step-time statistics); ~0.8 MB.
MAX_STEP_TIMES = 100_000


def rank_file(run_dir: str, rank: int, kind: str) -> str:
    """Path of one of a rank's files: kind is ``host_et``, ``kineto`` or ``info``."""
    suffix = {"host_et": "host_et.json.gz", "kineto": "kineto.json.gz", "info": "info.json"}[kind]
    return os.path.join(run_dir, f"rank-{rank}.{suffix}")


def env_rank() -> int | None:
    """The global rank from the launcher's environment (torchrun, Slurm, Open MPI, MPICH/PMI)."""
    return _env_int("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def env_local_rank() -> int | None:
    return _env_int("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")


def _env_int(*names: str) -> int | None:
    """The first of the environment variables ``names`` that is set to a number of digits."""
    for var in names:
        v = os.environ.get(var)
        if v is not None and v.strip().isdigit():
            return int(v)
    return None


def _write_json_atomic(path: str, obj: Any) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def proc_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def set_parent_death_signal(sig: int = 15) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies (``PR_SET_PDEATHSIG``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0
    except Exception:
        return False


def _versions_and_device() -> dict[str, Any]:
    """torch / CUDA / ROCm / NCCL versions and this rank's accelerator, as far as torch knows."""
    import torch

    out: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "nccl": None,
        "device": None,
    }
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:  # no NCCL/RCCL in this build
        pass
    try:
        if torch.cuda.is_available():
            idx = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(idx)
            uuid = getattr(props, "uuid", None)
            out["device"] = {
                "index": idx,
                "name": props.name,
                "uuid": str(uuid) if uuid is not None else None,
                "pci_bus_id": getattr(props, "pci_bus_id", None),
                "pci_device_id": getattr(props, "pci_device_id", None),
                "pci_domain_id": getattr(props, "pci_domain_id", None),
                "total_memory": int(props.total_memory),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "hip_visible_devices": os.environ.get("HIP_VISIBLE_DEVICES"),
            }
    except Exception:
        pass
    return out


class StepTracer:
    """Counts training steps and traces steps ``first..last`` (inclusive) on the chosen ranks.

    ``on_step_end()`` is called when a step ends (the optimizer hook or ``Session.step()``);
    ``begin()`` marks the start of step 0 (only the Python API can call it before step 0 runs).
    """

    def __init__(
        self,
        run_dir: str,
        first: int,
        last: int,
        ranks: list[int] | None = None,
        *,
        record_shapes: bool = True,
        with_stack: bool = False,
        mode: str = "hook",
        run_id: str | None = None,
    ) -> None:
        if first < 0 or last < first:
            raise ValueError(f"bad step range {first}-{last}")
        self.run_dir = os.path.abspath(run_dir)
        self.first = first
        self.last = last
        self.ranks = None if ranks is None else sorted(set(ranks))
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.mode = mode
        self.run_id = run_id
        self.launcher_pid: int | None = None  # the collect launcher this rank runs under
        self.announced = False
        self.ended: dict[str, Any] | None = None  # how this process ended, once it has
        self.ended_ns: int | None = None
        self.completed = 0  # optimizer steps completed == number of the step now running
        self.state = "idle"  # idle -> tracing -> done | skipped
        self.rank: int | None = None
        self.world_size: int | None = None
        self.traced: list[int] = []
        self.step_end_ns: list[int] = []
        self.begin_ns: int | None = None
        self.trace_start_ns: int | None = None
        self.trace_end_ns: int | None = None
        self.export_s: float | None = None
        self.error: str | None = None
        self._clock: weakref.ref[Any] | None = None
        self._in_wrapper = 0
        self._pending = False
        self._prof: Any = None
        self._et: Any = None
        self._lock = threading.Lock()
        self._pid = os.getpid()
        atexit.register(self._atexit)

    # -- step clock ---------------------------------------------------------
    def optimizer_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Global ``register_optimizer_step_post_hook`` callback."""
        if os.getpid() != self._pid:  # a forked child (data loader worker) never counts
            return
        if self._clock is None:
            try:
                self._clock = weakref.ref(optimizer)
            except TypeError:
                self._clock = lambda: optimizer  # type: ignore[assignment]
            self._wrap(optimizer)
        elif self._clock() is not optimizer:
            return
        if self._in_wrapper:
            # Post hooks run inside optimizer.step()'s own profiler range; a step boundary placed
            # there would cut that range in two. Act when optimizer.step() has returned instead.
            self._pending = True
            return
        self.on_step_end()

    def _wrap(self, optimizer: Any) -> None:
        """Wrap this optimizer instance's ``step`` so that step boundaries fall after it returns."""
        original = optimizer.step
        tracer = self

        @functools.wraps(original)
        def step(*args: Any, **kwargs: Any) -> Any:
            tracer._in_wrapper += 1
            try:
                return original(*args, **kwargs)
            finally:
                tracer._in_wrapper -= 1
                if tracer._pending and not tracer._in_wrapper:
                    tracer._pending = False
                    tracer.on_step_end()

        try:
            optimizer.step = step
        except Exception:  # an optimizer that refuses attributes: boundaries stay inside its range
            pass

    def begin(self) -> None:
        """Step 0 begins now (Python API)."""
        self.begin_ns = time.time_ns()
        if self.first == 0:
            self._maybe_start(0)

    def on_step_end(self) -> None:
        with self._lock:
            now = time.time_ns()
            if len(self.step_end_ns) < MAX_STEP_TIMES:
                self.step_end_ns.append(now)
            self.completed += 1
            n = self.completed  # step n begins now
            try:
                if self.state == "idle" and n == self.first:
                    self._maybe_start(n)
                elif self.state == "tracing":
                    if n > self.last:
                        self._stop(complete=True)
                    else:
                        self._prof.step()
                        self.traced.append(n)
            except Exception as exc:  # never break training because tracing failed
                self._fail(exc)

    # -- profiler -----------------------------------------------------------
    def _identify(self) -> None:
        rank, world = env_rank(), None
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                rank, world = dist.get_rank(), dist.get_world_size()
        except Exception:
            pass
        if world is None:
            w = os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS")
            world = int(w) if w and w.isdigit() else None
        self.rank = 0 if rank is None else rank
        self.world_size = world

    def _maybe_start(self, n: int) -> None:
        self._identify()
        if self.ranks is not None and self.rank not in self.ranks:
            self.state = "skipped"
            return
        import torch
        from torch.profiler import ExecutionTraceObserver, ProfilerAction, ProfilerActivity, profile

        os.makedirs(self.run_dir, exist_ok=True)
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():  # CUDA and ROCm/HIP both appear as CUDA here
            activities.append(ProfilerActivity.CUDA)
        _sibling("pg_hook").install()  # each collective's process group, which gloo does not record
        self._et = ExecutionTraceObserver().register_callback(self._tmp("host_et"))
        self._prof = profile(
            activities=activities,
            record_shapes=self.record_shapes,
            with_stack=self.with_stack,
            # A schedule that always records: it makes the profiler emit ProfilerStep#N ranges.
            schedule=lambda _step: ProfilerAction.RECORD,
            execution_trace_observer=self._et,
        )
        self._prof.step_num = n  # the true step number in ProfilerStep#N
        self.trace_start_ns = time.time_ns()
        self._prof.start()
        self.state = "tracing"
        self.traced = [n]

    def _tmp(self, kind: str) -> str:
        # Written under a temporary name and renamed when complete (a name ending in .gz
        # makes torch compress it).
        final = rank_file(self.run_dir, self.rank if self.rank is not None else 0, kind)
        d, base = os.path.split(final)
        return os.path.join(d, f".tmp-{os.getpid()}-{base}")

    def _stop(self, complete: bool) -> None:
        prof, et = self._prof, self._et
        self._prof = self._et = None
        self.state = "done"
        self.trace_end_ns = time.time_ns()
        t0 = time.perf_counter()
        try:
            prof.stop()
            prof.export_chrome_trace(self._tmp("kineto"))
        finally:
            # Finalises and compresses the host execution trace; torch prints a line about the
            # compression to stdout, which is not the training script's output.
            with contextlib.redirect_stdout(io.StringIO()):
                et.cleanup()
        rank = self.rank if self.rank is not None else 0
        os.replace(self._tmp("kineto"), rank_file(self.run_dir, rank, "kineto"))
        os.replace(self._tmp("host_et"), rank_file(self.run_dir, rank, "host_et"))
        self.export_s = time.perf_counter() - t0
        self._complete = complete
        self.write_info()

    def _fail(self, exc: BaseException) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        self.state = "failed"
        print(f"charllm-trace: tracing failed on this rank: {self.error}", file=sys.stderr, flush=True)
        for obj, meth in ((self._prof, "stop"), (self._et, "unregister_callback")):
            if obj is not None:
                try:
                    getattr(obj, meth)()
                except Exception:
                    pass
        self._prof = self._et = None
        for kind in ("kineto", "host_et"):  # half-written files must not look like traces
            try:
                os.remove(self._tmp(kind))
            except OSError:
                pass
        self.write_info()

    def finish(self) -> None:
        """End of training (Python API exit or process exit): stop a trace still running."""
        with self._lock:
            if self.state == "tracing":
                try:
                    self._stop(complete=False)
                except Exception as exc:
                    self._fail(exc)
            elif self.state in ("done", "skipped") or self.step_end_ns or self.announced:
                self.write_info()

    def _atexit(self) -> None:
        if os.getpid() == self._pid:
            if self.ended is None:
                self._ended({"how": "exit"})
            self.finish()

    def _ended(self, how: dict[str, Any]) -> None:
        self.ended = how
        self.ended_ns = time.time_ns()

    # -- the rank's life (launcher mode) ----------------------------------------
    def announce(self) -> None:
        """Write this rank's info file now (state ``idle``, ``ended`` null), record how the
        process ends (an uncaught exception, SIGTERM/SIGHUP, or a normal exit; a process that
        dies with none of these, e.g. by SIGKILL, leaves ``ended`` null), and die with its parent."""
        self.announced = True
        os.environ[ENV_RANK_OWNER] = f"{self._pid}:{os.environ.get('RANK')}"
        set_parent_death_signal()
        previous = sys.excepthook

        def excepthook(tp: Any, value: Any, tb: Any) -> None:
            if os.getpid() == self._pid and self.ended is None:
                self._ended({"how": "exception", "error": f"{tp.__name__}: {value}"[:500]})
            previous(tp, value, tb)

        sys.excepthook = excepthook
        import signal

        def on_signal(signum: int, frame: Any) -> None:
            if os.getpid() == self._pid:
                self._ended({"how": "signal", "signal": signal.Signals(signum).name})
                self.write_info()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                if signal.getsignal(sig) == signal.SIG_DFL:
                    signal.signal(sig, on_signal)
            except (ValueError, OSError):  # not the main thread
                pass
        self.write_info()

    # -- per-rank record ------------------------------------------------------
    def info(self) -> dict[str, Any]:
        traced_files = self.state == "done"
        rank = self.rank if self.rank is not None else env_rank()
        d: dict[str, Any] = {
            "info_version": INFO_VERSION,
            "run_id": self.run_id,
            "rank": rank,
            "world_size": self.world_size,
            "local_rank": env_local_rank(),
            "local_world_size": _env_int("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"),
            "hostname": socket.gethostname(),
            "pid": self._pid,
            "pid_start": proc_start(self._pid),
            "launcher_pid": self.launcher_pid,
            "ended": self.ended,
            "ended_ns": self.ended_ns,
            "mode": self.mode,
            "state": self.state,
            "error": self.error,
            "step_numbering": STEP_NUMBERING,
            "steps_requested": [self.first, self.last],
            "steps_traced": self._complete_steps(),
            "partial_step": self._partial_step(),
            "trace_complete": bool(getattr(self, "_complete", False)),
            "trace_start_ns": self.trace_start_ns,
            "trace_end_ns": self.trace_end_ns,
            "export_s": self.export_s,
            "begin_ns": self.begin_ns,
            "steps_completed": self.completed,
            "step_end_ns": list(self.step_end_ns),
            "files": {
                "host_et": os.path.basename(rank_file(self.run_dir, rank or 0, "host_et"))
                if traced_files
                else None,
                "kineto": os.path.basename(rank_file(self.run_dir, rank or 0, "kineto"))
                if traced_files
                else None,
            },
            "clock": "unix_ns",
        }
        if "torch" in sys.modules:
            try:
                d.update(_versions_and_device())
            except Exception:
                pass
        return d

    def _complete_steps(self) -> list[int]:
        """Traced steps that ended (a run ending inside the window leaves its last step partial)."""
        if self.state not in ("done", "failed", "tracing"):
            return []
        return [s for s in self.traced if s < self.completed]

    def _partial_step(self) -> int | None:
        """The step that had begun but not ended when tracing stopped (training ended first)."""
        if self.state not in ("done", "failed") or not self.traced:
            return None
        last = self.traced[-1]
        return last if last >= self.completed else None

    def write_info(self) -> None:
        rank = self.rank if self.rank is not None else env_rank()
        if rank is None:
            rank = 0
        if self.ranks is not None and rank not in self.ranks:
            return
        try:
            os.makedirs(self.run_dir, exist_ok=True)
            _write_json_atomic(rank_file(self.run_dir, rank, "info"), self.info())
        except OSError as exc:
            print(f"charllm-trace: cannot write rank info: {exc}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Zero-code installation (called by the injected sitecustomize)
# ---------------------------------------------------------------------------

_TRACER: StepTracer | None = None


def _register(optimizer_module: Any) -> None:
    assert _TRACER is not None
    optimizer_module.register_optimizer_step_post_hook(_TRACER.optimizer_hook)


class _PostImportFinder:
    """Registers the optimizer hook as soon as ``torch.optim.optimizer`` has been imported.

    Importing torch from ``sitecustomize`` would slow down every Python process started under the
    launcher (the torchrun agent, data-loader workers, compilers) and change import order; this
    waits for the training script to import torch itself.
    """

    target = "torch.optim.optimizer"

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.target:
            return None
        import importlib.machinery

        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            try:
                _register(module)
            except Exception as exc:
                print(f"charllm-trace: could not hook optimizer steps: {exc}", file=sys.stderr, flush=True)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def invalidate_caches(self) -> None:
        pass


def config_from_env() -> dict[str, Any] | None:
    raw = os.environ.get(ENV_CONFIG)
    if not raw:
        return None
    return json.loads(raw)


def install_from_env() -> StepTracer | None:
    """Set up step tracing in this process from ``$CHARLLM_TRACE_CONFIG``; no-op without it."""
    global _TRACER
    cfg = config_from_env()
    if cfg is None or _TRACER is not None:
        return _TRACER
    first, last = cfg["steps"]
    marker = _sibling("marker_hook") if cfg.get("marker") else None  # iterations by a marker
    _TRACER = (marker.tracer_class(StepTracer) if marker else StepTracer)(
        cfg["run_dir"],
        int(first),
        int(last),
        cfg.get("ranks"),
        record_shapes=bool(cfg.get("record_shapes", True)),
        with_stack=bool(cfg.get("with_stack", False)),
        mode="hook",
        run_id=cfg.get("run_id"),
        **({"marker": cfg["marker"]} if marker else {}),
    )
    _TRACER.launcher_pid = cfg.get("launcher_pid")
    if cfg.get("launcher_pid") is not None and os.getppid() == cfg.get("launcher_pid"):
        set_parent_death_signal()  # the command itself (torchrun, python): ends with its launcher
    rank_env = os.environ.get("RANK")
    owner = os.environ.get(ENV_RANK_OWNER, "")
    if rank_env is not None and rank_env.strip().isdigit() and owner.split(":", 1)[-1] != rank_env:
        _TRACER.announce()  # a rank process (torchrun and most launchers set RANK)
    mod = sys.modules.get(_PostImportFinder.target)
    if cfg.get("window"):  # a time window: no step clock (marker_hook.install_window)
        _sibling("marker_hook").install_window(_TRACER, *cfg["window"])
    elif marker:
        marker.install(_TRACER)
    elif mod is not None:
        _register(mod)
    else:
        sys.meta_path.insert(0, _PostImportFinder())  # type: ignore[arg-type]
    return _TRACER


def _sibling(name: str) -> Any:
    """A module of this directory, loaded from its file as this one is (standard library only)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"_charllm_trace_{name}", os.path.join(os.path.dirname(__file__), f"{name}.py")
    )
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def active_tracer() -> StepTracer | None:
    return _TRACER
