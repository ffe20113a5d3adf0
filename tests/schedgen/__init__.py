"""Schedules with a known critical path: a simulator of ranks whose CPU thread launches kernels onto
GPU streams, written out as Kineto profiles (one per rank) whose true critical path, and the time
of each category on it, are known from the simulation itself (not from the analyser).

The rules the simulator applies (times in integer ns):

- a CPU op runs ``pre`` of its own time, then its runtime call (``cudaLaunchKernel``, cost
  ``launch_call``), then ``post``; consecutive top-level ops on the thread are ``cpu_gap`` apart;
- a kernel starts at max(call start + ``latency``, end of the previous op on its stream +
  ``gap``, end of the op an event wait names); it runs its duration;
- ``cudaGraphLaunch`` starts its kernels one after another on its stream (they carry the graph
  launch's correlation id), the first as a launched kernel;
- ``cudaDeviceSynchronize`` returns at max(call start + ``sync_call``, last GPU op end +
  ``sync_latency``) when that op had not ended before the call began (else after its own cost);
- an event wait (``cudaEventRecord`` on stream A, ``cudaStreamWaitEvent`` on stream B, with the
  CUPTI ``Stream Wait Event`` record) makes the next op on B wait for the last op on A;
- an all-reduce waits (event) for the compute stream, then runs on the communication stream of
  every rank: it ends on every rank at the last rank's arrival + ``transfer``.

Every time is the maximum of its candidates; the candidate that won is remembered with the category
of the time between them (``CP_CATEGORIES``: the kernel's span ``gpu_compute``/``gpu_memory``/
``communication``, a CPU op's own time ``cpu_op`` (``communication`` in a collective's CPU op, as
``core.classify`` counts it), a runtime call's own time and launch-to-start
latency ``launch``, a stream gap, an event or a peer ``sync_wait``, time between steps ``idle``).
The true critical path is the chain of winners walked back from the trace's last point.
"""

from tests.schedgen.regimes import (
    REGIMES,
    collective,
    cpu_bound,
    gpu_bound,
    graphs,
    launch_bound,
    streams_and_events,
    switching,
)
from tests.schedgen.sim import (
    COMM,
    COMPUTE,
    SIDE,
    AllReduce,
    Costs,
    Cpu,
    GraphLaunch,
    Kernel,
    Op,
    Schedule,
    Sync,
    WaitEvent,
)

__all__ = [
    "COMM",
    "COMPUTE",
    "REGIMES",
    "SIDE",
    "AllReduce",
    "Costs",
    "Cpu",
    "GraphLaunch",
    "Kernel",
    "Op",
    "Schedule",
    "Sync",
    "WaitEvent",
    "collective",
    "cpu_bound",
    "gpu_bound",
    "graphs",
    "launch_bound",
    "streams_and_events",
    "switching",
]
