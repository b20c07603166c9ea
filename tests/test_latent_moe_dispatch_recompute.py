"""Recomputing ``moe_dispatch`` in a LatentMoE layer permutes the rows at the latent width.

The dispatch sends the routed rows at the experts' width (``params.routed_expert_width``: the
latent size; ``moe.moe_dispatch_bytes``), so the recomputed permutation reads and writes
``2 x routed x top_k x latent x 2 bytes``, not the hidden width. User YAML: h 1,024, latent
256, 8 experts top-2; 4,096 tokens, tp 1, ep 2: 2 x 4,096 x 2 x 256 x 2 = 8,388,608 bytes
at the GPU's HBM rate (the hidden width would be 33,554,432), plus the dispatch all-to-all.
"""
import numpy as np
import pytest

from cost_models import moe as moe_costs
from moe_toy_layers import TOY_MOE_YAML, toy_moe_dispatch_recompute


def test_recomputed_dispatch_moves_latent_rows(tmp_path):
    a = np.array
    tokens, ep = 4096.0, 2.0
    model, cluster, eff, rates, out = toy_moe_dispatch_recompute(
        tmp_path, TOY_MOE_YAML.replace("name: moe-toy", "name: latent-toy") + "  latent_size: 256\n",
        tokens, ep, 1.0, True)
    permute_bytes = 2.0 * 4096 * 2 * 256 * 2
    assert permute_bytes == 8_388_608
    mlp = moe_costs.moe_mlp_costs(model, rates, a([tokens]), a([ep]), a([1.0]))
    assert float(mlp["a2a_dispatch_buffer_bytes"][0]) == 4096 * 2 * 256 * 2
    a2a = moe_costs.moe_all_to_all_time_s(mlp["a2a_dispatch_buffer_bytes"], a([ep]), a([1.0]), cluster, eff)
    expected = permute_bytes / rates.hbm_bytes_per_s + float(a2a["dispatch_s"][0])
    assert float(out["recompute_sel_moe"][0]) == pytest.approx(expected, rel=1e-12)
