"""A plan as a torchtitan 0.3.0 job: a ``config_registry`` module.

torchtitan 0.3.0 removed the TOML job files: a job is a Python function returning
``Trainer.Config``, selected with ``--module`` / ``--config`` (``torchtitan/config/manager.py``;
a fully qualified module path is accepted). The export is such a module. Its function starts
from the release's own registry function for the model (``llama3_70b``, ``deepseek_v3_671b``,
...), rebuilds the model spec with the plan's converters (float8) and MTP modules, and sets the
plan's degrees, batch, pipeline split and recomputation. Launch::

    torchrun --nnodes 32 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \
        -m torchtitan.train --module paraplan_plan --config paraplan_plan

(the plan's hosts and GPUs per host, ``common.torchrun_head``) with the file saved as ``paraplan_plan.py`` in the working directory.

How the plan maps (and what is refused, ``refusal``):

* ZeRO 0 = ``data_parallel_replicate_degree`` (DDP, only without TP / PP / CP); ZeRO 1-3 =
  FSDP2 over ``data_parallel_shard_degree``; 3 reshards after forward (``"always"``), 1 and 2
  do not (``"never"``: ZeRO-2; without a pipeline FSDP2 still reshards after each backward,
  so every micro-batch's forward gathers the parameters again, and a ZeRO-1 / ZeRO-2 plan of
  several micro-batches priced with whole parameters gathered once a step, ``zero2_gather_
  every_microbatch`` off, is refused), nor does 3 under a pipeline where the plan
  was priced gathering each stage once a step (``zero3_once_per_step``, torchtitan's own
  default then). Under a pipeline ``"never"`` and that default are one run, which keeps the
  stage's gradients whole to its last backward: ZeRO-2 and such a ZeRO-3 plan are priced alike
  (one gather and one reduce-scatter of the stage a step), and a ZeRO-2 / ZeRO-3 pipeline plan
  priced per micro-batch (another stack's FSDP) is refused, as torchtitan would not run it so.
  ``enable_sequence_parallel`` follows the plan.
* Pipeline: ``module_fqns_per_model_part`` lists the modules of every chunk in the plan's layout
  (``common.stage_layer_counts``; ``tok_embeddings`` with the first chunk, ``norm`` and
  ``lm_head`` with the last), since torchtitan's own split counts the embedding and the head
  as layers; the schedule by the name ``torch.distributed.pipelining`` gives it.
* torch.compile as the plan prices it (``compile.enable``, ``compile.components``): the blocks
  (``model``) unless the plan priced torchtitan's eager element-wise ops (``unfused_block_ops``,
  the ``torchtitan`` stack; async TP, written where the plan priced the TP overlap, i.e. under
  sequence parallelism (``async_tp``), compiles them regardless), the loss unless it priced the
  eager loss (``cross_entropy: torch_eager``): a ``torchtitan-compile`` plan compiles both, a
  ``torchtitan`` plan neither.
* CUDA graphs as the plan prices them (``training.disable_cuda_graphs``; 0.3.0 captures them
  by default, and refuses them beside a pipeline or its default expert dispatcher).
* Expert parallelism: ``expert_parallel_degree`` (torchtitan borrows the EP ranks from the
  FSDP-shard x TP ranks, ``parallel_dims.build_mesh``, so ``ep`` must divide
  ``data_parallel_shard_degree x tp``: the shard group under HSDP, 1 under DDP); with EP the
  experts are whole on each EP rank (``etp`` 1), without it they are sharded over the TP ranks
  like a dense MLP (``etp`` = ``tp``; ``models/common/moe_sharding.py``
  ``_routed_experts_sharding_configs`` / ``expert_param_placement_dense``), and a plan with any
  other ``etp`` is refused (``expert_tp``).
* Recomputation: ``full`` = ``FullAC``; ``none`` = no checkpointing; ``selective`` =
  ``SelectiveAC`` (the per-operation policy: attention and matmul outputs saved, every second
  matmul and the element-wise work rerun) when the plan prices that policy, i.e. it was planned
  on the ``torchtitan`` stack (``selective_modules`` = layernorm, mlp_act,
  every_second_linear). A selective plan priced as Megatron's (the attention core only,
  Korthikanti et al. 2022) has no torchtitan equivalent and is refused.
* Context parallelism: ``context_parallel_degree`` = cp for a plan priced as all-gather CP
  (``cp_kind`` ``allgather``, the ``torchtitan`` stacks' ``context_parallel_kind``): 0.3.0's
  registry models run FlexAttention (``attn_backend`` ``"flex"``), whose CP wrapper all-gathers
  K/V over the CP group before the local queries' attention (``distributed/context_parallel/
  api.py`` ``apply_cp_to_forward``: ``flex_cp_allgather``; the default ``spmd_types`` backend's
  ``models/common/decoder_sharding.py`` makes K/V Replicate on ``cp``, their gradients Partial),
  with ``context_parallel_load_balancer`` ``"headtail"`` (written; 0.3.0's default): rank i holds
  sequence chunks i and 2cp-1-i of 2cp, the load balancing the plan's 2 x cp chunks price
  (``simulator.validate_config.cp_sequence_chunks``). FSDP then shards over ``data_parallel_shard_
  degree`` x cp (``parallel_dims``: ``fsdp = dp_shard * cp``), the ZeRO group of dp x cp ranks the
  plan prices. Ring, Ulysses and hybrid plans are refused (0.3.0 has no such option; 0.2.x's
  ``context_parallel_rotate_method`` is gone), as are ZeRO-0 and HSDP plans with cp > 1.
* Precision: bf16 / fp32 mixed-precision parameters; ``fp8`` = ``Float8LinearConverter`` with
  its rowwise recipe (the float8 converter of 0.3.0; needs torchao and an SM89+ GPU when the
  config is built); fp16, MXFP8 and NVFP4 plans are refused.
* The loss as priced (``loss``): 0.3.0's registry functions wrap the cross-entropy in
  ``ChunkedLossWrapper`` (8 chunks), so the export always writes ``config.loss`` itself:
  ``CrossEntropyLoss`` for a plan priced with the whole micro-batch's logits
  (``loss_chunk_tokens`` 0), ``ChunkedLossWrapper`` with the ``num_chunks`` that gives the
  priced chunk otherwise (refused where no whole divisor of the sequence gives it); an MTP model
  runs ``MTPLoss``, unchunked, and a chunked MTP plan is refused.
* Models: the release's registry models whose architecture equals the plan's (``REGISTRY``).
"""
from __future__ import annotations

from typing import Any

from hardware_specs.errors import InputError
from hardware_specs.stack_spec import SELECTIVE_CHECKPOINTS
from model_specs.model_spec import ModelSpec
from paraplan.exports import screen
from paraplan.exports.common import (gpus_text, plan_fields, refuse_kv_head_replication, refuse_memory_features,
                                     require_model, selective_recompute_modules, stage_layer_counts, summary,
                                     torchrun_head)
from simulator.layer_times import tp_overlap_applies
from simulator.parallel_config import Recompute, Schedule
from simulator.stack_defaults import expert_tp_for

NAME = "torchtitan"
SUFFIX = ".py"
RELEASE = "torchtitan 0.3.0"
#: the module name the launch line uses (the file the export is saved as, without ``.py``).
MODULE_NAME = "paraplan_plan"

#: torchtitan 0.3.0 registry models and their architecture (torchtitan/models/llama3/__init__.py
#: ``llama3_configs`` 8B / 70B / 405B and models/deepseek_v3/__init__.py ``deepseekv3_configs`` 671B at
#: 0.3.0): a plan's model runs there when every listed field equals the ModelSpec's. ``router``:
#: (score, expert bias, scaling factor, groups, group top-k, renormalised) of the registry's MoE
#: router (0.3.0's ``_671b``: router_score_func sigmoid, router_route_scale 2.5,
#: router_num_expert_groups 8, router_num_limited_groups 4, router_route_norm True (models/
#: deepseek_v3/__init__.py; common/moe.py divides the chosen scores by their sum when set), MoE
#: load_balance_coeff 1e-3: the aux-loss-free bias), which the export cannot change: a model routed
#: otherwise is not that registry model.
#: the RoPE torchtitan 0.3.0 builds its Llama 3 8B / 70B / 405B with: Llama 3.1's frequency scaling
#: (models/llama3/__init__.py ``_8b`` / ``_70b`` / ``_405b``: ``ComplexRoPE.Config(theta=500000,
#: scaling="llama")``, models/common/rope.py ``scaling_factor: float = 8.0``): (theta, scaling, factor)
LLAMA31_ROPE = (500000.0, "llama", 8.0)
REGISTRY = (
    {"module": "llama3", "config": "llama3_8b", "flavor": "8B", "rope": LLAMA31_ROPE,
     "arch": dict(num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
                  vocab_size=128256, moe=None, mla=False)},
    {"module": "llama3", "config": "llama3_70b", "flavor": "70B", "rope": LLAMA31_ROPE,
     "arch": dict(num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, ffn_hidden_size=28672,
                  vocab_size=128256, moe=None, mla=False)},
    # llama3_configs["405B"] (models/llama3/__init__.py _405b) and config_registry.llama3_405b()
    {"module": "llama3", "config": "llama3_405b", "flavor": "405B", "rope": LLAMA31_ROPE,
     "arch": dict(num_layers=126, hidden_size=16384, num_heads=128, num_kv_heads=8, ffn_hidden_size=53248,
                  vocab_size=128256, moe=None, mla=False)},
    {"module": "deepseek_v3", "config": "deepseek_v3_671b", "flavor": "671B",
     "arch": dict(num_layers=61, hidden_size=7168, num_heads=128, ffn_hidden_size=18432, vocab_size=129280,
                  moe=(256, 8, 2048), mla=True, router=("sigmoid", True, 2.5, 8, 4, True))},
)

#: plan schedules by the name ``torch.distributed.pipelining.schedules.get_schedule_class`` knows;
#: DualPipe (two model copies, both directions) has no counterpart there: its ``DualPipeV`` is the
#: one-copy V, so such plans are refused.
_SCHEDULES = {Schedule.GPIPE: "GPipe", Schedule.ONE_F_ONE_B: "1F1B", Schedule.INTERLEAVED: "Interleaved1F1B",
              Schedule.ZB_H1: "InterleavedZeroBubble", Schedule.ZB_V: "ZBVZeroBubble"}


def registry_entry(model: ModelSpec) -> dict | None:
    """The torchtitan registry entry whose architecture is ``model``'s, or None."""
    for entry in REGISTRY:
        a = entry["arch"]
        moe = (model.moe.num_experts, model.moe.top_k, model.moe.expert_ffn_hidden_size) if model.moe else None
        router = (model.moe.router_score, model.moe.expert_bias, model.moe.topk_scaling_factor, model.moe.num_groups,
                  model.moe.group_topk, model.moe.topk_renormalized) if model.moe else None
        same = all(getattr(model, k) == v for k, v in a.items() if k not in ("moe", "mla", "router"))
        same = same and moe == a["moe"] and (model.mla is not None) == a["mla"] and router == a.get("router")
        same = same and (model.position_embedding, model.normalization, model.linear_bias, model.activation) == (
            "rope", "rmsnorm", False, "swiglu") and not model.qkv_bias and not model.sliding_window
        if same:
            return entry
    return None


def rope_overrides(model: ModelSpec, entry: dict) -> dict:
    """The RoPE fields (torchtitan ``RoPE.Config`` names) the job must set on every layer so its
    rotary embedding is ``model``'s, not the registry model's (``entry["rope"]``): Llama 3 8B / 70B
    rotate unscaled (``scaling="none"``), where torchtitan's registry builds Llama 3.1's scaling.
    An empty ``rope_scaling`` is no scaling (``ModelSpec``: a config.json without rope_scaling
    rotates unscaled), so it sets ``scaling="none"``; a ``rope_theta`` or ``rope_scaling_factor``
    of 0 is not stated and keeps the registry's. Raises ``InputError`` for a scaling torchtitan's ``ComplexRoPE`` cannot express this way."""
    if "rope" not in entry:
        return {}
    theta, scaling, factor = entry["rope"]
    out = {}
    if model.rope_theta and model.rope_theta != theta:
        out["theta"] = float(model.rope_theta)
    if not model.rope_scaling:
        out["scaling"] = "none"
    elif model.rope_scaling == "llama3":
        if model.rope_scaling_factor and model.rope_scaling_factor != factor:
            out["scaling_factor"] = float(model.rope_scaling_factor)
    else:
        raise InputError("model", f"{model.name}'s RoPE scaling {model.rope_scaling!r} is not one {RELEASE}'s "
                         f"{entry['config']} model can take (ComplexRoPE: none or llama)", "emit megatron")
    return out


def float8_skipped(entry: dict) -> list[str]:
    """The linears the float8 converter must leave 16-bit for the job to run as priced
    (``Float8LinearConverter.Config.filter_fqns``; it defaults to ``[]``, which converts every
    linear whose dims divide by 16, the output projection included: components/quantization/
    float8.py and utils.py ``module_filter_fn`` at 0.3.0). The step model keeps the output layer
    16-bit under low-precision recipes (``simulator/layer_times.py``, the model's ends) and
    counts the MoE router among the 16/32-bit parts (``cost_models/low_precision.py``), as
    torchtitan's own jobs filter them: ``llama3_405b`` ``["lm_head"]``, ``deepseek_v3_671b``
    ``["lm_head", "router.gate"]`` (models/*/config_registry.py)."""
    return ["lm_head", "router.gate"] if entry["arch"]["moe"] else ["lm_head"]


def registry_text() -> str:
    """The registry models this export maps, as a refusal names them (from ``REGISTRY``, so the two
    cannot disagree): ``llama3 8B (llama3_8b), ...``."""
    return ", ".join(f"{e['module']} {e['flavor']} ({e['config']})" for e in REGISTRY)


def refusal(p: dict) -> InputError | None:
    """Why torchtitan 0.3.0 cannot run the plan ``p`` (a ``plan_fields`` dict) as planned, or None."""
    try:
        _settings(p)
    except InputError as exc:
        return exc
    return None


def can_run(plan_row: Any) -> bool:
    return refusal(plan_fields(plan_row)) is None


def screened(col) -> list:
    """Column conditions under which ``_settings`` refuses a plan for certain (``exports.screen``;
    ``col(name)``: the field on every row), each one of its checks."""
    dp, tp, pp, cp = (screen.number(col, k) for k in ("dp", "tp", "pp", "cp"))
    zero = screen.effective_zero(col)
    return [
        # refuse_memory_features (zero_shard_group and loss_chunk_tokens supported)
        screen.any_of(col, ("recompute_num_layers", "recompute_layers_decrement", "offload_activation_layers")),
        # context parallelism only as all-gather CP, with FSDP over the cp ranks
        screen.where(None if cp is None else cp > 1, screen.text_in(col, "cp_kind", ("ring", "ulysses", "hybrid"))),
        screen.where(None if cp is None else cp > 1, None if zero is None else zero == 0),
        screen.text_in(col, "dtype", ("fp16", "mxfp8", "nvfp4")),          # bf16 / fp32 / float8 rowwise
        screen.where(None if zero is None else zero == 0, None if dp is None else dp > 1,   # DDP: no TP or PP
                     None if tp is None or pp is None else (tp > 1) | (pp > 1)),
    ]


def _settings(p: dict) -> dict:
    """The plan as torchtitan settings; raises ``InputError`` for what 0.3.0 cannot run as planned."""
    model = require_model(p, RELEASE)
    if model.hybrid_pattern:
        raise InputError("model", f"hybrid Mamba models: not supported by this export ({RELEASE} registers no "
                         "Mamba mixer)", "emit the plan's degrees by hand")
    if model.linear_attention is not None:
        raise InputError("model", f"linear-attention layers (Gated DeltaNet): not supported by this export ({RELEASE} "
                         "registers no such attention)", "emit the plan's degrees by hand")
    entry = registry_entry(model)
    if entry is None:
        raise InputError("model", f"{model.name}'s architecture is none of the {RELEASE} registry models this "
                         f"export maps ({registry_text()})",
                         "emit megatron or deepspeed, or add a config_registry function for this model")
    dp, tp, pp, cp, ep = p["dp"], p["tp"], p["pp"], p["cp"], p["ep"]
    zero = p["zero_stage"]
    schedule = Schedule(p["schedule"])
    refuse_kv_head_replication(p, model, RELEASE)
    refuse_memory_features(p, RELEASE, supported=("zero_shard_group", "loss_chunk_tokens"))
    if cp > 1 and p["cp_kind"] != "allgather":
        raise InputError("cp_kind", f"{RELEASE} all-gathers K/V under context parallelism (FlexAttention: "
                         f"distributed/context_parallel/api.py), not the {p['cp_kind']} attention the plan prices",
                         "plan with --stack torchtitan-0.3 (its context parallelism is allgather) or --fix "
                         "cp_kind=allgather, or emit megatron")
    if cp > 1 and zero == 0:
        raise InputError("zero_stage", f"with context parallelism {RELEASE} shards the model with FSDP over the "
                         "data_parallel_shard x cp ranks (parallel_dims: fsdp = dp_shard * cp); the plan priced "
                         "ZeRO-0", "plan with zero_stage >= 1")
    if cp > 1 and p.get("zero_shard_group"):
        raise InputError("zero_shard_group", "this export writes hybrid sharding without context parallelism only "
                         f"({RELEASE} folds the cp ranks into the shard group)", "plan without zero_shard_group")
    if cp > 1 and p["seq_len"] % (2 * cp):
        raise InputError("seq_len", f"the head-tail load balancer cuts {p['seq_len']} tokens into 2 x cp = {2 * cp} "
                         "equal chunks", f"choose a sequence length divisible by {2 * cp}")
    if pp > 1 and schedule not in _SCHEDULES:
        raise InputError("schedule", f"torch.distributed.pipelining has no {schedule.value} schedule (its DualPipeV "
                         "runs one model copy)", "choose gpipe, 1f1b, interleaved, zb-h1 or zb-v")
    if pp > 1 and schedule == Schedule.GPIPE and p["vpp"] > 1:
        raise InputError("vpp", "GPipe runs one stage per rank", "use vpp 1 or the interleaved schedule")
    if zero >= 2 and pp > 1 and not p.get("zero3_once_per_step", False):
        raise InputError("zero_stage", f"under a pipeline torchtitan's FSDP gathers each stage once a step and "
                         f"reduce-scatters once after its last backward; the plan priced ZeRO-{zero} per layer and "
                         "micro-batch", "plan with --stack torchtitan-0.3 (zero3_under_pipeline once_per_step)")
    m = p["global_batch"] // (dp * p["micro_batch"])
    if pp > 1 and schedule == Schedule.ONE_F_ONE_B and m < pp:
        # torch 2.13 torch/distributed/pipelining/schedules.py:1020-1024 (Schedule1F1B.__init__),
        # built by torchtitan/distributed/pipeline_parallel.py:303-311 with local batch / micro-batch
        raise InputError("global_batch", f"torch's Schedule1F1B raises 'Number of microbatches ({m}) must be greater "
                         f"than or equal to the number of stages ({pp})'", f"plan with at least {pp} micro-batches "
                         "per data-parallel rank (a larger global batch or a smaller micro-batch), or the gpipe "
                         "schedule")
    rounds = max(1, m // pp)
    if pp > 1 and schedule in (Schedule.INTERLEAVED, Schedule.ZB_H1) and m % rounds:
        # torch 2.13 torch/distributed/pipelining/schedules.py:2936-2942 (ScheduleInterleaved1F1B) and
        # :3046-3052 (ScheduleInterleavedZeroBubble): rounds = max(1, m // pp), and m must be a multiple
        raise InputError("global_batch", f"torch's {_SCHEDULES[schedule]} schedule runs the micro-batches in rounds "
                         f"of max(1, m // pp) = {rounds} and raises unless the {m} micro-batches per data-parallel "
                         f"rank are a multiple of it", f"plan with a micro-batch count that is a multiple of "
                         f"{rounds} (e.g. {rounds * pp}), or the 1f1b schedule")
    if zero in (1, 2) and pp == 1 and m > 1 and not (zero == 2 and p.get("zero2_gather_every_microbatch", False)):
        raise InputError("zero_stage", f"torchtitan's ZeRO-{zero} is FSDP2 with reshard_after_forward 'never', which "
                         f"reshards after each backward and gathers the parameters again in each of the {m} "
                         "micro-batches' forwards; the plan priced them whole, gathered once after the step",
                         "plan with --stack torchtitan-0.3 (ZeRO-2 priced as FSDP2 runs it)")
    if zero == 0 and dp > 1 and (tp > 1 or pp > 1):
        raise InputError("zero_stage", "torchtitan runs plain DDP (ZeRO-0) only without TP or PP",
                         "use a plan with zero_stage >= 1 (FSDP2) for torchtitan")
    if Recompute(p["recompute"]) == Recompute.SELECTIVE:
        priced = selective_recompute_modules(p)
        if set(priced) != set(SELECTIVE_CHECKPOINTS["per_op"]):
            raise InputError("recompute", "torchtitan's SelectiveAC saves attention and matmul outputs and recomputes "
                             f"every second matmul; the plan's selective recomputation ({', '.join(priced)}) is "
                             "a different trade", "plan with --stack torchtitan-0.3 (its selective is that policy), "
                             "or with recompute none or full")
    if p["dtype"] == "fp16":
        raise InputError("dtype", "torchtitan trains in bfloat16 or float32 (mixed_precision_param), not fp16",
                         "use bf16")
    if p["dtype"] in ("mxfp8", "nvfp4"):
        raise InputError("dtype", f"this export writes torchtitan's float8 (rowwise) converter only, not {p['dtype']}",
                         "use fp8 or bf16")
    if model.moe is not None and p["etp"] != expert_tp(tp, ep):
        raise InputError("etp", f"{RELEASE} shards the routed experts over the TP ranks when expert parallelism "
                         "is off and keeps them whole under it (models/common/moe_sharding.py "
                         f"_routed_experts_sharding_configs): with tp={tp}, ep={ep} its experts run at etp="
                         f"{expert_tp(tp, ep)}, not the plan's {p['etp']}", f"plan with etp {expert_tp(tp, ep)}")
    if p["ep_comm_overlap"] and ep > 1:
        raise InputError("ep_comm_overlap", "this export does not switch on an overlapped expert all-to-all "
                         "(torchtitan's HybridEP / MinimalAsyncEP dispatchers)", "plan without ep_comm_overlap")
    if p["ep_dispatch_dedup"] and ep > 1:
        raise InputError("ep_dispatch_dedup", "this export writes torchtitan's default expert all-to-all (one row "
                         "per token and expert), not the once-per-node dispatch the plan priced",
                         "plan without ep_dispatch_dedup")
    if p["cuda_graphs"] and (pp > 1 or ep > 1):
        raise InputError("cuda_graphs", "torchtitan 0.3.0 captures no CUDA graphs with a pipeline or with its "
                         "default expert dispatcher", "plan without cuda_graphs here")
    # no refusal of a per-micro-batch gradient reduction: without a pipeline it is what torchtitan
    # runs (pytorch/torchtitan train.py at e9f53473: train_step's accumulation loop never calls
    # set_requires_gradient_sync(False)), as its stack profile prices it (hardware_specs/stacks/
    # torchtitan.yaml zero01_grad_reduce); this export refused it, and with it every plan of that
    # profile that accumulates gradients over micro-batches
    if p["grad_reduce_bytes"] != 4:
        raise InputError("grad_reduce_bytes", "torchtitan reduces gradients in float32 (mixed_precision_reduce)",
                         "plan with grad_reduce_bytes 4")
    # the expert mesh is [efsdp, ep] over the FSDP-shard x CP x TP ranks (parallel_dims.build_mesh:
    # efsdp = dp_shard * cp * tp // ep); dp_shard is 1 under DDP (ZeRO 0) and the shard group under HSDP
    shard = 1 if zero == 0 else (p.get("zero_shard_group") or dp)
    if ep > 1 and (shard * cp * tp) % ep:
        within = f"{shard} x {tp}" if cp == 1 else f"{shard} x {cp} x {tp}"
        raise InputError("ep", f"{RELEASE} forms the EP groups inside the FSDP-shard x {'CP x ' if cp > 1 else ''}"
                         f"TP ranks: ep={ep} must divide data_parallel_shard_degree x "
                         f"{'context_parallel_degree x ' if cp > 1 else ''}tp = {within}",
                         f"choose ep dividing {shard * cp * tp}" + (" (or a larger ZeRO shard group)" if shard < dp else ""))
    if model.mtp_layers and pp > 1:
        raise InputError("pp", f"{RELEASE}'s pipeline split has no place for the MTP modules", "use pp 1")
    if p["tp"] > 1 and (p["seq_len"] // cp) % (tp if p["sequence_parallel"] else 1):
        raise InputError("seq_len", f"sequence parallelism splits the {p['seq_len'] // cp} tokens of a cp rank "
                         f"over tp={tp}", "choose a sequence length divisible by cp x tp")
    return {"entry": entry, "model": model, "parts": _model_parts(p, model, schedule) if pp > 1 else None,
            "loss": loss_settings(p, model)}


def expert_tp(tp: int, ep: int) -> int:
    """The expert tensor-parallel degree torchtitan 0.3.0 runs routed experts at: ``tp`` without
    expert parallelism (``expert_param_placement_dense``: w1/w3 Shard(1), w2 Shard(2) on the TP
    axis), 1 with it (``expert_param_placement_sparse``: the experts split over EP only): its
    stacks' ``expert_tp_default`` ``tp_without_ep`` (``simulator.stack_defaults.expert_tp_for``)."""
    return expert_tp_for("tp_without_ep", tp, ep)


def loss_settings(p: dict, model: ModelSpec) -> dict:
    """The loss the plan ``p`` was priced with, as torchtitan 0.3.0 runs it: ``{"kind":
    "cross_entropy" | "chunked" | "mtp", "num_chunks": N}`` (``N`` 1 unless chunked); raises
    ``InputError`` where 0.3.0 cannot cut the priced chunk.

    The plan's ``loss_chunk_tokens`` (``simulator.parallel_config.ParallelConfig``; priced in
    ``simulator.memory_rows``: the logits of ``min(tokens, loss_chunk_tokens)`` tokens at a time,
    ``tokens`` = micro_batch x seq_len / cp, 0 = all of them) is a number of tokens a chunk
    holds. torchtitan 0.3.0's ``ChunkedLossWrapper`` (torchtitan/components/loss.py, the
    installed 0.3.0 release) splits the local hidden states ``[B, L, D]`` of one micro-batch
    along the sequence dimension only (``torch.split(t, [L // num_chunks] * num_chunks,
    dim=1)``) and asserts ``L % num_chunks == 0``: a chunk holds ``B x L / num_chunks`` tokens, so
    the priced chunk is ``num_chunks = B x L / loss_chunk_tokens``, which must be a whole number
    dividing ``L``. ``B`` is the micro-batch (``local_batch_size`` without a pipeline,
    ``pipeline_parallel_microbatch_size`` with one, whose schedule calls the loss per
    micro-batch) and ``L`` the cp rank's ``seq_len / cp`` positions (the loss runs on the local
    shard of the sequence under context parallelism).
    A chunk as large as the micro-batch was priced as the whole logits, which the unchunked
    ``CrossEntropyLoss`` runs. ``MTPLoss`` (torchtitan/models/deepseek_v3/mtp.py at 0.3.0) takes
    the main and every MTP module's full logits at once: unchunked only."""
    chunk_tokens = int(p.get("loss_chunk_tokens") or 0)
    seq_len, micro_batch = int(p["seq_len"]) // int(p.get("cp") or 1), int(p["micro_batch"])
    tokens = micro_batch * seq_len
    chunked = 0 < chunk_tokens < tokens
    if model.mtp_layers:
        if chunked:
            raise InputError("loss_chunk_tokens", f"{RELEASE}'s MTPLoss takes the whole micro-batch's logits (main "
                             f"and MTP heads), not chunks of {chunk_tokens} tokens",
                             "plan with loss_chunk_tokens 0")
        return {"kind": "mtp", "num_chunks": 1}
    if not chunked:
        return {"kind": "cross_entropy", "num_chunks": 1}
    num_chunks, left = divmod(tokens, chunk_tokens)
    if left or seq_len % num_chunks:
        fits = [tokens // n for n in range(2, seq_len + 1) if seq_len % n == 0][:4]
        raise InputError("loss_chunk_tokens", f"{RELEASE}'s ChunkedLossWrapper cuts each micro-batch's {seq_len} "
                         f"positions into equal chunks of micro_batch x seq_len / num_chunks tokens; "
                         f"{chunk_tokens} is not one ({micro_batch} x {seq_len} / {chunk_tokens} is not a whole "
                         f"divisor of {seq_len})",
                         "plan with loss_chunk_tokens " + ", ".join(map(str, fits)) + ", ... or 0")
    return {"kind": "chunked", "num_chunks": num_chunks}


def _model_parts(p: dict, model: ModelSpec, schedule: Schedule) -> list[list[str]]:
    counts = stage_layer_counts(model.num_layers, p["pp"], p["vpp"], model.mtp_layers,
                                p["first_stage_layers"], p["last_stage_layers"], schedule=schedule.value)
    parts, start = [], 0
    for n in counts:
        parts.append([f"layers.{i}" for i in range(start, start + n)])
        start += n
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "lm_head"]
    return parts


def settings(plan_row: Any) -> dict:
    """The values the export sets, by ``Trainer.Config`` section (for tests and notebooks)."""
    p = plan_fields(plan_row)
    s = _settings(p)
    return _values(p, s)


def _values(p: dict, s: dict) -> dict:
    dp, tp, pp, ep = p["dp"], p["tp"], p["pp"], p["ep"]
    zero = p["zero_stage"]
    training: dict[str, Any] = {
        # with a pipeline, a rank's whole share of the step enters the schedule, which splits it
        # into micro-batches; without one torchtitan accumulates over local batches
        "local_batch_size": p["global_batch"] // dp if pp > 1 else p["micro_batch"],
        "global_batch_size": p["global_batch"],
        "seq_len": p["seq_len"],
        "mixed_precision_param": "float32" if p["dtype"] in ("fp32", "tf32") else "bfloat16",
    }
    # as planned: torchtitan replays CUDA graphs by default where it can, which the plan may not price
    training["disable_cuda_graphs"] = not p["cuda_graphs"]
    par: dict[str, Any] = {
        # HSDP: FSDP2 shards over dp_shard and replicates over dp_replicate (zero_shard_group)
        "data_parallel_replicate_degree": dp if zero == 0 else dp // (p.get("zero_shard_group") or dp),
        "data_parallel_shard_degree": 1 if zero == 0 else (p.get("zero_shard_group") or dp),
        "tensor_parallel_degree": tp,
        "enable_sequence_parallel": bool(p["sequence_parallel"]),
        "pipeline_parallel_degree": pp,
        "context_parallel_degree": p["cp"],
        "expert_parallel_degree": ep,
    }
    if p["cp"] > 1:
        # rank i holds chunks i and 2cp-1-i (0.3.0's default, written as the plan's load balancing)
        par["context_parallel_load_balancer"] = "headtail"
    if zero >= 1:
        # a ZeRO-3 plan priced as gathering each stage once a step under the pipeline
        # (``zero3_once_per_step``) keeps the parameters after the forward, as torchtitan's
        # "default" policy does with pp > 1
        once = zero == 3 and pp > 1 and bool(p.get("zero3_once_per_step", False))
        par["fsdp_reshard_after_forward"] = "always" if zero == 3 and not once else "never"
    if pp > 1:
        par["pipeline_parallel_schedule"] = _SCHEDULES[Schedule(p["schedule"])]
        par["pipeline_parallel_microbatch_size"] = p["micro_batch"]
        par["module_fqns_per_model_part"] = s["parts"]
    overlap = async_tp(p)
    return {"training": training, "parallelism": par,
            "activation_checkpoint": {Recompute.FULL: "full", Recompute.SELECTIVE: "selective"}.get(
                Recompute(p["recompute"]), "none"),
            "async_tp": overlap, "float8": p["dtype"] == "fp8",
            "compile": _compile_components(p, overlap),
            "mtp_layers": s["model"].mtp_layers, "registry": dict(s["entry"]), "loss": dict(s["loss"]),
            "rope": rope_overrides(s["model"], s["entry"])}


def async_tp(p: dict) -> bool:
    """Whether the plan runs async TP (``compile.enable_async_tensor_parallel``): where it priced
    the TP overlap, which applies under sequence parallelism only
    (``simulator.layer_times.tp_overlap_applies``). Inductor's micro-pipeline TP pass, what
    torchtitan's switch turns on (``torchtitan/distributed/compile.py`` ``_maybe_enable_async_tp``:
    ``torch._inductor.config._micro_pipeline_tp = True``), fuses all-gather + matmul and matmul +
    reduce-scatter (``torch/_inductor/fx_passes/micro_pipeline_tp.py``); without
    ``enable_sequence_parallel`` the TP plan's collectives are all-reduces, so the switch would
    overlap nothing and only force the compiled blocks (``CompileConfig.__post_init__``) on a plan
    priced with eager ones."""
    return bool(tp_overlap_applies(p["tp_comm_overlap"], p["sequence_parallel"], p["tp"]))


def _compile_components(p: dict, async_tp: bool) -> list[str]:
    """The ``compile.components`` the plan was priced with: ``model`` unless it priced the
    blocks' element-wise ops as eager ops (``unfused_block_ops``, the ``torchtitan`` stack) and
    for async TP, which needs the compiled model; ``loss`` unless it priced the eager loss
    (``cross_entropy`` ``torch_eager``). A plan of the ``torchtitan-compile`` stack compiles both,
    one of ``torchtitan`` neither; one priced on another stack's fused kernels compiles both,
    torchtitan's way to them. Empty: compile off."""
    components = []
    if not p["unfused_block_ops"] or async_tp:
        components.append("model")
    if p["cross_entropy"] != "torch_eager":
        components.append("loss")
    return components


def _literal(value: Any, indent: str) -> str:
    if isinstance(value, list) and value and isinstance(value[0], list):
        inner = ",\n".join(f"{indent}    {v!r}" for v in value)
        return "[\n" + inner + f",\n{indent}]"
    return repr(value)


def emit(plan_row: Any, note: str = "") -> str:
    """The plan as a torchtitan 0.3.0 ``config_registry`` module (Python source); raises
    ``InputError`` (one line, naming the field) for a plan torchtitan cannot run as planned."""
    p = plan_fields(plan_row)
    v = _values(p, _settings(p))
    reg = v["registry"]
    module = f"torchtitan.models.{reg['module']}"
    compiled_model = "model" in v["compile"]
    converters = ("[Float8LinearConverter.Config(recipe_name=\"rowwise\", "
                  f"filter_fqns={float8_skipped(reg)!r}"
                  + (", model_compile_enabled=True" if compiled_model else "") + ")]") if v["float8"] else "None"
    registry_args = [repr(reg["flavor"])]
    if reg["module"] == "deepseek_v3":
        registry_args.append('attn_backend="flex"')
        if v["mtp_layers"]:
            registry_args.append(f"num_mtp_layers={v['mtp_layers']}")
    registry_args.append(f"converters={converters}")
    lines = [f'"""{summary(p)}',
             "",
             f"{RELEASE} job written by paraplan (paraplan.exports.torchtitan). Save as {MODULE_NAME}.py and run",
             f"    {torchrun_head(p)} -m torchtitan.train --module {MODULE_NAME} --config {MODULE_NAME}",
             f"on {gpus_text(p['n_gpus'])}. Data, tokenizer (hf_assets_path), optimizer and checkpoints come from",
             f"{reg['config']}(); change them below." + (f"\n{note}" if note else ""),
             '"""',
             f"from {module} import model_registry",
             f"from {module}.config_registry import {reg['config']}"]
    if v["activation_checkpoint"] == "full":
        lines.append("from torchtitan.distributed.activation_checkpoint import FullAC")
    elif v["activation_checkpoint"] == "selective":
        lines.append("from torchtitan.distributed.activation_checkpoint import SelectiveAC")
    if v["float8"]:
        lines.append("from torchtitan.components.quantization import Float8LinearConverter")
    lines.append("from torchtitan.models.common.config_utils import decoder_vocab_size")
    loss = v["loss"]
    if loss["kind"] == "mtp":
        lines.append("from torchtitan.models.deepseek_v3.mtp import MTPLoss")
    else:
        lines.append("from torchtitan.components.loss import "
                     + ("ChunkedLossWrapper, CrossEntropyLoss" if loss["kind"] == "chunked" else "CrossEntropyLoss"))
    lines += ["", "", f"def {MODULE_NAME}():",
              f"    config = {reg['config']}()",
              f"    config.model_spec = model_registry({', '.join(registry_args)})"]
    if v["rope"]:
        # the registry model's RoPE is Llama 3.1's; every layer holds its own RoPE config
        lines.append("    for layer in config.model_spec.model.layers:   # the rotary embedding the plan's model has")
        lines += [f"        layer.attention.rope.{k} = {value!r}" for k, value in v["rope"].items()]
    # the loss as priced: the registry function's loss is ChunkedLossWrapper with 8 chunks,
    # whatever the plan priced, so it is always replaced
    vocab = "global_vocab_size=decoder_vocab_size(config.model_spec)"
    lines.append("    config.loss = " + {
        "mtp": f"MTPLoss.Config({vocab})",
        "cross_entropy": f"CrossEntropyLoss.Config({vocab})",
        "chunked": f"ChunkedLossWrapper.Config(num_chunks={loss['num_chunks']}, "
                   f"loss_fn=CrossEntropyLoss.Config({vocab}))"}[loss["kind"]])
    for section in ("training", "parallelism"):
        for key, value in v[section].items():
            lines.append(f"    config.{section}.{key} = {_literal(value, '    ')}")
    lines.append("    config.activation_checkpoint = "
                 + {"full": "FullAC.Config()", "selective": "SelectiveAC.Config()"}.get(v["activation_checkpoint"], "None"))
    # as priced: torch.compile of the blocks and the loss (torchtitan's default is neither)
    lines.append(f"    config.compile.enable = {bool(v['compile'])}")
    if v["compile"]:
        lines.append(f"    config.compile.components = {v['compile']!r}")
    lines.append(f"    config.compile.enable_async_tensor_parallel = {v['async_tp']}")
    lines.append("    return config")
    return "\n".join(lines) + "\n"
