"""Hardware profiles: accelerators, clusters and per-generation efficiency models (bottom layer)."""
from hardware_specs.catalog import (efficiency_for, efficiency_for_cluster, list_clusters, list_gpus, load_cluster,
                                    load_efficiency, load_gpu)
from hardware_specs.cluster_spec import ClusterSpec, NetworkTier
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError
from hardware_specs.gpu_spec import KNOWN_DTYPES, GPUSpec

__all__ = ["ClusterSpec", "EfficiencyModel", "GPUSpec", "InputError", "KNOWN_DTYPES", "NetworkTier",
           "efficiency_for", "efficiency_for_cluster", "list_clusters", "list_gpus", "load_cluster", "load_efficiency", "load_gpu"]
