"""Dense peak compute per device and data type, TFLOP/s (10^12 floating-point operations per s).

The peaks that MFU (model FLOPs utilisation, ``analysis.flops``) divides by: vendors' published
datasheet figures, **dense** (NVIDIA prints its Tensor Core figures "with sparsity"; those are
halved here), at the boost clock the datasheet assumes. A device is matched on its model name
(first row whose pattern matches); a data type the device has no figure for is None (V100 has no
bf16 or tf32, MI200 no tf32), and MFU is then null with that reason.

======================= ======= ====== ====== ====== ====== ====== ==========================================
device                  fp64    fp32   tf32   fp16   bf16   fp8    source
======================= ======= ====== ====== ====== ====== ====== ==========================================
GB200 (NVL72, 1 GPU)    40      80     1250   2500   2500   5000   NVIDIA GB200 NVL72 datasheet (per GPU)
B200 (HGX B200, 1 GPU)  37      75     1100   2250   2250   4500   NVIDIA HGX B200 datasheet (per GPU)
H100 / H200 NVL         60      60     417.5  835.5  835.5  1670.5 NVIDIA H100 NVL / H200 NVL datasheets
H100 PCIe               51      51     378    756.5  756.5  1513   NVIDIA H100 Tensor Core GPU datasheet
H100 / H200 SXM         67      67     494.5  989.5  989.5  1979   NVIDIA H100 / H200 Tensor Core GPU datasheets
A100 (SXM4, PCIe)       19.5    19.5   156    312    312    -      NVIDIA A100 Tensor Core GPU datasheet
V100S PCIe              8.2     16.4   -      130    -      -      NVIDIA V100 Tensor Core GPU datasheet
V100 PCIe               7       14     -      112    -      -      NVIDIA V100 Tensor Core GPU datasheet
V100 SXM2               7.8     15.7   -      125    -      -      NVIDIA V100 Tensor Core GPU datasheet
MI300X / MI325X         163.4   163.4  653.7  1307.4 1307.4 2614.9 AMD Instinct MI300X / MI325X data sheets
MI250X                  95.7    95.7   -      383    383    -      AMD Instinct MI250X data sheet (matrix)
MI250                   90.5    90.5   -      362.1  362.1  -      AMD Instinct MI250 data sheet (matrix)
======================= ======= ====== ====== ====== ====== ====== ==========================================

fp64 is the Tensor Core / matrix figure where there is one; fp32 is the plain (CUDA core) figure on
NVIDIA parts, the matrix figure on AMD ones. ROCm names an MI250X "AMD Instinct MI250X / MI250":
a name that says MI250X is taken as one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The data types of the table, in its column order.
DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8")

_N = None
#: (pattern on the device model, device, (fp64, fp32, tf32, fp16, bf16, fp8), source); first match wins.
PEAKS: tuple[tuple[str, str, tuple[float | None, ...], str], ...] = (
    (r"(?i)\bGB200\b", "GB200", (40.0, 80.0, 1250.0, 2500.0, 2500.0, 5000.0),
     "NVIDIA GB200 NVL72 datasheet, per-GPU figures (sparsity halved)"),
    (r"(?i)\bB200\b", "B200", (37.0, 75.0, 1100.0, 2250.0, 2250.0, 4500.0),
     "NVIDIA HGX B200 datasheet, per-GPU figures (sparsity halved)"),
    (r"(?i)\bH[12]00\b.*\bNVL\b", "H100/H200 NVL", (60.0, 60.0, 417.5, 835.5, 835.5, 1670.5),
     "NVIDIA H100 NVL / H200 NVL datasheets (sparsity halved)"),
    (r"(?i)\bH100\b.*PCIe", "H100 PCIe", (51.0, 51.0, 378.0, 756.5, 756.5, 1513.0),
     "NVIDIA H100 Tensor Core GPU datasheet (sparsity halved)"),
    (r"(?i)\b(H100|H200|GH200)\b", "H100/H200 SXM", (67.0, 67.0, 494.5, 989.5, 989.5, 1979.0),
     "NVIDIA H100 / H200 Tensor Core GPU datasheets, SXM (sparsity halved)"),
    (r"(?i)\bA100\b", "A100", (19.5, 19.5, 156.0, 312.0, 312.0, _N),
     "NVIDIA A100 Tensor Core GPU datasheet (dense)"),
    (r"(?i)\bV100S\b", "V100S PCIe", (8.2, 16.4, _N, 130.0, _N, _N), "NVIDIA V100 Tensor Core GPU datasheet"),
    (r"(?i)\bV100\b.*PCIe", "V100 PCIe", (7.0, 14.0, _N, 112.0, _N, _N), "NVIDIA V100 Tensor Core GPU datasheet"),
    (r"(?i)\bV100\b", "V100 SXM2", (7.8, 15.7, _N, 125.0, _N, _N), "NVIDIA V100 Tensor Core GPU datasheet"),
    (r"(?i)\bMI3(00|25)X\b", "MI300X", (163.4, 163.4, 653.7, 1307.4, 1307.4, 2614.9),
     "AMD Instinct MI300X / MI325X data sheets (dense)"),
    (r"(?i)\bMI250X\b", "MI250X", (95.7, 95.7, _N, 383.0, 383.0, _N), "AMD Instinct MI250X data sheet"),
    (r"(?i)\bMI250\b", "MI250", (90.5, 90.5, _N, 362.1, 362.1, _N), "AMD Instinct MI250 data sheet"),
)  # fmt: skip


@dataclass(frozen=True)
class DevicePeaks:
    """The row of the table a device model matched."""

    device: str  # the table's name for it, e.g. "H100/H200 SXM"
    tflops: dict[str, float | None]  # dtype -> dense peak, None where the device has no figure
    source: str


def device_peaks(device_model: str | None) -> DevicePeaks | None:
    """The peaks of ``device_model``; None when it is unknown or not in the table."""
    if not device_model:
        return None
    for rx, name, figures, source in PEAKS:
        if re.search(rx, device_model):
            return DevicePeaks(name, dict(zip(DTYPES, figures, strict=True)), source)
    return None


def peak_or_reason(device_model: str | None, dtype: str | None) -> tuple[float | None, str | None]:
    """(peak TFLOP/s, None), or (None, why there is none) for ``dtype`` on ``device_model``."""
    if not device_model:
        return None, "device model unknown"
    dp = device_peaks(device_model)
    if dp is None:
        return None, f"no peak for device {device_model!r} in the table"
    if dtype is None:
        return None, "data type unknown"
    v = dp.tflops.get(dtype)
    if v is None:
        return None, f"{dp.device} has no dense {dtype} peak"
    return v, None
