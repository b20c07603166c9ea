"""A plan as a DeepSpeed 0.19.8 config (JSON) and the launch recipe around it.

Written for a DeepSpeed-native run (``deepspeed.initialize(model=..., config=...)``) of a model
whose code the user brings (e.g. a Hugging Face model): AutoTP for tensor parallelism, AutoEP
for experts, Ulysses for context parallelism, ``PipelineModule`` for pipeline stages.

How DeepSpeed counts the world in ``train_batch_size`` (``runtime/config.py``
``DeepSpeedConfig.__init__`` and ``deepspeed/__init__.py`` ``initialize`` at 0.19.8), which the
batch keys follow, so that ``train_batch_size == micro * gradient_accumulation * world``:

* plain module, AutoTP and/or AutoEP, no ``mpu``: every rank, TP ranks included (TP ranks read
  the same micro-batch), so ``train_batch_size`` is the plan's global batch times ``tp``;
* Ulysses (``sequence_parallel_size`` with ``data_parallel_size``): ``initialize`` builds a
  data x sequence mesh and counts its data-parallel ranks;
* ``PipelineModule``: its topology's data-parallel ranks.

Refused (``refusal``), each with the reason: low-precision GEMMs (fp8 / mxfp8 / nvfp4; DeepSpeed
has no FP8 training switch, the model's own Transformer Engine layers would be), virtual
pipeline stages and schedules other than 1F1B (the pipeline engine runs one 1F1B schedule; this
export writes ``PipelineModule`` only), a stage without a decoder layer (the export partitions the
stages by decoder layer), a split of the layers over the stages that no ``partition_method``
gives (``PipelineModule`` takes ``uniform``, ``parameters`` or ``type:<regex>``, no explicit cut;
the recipe writes the ``type:`` regex under which DeepSpeed's ``partition_balanced`` reproduces
the plan's layers per stage, ``partition_method``), ZeRO-2/3 beside a pipeline, AutoTP beside a pipeline or
beside Ulysses, AutoTP with Megatron-style sequence parallelism (see ``autotp_sequence_parallel``),
ring / hybrid context parallelism (DeepSpeed's is Ulysses), expert TP, ZeRO-3
with full recomputation unless the plan priced DeepSpeed's extra parameter gather
(``zero3_recompute_gather``), ZeRO-3 MoE with Ulysses, and MTP modules (the model code it wraps
does not train them).

Written, not refused: a bf16 ZeRO-1 plan of a stack whose ZeRO-1 is ``BF16_Optimizer``
(``zero1_grad_all_reduce``) with the optimizer offloaded. DeepSpeed then builds its ZeRO-1
optimizer, which reduce-scatters, and the plan is priced so (``simulator.step_model.
zero1_reduces_whole``); the gradient buffer it keeps is the plan's (``grad_accum_dtype``).

Not refused: AutoTP with ZeRO-3. DeepSpeed trains it since 0.19.4 (deepspeedai/DeepSpeed#8168
removed the block; ``runtime/engine.py`` ``_configure_tensor_parallel_states`` at 0.19.8: "AutoTP +
ZeRO stage 3 is supported for both inference and training"); the AutoTP training tutorial's
"ZeRO Stage 3 not supported" limitation is that of the releases before.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import numpy as np

from hardware_specs.errors import InputError
from paraplan.exports import screen
from paraplan.exports.common import (plan_fields, refuse_kv_head_replication, refuse_memory_features, require_model,
                                     selective_recompute_modules, stage_layer_counts, summary)
from simulator.layout_string import parse_layout
from simulator.parallel_config import Recompute, Schedule

NAME = "deepspeed"
SUFFIX = ".json"
RELEASE = "DeepSpeed 0.19.8"


def refusal(p: dict) -> InputError | None:
    """Why DeepSpeed cannot run the plan ``p`` (a ``plan_fields`` dict) as planned, or None."""
    try:
        _check(p)
    except InputError as exc:
        return exc
    return None


def can_run(plan_row: Any) -> bool:
    return refusal(plan_fields(plan_row)) is None


def screened(col) -> list:
    """Column conditions under which ``_check`` refuses a plan for certain (``exports.screen``;
    ``col(name)``: the field on every row), each one of its checks."""
    pp, tp, cp, vpp, ep = (screen.number(col, k) for k in ("pp", "tp", "cp", "vpp", "ep"))
    offload = screen.number(col, "offload_optimizer_fraction")
    zero = screen.effective_zero(col)
    piped = None if pp is None else pp > 1
    return [
        # refuse_memory_features (offload_optimizer_fraction supported)
        screen.any_of(col, ("recompute_num_layers", "recompute_layers_decrement", "offload_activation_layers",
                            "zero_shard_group", "loss_chunk_tokens")),
        screen.text_in(col, "dtype", ("fp8", "mxfp8", "nvfp4")),                    # no 8/4-bit GEMM switch
        None if vpp is None else vpp > 1,                                             # one stage per rank
        screen.where(piped, None if zero is None else zero >= 2),                     # pipeline: ZeRO 0-1
        screen.where(piped, None if zero is None else zero == 0, screen.text_in(col, "dtype", ("bf16",))),
        screen.where(piped, None if tp is None else tp > 1),                          # no AutoTP beside it
        # ZeRO-Offload refused beside AutoEP + AutoTP folding
        screen.where(None if tp is None else tp > 1, None if ep is None else ep > 1,
                     None if offload is None else offload > 0),
        # cp > 1: Ulysses only, and on a data x sequence mesh (either check refuses)
        screen.where(None if cp is None else cp > 1,
                     None if tp is None or pp is None else (tp > 1) | (pp > 1)),
    ]


def _check(p: dict) -> None:
    model = require_model(p, RELEASE)
    if model.hybrid_pattern:
        raise InputError("model", f"hybrid Mamba models: not supported by this export ({model.name}; the model code "
                         "DeepSpeed wraps here has no Mamba mixer)", "emit the plan's degrees by hand")
    if model.linear_attention is not None:
        raise InputError("model", f"linear-attention layers (Gated DeltaNet): not supported by this export "
                         f"({model.name}; the model code DeepSpeed wraps here has softmax attention only)",
                         "emit the plan's degrees by hand")
    refuse_kv_head_replication(p, model, RELEASE)
    refuse_memory_features(p, RELEASE, supported=("offload_optimizer_fraction", "pipeline_layout"))
    if p.get("pipeline_layout") and p["vpp"] == 1:
        parse_layout(p["pipeline_layout"]).check(model.num_layers, model.mtp_layers, p["pp"], "the plan's pipeline")
    if p.get("offload_optimizer_fraction") and (p["offload_optimizer_fraction"] != 1.0 or p["zero_stage"] == 0):
        raise InputError("offload_optimizer_fraction", "ZeRO-Offload moves the whole optimizer of ZeRO 1-3 to the "
                         "host", "plan with offload_optimizer_fraction 1 and zero_stage >= 1")
    tp, pp, cp, zero = p["tp"], p["pp"], p["cp"], p["zero_stage"]
    recompute = Recompute(p["recompute"])
    if recompute == Recompute.SELECTIVE and "mlp_fc1" in selective_recompute_modules(p):
        raise InputError("recompute", "the plan's selective recomputation is MaxText's save-the-projections remat "
                         "policy (attention core, norms, MLP input projections), which DeepSpeed's checkpointing "
                         "does not run", "plan with --stack megatron-deepspeed, or with recompute none or full")
    if p["dtype"] in ("fp8", "mxfp8", "nvfp4"):
        raise InputError("dtype", f"{RELEASE} has no switch for {p['dtype']} GEMMs (only the model's own Transformer "
                         "Engine layers would run them)", "plan in bf16 or fp16 for DeepSpeed")
    if p["vpp"] > 1:
        raise InputError("vpp", f"DeepSpeed's pipeline engine runs one stage per rank, not vpp={p['vpp']}",
                         "use a plan with vpp 1, or emit megatron / torchtitan")
    # the field that set the plan's split: a layout or an uneven first / last stage, else pp itself
    split_field = ("pipeline_layout" if p.get("pipeline_layout") else "first_stage_layers"
                   if p.get("first_stage_layers") else "last_stage_layers" if p.get("last_stage_layers") else "pp")
    if pp > 1 and min(plan_stage_counts(p)) < 1:
        raise InputError(split_field, f"the plan's stages hold {list(plan_stage_counts(p))} decoder layers; this "
                         "export partitions PipelineModule's stages by decoder layer (partition_method='type:...'), "
                         "which cannot leave a stage only the embedding or only the loss",
                         ("use a plan with pp <= layers" if split_field == "pp" else
                          "put a decoder layer on every stage") + ", or emit megatron / torchtitan")
    if pp > 1 and partition_method(p) is None:
        ds_counts = deepspeed_stage_counts(model.num_layers, pp, 0, 0)
        field = split_field
        raise InputError(field, f"the plan's stages hold {list(plan_stage_counts(p))} decoder layers, a split "
                         f"{RELEASE}'s PipelineModule does not make: its partition_method 'type:<regex>' balances "
                         "the layers the regex matches (runtime/pipe/module.py:412-417, partition_balanced in "
                         f"runtime/utils.py:627), e.g. 'type:DecoderLayer' as {list(ds_counts)}, and no regex over "
                         "the embedding, decoder layers and head gives the plan's split",
                         f"simulate DeepSpeed's split (--pipeline-layout '{layout_string(ds_counts)}') and emit that "
                         "plan, or emit megatron / torchtitan")
    if pp > 1 and Schedule(p["schedule"]) != Schedule.ONE_F_ONE_B:
        raise InputError("schedule", f"this export writes DeepSpeed's PipelineModule, whose engine runs 1F1B, not "
                         f"{p['schedule']}", "use the 1f1b schedule, or emit megatron / torchtitan")
    if zero == 2 and p.get("zero2_gather_every_microbatch", False):
        raise InputError("zero_stage", "the plan priced ZeRO-2 as FSDP runs it, parameters gathered again in every "
                         "micro-batch's forward; DeepSpeed's stage 2 keeps them whole and gathers once a step",
                         "plan ZeRO-2 on a DeepSpeed stack, or emit torchtitan")
    if pp > 1 and zero >= 2:
        raise InputError("zero_stage", f"DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only, not {zero}",
                         "use a plan with zero_stage <= 1, or pp = 1")
    if pp > 1 and zero == 0 and p["dtype"] not in ("fp16", "fp32", "tf32"):
        # deepspeed/runtime/engine.py:2313-2320 at v0.19.8 picks BF16_Optimizer for a bf16 pipeline
        # without ZeRO (used at :2363); it shards the fp32 master weights and optimizer states over
        # the data-parallel ranks (bf16_optimizer.py:153-182) and all-gathers the bf16 weights after
        # each step (:593-599): ZeRO-1's memory and traffic, not the ZeRO-0 the plan priced
        raise InputError("zero_stage", f"{RELEASE}'s pipeline engine runs bf16 without ZeRO through BF16_Optimizer, "
                         "which shards the fp32 master weights and optimizer states over data parallelism and "
                         "all-gathers the weights after each step (ZeRO-1, not the ZeRO-0 priced)",
                         "plan with zero_stage 1")
    if pp > 1 and tp > 1:
        raise InputError("tp", "AutoTP is not combined with PipelineModule (its topology has no tensor axis "
                         "unless the model code implements Megatron TP; AutoEP folding runs pp 1 only)",
                         "use tp 1 beside a pipeline, or pp 1")
    if cp > 1:
        if p["cp_kind"] != "ulysses":
            raise InputError("cp_kind", f"DeepSpeed's sequence parallelism is Ulysses (all-to-all), not {p['cp_kind']}",
                             "use cp_kind ulysses for DeepSpeed, or emit megatron")
        if tp > 1 or pp > 1:
            raise InputError("cp", "Ulysses runs on a data x sequence mesh: no AutoTP or pipeline beside it",
                             "use tp 1 and pp 1 with cp > 1")
        if model.num_heads % cp:
            raise InputError("cp", f"Ulysses splits the {model.num_heads} attention heads over cp={cp}",
                             "choose cp dividing the head count")
    if tp > 1 and p["ep"] > 1 and p.get("offload_optimizer_fraction"):
        # deepspeed/module_inject/auto_ep_folding.py:248-250 at 0.19.8 (validate_autoep_config,
        # called from runtime/engine.py:851-864 with zero_offload_optimizer set): "ZeRO optimizer/
        # parameter offload with AutoEP+AutoTP folding is not validated yet"
        raise InputError("offload_optimizer_fraction", f"{RELEASE} refuses ZeRO-Offload beside AutoEP + AutoTP "
                         f"folding (tp={tp} with ep={p['ep']})",
                         "plan without optimizer offload, or with tp 1 or ep 1")
    if p["etp"] > 1:
        raise InputError("etp", "AutoEP reserves expert_tensor_parallel_size for future use (it must be 1)", "use etp 1")
    if zero == 3 and recompute == Recompute.FULL and not p["zero3_recompute_gather"]:
        raise InputError("recompute", "DeepSpeed's ZeRO-3 gathers a fully recomputed layer's parameters a third "
                         "time, which this plan did not price",
                         "plan with --stack deepspeed-2021 (its ZeRO-3 gathers again for the recompute: "
                         "zero3_recompute_gather), or --recompute selective / none, or --zero 2 or lower")
    if zero == 3 and p["ep"] > 1 and cp > 1:
        raise InputError("cp", "AutoEP with ZeRO-3 does not run with Ulysses", "use zero_stage <= 2 or cp 1")
    if model.mtp_layers:
        raise InputError("model", f"{model.name} trains {model.mtp_layers} MTP module(s); the model code DeepSpeed "
                         "wraps (AutoTP / AutoEP presets build the Hugging Face model) does not", "emit megatron")
    autotp_sequence_parallel(p)
    if p["ep"] > 1 and model.moe is None:
        raise InputError("ep", "expert parallelism needs an MoE model", "use ep 1")
    if p["ep_comm_overlap"] and p["ep"] > 1:
        raise InputError("ep_comm_overlap", "AutoEP's config has no overlapped expert all-to-all",
                         "plan without ep_comm_overlap for DeepSpeed")
    if p["ep_dispatch_dedup"] and p["ep"] > 1:
        raise InputError("ep_dispatch_dedup", "AutoEP's all-to-all sends one row per token and expert, not "
                         "DeepEP's once-per-node dispatch the plan priced", "plan without ep_dispatch_dedup for DeepSpeed")
    if p["cuda_graphs"]:
        raise InputError("cuda_graphs", f"{RELEASE}'s training config has no CUDA-graph switch",
                         "plan without cuda_graphs for DeepSpeed")
    if p["grad_reduce_every_microbatch"]:
        raise InputError("grad_reduce_every_microbatch", "DeepSpeed reduces gradients at the accumulation "
                         "boundary, not after every micro-batch", "plan without grad_reduce_every_microbatch")


def plan_stage_counts(p: dict) -> tuple[int, ...]:
    """Decoder layers of each pipeline stage as the plan ``p`` priced them: its
    ``pipeline_layout``, else its ``first_stage_layers`` / ``last_stage_layers`` (0 = the even
    split)."""
    if p.get("pipeline_layout"):
        return parse_layout(p["pipeline_layout"]).decoder
    return stage_layer_counts(p["model"].num_layers, p["pp"], 1, p["model"].mtp_layers,
                              p.get("first_stage_layers") or 0, p.get("last_stage_layers") or 0)


#: the ``partition_method`` values the recipe may write, tried in this order, each with the
#: weights DeepSpeed's ``_find_layer_type`` gives the embedding and the head LayerSpecs (every
#: ``DecoderLayer`` weighs 1); the regex is searched case-insensitively in the class name
#: (``runtime/pipe/module.py:322-341`` at 0.19.8), so it is anchored to whole names
PARTITION_METHODS = (("type:^DecoderLayer$", 0, 0), ("type:^(Embedding|DecoderLayer)$", 1, 0),
                     ("type:^(DecoderLayer|Head)$", 0, 1), ("type:^(Embedding|DecoderLayer|Head)$", 1, 1))


@lru_cache(maxsize=1024)
def deepspeed_stage_counts(num_layers: int, pp: int, embedding_weight: int, head_weight: int) -> tuple[int, ...]:
    """Decoder layers per stage of ``PipelineModule(layers=[Embedding] + num_layers x
    [DecoderLayer] + [Head], num_stages=pp, partition_method='type:<regex>')`` at DeepSpeed
    0.19.8, the regex matching every decoder layer and the embedding / head when their weight is
    1: ``_partition_layers`` (``runtime/pipe/module.py:412-417``) weighs each matched LayerSpec 1
    and the others 0 and cuts with ``partition_balanced`` (``runtime/utils.py:627-665``), the
    linear-partition dynamic programme that minimises a cut's largest less smallest stage
    weight, ties going to the last cut point tried. Re-derived here (vectorised over the cut
    point) so the export needs no DeepSpeed install; ``tests/test_exports_deepspeed.py`` checks
    it against DeepSpeed's own ``_partition_layers``."""
    weights = np.array([embedding_weight] + [1] * num_layers + [head_weight], dtype=float)
    n, m = len(weights), pp
    if n <= m:                        # partition_uniform's edge case: one LayerSpec a stage
        bounds = [min(s, n) for s in range(m + 1)]
    else:
        prefix = np.concatenate(([0.0], np.cumsum(weights)))
        dp_max = np.full((n + 1, m + 1), np.inf)
        dp_min = np.full((n + 1, m + 1), np.inf)
        dp_cost = np.full((n + 1, m + 1), np.inf)
        position = np.zeros((n + 1, m + 1), dtype=int)
        dp_max[0, 0] = dp_cost[0, 0] = 0
        for i in range(1, n + 1):
            for j in range(1, min(i, m) + 1):
                last = prefix[i] - prefix[:i]
                high = np.maximum(dp_max[:i, j - 1], last)
                low = np.minimum(dp_min[:i, j - 1], last)
                with np.errstate(invalid="ignore"):
                    cost = high - low                      # inf - inf: nan, never below a finite cost
                cost = np.where(np.isnan(cost), np.inf, cost)
                k = int(np.flatnonzero(cost == cost.min())[-1])   # '>=': the last k of least cost
                dp_cost[i, j], dp_max[i, j], dp_min[i, j], position[i, j] = cost[k], high[k], low[k], k
        bounds = [n]
        for j in range(m, 0, -1):
            bounds.append(int(position[bounds[-1], j]))
        bounds.reverse()
    return tuple(max(0, min(b, num_layers + 1) - max(a, 1)) for a, b in zip(bounds[:-1], bounds[1:]))


def partition_method(p: dict) -> str | None:
    """The ``partition_method`` under which DeepSpeed's ``PipelineModule`` cuts the plan's
    stages as the plan priced them (``plan_stage_counts``), or None when none of
    ``PARTITION_METHODS`` does."""
    want = plan_stage_counts(p)
    for method, embedding, head in PARTITION_METHODS:
        if deepspeed_stage_counts(p["model"].num_layers, p["pp"], embedding, head) == want:
            return method
    return None


def layout_string(counts: tuple[int, ...]) -> str:
    """``counts`` decoder layers per stage as a ``pipeline_layout`` string (embedding first,
    loss last)."""
    stages = [f"t*{c}" if c else "" for c in counts]
    stages[0], stages[-1] = "E" + stages[0], stages[-1] + ("," if stages[-1] else "") + "L"
    return "|".join(stages)


def autotp_sequence_parallel(p: dict) -> None:
    """Refuse a plan priced with sequence parallelism beside tensor parallelism (``tp > 1``):
    AutoTP has none. Its column-parallel linears take the whole sequence (``LinearLayer.forward``:
    ``ColumnParallel``, identity forward, all-reduce of the input gradient) and its row-parallel
    linears all-reduce their whole output (``LinearAllreduce.forward``: ``RowParallel.forward``,
    ``dist.all_reduce``), ``deepspeed/module_inject/layers.py`` at 0.19.8; the compiled path
    (``compile/passes/tp_compile.py``) inserts the same copy / all-reduce ops, and
    ``TPTrainingConfig`` (``runtime/tensor_parallel/config.py``) has no sequence-parallel key.
    So the norms, dropouts and residuals between the linears run on every token on every TP
    rank and their activations are not split by ``tp``, which the plan's memory and time
    assumed (Megatron's ``--sequence-parallel``: reduce-scatter / all-gather around them)."""
    if p["sequence_parallel"] and p["tp"] > 1:
        raise InputError("sequence_parallel", "DeepSpeed's AutoTP has no sequence parallelism (its row-parallel "
                         "linears all-reduce the whole sequence, module_inject/layers.py), so the activations the "
                         f"plan split over tp={p['tp']} would be whole on every rank",
                         "plan with sequence_parallel off (--fix sequence_parallel=off), or emit megatron / torchtitan")


def grad_accum_dtype(p: dict) -> str | None:
    """``data_types.grad_accum_dtype`` for the plan ``p``: the dtype of the gradient buffer it
    priced (``grad_buffer_bytes``) where DeepSpeed 0.19.8 keeps its buffer in that dtype, or None
    (the key left out: DeepSpeed accumulates in the model dtype, ``runtime/engine.py:1806-1807``).

    What a bf16 run keeps, by optimizer (the engine's choice, ``engine.py:2305-2311``):

    * ZeRO-1, optimizer on the GPU, fp32 accumulation: ``BF16_Optimizer``, an fp32 gradient
      buffer of the whole model (``runtime/bf16_optimizer.py:191``, ``torch.zeros_like(...,
      dtype=self.grad_acc_dtype)``) all-reduced whole: the plan priced with
      ``zero1_grad_all_reduce`` (4 bytes a parameter, whole). Written as ``fp32``, which is what
      makes the engine pick it.
    * ZeRO-1 with the optimizer offloaded, and ZeRO-2: the ZeRO stage 1-2 optimizer, which keeps
      the gradients in ``gradient_accumulation_dtype``: at stage 1 a whole ``param.grad_accum``
      of that dtype (``runtime/zero/stage_1_and_2.py:397-404``, ``:1236-1239``), at stage 2 the
      rank's partition (``:1259-1271``, ``_build_compact_grad_partition_buffer``); ZeRO-3 its
      partition too (``runtime/zero/stage3.py:791-792``, ``grad_partitions_flat_buffer``). Each
      is the plan's buffer (whole at ZeRO-1, sharded at 2-3, ``memory.model_state_bytes``) in
      the dtype ``grad_buffer_bytes`` names: ``fp32`` for 4, the default (bf16) for 2.
    * ZeRO-1 reduce-scattered with the optimizer on the GPU: fp32 accumulation would make the
      engine pick ``BF16_Optimizer`` and all-reduce, so the key stays out and the ZeRO-1
      optimizer accumulates in bf16, 2 bytes a parameter whatever ``grad_buffer_bytes`` says
      (a 4-byte plan over-counts its gradient buffer by 2 bytes a parameter).
    """
    if p["dtype"] != "bf16" or p["zero_stage"] == 0:
        return None
    if p["zero_stage"] == 1 and not p.get("offload_optimizer_fraction"):
        return "fp32" if p.get("zero1_grad_all_reduce", False) else None
    return "fp32" if p["grad_buffer_bytes"] == 4 else None


def world_counted(p: dict) -> int:
    """The world ``DeepSpeedConfig`` multiplies into ``train_batch_size`` for this launch."""
    if p["pp"] > 1 or p["cp"] > 1:
        return p["dp"]
    return p["n_gpus"]


def config(plan_row: Any) -> dict:
    """The DeepSpeed config dict for the plan; raises ``InputError`` when DeepSpeed cannot run it."""
    p = plan_fields(plan_row)
    _check(p)
    return _config(p)


def _config(p: dict) -> dict:
    accumulation = p["global_batch"] // (p["micro_batch"] * p["dp"])
    cfg: dict[str, Any] = {
        "train_batch_size": p["micro_batch"] * accumulation * world_counted(p),
        "train_micro_batch_size_per_gpu": p["micro_batch"],
        "gradient_accumulation_steps": accumulation,
        "zero_optimization": {"stage": p["zero_stage"], "overlap_comm": bool(p["overlap_grad_reduce"]),
                              "contiguous_gradients": True, "reduce_scatter": True,
                              # the bucket the plan priced, in gradient elements
                              "reduce_bucket_size": int(max(p["grad_bucket_elements"],
                                                            p["grad_bucket_elements_per_dp"] * p["dp"]))},
        "communication_data_type": ("fp32" if p["grad_reduce_bytes"] == 4 else
                                    "fp16" if p["dtype"] == "fp16" else "bf16"),
        "bf16": {"enabled": p["dtype"] not in ("fp16", "fp32", "tf32")},
        "fp16": {"enabled": p["dtype"] == "fp16"},
    }
    if p["zero_stage"] == 3 and p["param_prefetch_max_elements"] > 0:
        cfg["zero_optimization"]["stage3_prefetch_bucket_size"] = int(p["param_prefetch_max_elements"])
    if p["zero_stage"] == 3 and p.get("zero3_persistence_elements", 0) > 0:
        # the tensors the plan priced as persistent (never gathered per use)
        cfg["zero_optimization"]["stage3_param_persistence_threshold"] = int(p["zero3_persistence_elements"])
    if p["zero_stage"] == 3 and p.get("zero3_grad_all_reduce", False):
        # the plan priced all-reduced gradient buckets, DeepSpeed's path without reduce_scatter
        cfg["zero_optimization"]["reduce_scatter"] = False
    if grad_accum_dtype(p) is not None:
        cfg["data_types"] = {"grad_accum_dtype": grad_accum_dtype(p)}
    if p.get("offload_optimizer_fraction"):
        # ZeRO-Offload: optimizer states and step on the host (pinned buffers)
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if p["tp"] > 1:
        cfg["tensor_parallel"] = {"autotp_size": p["tp"]}
    recompute = Recompute(p["recompute"])
    if p["pp"] > 1:
        cfg["pipeline"] = {"stages": p["pp"], "activation_checkpoint_interval": 1 if recompute == Recompute.FULL else 0}
    if p["cp"] > 1:
        cfg["sequence_parallel_size"] = p["cp"]
        cfg["data_parallel_size"] = p["dp"]
        # under Ulysses the engine reduces gradients in seq_parallel_communication_data_type, not
        # communication_data_type (runtime/engine.py:2181-2182 at 0.19.8, before the optimizer is
        # built), whose default is fp32 (runtime/constants.py:236): the plan's dtype, said again
        cfg["seq_parallel_communication_data_type"] = cfg["communication_data_type"]
    if p["ep"] > 1:
        cfg["expert_parallel"] = {"enabled": True, "autoep_size": p["ep"], "expert_tensor_parallel_size": 1}
    if recompute != Recompute.NONE:
        cfg["activation_checkpointing"] = {"partition_activations": False, "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False}
    return cfg


def recompute_lines(p: dict) -> list[str]:
    """The recipe's lines for the plan's recomputation, pipeline or not.

    Full recomputation under a pipeline is ``PipelineModule``'s own
    ``activation_checkpoint_interval=1`` (in the recipe's constructor), so it adds no line here.
    Selective recomputation is the model code's: a checkpoint of the selected operations inside
    each decoder layer's forward. ``PipelineModule`` runs that forward as it is:
    with ``activation_checkpoint_interval=0`` its ``forward`` calls every layer of the stage in
    turn, unwrapped (``deepspeed/runtime/pipe/module.py`` ``PipelineModule.forward``, the
    ``activation_checkpoint_interval == 0`` branch, at 0.19.8), so the same lines hold for a
    pipeline's ``DecoderLayer`` as for a plain module (where a selective plan had been written
    with no recomputation at all under a pipeline)."""
    rc = Recompute(p["recompute"])
    piped = p["pp"] > 1
    where = ("in DecoderLayer.forward; PipelineModule runs it as is with activation_checkpoint_interval=0"
             if piped else "in the model code")
    if rc == Recompute.SELECTIVE and "every_second_linear" in selective_recompute_modules(p):
        return ["#   selective recomputation as priced: PyTorch's per-operation checkpoint of each layer "
                "(torch.utils.checkpoint with create_selective_checkpoint_contexts) saving the matmul and "
                f"attention outputs except every second matmul, as torchtitan's SelectiveAC does ({where})."]
    if rc == Recompute.SELECTIVE:
        return ["#   selective recomputation: checkpoint only each layer's attention core "
                f"(deepspeed.checkpointing.checkpoint around it {where})."]
    if rc == Recompute.FULL and not piped:
        return ["#   full recomputation: checkpoint every layer (deepspeed.checkpointing.checkpoint per layer, "
                "or model.gradient_checkpointing_enable() for Hugging Face models)."]
    return []


def emit(plan_row: Any, note: str = "") -> str:
    """The DeepSpeed config JSON for the plan (pass it as ``deepspeed.initialize(config=...)``);
    ``recipe`` gives the launch around it. Raises ``InputError`` (one line, naming the field)
    for a plan DeepSpeed cannot run as planned."""
    return json.dumps(config(plan_row), indent=2) + "\n"


def recipe(plan_row: Any, note: str = "") -> str:
    """How to launch the config: the model wrapping, ``initialize`` call and what DeepSpeed
    counts (comment lines and Python, for the terminal and the docs)."""
    p = plan_fields(plan_row)
    _check(p)
    model = p["model"]
    lines = [f"# {summary(p)}", f"# {RELEASE} launch for the config JSON (paraplan.exports.deepspeed):"]
    if note:
        lines.append(f"# {note}")
    if p["pp"] > 1:
        counts, method = plan_stage_counts(p), partition_method(p)
        lines += [f"#   PipelineModule: {p['pp']} stages; the plan's decoder layers per stage {list(counts)}, which",
                  f"#   partition_method='{method}' gives (DeepSpeed weighs the LayerSpecs it matches 1,",
                  "#   the others 0, and balances them: runtime/pipe/module.py _partition_layers); keep the class",
                  "#   names Embedding / DecoderLayer / Head or edit the regex with them. The config's data-parallel "
                  f"ranks are dp={p['dp']}.",
                  "from deepspeed.pipe import PipelineModule, LayerSpec",
                  "model = PipelineModule(layers=[LayerSpec(Embedding, ...)] + "
                  f"[LayerSpec(DecoderLayer, ...) for _ in range({model.num_layers})] + [LayerSpec(Head, ...)],",
                  f"                       num_stages={p['pp']}, partition_method='{method}', loss_fn=loss_fn,",
                  "                       activation_checkpoint_interval="
                  f"{1 if Recompute(p['recompute']) == Recompute.FULL else 0})"]
    if p["cp"] > 1:
        lines += [f"#   Ulysses: attention wrapped by deepspeed.sequence.layer.DistributedAttention (or "
                  "UlyssesSPAttentionHF for Hugging Face models);",
                  f"#   the config's sequence_parallel_size={p['cp']} x data_parallel_size={p['dp']} mesh is "
                  "what DeepSpeed counts."]
    if p["tp"] > 1:
        lines.append(f"#   AutoTP shards the model over tp={p['tp']}; DeepSpeed counts every rank in train_batch_size "
                     f"({world_counted(p)} ranks), so it reads {p['global_batch']} x {p['tp']} = "
                     f"{p['global_batch'] * p['tp']} (each TP group reads one batch).")
    if p["ep"] > 1:
        lines.append(f"#   AutoEP: {p['ep']}-way expert parallelism folded into the data-parallel ranks.")
    lines += recompute_lines(p)
    lines.append("engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), "
                 "config='ds_config.json')")
    return "\n".join(lines) + "\n"
