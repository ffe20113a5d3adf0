"""The simulator of ``tests.schedgen`` (its rules: the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

T_BASE_NS = 1_790_000_000_000_000_000  # baseTimeNanoseconds of the profiles
T0 = 1_000_000  # ns after the base where every rank's thread starts
PID, TID, DEVICE = 100, 100, 0
COMPUTE, SIDE, COMM = 7, 13, 20  # streams


@dataclass(frozen=True)
class Costs:
    launch_call: int = 4_000
    latency: int = 6_000
    gap: int = 1_000
    cpu_gap: int = 2_000
    sync_call: int = 2_000  # at most sync_latency: a sync that found the GPU busy is bound by it
    sync_latency: int = 3_000


@dataclass(frozen=True)
class Kernel:
    dur: int
    pre: int = 10_000
    post: int = 2_000
    stream: int = COMPUTE
    name: str = "ampere_bf16_s16816gemm_bf16_128x128_nn"
    memcpy: bool = False


@dataclass(frozen=True)
class GraphLaunch:
    durs: tuple[int, ...]
    pre: int = 10_000
    call: int = 20_000
    stream: int = COMPUTE


@dataclass(frozen=True)
class Cpu:
    dur: int


@dataclass(frozen=True)
class Sync:
    pre: int = 1_000


@dataclass(frozen=True)
class WaitEvent:
    src: int = COMPUTE
    dst: int = SIDE


@dataclass(frozen=True)
class AllReduce:
    transfer: int
    pre: int = 5_000
    nbytes: int = 1 << 24
    post: int = 2_000  # CPU time of the collective's op after its launch call


Op = Kernel | GraphLaunch | Cpu | Sync | WaitEvent | AllReduce


@dataclass
class Point:
    t: int
    pred: int | None  # point whose time bound this one (None: a root)
    cat: str  # category of the time from pred to this point


@dataclass
class Rank:
    rank: int
    cpu_scale: float
    events: list[dict] = field(default_factory=list)
    cur: int = -1  # point of the CPU thread's cursor
    free: dict[int, int] = field(default_factory=dict)  # stream -> point of its last op's end
    waits: dict[int, int] = field(default_factory=dict)  # stream -> point its next op waits for
    step_ends: list[int] = field(default_factory=list)
    gpu_ends: list[int] = field(default_factory=list)
    step_starts: list[int] = field(default_factory=list)
    step_gpu: list[list[tuple[int, int]]] = field(default_factory=list)  # each step's GPU ops (start, end)


class Schedule:
    """Simulate ``steps`` (a list of steps, each a list of ops) on ``world`` ranks; rank r's CPU
    costs are scaled by ``cpu_scale[r]``."""

    def __init__(self, steps: list[list[Op]], costs: Costs = Costs(), world: int = 1, cpu_scale=None):
        self.costs = costs
        self.spec = (steps, costs, world, cpu_scale)  # (shown when a property test fails)
        self.pts: list[Point] = []
        self.corr = 0
        self.ranks = [Rank(r, (cpu_scale or [1.0] * world)[r]) for r in range(world)]
        for rk in self.ranks:
            rk.cur = self.point(T0, None, "idle")
        self.coll_seq = 0
        for n, step in enumerate(steps, start=1):
            self._step(n, step)

    def __repr__(self) -> str:
        steps, costs, world, scale = self.spec
        return f"Schedule({steps!r}, costs={costs!r}, world={world}, cpu_scale={scale!r})"

    # ---- points ----
    def point(self, t: int, pred: int | None, cat: str) -> int:
        self.pts.append(Point(int(t), pred, cat))
        return len(self.pts) - 1

    def t(self, p: int) -> int:
        return self.pts[p].t

    def latest(self, cands: list[tuple[int, int | None, str]]) -> int:
        """A point at the latest of ``cands`` (time, pred, cat): the first such wins ties."""
        best = max(cands, key=lambda c: c[0])
        return self.point(*best)

    def after(self, p: int, dt: int, cat: str) -> int:
        return self.point(self.t(p) + int(dt), p, cat)

    # ---- events ----
    def ev(self, rk: Rank, name: str, cat: str, a: int, b: int, **kw) -> None:
        pid = kw.pop("pid", PID)
        tid = kw.pop("tid", TID)
        t0, t1 = self.t(a), self.t(b)
        rk.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": (t0 - 0) / 1000,
                "dur": (t1 - t0) / 1000,
                "args": kw,
            }  # fmt: skip
        )

    def cpu(self, rk: Rank, ns: int) -> int:
        return int(round(ns * rk.cpu_scale))

    def _step(self, n: int, ops: list[Op]) -> None:
        c = self.costs
        starts = {}
        for rk in self.ranks:
            starts[rk.rank] = self.after(rk.cur, self.cpu(rk, c.cpu_gap), "idle")
            rk.step_starts.append(starts[rk.rank])
            rk.step_gpu.append([])
            rk.cur = starts[rk.rank]
        for op in ops:
            if isinstance(op, AllReduce):
                self._allreduce(op)
                continue
            for rk in self.ranks:
                self._op(rk, op)
                rk.cur = self.after(rk.cur, self.cpu(rk, c.cpu_gap), "cpu_op")  # inside the step
        for rk in self.ranks:
            self.ev(rk, f"ProfilerStep#{n}", "user_annotation", starts[rk.rank], rk.cur)
            rk.step_ends.append(rk.cur)

    def _runtime(self, rk: Rank, name: str, start: int, dur: int, **args) -> int:
        end = self.after(start, dur, "launch")
        self.ev(rk, name, "cuda_runtime", start, end, correlation=args.pop("correlation"), **args)
        return end

    def _stream_cands(self, rk: Rank, stream: int) -> list[tuple[int, int | None, str]]:
        """When the next op on ``stream`` may start, stream order and event waits (the launch is
        added by the caller). Ties between candidates are broken as the analyser breaks them
        (one critical path among equal ones): an edge that explains the time by itself wins, a
        stream edge with no gap (the lane) first, then the launch, then an event wait, then the
        stream edge whose gap nothing explains."""
        c = self.costs
        cands = []
        if stream in rk.waits:
            w = rk.waits.pop(stream)
            cands.append((self.t(w), w, "sync_wait"))
        if stream in rk.free:
            cand = (self.t(rk.free[stream]) + c.gap, rk.free[stream], "sync_wait")
            cands.insert(0, cand) if c.gap == 0 else cands.append(cand)
        return cands

    def _gpu(
        self, rk: Rank, stream: int, launch: int | None, dur: int, cat: str, name: str, kcat: str, **args
    ):
        """A GPU op on ``stream`` launched by the call starting at point ``launch``."""
        c = self.costs
        cands = self._stream_cands(rk, stream)
        if launch is not None:
            cands.insert(
                1 if c.gap == 0 and stream in rk.free else 0, (self.t(launch) + c.latency, launch, "launch")
            )
        s = self.latest(cands)
        e = self.after(s, dur, cat)
        self.ev(rk, name, kcat, s, e, pid=DEVICE, tid=stream, device=DEVICE, stream=stream, **args)
        rk.free[stream] = e
        rk.gpu_ends.append(e)
        rk.step_gpu[-1].append((s, e))
        return s, e

    def _op(self, rk: Rank, op: Op) -> None:
        c = self.costs
        a = rk.cur
        if isinstance(op, Cpu):
            b = self.after(a, self.cpu(rk, op.dur), "cpu_op")
            self.ev(rk, "aten::cpu_work", "cpu_op", a, b)
        elif isinstance(op, Kernel):
            call = self.after(a, self.cpu(rk, op.pre), "cpu_op")
            self.corr += 1
            kcat, cat = ("gpu_memcpy", "gpu_memory") if op.memcpy else ("kernel", "gpu_compute")
            self._gpu(rk, op.stream, call, op.dur, cat, op.name, kcat, correlation=self.corr)
            name = "cudaMemcpyAsync" if op.memcpy else "cudaLaunchKernel"
            ce = self._runtime(rk, name, call, self.cpu(rk, c.launch_call), correlation=self.corr)
            b = self.after(ce, self.cpu(rk, op.post), "cpu_op")
            self.ev(rk, "aten::copy_" if op.memcpy else "aten::mm", "cpu_op", a, b)
        elif isinstance(op, GraphLaunch):
            call = self.after(a, self.cpu(rk, op.pre), "cpu_op")
            self.corr += 1
            launch: int | None = call
            for i, d in enumerate(op.durs):
                self._gpu(
                    rk,
                    op.stream,
                    launch,
                    d,
                    "gpu_compute",
                    f"graph_kernel_{i}",
                    "kernel",
                    correlation=self.corr,
                )
                launch = None
            ce = self._runtime(rk, "cudaGraphLaunch", call, self.cpu(rk, op.call), correlation=self.corr)
            b = self.after(ce, self.cpu(rk, 1_000), "cpu_op")
            self.ev(rk, "CUDAGraph::replay", "cpu_op", a, b)
        elif isinstance(op, Sync):
            call = self.after(a, self.cpu(rk, op.pre), "cpu_op")
            self.corr += 1
            cands = [(self.t(call) + c.sync_call, call, "launch")]  # (a driver cost: not scaled)
            last = max(rk.gpu_ends, key=self.t) if rk.gpu_ends else None
            if last is not None and self.t(last) > self.t(call):  # the GPU was busy at the call
                cands.insert(0, (self.t(last) + c.sync_latency, last, "sync_wait"))
            ce = self.latest(cands)
            self.ev(rk, "cudaDeviceSynchronize", "cuda_runtime", call, ce, correlation=self.corr)
            b = self.after(ce, self.cpu(rk, 1_000), "cpu_op")
            self.ev(rk, "aten::item", "cpu_op", a, b)
        elif isinstance(op, WaitEvent):
            b = self._wait_event(rk, a, op.src, op.dst)
        else:  # pragma: no cover
            raise TypeError(op)
        rk.cur = b

    def _wait_event(self, rk: Rank, a: int, src: int, dst: int) -> int:
        """cudaEventRecord on ``src`` then cudaStreamWaitEvent on ``dst`` from point ``a``."""
        c = self.costs
        self.corr += 1
        rec_corr = self.corr
        r1 = self._runtime(rk, "cudaEventRecord", a, self.cpu(rk, 1_000), correlation=rec_corr)
        self.corr += 1
        w1 = self._runtime(rk, "cudaStreamWaitEvent", r1, self.cpu(rk, 1_000), correlation=self.corr)
        if src in rk.free:
            rk.waits[dst] = rk.free[src]
            rk.events.append(
                {
                    "ph": "X",
                    "cat": "cuda_sync",
                    "name": "Stream Wait Event",
                    "pid": DEVICE,
                    "tid": dst,
                    "ts": self.t(w1) / 1000,
                    "dur": 0,
                    "args": {
                        "device": DEVICE,
                        "stream": dst,
                        "correlation": self.corr,
                        "wait_on_stream": src,
                        "wait_on_cuda_event_record_corr_id": rec_corr,
                    },
                }  # fmt: skip
            )
        del c
        return w1

    def _allreduce(self, op: AllReduce) -> None:
        """Every rank: an event wait (compute -> comm stream), then the NCCL kernel launch."""
        c = self.costs
        seq = self.coll_seq
        self.coll_seq += 1
        arrive = {}
        for rk in self.ranks:
            a = rk.cur
            w = self._wait_event(rk, a, COMPUTE, COMM)
            # a collective's CPU op (and what it encloses) is communication (core.classify)
            call = self.after(w, self.cpu(rk, op.pre), "communication")
            self.corr += 1
            cands = self._stream_cands(rk, COMM)
            cands.insert(
                1 if c.gap == 0 and COMM in rk.free else 0, (self.t(call) + c.latency, call, "launch")
            )
            arrive[rk.rank] = (self.latest(cands), self.corr)
            ce = self._runtime(
                rk, "cudaLaunchKernel", call, self.cpu(rk, c.launch_call), correlation=self.corr
            )
            b = self.after(ce, self.cpu(rk, op.post), "communication")
            self.ev(rk, "nccl:all_reduce", "cpu_op", a, b)
            rk.cur = self.after(b, self.cpu(rk, c.cpu_gap), "cpu_op")
        last = max((p for p, _ in arrive.values()), key=self.t)
        v = self.point(self.t(last), last, "sync_wait")
        world = len(self.ranks)
        for rk in self.ranks:
            s, corr = arrive[rk.rank]
            e = self.after(v, op.transfer, "communication")
            self.ev(
                rk,
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                "kernel",
                s,
                e,
                pid=DEVICE,
                tid=COMM,
                device=DEVICE,
                stream=COMM,
                correlation=corr,
                **{
                    "Collective name": "allreduce",
                    "In msg nelems": op.nbytes // 2,
                    "Out msg nelems": op.nbytes // 2,
                    "Group size": world,
                    "dtype": "BFloat16",
                    "Process Group Name": "0",
                    "Process Group Description": "default_pg",
                    "Process Group Ranks": str(list(range(world))),
                    "Seq": seq,
                },  # fmt: skip
            )
            rk.free[COMM] = e
            rk.gpu_ends.append(e)
            rk.step_gpu[-1].append((s, e))

    # ---- truth ----
    def window(self, r: int) -> tuple[int, int]:
        """(sink point, window start time) of rank r's whole trace, as the analyser chooses them:
        the latest step end or GPU op end, from the first step's start."""
        rk = self.ranks[r]
        sink = max(rk.gpu_ends + rk.step_ends, key=self.t)
        return sink, self.t(rk.step_starts[0])

    def truth(self, r: int) -> dict[str, int]:
        """Time per category on rank r's whole-trace critical path (and ``length``)."""
        sink, w0 = self.window(r)
        return self.walk(sink, w0)

    def walk(self, p: int, w0: int) -> dict[str, int]:
        """Back from point ``p`` while the points are at or after ``w0`` (as the analyser walks: a
        segment that starts before the window is not on the path)."""
        out: dict[str, int] = {}
        end = self.t(p)
        while (q := self.pts[p].pred) is not None and self.t(q) >= w0:
            dt = self.t(p) - self.t(q)
            if dt > 0:
                out[self.pts[p].cat] = out.get(self.pts[p].cat, 0) + dt
            p = q
        out["length"] = end - self.t(p)
        return out

    def step_windows(self, r: int) -> list[tuple[int, int]]:
        """(end point, start point) of rank r's steps as the analyser tiles them
        (``critical.step_bounds``): a step's boundary is the start of its first GPU op (else its
        ``ProfilerStep`` start), non-decreasing; step k runs from its boundary to the next one,
        the first from its ``ProfilerStep`` start, the last to the last end among its ops."""
        rk = self.ranks[r]
        bounds: list[int] = []
        for ps, ops in zip(rk.step_starts, rk.step_gpu, strict=True):
            b = min((a for a, _ in ops), key=self.t) if ops else ps
            if bounds and self.t(b) < self.t(bounds[-1]):
                b = bounds[-1]
            bounds.append(b)
        last = max([rk.step_ends[-1], *(e for _, e in rk.step_gpu[-1])], key=self.t)
        out = []
        for k in range(len(bounds)):
            start = rk.step_starts[0] if k == 0 else bounds[k]
            end = bounds[k + 1] if k + 1 < len(bounds) else last
            out.append((end, start))
        return out

    def step_truth(self, r: int) -> list[dict[str, int]]:
        """Time per category on each of rank r's step paths (walked back from the step's end)."""
        return [self.walk(e, self.t(a)) for e, a in self.step_windows(r)]

    # ---- output ----

    def write(self, out: Path, flavour: str = "cuda") -> list[Path]:
        """One Kineto profile per rank in ``out`` (``tests.schedgen.kineto.write``)."""
        from tests.schedgen.kineto import write

        return write(self, out, flavour)
