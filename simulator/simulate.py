"""Simulate one configuration: model + cluster + ``ParallelConfig`` -> ``StepReport``."""
from __future__ import annotations

from hardware_specs.catalog import efficiency_for_cluster
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.report import MEMORY_PARTS, TIME_PARTS, StepReport
from simulator.step_model import evaluate, memory_parts
from simulator.validate_config import check_config, placed_and_checked


def simulate(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig,
             n_gpus: int | None = None, efficiency: EfficiencyModel | None = None) -> StepReport:
    """Predict one training step of ``model`` on ``cluster`` under ``config``.

    ``n_gpus`` (optional) is checked against dp*tp*pp*cp; ``efficiency`` overrides the GPU
    generation's fitted model (for what-if studies and fitting). The pipeline part of the step
    is the schedule's makespan over the configuration's layer layout, the same computation the
    planner ranks by (``simulator.step_pipeline``).
    """
    check_config(model, config, n_gpus)
    cluster = placed_and_checked(cluster, config)     # a multi-rack NVL72 job in its Slurm segments
    eff = efficiency if efficiency is not None else efficiency_for_cluster(cluster)
    batch = ConfigBatch.from_configs([config])
    mem = memory_parts(model, cluster, eff, batch, detail=True)
    out = evaluate(model, cluster, eff, batch, memory_by_part=mem)
    stages = tuple({"stage": s, "layers": float(mem["_stage_layers"][0, s]),
                    "in_flight": float(mem["_stage_in_flight"][0, s]),
                    "memory_bytes": float(mem["_stage_memory_bytes"][0, s]),
                    "host_memory_bytes": float(mem["_stage_host_memory_bytes"][0, s]),
                    "parts_bytes": {k: float(mem[f"_stage_{k}"][0, s]) for k in MEMORY_PARTS}}
                   for s in range(config.pp))
    v = {k: (x.item() if hasattr(x, "item") else x) for k, x in ((k, x[0]) for k, x in out.items())}
    report = StepReport(
        model=model.name, cluster=cluster.name, gpu=cluster.gpu.name, n_gpus=config.n_gpus,
        config=config.as_dict(), step_time_s=v["step_time_s"],
        time_breakdown_s={k: v[k] for k in TIME_PARTS},
        tokens_per_step=v["tokens_per_step"], tokens_per_s=v["tokens_per_s"],
        tokens_per_s_per_gpu=v["tokens_per_s_per_gpu"], model_flops=v["model_flops"],
        hardware_flops=v["hardware_flops"], model_tflops_per_gpu=v["model_tflops_per_gpu"],
        hardware_tflops_per_gpu=v["hardware_tflops_per_gpu"], mfu=v["mfu"], hfu=v["hfu"],
        memory_bytes=v["memory_bytes"], memory_breakdown_bytes={k: v[k] for k in MEMORY_PARTS},
        hbm_bytes=v["hbm_bytes"], fits=bool(v["fits"]), num_microbatches=int(round(v["num_microbatches"])),
        layer_fwd_s=v["layer_fwd_s"], layer_bwd_s=v["layer_bwd_s"], layer_recompute_s=v["layer_recompute_s"],
        extras={k: v[k] for k in EXTRAS}, stage_memory=stages,
    )
    return report


#: step-model outputs a ``StepReport`` carries in ``extras``
EXTRAS = ("tp_comm_total_s", "dp_comm_total_s", "microbatch_stage_time_s", "params_local", "layer_w_s",
          "p2p_per_microbatch_s", "pipeline_makespan_s", "busiest_stage", "busiest_stage_layers",
          "first_stage_layers", "last_stage_layers", "memory_stage", "host_memory_bytes", "host_memory_node_bytes",
          "expert_params_local", "host_fits", "ep_unpaired_s")
