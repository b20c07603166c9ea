"""A host CPU device (generation ``cpu``: ``cpu-generic``, and what ``paraplan calibrate`` writes
for CPU ranks on gloo) holds no CUDA context, cuBLAS/cuDNN workspace or NCCL buffer: its
allocator allowance is fragmentation only, while a GPU keeps ``RUNTIME_RESERVED_BYTES``."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from cost_models import memory
from hardware_specs.catalog import load_cluster
from paraplan import api
from paraplan.cli import main

CPU_RUN = dict(model="gpt3-125m", cluster="cpu-local", gpus=2, dp=2, global_batch=8, dtype="fp32")


def test_the_runtime_reserve_is_a_property_of_the_device_kind():
    cpu, h100 = load_cluster("cpu-local").gpu, load_cluster("dgx-h100").gpu
    assert cpu.is_cpu and not h100.is_cpu
    assert memory.runtime_reserved_bytes(cpu) == 0.0
    assert memory.runtime_reserved_bytes(h100) == memory.RUNTIME_RESERVED_BYTES == 1.5 * 2**30


def test_a_calibrated_cpu_profile_is_a_cpu_device():
    """calibrate writes generation 'cpu' and vendor platform.processor() (x86_64, or '')."""
    from hardware_specs.gpu_spec import GPUSpec
    spec = GPUSpec(name="local-cpu", generation="cpu", vendor="x86_64", peak_flops_per_s={"fp32": 1e11},
                   hbm_bytes=8 * 2**30, hbm_bw_bytes_per_s=1e10, scaleup_bw_bytes_per_s=1e9, scaleup_domain_size=2)
    assert memory.runtime_reserved_bytes(spec) == 0.0


def test_a_cpu_run_predicts_no_cuda_reserve_and_a_gpu_run_keeps_it():
    row = api.simulate(**CPU_RUN).iloc[0]
    tensors = row["memory_gib"] - row["allocator_gib"]
    assert row["allocator_gib"] == pytest.approx(tensors * memory.ALLOCATOR_FRAGMENTATION)
    gpu = api.simulate(**{**CPU_RUN, "cluster": "dgx-h100"}).iloc[0]
    tensors = gpu["memory_gib"] - gpu["allocator_gib"]
    assert gpu["allocator_gib"] == pytest.approx(tensors * memory.ALLOCATOR_FRAGMENTATION
                                                 + memory.RUNTIME_RESERVED_BYTES / 2**30)


def test_simulate_names_no_cuda_workspaces_on_a_cpu_device():
    args = ["simulate", "--cluster", "cpu-local", "--model", "gpt3-125m", "--gpus", "2", "--dp", "2",
            "--global-batch", "8", "--dtype", "fp32"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "CUDA" not in result.stdout and "allocator fragmentation" in result.stdout
    result = CliRunner().invoke(main, [*args[:2], "dgx-h100", *args[3:]])
    assert "allocator fragmentation + CUDA/NCCL workspaces" in result.stdout


def test_a_pool_of_cpu_ranks_holds_no_cuda_reserve_as_simulate_has_it():
    """The pooled model (mixed clusters) takes each pool's device reserve too: on a pool of CPU
    ranks its allocator allowance is the fragmentation of the tensors alone, as ``simulate``'s
    (the two still differ on fp32 logits, 8 bytes a logit pooled against the loss table's 6)."""
    from hardware_specs.pools import PooledCluster
    from model_specs.catalog import load_model
    from simulator.heterogeneous import HeteroPlan, ReplicaGroup, StagePlacement, simulate_heterogeneous
    from simulator.parallel_config import ParallelConfig
    from simulator.simulate import simulate
    model, cl = load_model("gpt3-125m"), load_cluster("cpu-local")
    cfg = ParallelConfig(dp=2, micro_batch=1, global_batch=4, dtype="fp32")
    homo = simulate(model, cl, cfg)
    plan = HeteroPlan(groups=(ReplicaGroup((StagePlacement("p", 1, model.num_layers),), replicas=2),),
                      micro_batch=1, global_batch=4, dtype="fp32")
    het = simulate_heterogeneous(model, PooledCluster.single(cl, 2, "p"), plan)
    for rep in (het.stages[0], homo):
        allocator = rep.memory_breakdown_bytes["allocator_bytes"]
        tensors = rep.memory_bytes - allocator
        assert allocator == pytest.approx(tensors * memory.ALLOCATOR_FRAGMENTATION, rel=1e-9)
