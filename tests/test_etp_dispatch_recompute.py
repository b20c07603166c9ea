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

from cost_models import moe as moe_costs
from cost_models.topology import group_collective_time_s
from moe_toy_layers import TOY_MOE_YAML, toy_moe_dispatch_recompute


@pytest.mark.parametrize("etp", [1.0, 4.0])
def test_recomputed_dispatch_gathers_the_expert_tp_rows_again(tmp_path, etp):
    a = np.array
    tokens, ep = 4096.0, 2.0
    _, cluster, eff, rates, out = toy_moe_dispatch_recompute(tmp_path, TOY_MOE_YAML, tokens, ep, etp, False)
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
