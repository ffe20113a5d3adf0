"""Link peak bandwidth table, per direction, GB/s (GB = 1e9 bytes).

Utilisation of a collective is its bus bandwidth over the peak of the slowest link
its group crosses: the GPU's scale-up link when every rank of the group is on one
node, the network port when the group spans nodes. The figures are vendors'
published per-direction peaks; ``--peak-gbps`` overrides them.

====================================== ========= ===============================================
device (matched on the model name)      GB/s/dir  link
====================================== ========= ===============================================
H100 / H200 / GH200 / H800 (SXM)         450      NVLink 4: 18 links x 25 GB/s (900 GB/s both ways)
B200 / GB200                             900      NVLink 5 (1.8 TB/s both ways)
A100 / A800 (SXM, incl. PG509)           300      NVLink 3: 12 links x 25 GB/s (600 both ways)
V100 (SXM2/SXM3)                         150      NVLink 2: 6 links x 25 GB/s (300 both ways)
MI300X                                   448      Infinity Fabric: 7 links x 64 GB/s
MI250 / MI250X                           400      Infinity Fabric: 8 links x 100 GB/s both ways, per OAM
any "PCIe" card, gen5 parts              64       PCIe gen5 x16
any "PCIe" card, otherwise               32       PCIe gen4 x16 (V100 PCIe / older: gen3, 16)
group spanning nodes                     50       InfiniBand NDR, one 400 Gb/s port per GPU
====================================== ========= ===============================================

Whether a group spans nodes comes from its ranks' hosts. When a host is unknown, the group is
*assumed* to span nodes if it has more ranks than a node has GPUs (the run's ranks per node when
the manifest says, else :data:`NODE_GPUS`), else to be on one node; either way the link's name
says "assumed".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from charllm_trace.analysis.results import LinkPeak

PCIE_GEN3 = 16.0
PCIE_GEN4 = 32.0
PCIE_GEN5 = 64.0
IB_NDR_PORT = 50.0
#: GPUs of a node when the run does not say (DGX/HGX and MI250/MI300 platforms have 8)
NODE_GPUS = 8

#: (regex on device model, GB/s per direction, link name); first match wins.
SCALE_UP: tuple[tuple[str, float, str], ...] = (
    (r"(?i)\b(GB200|B200|B100)\b", 900.0, "NVLink 5"),
    (r"(?i)\b(H100|H200|GH200|H800|H20)\b.*PCIe", PCIE_GEN5, "PCIe gen5 x16"),
    (r"(?i)\b(H100|H200|GH200|H800|H20)\b", 450.0, "NVLink 4"),
    (r"(?i)\b(A100|A800)\b.*PCIe", PCIE_GEN4, "PCIe gen4 x16"),
    (r"(?i)\b(A100|A800)", 300.0, "NVLink 3"),
    (r"(?i)\bV100\b.*PCIe", PCIE_GEN3, "PCIe gen3 x16"),
    (r"(?i)\bV100", 150.0, "NVLink 2"),
    (r"(?i)MI300", 448.0, "Infinity Fabric (MI300X)"),
    (r"(?i)MI250", 400.0, "Infinity Fabric (MI250)"),
    (r"(?i)(L40|L4\b|RTX|GeForce|Quadro|T4\b|A10\b|A30\b|A40\b)", PCIE_GEN4, "PCIe gen4 x16"),
)


def scale_up_peak(device_model: str | None) -> tuple[float, str] | None:
    if not device_model:
        return None
    for rx, gbps, link in SCALE_UP:
        if re.search(rx, device_model):
            return gbps, link
    return None


def spans_nodes(group_ranks: Iterable[int], hosts: Mapping[int, str | None]) -> bool | None:
    """Whether the ranks live on more than one host; None when a host is unknown."""
    hs = [hosts.get(r) for r in group_ranks]
    if not hs or any(h is None for h in hs):
        return None
    return len(set(hs)) > 1


def link_peak(
    device_model: str | None,
    spans: bool | None,
    override: float | None = None,
    group_size: int | None = None,
    node_gpus: int | None = None,
) -> LinkPeak:
    """The peak used for utilisation (see the module table). ``group_size``: the group's ranks;
    ``node_gpus``: GPUs per node when known (else :data:`NODE_GPUS`); they decide the link when
    ``spans`` is unknown."""
    if override is not None:
        return LinkPeak(gbps=float(override), link="given peak", source="override", spans_nodes=spans)
    if group_size == 1:  # nothing crosses a link: no peak, no utilisation (busbw is 0 by definition)
        return LinkPeak(gbps=None, link="one rank: no link is used", source="one rank", spans_nodes=False)
    if spans:
        return LinkPeak(gbps=IB_NDR_PORT, link="InfiniBand NDR port", source="table", spans_nodes=True)
    node = node_gpus or NODE_GPUS
    if spans is None and group_size is not None and group_size > node:
        per_node = f"{node} GPUs" + (" by the run's manifest" if node_gpus else ", the default")
        return LinkPeak(
            gbps=IB_NDR_PORT,
            link=f"InfiniBand NDR port (assumed: a group of {group_size} ranks spans nodes of {per_node}; "
            "the group's hosts unknown)",
            source="table",
            spans_nodes=None,
        )
    hit = scale_up_peak(device_model)
    if hit is None:
        return LinkPeak(
            gbps=None, link=f"unknown device {device_model!r}", source="unknown", spans_nodes=spans
        )
    gbps, link = hit
    if spans is None:
        link += " (assumed single node: hosts unknown)"
        if group_size is None:
            link = link.replace("hosts unknown", "hosts and group size unknown")
    return LinkPeak(gbps=gbps, link=link, source="table", spans_nodes=spans)
