"""Tensor-parallel collectives of an MoE layer under sequence parallelism (``simulator.layer_times``).

Megatron-Core (NVIDIA/Megatron-LM@core_v0.15.0) routes the sequence-parallel hidden states as
they are (megatron/core/transformer/moe/moe_layer.py:272-278, no gather before the router); the
all-to-all dispatcher's tensor-parallel traffic runs over the *expert* TP group
(token_dispatcher.py:67, :656, :739), priced as the all-to-all's ``etp_s``. Only a shared expert,
a plain column/row-parallel MLP (shared_experts.py:30), all-gathers and reduce-scatters over
the attention TP group. So, with ``c`` one all-reduce's time of the block's activation
(tokens x hidden x 2 bytes) over the TP group, per layer:

* forward: the attention block's all-gather + reduce-scatter, ``c`` (Mixtral), plus ``c`` for a
  shared expert (Qwen2-57B-A14B); a dense layer ``2 c``;
* backward: each block's two gradient collectives and the re-gather for the weight gradient,
  ``1.5 c`` a block;
* so the layer's whole TP traffic (``tp_total_base``) is ``2.5 c`` for Mixtral, ``5 c`` with a
  shared expert, ``5 c`` for a dense layer. Without sequence parallelism (which Megatron refuses
  for MoE training at tp > 1) the dense block's pair stays: ``4 c``.
"""
from __future__ import annotations

import numpy as np
import pytest

from cost_models.compute import compute_rates
from cost_models.topology import group_collective_time_s
from hardware_specs.catalog import load_cluster, load_efficiency
from model_specs.catalog import load_model
from simulator.config_batch import ATTENTION_KERNEL_CODES, CP_KIND_CODES
from simulator.layer_times import layer_times
from simulator.parallel_config import AttentionKernel, CPKind

TOKENS = 4096.0
TP = 2.0


def _layer(name, sp, rc=0, modules=0):
    model = load_model(name).with_seq_len(4096)
    cluster = load_cluster("dgx-h100")
    eff = load_efficiency("hopper")
    rates = compute_rates(cluster.gpu, eff, "bf16")
    a = np.array
    out = layer_times(model, cluster, eff, rates, a([TOKENS]), a([TP]), a([1.0]), a([sp]), a([rc]), a([8.0]),
                      a([1.0]), a([1.0]), a([False]), a([CP_KIND_CODES[CPKind.RING]]),
                      a([ATTENTION_KERNEL_CODES[AttentionKernel.AUTO]]), a([True]), a([False]), modules=modules)
    c = float(group_collective_time_s("all_reduce", a([TOKENS * model.hidden_size * 2.0]), a([TP]), a([1.0]),
                                      cluster, eff)[0])
    return out, c


@pytest.mark.parametrize("name, sp, blocks", [("mixtral-8x7b", True, 1.0), ("qwen2-57b-a14b", True, 2.0),
                                              ("mixtral-8x7b", False, 2.0)])
def test_moe_layer_tp_traffic(name, sp, blocks):
    out, c = _layer(name, sp)
    per_block = 1.0 + (1.0 + 0.5 if sp else 1.0)
    assert float(out["tp_total_base_moe"][0]) == pytest.approx(blocks * per_block * c, rel=1e-12)
    # the dense layers of the same model keep both blocks' collectives
    assert float(out["tp_total_base_dense"][0]) == pytest.approx(2.0 * per_block * c, rel=1e-12)


def test_full_recompute_repeats_only_the_attention_blocks_collectives():
    out, c = _layer("mixtral-8x7b", True, rc=2)
    assert float(out["tp_total_recompute_moe"][0]) == pytest.approx(c, rel=1e-12)


@pytest.mark.parametrize("name, shared", [("mixtral-8x7b", 0.0), ("qwen2-57b-a14b", 1.0)])
def test_recomputing_the_moe_block_repeats_only_a_shared_experts_tp_collective(name, shared):
    """``moe`` recomputed: the block's forward (GEMMs, casts, element-wise kernels), its dispatch
    and combine again, and the TP all-gather + reduce-scatter of a shared expert if it has one."""
    from cost_models import memory, moe as moe_costs
    model = load_model(name).with_seq_len(4096)
    cluster, eff = load_cluster("dgx-h100"), load_efficiency("hopper")
    rates = compute_rates(cluster.gpu, eff, "bf16")
    a = np.array
    out = layer_times(model, cluster, eff, rates, a([TOKENS]), a([TP]), a([1.0]), a([True]), a([1]), a([8.0]),
                      a([1.0]), a([1.0]), a([False]), a([CP_KIND_CODES[CPKind.RING]]),
                      a([ATTENTION_KERNEL_CODES[AttentionKernel.AUTO]]), a([True]), a([False]),
                      cuda_graphs=a([True]), modules=memory.MODULE_BITS["moe"])
    c = float(group_collective_time_s("all_reduce", a([TOKENS * model.hidden_size * 2.0]), a([TP]), a([1.0]),
                                      cluster, eff)[0])
    mlp = moe_costs.moe_mlp_costs(model, rates, a([TOKENS]), a([8.0]), a([1.0]), a([1.0]), a([TP]), a([True]))
    a2a = moe_costs.moe_all_to_all_time_s(mlp["a2a_dispatch_buffer_bytes"], a([8.0]), a([1.0]), cluster, eff,
                                          num_experts=model.moe.num_experts, top_k=model.moe.top_k)
    expected = float(mlp["gemm_fwd_s"][0] + mlp["cast_fwd_s"][0] + mlp["elem_fwd_s"][0] + a2a["fwd_s"][0]) + shared * c
    assert float(out["recompute_sel_moe"][0]) == pytest.approx(expected, rel=1e-12)
