"""Our decoding of NVML and AMD SMI readings, driven by stand-ins for the vendor libraries.

These check what our code does with the values the libraries return (units: mW, mJ, uW, uJ ->
W, J; unsupported metrics -> empty; a failing device -> DeviceError; MI250 GCD pairs), using
stand-in modules put in ``sys.modules``. They do not show that the real libraries return such
values: the ``gpu``-marked tests in test_telemetry_backends.py do that on hardware.
"""

from __future__ import annotations

import enum
import sys
import types

import pytest

from charllm_trace.collectors.telemetry.backends import AmdSmiBackend, DeviceError, NvmlBackend

real = pytest.importorskip("pynvml")


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    nv = types.ModuleType("pynvml")
    for k in dir(real):
        if k.startswith(("NVML", "NVMLError", "c_nvml")):
            setattr(nv, k, getattr(real, k))

    def field_values(h: int, ids: list[int]) -> object:
        arr = (real.c_nvmlFieldValue_t * len(ids))()
        for i, f in enumerate(ids):
            arr[i].fieldId = f
            arr[i].valueType = real.NVML_VALUE_TYPE_UNSIGNED_INT
            if f == real.NVML_FI_DEV_POWER_INSTANT:
                arr[i].value.uiVal = 312_345  # mW
                arr[i].nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED if h == 1 else real.NVML_SUCCESS
            else:  # memory temperature
                arr[i].value.uiVal = 71
                arr[i].nvmlReturn = real.NVML_SUCCESS
        return arr

    def reasons(h: int) -> int:
        if h == 1:
            raise real.NVMLError_NotSupported()
        return 4

    class Util:
        gpu = 97

    class Pci:
        busId = b"00000000:18:00.0"

    nv.nvmlInit = lambda: None
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    nv.nvmlDeviceGetPciInfo = lambda h: Pci()
    nv.nvmlDeviceGetFieldValues = field_values
    nv.nvmlDeviceGetPowerUsage = lambda h: 300_000  # mW
    nv.nvmlDeviceGetTotalEnergyConsumption = lambda h: 123_456_789  # mJ
    nv.nvmlDeviceGetTemperature = lambda h, s: 55
    nv.nvmlDeviceGetClockInfo = lambda h, c: 1980 if c == real.NVML_CLOCK_SM else 2619
    nv.nvmlDeviceGetUtilizationRates = lambda h: Util()
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000  # mW
    nv.nvmlDeviceGetCurrentClocksEventReasons = reasons
    nv.nvmlSystemGetNVMLVersion = lambda: "12.550"
    nv.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    nv.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv


def test_nvml_decoding(fake_nvml: types.ModuleType) -> None:
    b = NvmlBackend()
    assert [d["power_field"] for d in b.devices] == ["NVML_FI_DEV_POWER_INSTANT", "nvmlDeviceGetPowerUsage"]
    assert b.info["cuda_driver_version"] == "12.4" and b.info["driver_version"] == "550.54.15"
    assert b.read(0) == (312.345, 123456.789, 55.0, 71.0, 1980.0, 2619.0, 97.0, 700.0, 4)
    # Device 1: no instantaneous field (falls back to the power usage), no clock-event reasons.
    assert b.read(1) == (300.0, 123456.789, 55.0, 71.0, 1980.0, 2619.0, 97.0, 700.0, None)

    def lost(h: int) -> int:
        raise real.NVMLError_GpuIsLost()

    fake_nvml.nvmlDeviceGetTotalEnergyConsumption = lost
    with pytest.raises(DeviceError, match="energy"):
        b.read(0)


def test_amdsmi_decoding_and_mi250_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    class AmdSmiException(Exception):
        pass

    exc = types.ModuleType("amdsmi.amdsmi_exception")
    exc.AmdSmiException = AmdSmiException
    a = types.ModuleType("amdsmi")

    class TT(enum.IntEnum):
        HOTSPOT = 1
        VRAM = 3

    class CK(enum.IntEnum):
        GFX = 1
        MEM = 5

    a.AmdSmiInitFlags = enum.IntEnum("F", {"INIT_AMD_GPUS": 2})
    a.AmdSmiTemperatureType = TT
    a.AmdSmiTemperatureMetric = enum.IntEnum("TM", {"CURRENT": 0})
    a.AmdSmiClkType = CK
    a.amdsmi_init = lambda f: None
    a.amdsmi_shut_down = lambda: None
    a.amdsmi_get_processor_handles = lambda: [0, 1, 2, 3]
    a.amdsmi_get_gpu_asic_info = lambda h: {"market_name": "AMD Instinct MI250X"}
    a.amdsmi_get_gpu_device_uuid = lambda h: f"uuid-{h}"
    a.amdsmi_get_gpu_device_bdf = lambda h: f"0000:{h:02x}:00.0"
    # MI250: only the even GCD of a package reports (average) socket power, in W.
    a.amdsmi_get_power_info = lambda h: {
        "current_socket_power": "N/A",
        "average_socket_power": 410 if h % 2 == 0 else "N/A",
    }
    a.amdsmi_get_energy_count = lambda h: {
        "energy_accumulator": 2_000_000,
        "counter_resolution": 15.25,
        "timestamp": 1,
    }

    def temp(h: int, t: TT, m: int) -> int:
        if t == TT.VRAM and h == 3:
            raise AmdSmiException("not supported")
        return 60 if t == TT.HOTSPOT else 70

    a.amdsmi_get_temp_metric = temp
    a.amdsmi_get_clock_info = lambda h, c: {"clk": 1700 if c == CK.GFX else 1600}
    a.amdsmi_get_gpu_activity = lambda h: {"gfx_activity": 88, "umc_activity": 40, "mm_activity": "N/A"}
    a.amdsmi_get_power_cap_info = lambda h: {"power_cap": 560_000_000}  # uW
    a.amdsmi_get_gpu_metrics_info = lambda h: {"throttle_status": 0}
    a.amdsmi_get_lib_version = lambda: "25.0"
    a.amdsmi_get_gpu_driver_info = lambda h: {"driver_version": "6.8.5"}
    a.amdsmi_get_rocm_version = lambda: (True, "6.2.0")
    monkeypatch.setitem(sys.modules, "amdsmi", a)
    monkeypatch.setitem(sys.modules, "amdsmi.amdsmi_exception", exc)

    b = AmdSmiBackend()
    assert [d["power_domain"]["gcds"] for d in b.devices] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [d["power_domain"]["reported_on"] for d in b.devices] == [0, 0, 2, 2]
    assert b.info["rocm_version"] == "6.2.0"
    energy_j = 2_000_000 * 15.25 / 1e6
    assert b.read(0) == (410.0, energy_j, 60.0, 70.0, 1700.0, 1600.0, 88.0, 560.0, 0)
    assert b.read(1)[0] is None  # the odd GCD: the pair's power is on GCD 0
    assert b.read(3)[3] is None  # an unsupported sensor is empty, not an error

    def gone(h: int) -> dict:
        raise AmdSmiException("gone")

    a.amdsmi_get_power_info = gone
    with pytest.raises(DeviceError, match="power"):
        b.read(2)
