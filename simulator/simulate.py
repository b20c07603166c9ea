"""Simulate one configuration: model + cluster + ``ParallelConfig`` -> ``StepReport``."""
from __future__ import annotations

from hardware_specs.catalog import efficiency_for_cluster
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.report import MEMORY_PARTS, TIME_PARTS, StepReport
from simulator.step_model import evaluate
from simulator.validate_config import check_config


def simulate(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig,
             n_gpus: int | None = None, efficiency: EfficiencyModel | None = None) -> StepReport:
    """Predict one training step of ``model`` on ``cluster`` under ``config``.

    ``n_gpus`` (optional) is checked against dp*tp*pp*cp; ``efficiency`` overrides the GPU
    generation's fitted model (for what-if studies and fitting). The pipeline part of the step
    is the schedule's makespan over the configuration's layer layout, the same computation the
    planner ranks by (``simulator.step_pipeline``).
    """
    check_config(model, config, n_gpus)
    eff = efficiency if efficiency is not None else efficiency_for_cluster(cluster)
    out = evaluate(model, cluster, eff, ConfigBatch.from_configs([config]))
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
        extras={k: v[k] for k in EXTRAS},
    )
    return report


#: step-model outputs a ``StepReport`` carries in ``extras``
EXTRAS = ("tp_comm_total_s", "dp_comm_total_s", "microbatch_stage_time_s", "params_local", "layer_w_s",
          "p2p_per_microbatch_s", "pipeline_makespan_s", "busiest_stage", "busiest_stage_layers",
          "first_stage_layers", "last_stage_layers", "memory_stage")
