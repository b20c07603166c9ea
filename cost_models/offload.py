"""Offload to host memory: activation offload per layer and optimizer offload (ZeRO-Offload).

Activation offload (Megatron / Transformer Engine CPU offloading, ``--cpu-offloading
--cpu-offloading-num-layers N``; TE ``get_cpu_offload_context``): after an offloaded layer's
forward its kept activations are copied to pinned host memory on a side stream, and copied
back ahead of its backward. Each copy runs under the compute of the neighbouring layer (the
next layer's forward, the previous layer's backward), so per offloaded layer and micro-batch
the exposed time is what the copy exceeds that window by:

    exposed_fwd = max(bytes / link_bw - next layer's forward, 0)
    exposed_bwd = max(bytes / link_bw - previous layer's backward, 0)

While a copy runs its layer's activations are still (or again) on the GPU: one offloaded layer's
worth beyond those the GPU keeps (the last one going out at the end of a forward, the next one
coming back during a backward).

Optimizer offload (Ren et al. 2021, "ZeRO-Offload", USENIX ATC, section 4; Megatron-Core
``HybridDeviceOptimizer`` with ``--optimizer-cpu-offload --optimizer-offload-fraction``): a
fraction of the GPU's optimizer shard (fp32 master weights and Adam moments, 12 bytes per
parameter, plus the fp32 gradient copy the host step reads, 4) lives in host memory; per step
its gradients go down the link, the host runs Adam on them at host memory bandwidth (fused
CPU Adam is memory-bound like the GPU's: read weight, gradient and moments, write weight and
moments, 28 bytes per parameter), and the updated weights come back: in the dtype that crosses the
host link, which is the stack's (``TrainingBehaviour.offload_weight_bytes``): Megatron-Core's
``HybridDeviceOptimizer`` copies its fp32 host parameter into the GPU's fp32 main parameter, or with
a non-blocking ``copy_`` into a 16-bit one, which PyTorch converts on the GPU (4 bytes); DeepSpeed
0.9+'s ZeRO-Offload copies the fp32 partition into the 16-bit one with a blocking ``copy_``, which
converts on the CPU (2 bytes).

Every function takes numpy arrays or scalars.
"""
from __future__ import annotations

import re

import numpy as np

#: host bytes per offloaded optimizer parameter: fp32 master weight, Adam m and v (12) and
#: the fp32 gradient the host step reads (4)
HOST_OPTIMIZER_BYTES_PER_PARAM = 16.0
#: host-memory traffic of one Adam update per parameter (fp32 weight, gradient, m, v read;
#: weight, m, v written)
HOST_ADAM_BYTES_PER_PARAM = 28.0
#: the 16-bit weights copied back to the GPU per parameter: the default of
#: ``optimizer_offload_step`` (a stack states its own, ``TrainingBehaviour.offload_weight_bytes``)
UPDATED_WEIGHT_BYTES = 2.0
#: offloaded layers whose activations are on the GPU at a stage's peak: the one whose copy to the
#: host is in flight (during backward, the one copied back is the one being computed)
OFFLOAD_STAGING_LAYERS = 1.0


#: PCIe 3.0 and later encode 128 payload bits in 130 on the wire (PCI Express Base Specification
#: 3.0, 4.2.2); the rates a GPU datasheet gives (H100 SXM "PCIe Gen5: 128 GB/s", 64 each way)
#: are the raw 32 GT/s x 16 lanes
PCIE_ENCODING = 128.0 / 130.0
#: a DMA write or completion carries at most 256 payload bytes (the Max_Payload_Size servers run;
#: a GPU's copies move whole TLPs) behind about 24 bytes of framing, sequence number, TLP header
#: and LCRC (PCI Express Base Specification, 2.1 and 4.2; 3DW header + 4 B LCRC + framing)
PCIE_TLP_PAYLOAD_BYTES = 256.0
PCIE_TLP_OVERHEAD_BYTES = 24.0


def is_pcie_link(link) -> bool:
    """Whether a host link named ``link`` (a cluster file's ``host.link``, any case) is PCIe."""
    return link is not None and str(link).strip().lower().startswith("pcie")


def host_link_payload_bw(link: str, raw_bw_bytes_per_s):
    """Bytes/s of data a GPU's host link moves each way: a PCIe link's raw rate less its 128b/130b
    encoding and its per-packet overhead (64 GB/s raw Gen5 x16 -> 57.6 GB/s; bandwidthTest-style
    pinned copies on H100 measure about 55); other links (NVLink-C2C) at the rate their file
    gives."""
    name = str(link).lower()
    # 128b/130b and these packets are PCIe 3.0-5.0's (1.x-2.0 encode 8b/10b, 6.0 moves fixed-size
    # FLITs; neither is in the catalog, and both are taken at their file's rate like any other link)
    gen = re.search(r"(?:gen|pcie)[\s_.-]*0*(\d+)", name)
    if is_pcie_link(name) and (gen is None or 3 <= int(gen.group(1)) <= 5):     # no generation: 3-5
        return _f(raw_bw_bytes_per_s) * PCIE_ENCODING * (
            PCIE_TLP_PAYLOAD_BYTES / (PCIE_TLP_PAYLOAD_BYTES + PCIE_TLP_OVERHEAD_BYTES))
    return _f(raw_bw_bytes_per_s)


def shared_link_bw(link_bw_bytes_per_s, uplink_bw_bytes_per_s=None, gpus_per_uplink=1):
    """Bytes/s each GPU's host copies get, one direction, when every GPU of the node offloads at
    once (all ranks run the same plan): the GPU's own link, or its share of an uplink that
    ``gpus_per_uplink`` GPUs sit behind, whichever is less:

        min(link_bw, uplink_bw / gpus_per_uplink)

    ``uplink_bw_bytes_per_s`` None = the uplink is as fast as the GPU's own link. A DGX A100 puts
    two A100s (and two ConnectX-6) behind each of four PCIe Gen4 switches with one x16 uplink to a
    CPU (Azure/azhpc-images@4a4565a topology/ndv4-topo.xml, the same HGX A100 / AMD Rome board:
    each 16 GT/s x16 switch holds two GPUs and two NICs): min(32, 32 / 2) = 16 GB/s per GPU.
    What the copies contend for is the uplink's one direction; NIC traffic on the same switch goes
    GPU to NIC and does not cross it."""
    uplink = _f(link_bw_bytes_per_s) if uplink_bw_bytes_per_s is None else _f(uplink_bw_bytes_per_s)
    return np.minimum(_f(link_bw_bytes_per_s), uplink / _f(gpus_per_uplink))


def _f(x):
    return np.asarray(x, dtype=float)


def transfer_time_s(nbytes, link_bw_bytes_per_s):
    """Seconds to move ``nbytes`` over the GPU-host link in one direction."""
    return _f(nbytes) / _f(link_bw_bytes_per_s)


def exposed_transfer_s(nbytes, link_bw_bytes_per_s, window_s):
    """Exposed seconds of a copy of ``nbytes`` overlapped with compute lasting ``window_s``."""
    return np.maximum(transfer_time_s(nbytes, link_bw_bytes_per_s) - _f(window_s), 0.0)


def optimizer_offload_step(params_offloaded, grad_bytes_per_param, link_bw_bytes_per_s,
                           host_memory_bw_per_gpu_bytes_per_s, weight_bytes_per_param=UPDATED_WEIGHT_BYTES) -> dict:
    """Per step, for ``params_offloaded`` parameters whose optimizer lives on the host:
    ``grads_to_host_s`` (gradients down the link), ``host_step_s`` (Adam on the host at its
    memory bandwidth), ``weights_to_gpu_s`` (the updated weights back, ``weight_bytes_per_param``
    each crossing the link: 4 where the fp32 values cross, 2 where the host converts them to 16
    bits first), ``host_bytes`` (host memory they occupy), ``link_bytes`` (both directions)."""
    p = _f(params_offloaded)
    down = p * _f(grad_bytes_per_param)
    up = p * _f(weight_bytes_per_param)
    return {"grads_to_host_s": transfer_time_s(down, link_bw_bytes_per_s),
            "host_step_s": p * HOST_ADAM_BYTES_PER_PARAM / _f(host_memory_bw_per_gpu_bytes_per_s),
            "weights_to_gpu_s": transfer_time_s(up, link_bw_bytes_per_s),
            "host_bytes": p * HOST_OPTIMIZER_BYTES_PER_PARAM,
            "link_bytes": down + up}
