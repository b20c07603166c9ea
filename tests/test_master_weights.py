"""How the optimizer keeps the weights it steps (``TrainingBehaviour.master_weights``): an fp32
master copy (Megatron, DeepSpeed, FSDP: 4 + 4 + 4 bytes of optimizer state a parameter), Apex's
``DistributedFusedAdam(store_param_remainders=True)`` under NeMo 1.x (a 2-byte int16 remainder
beside the bf16 weight: 2 + 4 + 4 = 10), or an optimizer in the weights' own dtype (NeMo
``optim.dtype: bf16``: bf16 moments and no master, 2 + 2 = 4; a bf16 master beside FP8 primary
weights, 2 + 2 + 2 = 6). NVIDIA/NeMo@24.09-alpha.rc0 megatron_base_model.py:803-812 picks the
storage; NVIDIA/apex@810ffae3 distributed_fused_adam.py:439-466 allocates it.

Hand count (tests/test_zero3_master_params.py): Llama 3 8B's model states are 8,030,257,152
parameters, 1,003,782,144 a GPU over 8 data-parallel ranks (ZeRO-1 shards the optimizer only).
"""
from __future__ import annotations

import pytest

from hardware_specs.catalog import list_stacks, load_cluster, load_stack
from model_specs.catalog import load_model
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.stack_defaults import stack_config_fields
from simulator.step_model import adam_step_bytes_per_param

MODEL = load_model("llama3-8b")
CLUSTER = load_cluster("dgx-h100")
STATES = 8_030_261_248 - 4096
SHARD = STATES / 8


def _fields(stack, dtype="bf16", model=None):
    f = stack_config_fields(load_stack(stack), dtype, model, "h100-sxm-80gb")
    return f["master_weight_bytes"], f["moments_in_param_dtype"]


def test_nemo_1x_keeps_a_bf16_remainder_only_over_bf16_weights_without_fp8_primary_weights():
    assert _fields("nemo-24", "bf16") == (2.0, False)
    assert _fields("nemo-24", "fp8") == (2.0, False)          # the launcher recipes: no fp8_params
    assert _fields("nemo-24.09", "fp8") == (4.0, False)       # dgxc's fp8_params: store_params=True
    assert _fields("nemo-24.09", "bf16") == (2.0, False)
    assert _fields("nemo-24", "fp16") == (4.0, False)         # remainders complete bf16 only
    assert _fields("nemo-24", "fp32") == (4.0, False)


def test_nemotron_340b_steps_its_bf16_weights_with_bf16_moments_and_grok_runs_megatron_cores_optimizer():
    assert _fields("nemo-24", "bf16", "nemotron-4-340b") == (0.0, True)
    assert _fields("nemo-24.09", "bf16", "nemotron-4-340b") == (0.0, True)
    assert _fields("nemo-24.09", "fp8", "nemotron-4-340b") == (2.0, True)   # a bf16 master beside FP8 weights
    assert _fields("nemo-24.09", "bf16", "grok-1") == (4.0, False)           # mcore_distributed_optim
    assert _fields("nemo-24", "bf16", "mixtral-8x7b") == (4.0, False)


def test_only_nemo_1x_releases_store_remainders():
    for name in list_stacks():
        training = load_stack(name).training
        if training is not None:
            assert training.master_weights == ("bf16_remainder" if name in ("nemo-24", "nemo-24.09") else "fp32"), name


def _parts(master_weight_bytes=4.0, moments_in_param_dtype=False, zero_stage=1):
    fields = {**stack_config_fields(load_stack("megatron-core"), "bf16"),
              "master_weight_bytes": master_weight_bytes, "moments_in_param_dtype": moments_in_param_dtype}
    config = ParallelConfig(dp=8, tp=1, pp=1, micro_batch=1, global_batch=64, zero_stage=zero_stage,
                            recompute="full", dtype="bf16", **fields)
    return simulate(MODEL, CLUSTER, config)


@pytest.mark.parametrize("master, param_moments, per_param", [(4.0, False, 12), (2.0, False, 10), (0.0, True, 4),
                                                               (2.0, True, 6)])
def test_optimizer_state_bytes_a_parameter(master, param_moments, per_param):
    parts = _parts(master, param_moments).stage_memory[0]["parts_bytes"]
    assert parts["optimizer_bytes"] == pytest.approx(per_param * SHARD, rel=1e-12)
    assert parts["weights_bytes"] == pytest.approx(2 * STATES, rel=1e-12)   # the bf16 weights stay whole


def test_adam_step_bytes_without_megatrons_separate_master_copy():
    # 42 = Adam over fp32 w, g, m, v (28) + grad norm (4) + master -> bf16 copy (4 + 2) + zeroing (4)
    assert adam_step_bytes_per_param("bf16", 4.0, 4.0, 4.0) == 42.0
    # Apex's remainder kernel: bf16 weight and remainder read and written (8) in place of 8 + 6
    assert adam_step_bytes_per_param("bf16", 4.0, 4.0, 2.0) == 36.0
    # bf16 optimizer: weight read, written in place and to the sync buffer (6), moments 2 bytes
    assert adam_step_bytes_per_param("bf16", 2.0, 4.0, 0.0) == 42.0 - 8.0 - 8.0
    assert adam_step_bytes_per_param("fp32", 4.0, 4.0, 2.0) == 28.0          # fp32 training has no master


def test_the_step_prices_the_remainders_bytes():
    fp32 = _parts(4.0).time_breakdown_s["optimizer_s"]
    remainder = _parts(2.0).time_breakdown_s["optimizer_s"]
    assert remainder / fp32 == pytest.approx(36.0 / 42.0, rel=1e-9)


def test_master_weight_bytes_takes_the_three_storages_only():
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match="master_weight_bytes"):
        ParallelConfig(dp=8, micro_batch=1, global_batch=64, master_weight_bytes=3)


def test_the_host_holds_an_offloaded_optimizer_at_its_own_bytes_whatever_the_gpus_master():
    # the host's copy is HOST_OPTIMIZER_BYTES_PER_PARAM a parameter (fp32 master and moments)
    def host(master, param_moments):
        fields = {**stack_config_fields(load_stack("megatron-core"), "bf16"),
                  "master_weight_bytes": master, "moments_in_param_dtype": param_moments}
        config = ParallelConfig(dp=8, tp=1, pp=1, micro_batch=1, global_batch=64, zero_stage=1, recompute="full",
                                dtype="bf16", offload_optimizer_fraction=1.0, **fields)
        return simulate(MODEL, CLUSTER, config).extras["host_memory_bytes"]
    assert host(2.0, False) == pytest.approx(host(4.0, False), rel=1e-12)
    assert host(0.0, True) == pytest.approx(host(4.0, False), rel=1e-12)


def test_a_megatron_export_refuses_nemo_1x_optimizer_state():
    from hardware_specs.errors import InputError
    from paraplan.exports.megatron import _refuse_memory_features
    base = dict(dtype="bf16", recompute="none", zero_stage=1)
    with pytest.raises(InputError, match="fp32 master"):
        _refuse_memory_features({**base, "master_weight_bytes": 2.0}, MODEL)
    with pytest.raises(InputError, match="fp32 master"):
        _refuse_memory_features({**base, "master_weight_bytes": 0.0, "moments_in_param_dtype": True}, MODEL)
    assert _refuse_memory_features({**base, "master_weight_bytes": 4.0}, MODEL) is None



def _param_dtype_stack(tmp_path):
    """megatron-bridge-26.04 with its optimizer in the weights' dtype (a user's stack file)."""
    from hardware_specs.catalog import BUILTIN_DIR
    text = (BUILTIN_DIR / "stacks" / "megatron-bridge-26.04.yaml").read_text()
    head, tail = text.split("  master_weights:\n    value: fp32\n", 1)
    path = tmp_path / "param-dtype.yaml"
    path.write_text(head.replace("name: megatron-bridge-26.04", "name: my-param-dtype", 1)
                    + "  master_weights:\n    value: param_dtype\n" + tail)
    return str(path)


def test_an_explicit_moment_width_overrides_a_stack_that_keeps_moments_in_the_weights_dtype(tmp_path):
    """bf16 moments and no master (stack param_dtype): 2 + 2 = 4 bytes a parameter; given
    --optimizer-moment-bytes 4 the moments are fp32, still no master: 4 + 4 = 8 (it was ignored)."""
    from paraplan import api
    stack = _param_dtype_stack(tmp_path)
    run = dict(gpus=8, global_batch=8, zero_stage=1, stack=stack)
    plain = api.simulate("llama3-8b", "dgx-b200", **run).iloc[0]
    wide = api.simulate("llama3-8b", "dgx-b200", optimizer_moment_bytes=4.0, **run).iloc[0]
    assert plain["optimizer_gib"] == pytest.approx(STATES * 4 / 8 / 2**30, rel=1e-3)
    assert wide["optimizer_gib"] == pytest.approx(STATES * 8 / 8 / 2**30, rel=1e-3)
