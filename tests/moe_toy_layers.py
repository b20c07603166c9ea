"""A toy MoE model from a user YAML and one layer's times for it: the setup the recomputed
``moe_dispatch`` tests share (LatentMoE rows, expert tensor parallelism)."""
import numpy as np

from cost_models import memory
from cost_models.compute import compute_rates
from hardware_specs.catalog import load_cluster, load_efficiency
from model_specs.catalog import load_model
from simulator.config_batch import ATTENTION_KERNEL_CODES, CP_KIND_CODES
from simulator.layer_times import layer_times
from simulator.parallel_config import AttentionKernel, CPKind

#: h 1,024, 8 heads, 8 experts top-2 of width 512, 4,096-token sequences; ``latent_size`` added
#: where a test needs it
TOY_MOE_YAML = """name: moe-toy
num_layers: 4
hidden_size: 1024
num_heads: 8
num_kv_heads: 8
ffn_hidden_size: 512
vocab_size: 32000
seq_len: 4096
moe:
  num_experts: 8
  top_k: 2
  expert_ffn_hidden_size: 512
"""


def toy_moe_dispatch_recompute(tmp_path, yaml_text, tokens, ep, etp, sequence_parallel):
    """(model, cluster, efficiency, rates, layer_times output) of one layer of the toy model on
    a DGX H100 (Hopper factors, bf16), tp 1, with ``moe_dispatch`` the only recomputed module
    and CUDA graphs on (no host floor)."""
    path = tmp_path / "moe-toy.yaml"
    path.write_text(yaml_text)
    model = load_model(str(path))
    cluster, eff = load_cluster("dgx-h100"), load_efficiency("hopper")
    rates = compute_rates(cluster.gpu, eff, "bf16")
    a = np.array
    out = layer_times(model, cluster, eff, rates, a([tokens]), a([1.0]), a([1.0]), a([sequence_parallel]), a([1]),
                      a([ep]), a([etp]), a([1.0]), a([False]), a([CP_KIND_CODES[CPKind.RING]]),
                      a([ATTENTION_KERNEL_CODES[AttentionKernel.AUTO]]), a([True]), a([False]),
                      cuda_graphs=a([True]), modules=memory.MODULE_BITS["moe_dispatch"])
    return model, cluster, eff, rates, out
