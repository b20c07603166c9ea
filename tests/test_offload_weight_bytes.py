"""The weights the host's optimizer step sends back under optimizer offload, per stack
(``TrainingBehaviour.offload_weight_bytes`` -> ``ParallelConfig`` -> ``ConfigBatch`` -> step model).

Megatron-Core's ``HybridDeviceOptimizer`` keeps the fp32 main parameter on the host and copies it
back with a non-blocking ``copy_`` (NVIDIA/Megatron-LM@core_v0.13.0 megatron/core/optimizer/
cpu_offloading/hybrid_optimizer.py:124, :274), which PyTorch converts on the GPU (aten/src/ATen/
native/cuda/Copy.cu ``conversion_device = non_blocking ? kCUDA : kCPU``): 4 bytes a parameter.
DeepSpeed 0.9+ ZeRO-Offload copies the fp32 partition into the 16-bit one with a blocking ``copy_``
(microsoft/DeepSpeed@v0.9.5 deepspeed/runtime/zero/stage_1_and_2.py:1700), converted on the CPU:
2 bytes.

Hand count, Llama 3 8B on one DGX H100, dp 8, ZeRO-1, everything offloaded: the model holds the
untied embedding and head 2 x 128,256 x 4096 = 1,050,673,152, 32 layers of q/o 2 x 4096^2, k/v
2 x 4096 x 1024, the gated MLP 3 x 4096 x 14336 and two norms 2 x 4096 (218,112,000 each), and the
final norm 4096: 8,030,261,248 parameters, 1,003,782,656 per GPU's optimizer shard. The host (2
sockets x 8 channels x DDR5-4800 = 614.4 GB/s, dgx-h100.yaml) shared by 8 GPUs gives 76.8 GB/s,
Adam moving 28 bytes a parameter: 0.36596 s. PCIe Gen5 x16 carries 64 GB/s raw each way, 57.61 GB/s
of payload (128b/130b, 256-byte TLPs behind 24 bytes): 4 bytes a parameter 0.06969 s, 2 bytes
0.03485 s. The gradients' copy to the host hides under the backward. (The step model's optimizer
shard leaves out the final norm's 4096 parameters, 5e-7 of the shard: the comparisons allow 1e-6.)
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cost_models import offload
from hardware_specs.catalog import efficiency_for_cluster, load_cluster, load_stack
from hardware_specs.errors import InputError
from hardware_specs.stack_spec import TrainingBehaviour
from model_specs.catalog import load_model
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.stack_defaults import stack_config_fields
from simulator.step_model import evaluate

REPO = Path(__file__).resolve().parents[1]
LAYER = 2 * 4096 ** 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
PARAMS = 2 * 128_256 * 4096 + 32 * LAYER + 4096
SHARD = PARAMS / 8
HOST_BW = 614.4e9 / 8
LINK_BW = 64e9 * 128 / 130 * 256 / 280
HOST_ADAM_S = SHARD * 28 / HOST_BW


def test_the_hand_count_is_llama3_8b():
    assert PARAMS == 8_030_261_248
    from cost_models import params
    assert params.total_params(load_model("llama3-8b")) == PARAMS


def _cli_offload_exposed_s(stack: str) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "paraplan.cli", "simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8",
         "--micro-batch", "1", "--global-batch", "64", "--recompute", "selective", "--zero", "1",
         "--offload-optimizer-fraction", "1.0", "--stack", stack, "--json"],
        capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)["time_breakdown_s"]["offload_exposed_s"]


@pytest.mark.parametrize("stack, weight_bytes, total_s", [("megatron-core", 4, 0.4357),
                                                          ("megatron-deepspeed", 2, 0.4008)])
def test_the_host_step_sends_back_the_bytes_its_stack_copies(stack, weight_bytes, total_s):
    exposed = _cli_offload_exposed_s(stack)
    assert exposed == pytest.approx(HOST_ADAM_S + SHARD * weight_bytes / LINK_BW, rel=1e-6)
    assert exposed == pytest.approx(total_s, abs=5e-5)


@pytest.mark.parametrize("stack, bytes_16bit", [
    ("megatron-core", 4.0), ("megatron-core-0.12", 4.0), ("megatron-bridge", 4.0), ("megatron-bridge-25.09", 4.0),
    ("nemo-24", 4.0), ("deepspeed-2021", 4.0), ("megatron-deepspeed", 2.0), ("torchtitan", 2.0)])
def test_stacks_resolve_their_weight_bytes_and_fp32_runs_send_fp32(stack, bytes_16bit):
    spec = load_stack(stack)
    assert stack_config_fields(spec, "bf16")["offload_weight_bytes"] == bytes_16bit
    assert stack_config_fields(spec, "fp16")["offload_weight_bytes"] == bytes_16bit
    assert stack_config_fields(spec, "fp32")["offload_weight_bytes"] == 4.0


def test_the_cost_model_takes_the_weight_bytes():
    step = offload.optimizer_offload_step(1e9, 4.0, 50e9, 100e9, weight_bytes_per_param=4.0)
    assert step["weights_to_gpu_s"] == pytest.approx(4e9 / 50e9)
    assert step["link_bytes"] == pytest.approx(8e9)
    assert offload.optimizer_offload_step(1e9, 4.0, 50e9, 100e9)["weights_to_gpu_s"] == pytest.approx(2e9 / 50e9)


def test_bad_values_name_their_field():
    with pytest.raises(InputError) as err:
        TrainingBehaviour(offload_weight_bytes=3.0)
    assert err.value.field == "training.offload_weight_bytes"
    with pytest.raises(InputError) as err:
        ParallelConfig(dp=8, micro_batch=1, global_batch=64, offload_weight_bytes=1)
    assert err.value.field == "offload_weight_bytes"


def test_the_planners_batch_prices_the_field_as_simulate_does():
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100")
    base = {**stack_config_fields(load_stack("megatron-core"), "bf16", model.name, cluster.gpu.name),
            "dp": 8, "micro_batch": 1, "global_batch": 64, "zero_stage": 1, "recompute": "selective"}
    configs = [ParallelConfig(**{**base, "offload_optimizer_fraction": f, "offload_weight_bytes": w})
               for f in (0.5, 1.0) for w in (2.0, 4.0)]
    batch = ConfigBatch.from_configs(configs)
    assert [batch.row(i) for i in range(len(batch))] == configs
    out = evaluate(model, cluster, efficiency_for_cluster(cluster), batch)
    for i, config in enumerate(configs):
        report = simulate(model, cluster, config)
        assert out["offload_exposed_s"][i] == report.time_breakdown_s["offload_exposed_s"]
        assert out["step_time_s"][i] == report.step_time_s
    # all offloaded: the 4-byte copy back costs the shard's 2 extra bytes over the link
    assert out["offload_exposed_s"][3] - out["offload_exposed_s"][2] == pytest.approx(SHARD * 2 / LINK_BW, rel=1e-6)
    assert np.all(out["offload_exposed_s"][1::2] > out["offload_exposed_s"][0::2])
