"""Recomputing ``moe_dispatch`` with expert tensor parallelism all-gathers the rows again.

With etp > 1 the rows each rank receives from the dispatch all-to-all are all-gathered over the
expert-TP group before the experts (Megatron ``MoEAlltoAllTokenDispatcher``), and the tensor that
recomputing ``moe_dispatch`` drops is that all-gather's output (``rows x h x 2`` bytes, rows =
routed x top_k x etp: ``moe.moe_activation_bytes_per_layer``). Rebuilding it permutes the rows,
sends them and gathers them again; the recomputation paid the first two only (Qwen3-235B at
etp 4: 0.867 ms per layer and micro-batch, the all-gather's ~0.577 ms missing).

Toy model (user YAML): h 1,024, 8 experts top-2; 4,096 tokens, tp 1, ep 2, etp 4. Permute:
2 x 4,096 x 2 x 1,024 x 2 = 33,554,432 bytes at the GPU's HBM rate; dispatch buffer 4,096 x 2 x
1,024 x 2 = 16,777,216 bytes, all-gathered over 4 ranks into 67,108,864 bytes.
"""
import numpy as np
import pytest

from cost_models import memory, moe as moe_costs
from cost_models.compute import compute_rates
from cost_models.topology import group_collective_time_s
from hardware_specs.catalog import load_cluster, load_efficiency
from model_specs.catalog import load_model
from simulator.config_batch import ATTENTION_KERNEL_CODES, CP_KIND_CODES
from simulator.layer_times import layer_times
from simulator.parallel_config import AttentionKernel, CPKind

YAML = """name: moe-toy
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


@pytest.mark.parametrize("etp", [1.0, 4.0])
def test_recomputed_dispatch_gathers_the_expert_tp_rows_again(tmp_path, etp):
    path = tmp_path / "moe-toy.yaml"
    path.write_text(YAML)
    model = load_model(str(path))
    cluster, eff = load_cluster("dgx-h100"), load_efficiency("hopper")
    rates = compute_rates(cluster.gpu, eff, "bf16")
    a = np.array
    tokens, ep = 4096.0, 2.0
    out = layer_times(model, cluster, eff, rates, a([tokens]), a([1.0]), a([1.0]), a([False]), a([1]), a([ep]),
                      a([etp]), a([1.0]), a([False]), a([CP_KIND_CODES[CPKind.RING]]),
                      a([ATTENTION_KERNEL_CODES[AttentionKernel.AUTO]]), a([True]), a([False]),
                      cuda_graphs=a([True]), modules=memory.MODULE_BITS["moe_dispatch"])
    permute_bytes = 2.0 * 4096 * 2 * 1024 * 2
    buffer_bytes = 4096 * 2 * 1024 * 2
    assert permute_bytes == 33_554_432 and buffer_bytes == 16_777_216
    a2a = moe_costs.moe_all_to_all_time_s(a([float(buffer_bytes)]), a([ep]), a([etp]), cluster, eff)
    gather = (float(group_collective_time_s("all_gather", a([buffer_bytes * etp]), a([etp]), a([1.0]), cluster,
                                            eff)[0]) if etp > 1 else 0.0)
    if etp > 1:
        assert buffer_bytes * etp == 67_108_864 and gather > 0
    expected = permute_bytes / rates.hbm_bytes_per_s + float(a2a["dispatch_s"][0]) + gather
    assert float(out["recompute_sel_moe"][0]) == pytest.approx(expected, rel=1e-12)
