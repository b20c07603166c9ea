"""Recomputing ``moe_dispatch`` in a LatentMoE layer permutes the rows at the latent width.

The dispatch sends the routed rows at the experts' width (``params.routed_expert_width``: the
latent size; ``moe.moe_dispatch_bytes``), so the recomputed permutation reads and writes
``2 x routed x top_k x latent x 2 bytes``, not the hidden width. User YAML: h 1,024, latent
256, 8 experts top-2; 4,096 tokens, tp 1, ep 2: 2 x 4,096 x 2 x 256 x 2 = 8,388,608 bytes
at the GPU's HBM rate (the hidden width would be 33,554,432), plus the dispatch all-to-all.
"""
import numpy as np
import pytest

from cost_models import memory, moe as moe_costs
from cost_models.compute import compute_rates
from hardware_specs.catalog import load_cluster, load_efficiency
from model_specs.catalog import load_model
from simulator.config_batch import ATTENTION_KERNEL_CODES, CP_KIND_CODES
from simulator.layer_times import layer_times
from simulator.parallel_config import AttentionKernel, CPKind

YAML = """name: latent-toy
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
  latent_size: 256
"""


def test_recomputed_dispatch_moves_latent_rows(tmp_path):
    path = tmp_path / "latent-toy.yaml"
    path.write_text(YAML)
    model = load_model(str(path))
    cluster, eff = load_cluster("dgx-h100"), load_efficiency("hopper")
    rates = compute_rates(cluster.gpu, eff, "bf16")
    a = np.array
    tokens, ep = 4096.0, 2.0
    out = layer_times(model, cluster, eff, rates, a([tokens]), a([1.0]), a([1.0]), a([True]), a([1]), a([ep]),
                      a([1.0]), a([1.0]), a([False]), a([CP_KIND_CODES[CPKind.RING]]),
                      a([ATTENTION_KERNEL_CODES[AttentionKernel.AUTO]]), a([True]), a([False]),
                      cuda_graphs=a([True]), modules=memory.MODULE_BITS["moe_dispatch"])
    permute_bytes = 2.0 * 4096 * 2 * 256 * 2
    assert permute_bytes == 8_388_608
    mlp = moe_costs.moe_mlp_costs(model, rates, a([tokens]), a([ep]), a([1.0]))
    assert float(mlp["a2a_dispatch_buffer_bytes"][0]) == 4096 * 2 * 256 * 2
    a2a = moe_costs.moe_all_to_all_time_s(mlp["a2a_dispatch_buffer_bytes"], a([ep]), a([1.0]), cluster, eff)
    expected = permute_bytes / rates.hbm_bytes_per_s + float(a2a["dispatch_s"][0])
    assert float(out["recompute_sel_moe"][0]) == pytest.approx(expected, rel=1e-12)
