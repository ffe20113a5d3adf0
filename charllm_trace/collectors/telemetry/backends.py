"""Telemetry sources: NVIDIA (NVML via nvidia-ml-py), AMD (amdsmi) and replay of a recorded stream.

A backend is opened once per sampler process. ``devices`` describes the local GPUs; ``read(i)``
returns one sample of device ``i`` as a tuple in ``format.VALUE_COLUMNS`` order (``None`` where the
device does not have that sensor) or raises :class:`DeviceError` when the device itself fails (the
sampler then loses that device's samples only). Opening raises :class:`NoSource` when the machine
has no such GPU or library; the message says why in plain words.

pynvml and amdsmi are imported only here, inside the backends that need them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import time
from typing import Any

from charllm_trace.collectors.telemetry.format import VALUE_COLUMNS


class NoSource(Exception):
    """This kind of GPU telemetry does not exist on this machine."""


class DeviceError(Exception):
    """Reading one device failed (the device vanished, the driver returned an error)."""


class Backend:
    name = "none"

    def __init__(self) -> None:
        self.devices: list[dict[str, Any]] = []
        self.info: dict[str, Any] = {}

    def read(self, i: int) -> tuple[Any, ...]:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------
# NVIDIA
# ---------------------------------------------------------------------------


def _nvml_field_value(fv: Any) -> float | int | None:
    """Decode an ``nvmlFieldValue_t`` (None unless it was read successfully)."""
    import pynvml

    if fv.nvmlReturn != pynvml.NVML_SUCCESS:
        return None
    t = fv.valueType
    v = fv.value
    if t == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if t == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return int(v.uiVal)
    if t == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return int(v.ulVal)
    if t == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return int(v.ullVal)
    if t == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return int(v.sllVal)
    if t == getattr(pynvml, "NVML_VALUE_TYPE_SIGNED_INT", 5):
        return int(v.siVal)
    return None


class NvmlBackend(Backend):
    """NVIDIA GPUs through NVML.

    Power: the instantaneous field ``NVML_FI_DEV_POWER_INSTANT`` where the GPU and driver have it
    (Hopper and later), else ``nvmlDeviceGetPowerUsage`` (a ~1 s average on A100/H100 drivers;
    recorded per device as ``power_field``). Energy: ``nvmlDeviceGetTotalEnergyConsumption``
    (mJ since driver load, written in J). Throttle reasons: ``nvmlDeviceGetCurrentClocksEventReasons``
    (``...ThrottleReasons`` on older bindings).
    """

    name = "nvml"

    def __init__(self) -> None:
        super().__init__()
        try:
            import pynvml
        except ImportError:
            raise NoSource("nvidia-ml-py (pynvml) is not installed") from None
        self.nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            raise NoSource("NVML library not found (no NVIDIA driver on this machine)") from None
        except pynvml.NVMLError_DriverNotLoaded:
            raise NoSource("the NVIDIA driver is not loaded") from None
        except pynvml.NVMLError as exc:
            raise NoSource(f"NVML failed to initialise: {exc}") from None
        try:
            n = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise NoSource(f"NVML cannot count GPUs: {exc}") from None
        if n == 0:
            pynvml.nvmlShutdown()
            raise NoSource("NVML found no NVIDIA GPU")
        self._events = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        self.handles = []
        self._fields: list[list[int]] = []
        self._unsupported: list[set[str]] = []
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            self.handles.append(h)
            dev: dict[str, Any] = {"index": i}
            for key, fn in (
                ("name", pynvml.nvmlDeviceGetName),
                ("uuid", pynvml.nvmlDeviceGetUUID),
            ):
                try:
                    v = fn(h)
                    dev[key] = v.decode() if isinstance(v, bytes) else v
                except pynvml.NVMLError:
                    dev[key] = None
            try:
                bus = pynvml.nvmlDeviceGetPciInfo(h).busId
                dev["pci_bus_id"] = bus.decode() if isinstance(bus, bytes) else bus
            except pynvml.NVMLError:
                dev["pci_bus_id"] = None
            # Probe the instantaneous power field once.
            instant = False
            fid = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)
            if fid is not None:
                try:
                    instant = _nvml_field_value(pynvml.nvmlDeviceGetFieldValues(h, [fid])[0]) is not None
                except pynvml.NVMLError:
                    instant = False
            dev["power_field"] = "NVML_FI_DEV_POWER_INSTANT" if instant else "nvmlDeviceGetPowerUsage"
            fields = [fid] if instant else []
            memt = getattr(pynvml, "NVML_FI_DEV_MEMORY_TEMP", None)
            if memt is not None:
                fields.append(memt)
            self._fields.append(fields)
            self._unsupported.append(set())
            self.devices.append(dev)
        self.info = {"nvml_version": self._safe(pynvml.nvmlSystemGetNVMLVersion)}
        self.info["driver_version"] = self._safe(pynvml.nvmlSystemGetDriverVersion)
        cuda_fn = getattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(
            pynvml, "nvmlSystemGetCudaDriverVersion", None
        )
        cuda = self._safe(cuda_fn) if cuda_fn is not None else None
        self.info["cuda_driver_version"] = (
            f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        )

    def _safe(self, fn: Any, *args: Any) -> Any:
        try:
            v = fn(*args)
            return v.decode() if isinstance(v, bytes) else v
        except self.nv.NVMLError:
            return None

    def _get(self, i: int, key: str, fn: Any, *args: Any) -> Any:
        """One metric: None when unsupported (and never asked again); DeviceError otherwise."""
        if key in self._unsupported[i]:
            return None
        nv = self.nv
        try:
            return fn(self.handles[i], *args)
        except (nv.NVMLError_NotSupported, nv.NVMLError_NoPermission, nv.NVMLError_InvalidArgument):
            self._unsupported[i].add(key)
            return None
        except nv.NVMLError as exc:
            raise DeviceError(f"{key}: {exc}") from None

    def read(self, i: int) -> tuple[Any, ...]:
        nv = self.nv
        power_mw = mem_temp = None
        if self._fields[i]:
            try:
                fvs = nv.nvmlDeviceGetFieldValues(self.handles[i], self._fields[i])
            except nv.NVMLError as exc:
                raise DeviceError(f"field values: {exc}") from None
            vals = [_nvml_field_value(f) for f in fvs]
            if self.devices[i]["power_field"] == "NVML_FI_DEV_POWER_INSTANT":
                power_mw = vals.pop(0)
            mem_temp = vals[0] if vals else None
        if power_mw is None:
            power_mw = self._get(i, "power", nv.nvmlDeviceGetPowerUsage)
        energy_mj = self._get(i, "energy", nv.nvmlDeviceGetTotalEnergyConsumption)
        temp = self._get(i, "temp", nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU)
        sm = self._get(i, "sm_clock", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM)
        mem = self._get(i, "mem_clock", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM)
        util = self._get(i, "util", nv.nvmlDeviceGetUtilizationRates)
        limit_mw = self._get(i, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit)
        reasons = self._get(i, "reasons", self._events) if self._events is not None else None
        return (
            None if power_mw is None else power_mw / 1000.0,
            None if energy_mj is None else energy_mj / 1000.0,
            None if temp is None else float(temp),
            None if mem_temp is None else float(mem_temp),
            None if sm is None else float(sm),
            None if mem is None else float(mem),
            None if util is None else float(util.gpu),
            None if limit_mw is None else limit_mw / 1000.0,
            None if reasons is None else int(reasons),
        )

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError:
            pass


# ---------------------------------------------------------------------------
# AMD
# ---------------------------------------------------------------------------


def _amd_num(v: Any) -> float | None:
    if v is None or isinstance(v, str):  # amdsmi writes "N/A" for absent values
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class AmdSmiBackend(Backend):
    """AMD GPUs through amdsmi.

    Power: ``current_socket_power`` where the SMU reports it (MI300), else
    ``average_socket_power`` (MI250, MI210), in W. On MI250 the two GCDs of a package share one
    power sensor that reads on the even GCD; the odd GCD reports nothing. We record the reading on
    the even GCD for the pair (the odd GCD's ``power_w`` is empty) and the pairing is written in the
    metadata (``power_domain``) so nobody adds the package power twice. Energy:
    ``energy_accumulator * counter_resolution`` (uJ, written in J). Temperatures: hotspot
    (junction) and VRAM; clocks: GFX and MEM; utilisation: ``gfx_activity``; power limit:
    ``power_cap`` (uW, written in W); throttle: ``throttle_status`` of the GPU metrics table.
    """

    name = "amdsmi"

    def __init__(self) -> None:
        super().__init__()
        try:
            # Without ROCm, `import amdsmi` prints to stdout and raises KeyError('libamd_smi.so').
            with contextlib.redirect_stdout(io.StringIO()):
                import amdsmi
        except KeyError:
            raise NoSource("AMD SMI library libamd_smi.so not found (no ROCm on this machine)") from None
        except ImportError:
            raise NoSource("amdsmi is not installed") from None
        from amdsmi.amdsmi_exception import AmdSmiException  # the base class; not re-exported

        self.a = amdsmi
        self.err = AmdSmiException
        try:
            amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
            self.handles = list(amdsmi.amdsmi_get_processor_handles())
        except AmdSmiException as exc:
            raise NoSource(f"AMD SMI failed to initialise: {exc}") from None
        if not self.handles:
            amdsmi.amdsmi_shut_down()
            raise NoSource("AMD SMI found no AMD GPU")
        for i, h in enumerate(self.handles):
            dev: dict[str, Any] = {"index": i}
            dev["name"] = self._safe(lambda h=h: amdsmi.amdsmi_get_gpu_asic_info(h)["market_name"])
            dev["uuid"] = self._safe(lambda h=h: amdsmi.amdsmi_get_gpu_device_uuid(h))
            dev["pci_bus_id"] = self._safe(lambda h=h: amdsmi.amdsmi_get_gpu_device_bdf(h))
            pi = self._safe(lambda h=h: amdsmi.amdsmi_get_power_info(h)) or {}
            dev["power_field"] = (
                "current_socket_power" if _amd_num(pi.get("current_socket_power")) else "average_socket_power"
            )
            self.devices.append(dev)
        # MI250 / MI250X: GCD pairs (0,1), (2,3), ... share the package power sensor on the even GCD.
        for i, dev in enumerate(self.devices):
            if "MI250" in (dev.get("name") or ""):
                even = i - (i % 2)
                pair = [even, even + 1] if even + 1 < len(self.devices) else [even]
                dev["power_domain"] = {
                    "gcds": pair,
                    "reported_on": even,
                    "note": "MI250 package power: one sensor for both GCDs, read on the even GCD "
                    "and recorded there for the pair; the odd GCD's power_w is empty",
                }
        self.info = {
            "amdsmi_lib_version": self._safe(lambda: str(amdsmi.amdsmi_get_lib_version())),
            "driver_version": self._safe(
                lambda: amdsmi.amdsmi_get_gpu_driver_info(self.handles[0])["driver_version"]
            ),
            "rocm_version": self._safe(lambda: self._rocm_version(amdsmi)),
        }

    def _safe(self, fn: Any) -> Any:
        try:
            return fn()
        except Exception:
            return None

    @staticmethod
    def _rocm_version(amdsmi: Any) -> str | None:
        ok, version = amdsmi.amdsmi_get_rocm_version()  # (found, version or error message)
        return str(version) if ok else None

    def read(self, i: int) -> tuple[Any, ...]:
        a = self.a
        h = self.handles[i]
        dev = self.devices[i]
        try:
            pi = a.amdsmi_get_power_info(h)
        except self.err as exc:
            raise DeviceError(f"power: {exc}") from None
        dom = dev.get("power_domain")
        if dom is not None and dom["reported_on"] != i:
            power = None
        else:
            power = _amd_num(pi.get(dev["power_field"]))

        def opt(fn: Any) -> Any:
            try:
                return fn()
            except self.err:
                return None

        e = opt(lambda: a.amdsmi_get_energy_count(h))
        energy = None
        if e and _amd_num(e.get("energy_accumulator")) is not None:
            energy = e["energy_accumulator"] * float(e.get("counter_resolution") or 0.0) / 1e6
        TT, TM = a.AmdSmiTemperatureType, a.AmdSmiTemperatureMetric
        temp = opt(lambda: a.amdsmi_get_temp_metric(h, TT.HOTSPOT, TM.CURRENT))
        mtemp = opt(lambda: a.amdsmi_get_temp_metric(h, TT.VRAM, TM.CURRENT))
        gfx = opt(lambda: a.amdsmi_get_clock_info(h, a.AmdSmiClkType.GFX))
        mem = opt(lambda: a.amdsmi_get_clock_info(h, a.AmdSmiClkType.MEM))
        act = opt(lambda: a.amdsmi_get_gpu_activity(h))
        cap = opt(lambda: a.amdsmi_get_power_cap_info(h))
        metrics = opt(lambda: a.amdsmi_get_gpu_metrics_info(h))
        thr = metrics.get("throttle_status") if isinstance(metrics, dict) else None
        cap_w = _amd_num(cap.get("power_cap")) if cap else None
        return (
            power,
            energy,
            _amd_num(temp),
            _amd_num(mtemp),
            _amd_num(gfx.get("clk")) if gfx else None,
            _amd_num(mem.get("clk")) if mem else None,
            _amd_num(act.get("gfx_activity")) if act else None,
            None if cap_w is None else cap_w / 1e6,
            int(thr) if isinstance(thr, (int, bool)) else None,
        )

    def close(self) -> None:
        try:
            self.a.amdsmi_shut_down()
        except Exception:
            pass


# ---------------------------------------------------------------------------
# Replay of a recorded sample stream
# ---------------------------------------------------------------------------


class ReplayBackend(Backend):
    """Plays back a recorded sample stream as if it were live sensors.

    The stream is a CSV with a header: ``t_ns`` (offset from the start of the stream), ``device``,
    any of the telemetry value columns, and optionally ``error`` (non-empty: reading that device
    fails from that time on, until a later row without an error). ``read(i)`` returns the last row
    of device ``i`` whose ``t_ns`` is not after the time elapsed since the backend opened, like a
    sensor that updates at the recorded times. Used to test the sampler without a GPU.
    """

    name = "replay"

    def __init__(self, path: str) -> None:
        super().__init__()
        import numpy as np

        self.path = path
        try:
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
        except OSError as exc:
            raise NoSource(f"cannot read replay stream {path}: {exc.strerror}") from None
        if not rows or "t_ns" not in rows[0] or "device" not in rows[0]:
            raise NoSource(f"replay stream {path} needs a header with t_ns and device")
        per: dict[int, list[dict[str, str]]] = {}
        for r in rows:
            per.setdefault(int(r["device"]), []).append(r)
        self._t: dict[int, Any] = {}
        self._vals: dict[int, list[tuple[Any, ...] | str]] = {}
        for dev, rs in sorted(per.items()):
            rs.sort(key=lambda r: int(r["t_ns"]))
            self._t[dev] = np.array([int(r["t_ns"]) for r in rs], dtype=np.int64)
            vals: list[tuple[Any, ...] | str] = []
            for r in rs:
                if (r.get("error") or "").strip():
                    vals.append(r["error"].strip())
                else:
                    vals.append(tuple(self._num(c, r.get(c)) for c in VALUE_COLUMNS))
            self._vals[dev] = vals
            self.devices.append(
                {"index": dev, "name": "replay", "uuid": None, "pci_bus_id": None, "power_field": "replay"}
            )
        self.t0_mono_ns = time.monotonic_ns()
        self.t0_unix_ns = time.time_ns()
        self.info = {"replay_stream": os.path.basename(path), "replay_t0_unix_ns": self.t0_unix_ns}
        self._np = np

    @staticmethod
    def _num(col: str, s: str | None) -> Any:
        if s is None or s == "":
            return None
        return int(s) if col == "throttle_reasons" else float(s)

    def read(self, i: int) -> tuple[Any, ...]:
        dev = self.devices[i]["index"]
        el = time.monotonic_ns() - self.t0_mono_ns
        k = int(self._np.searchsorted(self._t[dev], el, side="right")) - 1
        if k < 0:
            return (None,) * len(VALUE_COLUMNS)
        v = self._vals[dev][k]
        if isinstance(v, str):
            raise DeviceError(v)
        return v


def open_backend(spec: str = "auto") -> tuple[Backend | None, list[str]]:
    """Open ``spec`` (``auto``, ``nvml``, ``amdsmi``, ``replay:PATH`` or ``none``).

    Returns the backend (None when there is no source) and the reasons each tried source was
    absent, in plain words.
    """
    reasons: list[str] = []
    if spec.startswith("replay:"):
        try:
            return ReplayBackend(spec[len("replay:") :]), reasons
        except NoSource as exc:
            return None, [f"replay: {exc}"]
    if spec == "none":
        return None, ["telemetry disabled"]
    kinds = {"auto": ("nvml", "amdsmi"), "nvml": ("nvml",), "amdsmi": ("amdsmi",)}.get(spec)
    if kinds is None:
        raise ValueError(f"unknown telemetry source {spec!r}")
    for kind in kinds:
        cls = NvmlBackend if kind == "nvml" else AmdSmiBackend
        try:
            return cls(), reasons
        except NoSource as exc:
            reasons.append(f"{kind}: {exc}")
    return None, reasons
