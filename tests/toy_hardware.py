"""The toy GPU, cluster and efficiency of the hand-derived collective tests: round numbers
(1 PFLOP/s bf16, 3 TB/s HBM, 400 GB/s NVLink, 50 GB/s NIC, 8 GPUs a node, zero latency and
overhead, every efficiency 1), so every collective takes bytes / bandwidth."""
from __future__ import annotations

from hardware_specs.cluster_spec import ClusterSpec, NetworkTier
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.gpu_spec import GPUSpec

NVLINK = 400e9
NIC = 50e9


def toy_cluster() -> ClusterSpec:
    gpu = GPUSpec(name="toy", generation="toy", peak_flops_per_s={"bf16": 1e15}, hbm_bytes=80e9,
                  hbm_bw_bytes_per_s=3e12, scaleup_bw_bytes_per_s=NVLINK, scaleup_domain_size=8)
    return ClusterSpec(name="toy", gpu=gpu, gpus_per_node=8, scaleup=NetworkTier("nvlink", NVLINK, 0.0),
                       scaleout=NetworkTier("infiniband", NIC, 0.0))


def toy_efficiency() -> EfficiencyModel:
    return EfficiencyModel(generation="toy", gemm_peak_fraction={"bf16": 1.0}, gemm_half_dim=64,
                           attention_peak_fraction=1.0, hbm_fraction=1.0, scaleup_fraction=1.0,
                           scaleout_fraction=1.0, kernel_overhead_s=0.0)
