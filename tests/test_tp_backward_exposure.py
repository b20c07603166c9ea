"""Which backward tensor-parallel collectives a layer waits for (``simulator.layer_times``).

Megatron-LM's column-parallel linear issues its backward collectives asynchronously (input
re-gather under the data-gradient GEMM, gradient reduce-scatter or all-reduce under the
weight-gradient GEMM); the row-parallel linear's output, reduce-scattered under sequence
parallelism, gets its gradient all-gathered synchronously before both of its gradient GEMMs
(NVIDIA/Megatron-LM@d898a8991d megatron/mpu/mappings.py
``_ReduceScatterToSequenceParallelRegion.backward``). Hand-derived: with sequence parallelism a
layer's backward exposes its two row-parallel blocks' gradient all-gathers, each half of the ring
all-reduce of the block's activation, i.e. one all-reduce's time; without it nothing (the two
all-reduces hide under the gradient GEMMs); with userbuffers overlap nothing either.
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

TOKENS = 2048.0
TP = 8.0


def _layer(sp: bool, tp_overlap: bool = False, tp_backward_overlap: bool = True):
    model = load_model("gpt-175b")
    cluster = load_cluster("dgx-a100-80gb")
    eff = load_efficiency("ampere")
    rates = compute_rates(cluster.gpu, eff, "fp16")
    a = np.array
    out = layer_times(model, cluster, eff, rates, a([TOKENS]), a([TP]), a([1.0]), a([sp]), a([0]), a([1.0]),
                      a([1.0]), a([1.0]), a([tp_overlap]), a([CP_KIND_CODES[CPKind.RING]]),
                      a([ATTENTION_KERNEL_CODES[AttentionKernel.AUTO]]), a([False]), a([False]),
                      tp_backward_overlap=a([tp_backward_overlap]))
    # one ring all-reduce of a block's activation (tokens x hidden, 16-bit) over the TP group
    all_reduce = float(group_collective_time_s("all_reduce", a([TOKENS * model.hidden_size * 2.0]), a([TP]),
                                               a([1.0]), cluster, eff)[0])
    return out, all_reduce


def _exposed_bwd(out):
    return float(out["b_dense"][0] - out["compute_bwd_dense"][0])


def test_sequence_parallel_backward_waits_for_the_row_parallel_gradient_all_gathers():
    out, all_reduce = _layer(sp=True)
    # two row-parallel blocks x an all-gather of half the ring all-reduce's time; the other
    # four collectives (two input re-gathers, two gradient reduce-scatters: two all-reduces'
    # time) fit under the data- and weight-gradient GEMMs of GPT-175B at TP 8
    assert float(out["w_dense"][0]) > 2.0 * all_reduce
    assert _exposed_bwd(out) == pytest.approx(2.0 * all_reduce / 2.0, rel=1e-12)
    # the zero-bubble B pass: the same gathers, the rest under the data-gradient GEMMs alone
    split = float(out["b_split_dense"][0] - out["compute_bwd_split_dense"][0])
    assert split == pytest.approx(all_reduce, rel=1e-12)


def test_without_sequence_parallelism_the_backward_all_reduces_hide_under_the_gradient_gemms():
    out, _ = _layer(sp=False)
    assert _exposed_bwd(out) == 0.0


def test_userbuffers_overlap_pipelines_the_gradient_all_gathers_too():
    out, _ = _layer(sp=True, tp_overlap=True)
    assert _exposed_bwd(out) == 0.0


def test_without_asynchronous_backward_collectives_all_of_them_are_exposed():
    out, all_reduce = _layer(sp=True, tp_backward_overlap=False)
    # two all-gathers, two reduce-scatters and two re-gathers: three all-reduces' time
    assert _exposed_bwd(out) == pytest.approx(3.0 * all_reduce, rel=1e-12)
