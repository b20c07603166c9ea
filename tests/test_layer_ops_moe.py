"""``api.layer_ops`` (the roofline's ops) draws an MoE block as the simulator times it
(``cost_models.moe.moe_mlp_costs``): each routed-expert matrix is one grouped GEMM over the
E / ep local experts with M = tokens x top_k x ep / E rows each, plus the router and the shared
experts. It drew the expert GEMMs with M = every token (DeepSeek-V3 at tp 1: m 4,096, 1,593
FLOP/B, compute-bound) and Mixtral's FLOPs without top_k (half of them)."""
from __future__ import annotations

import pytest

from cost_models.compute import compute_rates
from cost_models.moe import moe_mlp_costs
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs.catalog import load_model
from paraplan import api

H100 = "dgx-h100"


def _rows(df, prefix):
    return df[df.op.str.startswith(prefix)]


@pytest.mark.parametrize("ep, m, groups", [(1, 128, 256), (8, 1024, 32)])
def test_deepseek_v3_expert_gemms_are_grouped_per_local_expert(ep, m, groups):
    # DeepSeek-V3 (arXiv 2412.19437, config.json): h 7168, 256 routed experts, top-8, expert FFN 2048,
    # one shared expert of 2048; seq 4096 at micro-batch 1 and tp 1: 4096 x 8 x ep / 256 rows per expert
    df = api.layer_ops("deepseek-v3", H100, ep=ep)
    up = _rows(df, "expert mlp up+gate").iloc[0]
    assert (up.m, up.n, up.k, up.groups) == (m, 2 * 2048, 7168, groups)
    assert up.flops == pytest.approx(2 * 4096 * 8 * 4096 * 7168, rel=1e-12)   # 2 x tokens x top_k x n x k
    if ep == 1:     # (128 x 7168 + 7168 x 4096) x 2 B + 128 x 4096 x 2 B per expert: 122 FLOP/B, memory-bound
        per_expert = (128 * 7168 + 7168 * 4096) * 2 + 128 * 4096 * 2
        assert up.intensity_flop_per_byte == pytest.approx(2 * 128 * 4096 * 7168 / per_expert, rel=1e-12)
        assert up.intensity_flop_per_byte < 989e12 / 3.35e12       # left of the H100's ridge
    down = _rows(df, "expert mlp down").iloc[0]
    assert (down.m, down.n, down.k, down.groups) == (m, 7168, 2048, groups)
    router = _rows(df, "router").iloc[0]
    assert (router.m, router.n, router.k) == (4096, 256, 7168)
    shared = _rows(df, "shared expert")
    assert list(zip(shared.n, shared.k)) == [(4096, 7168), (7168, 2048)] and (shared.m == 4096).all()
    # the times are the simulator's own: moe_mlp_costs with the default stack's 4 grouped-GEMM streams
    cluster = load_cluster(H100)
    rates = compute_rates(cluster.gpu, efficiency_for_cluster(cluster), "bf16")
    sim = moe_mlp_costs(load_model("deepseek-v3"), rates, 4096, ep, 1, 1.0, 1, True, False, False, 4)
    assert _rows(df, "expert ").time_s.sum() == pytest.approx(float(sim["expert_gemm_fwd_s"]), rel=1e-12)
    assert router.time_s == pytest.approx(float(sim["router_fwd_s"]), rel=1e-12)
    assert shared.time_s.sum() == pytest.approx(float(sim["shared_gemm_fwd_s"]), rel=1e-12)
    moe_flops = df[df.op.str.contains("expert|router")].flops.sum()
    assert moe_flops == pytest.approx(float(sim["gemm_flops_fwd"]), rel=1e-12)


def test_mixtral_expert_flops_count_top_k():
    # Mixtral 8x7B (arXiv 2401.04088): h 4096, FFN 14336, 8 experts, top-2; seq 32768 in the preset
    df = api.layer_ops("mixtral-8x7b", H100)
    up = _rows(df, "expert mlp up+gate").iloc[0]
    assert (up.m, up.groups) == (32768 * 2 / 8, 8)
    assert up.flops == pytest.approx(2 * 32768 * 2 * 2 * 14336 * 4096, rel=1e-12)


def test_ep_must_divide_the_experts():
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match="ep"):
        api.layer_ops("mixtral-8x7b", H100, ep=3)
    with pytest.raises(InputError, match="ep"):
        api.layer_ops("llama3-8b", H100, ep=2)
