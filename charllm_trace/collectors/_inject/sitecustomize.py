"""Injected by ``charllm-trace collect`` on the PYTHONPATH of the training command.

Python imports ``sitecustomize`` at start-up. When ``$CHARLLM_TRACE_CONFIG`` is set, this loads
``charllm_trace/collectors/hook.py`` from its file (standard library only, no charllm-trace package
import) and installs the optimizer-step hook. Then it runs the ``sitecustomize`` this one shadows,
if any, so a site's own customisation keeps working. It never stops the process from starting.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _install() -> None:
    if not os.environ.get("CHARLLM_TRACE_CONFIG"):
        return
    path = os.path.join(os.path.dirname(_HERE), "hook.py")
    spec = importlib.util.spec_from_file_location("_charllm_trace_hook", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_charllm_trace_hook"] = mod
    spec.loader.exec_module(mod)
    mod.install_from_env()


def _pin() -> None:
    """``collect --cpus``: a rank process (``LOCAL_RANK`` set) narrows itself to its local rank's
    cores before any thread starts (collectors/cpu_alloc.py); other processes keep the cores the
    launcher gave the command."""
    import json

    raw = os.environ.get("CHARLLM_TRACE_CONFIG")
    lists = json.loads(raw).get("cpus") if raw else None
    local = os.environ.get("LOCAL_RANK", "")
    if lists and local.isdigit():
        os.sched_setaffinity(0, lists[int(local) % len(lists)])


def _chain() -> None:
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = mod
    spec.loader.exec_module(mod)


try:
    _pin()
except Exception as _exc:  # the allocation must never stop training from starting
    print(f"charllm-trace: --cpus not applied in this process: {type(_exc).__name__}: {_exc}", file=sys.stderr)
try:
    _install()
except Exception as _exc:  # tracing must never stop training from starting
    print(f"charllm-trace: tracing disabled in this process: {type(_exc).__name__}: {_exc}", file=sys.stderr)
try:
    _chain()
except Exception as _exc:
    print(
        f"charllm-trace: the site's own sitecustomize failed: {type(_exc).__name__}: {_exc}", file=sys.stderr
    )
