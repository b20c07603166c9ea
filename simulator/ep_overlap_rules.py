"""Which plans can run ``ep_comm_overlap``: Megatron-Core's combined 1F1B refuses the rest.

paraplan prices ``ep_comm_overlap`` as Megatron-Core's combined 1F1B
(``--overlap-moe-expert-parallel-comm``, ``step_model.ep_unpaired_passes``); the other stacks'
exports refuse the switch (torchtitan, DeepSpeed), so these are the rules of the one framework
that runs what is priced. ``TransformerConfig.__post_init__`` (NVIDIA/Megatron-LM
megatron/core/transformer/transformer_config.py, the ``if self.overlap_moe_expert_parallel_comm:``
block; since core_v0.14.0, the ``moe`` recompute module since core_v0.17.0) asserts, with expert
parallelism (ep > 1, where the switch acts and the export writes it):

- pp > 1 needs ``virtual_pipeline_model_parallel_size`` (an interleaved schedule, vpp >= 2);
- ``recompute_granularity != 'full'``, ``recompute_method`` and ``recompute_num_layers`` None
  (a full recomputation of any count: paraplan's export writes method and count for each);
- ``'moe' not in recompute_modules`` (the module recomputing the whole MoE block);
- a bf16 or fp16 model (fp8 and mxfp8 run on a bf16 model; fp32 and tf32 do not);
- ``mtp_num_layers`` None, 0 or 1.

Every rule is applied to every release, though two are release-specific: the ``moe`` recompute
module's assert exists from core_v0.17.0, and core_v0.16.0 / core_v0.17.0 also refuse one MTP
layer at pp 1 (``mtp_num_layers == 1`` needs pp > 1 there), which these rules let through (the
stack files do not record which Megatron-Core a Bridge release runs).

The zero-bubble schedules and DualPipe (``stack_support.ZERO_BUBBLE_SCHEDULES``) order their own
passes, and Megatron-LM runs none of them, so these rules leave them alone: DualPipe overlaps a
forward chunk's all-to-alls with a backward chunk's itself (DeepSeek-V3 report, section 3.2.1),
priced by its own steps, and the zero-bubble schedules pair no forward with a backward, so the
switch hides nothing there (``step_model.ep_unpaired_passes``). Its other asserts (the alltoall / flex dispatcher, no ``moe_shared_expert_overlap``) hold for
every plan paraplan writes. ``check_config`` refuses a plan that breaks a rule and the planner
does not search one (``planners.search_space``, rule ``ep_overlap``): one test, on scalars or
numpy arrays. The Megatron-LM export checks its written flags against the same asserts in its
own table (``paraplan/exports/megatron_flags.json`` rules ``ep_a2a_overlap``,
``ep_a2a_overlap_keeps_moe``).
"""
from __future__ import annotations

import numpy as np

from hardware_specs.errors import InputError
from simulator.config_batch import RECOMPUTE_CODES, SCHEDULE_CODES
from simulator.parallel_config import Recompute, Schedule
from simulator.stack_support import ZERO_BUBBLE_SCHEDULES

#: dtypes whose model is not bf16 or fp16 (Megatron-LM ``--bf16`` / ``--fp16`` unset)
FULL_PRECISION_DTYPES = ("fp32", "tf32")

#: rule -> (what breaks it, how to avoid it), in the order ``check_ep_comm_overlap`` reports them
RULES = {
    "pipeline": ("Megatron-Core's combined 1F1B needs an interleaved schedule with pp > 1 "
                 "(virtual_pipeline_model_parallel_size)", "use vpp >= 2 with pp > 1, or pp 1"),
    "full_recompute": ("Megatron-Core's combined 1F1B refuses full recomputation (recompute_granularity full, "
                       "recompute_method, recompute_num_layers)", "recompute none or selective"),
    "moe_recompute": ("Megatron-Core's combined 1F1B refuses the moe recompute module",
                      "drop moe from recompute_modules"),
    "dtype": ("Megatron-Core's combined 1F1B needs a bf16 or fp16 model", "use bf16, fp16 or fp8"),
    "mtp": ("Megatron-Core's combined 1F1B takes at most one multi-token-prediction layer", "use a model with "
            "at most one MTP layer"),
}


def ep_overlap_breaks(*, ep, pp, vpp, own_schedule, full_recompute, moe_recompute, full_precision,
                      mtp_layers) -> dict:
    """Rule name (``RULES``) -> whether a plan with ``ep_comm_overlap`` on breaks it: bools, or
    numpy masks broadcast from array arguments. A plan with ep 1 breaks none (the switch has
    nothing to overlap and the export does not write it), nor one whose schedule orders its own
    passes (``own_schedule``: a zero-bubble schedule or DualPipe). ``full_recompute``: the plan recomputes
    in full (any layer count); ``moe_recompute``: its recompute modules include ``moe``;
    ``full_precision``: its dtype is one of ``FULL_PRECISION_DTYPES``."""
    ep_on = (np.asarray(ep) > 1) & ~np.asarray(own_schedule, dtype=bool)
    return {"pipeline": ep_on & (np.asarray(pp) > 1) & (np.asarray(vpp) < 2),
            "full_recompute": ep_on & np.asarray(full_recompute, dtype=bool),
            "moe_recompute": ep_on & np.asarray(moe_recompute, dtype=bool),
            "dtype": ep_on & np.asarray(full_precision, dtype=bool),
            "mtp": ep_on & (np.asarray(mtp_layers) > 1)}


def ep_overlap_runnable(**plan_fields):
    """Whether a plan (or each row of array ``plan_fields``, see ``ep_overlap_breaks``) with
    ``ep_comm_overlap`` on breaks no rule."""
    breaks = ep_overlap_breaks(**plan_fields)
    out = np.zeros(np.broadcast_shapes(*(np.shape(b) for b in breaks.values())), dtype=bool)
    for b in breaks.values():
        out = out | b
    return ~out


def check_ep_comm_overlap(config, mtp_layers: int) -> None:
    """Raise ``InputError`` (field ``ep_comm_overlap``) if ``config`` (a ``ParallelConfig``) runs
    ``ep_comm_overlap`` in a combination Megatron-Core refuses (``check_plan_fields``).
    ``mtp_layers``: the model's multi-token-prediction layers."""
    c = config
    check_plan_fields(ep_comm_overlap=c.ep_comm_overlap, ep=c.ep, pp=c.pp, vpp=c.vpp, schedule=c.schedule.value,
                      recompute=c.recompute.value,
                      recompute_modules=c.recompute_modules, dtype=c.dtype, mtp_layers=mtp_layers)


def check_plan_fields(*, ep_comm_overlap: bool, ep: int, pp: int, vpp: int, schedule: str, recompute: str,
                      recompute_modules, dtype: str, mtp_layers: int) -> None:
    """Raise ``InputError`` (field ``ep_comm_overlap``) naming the first rule (``RULES``) a plan
    with these fields breaks and how to avoid it; nothing when the switch is off. ``schedule``:
    the pipeline schedule's name (``Schedule`` value); ``recompute``:
    ``none``, ``selective`` or ``full``; ``recompute_modules``: names (``RECOMPUTE_MODULES``)."""
    if not ep_comm_overlap:
        return
    modules = tuple(recompute_modules or ())
    breaks = ep_overlap_breaks(ep=ep, pp=pp, vpp=vpp, own_schedule=schedule in ZERO_BUBBLE_SCHEDULES,
                               full_recompute=recompute == "full",
                               moe_recompute="moe" in modules, full_precision=dtype in FULL_PRECISION_DTYPES,
                               mtp_layers=mtp_layers)
    for name, (what, fix) in RULES.items():
        if bool(breaks[name]):
            said = {"pipeline": f"pp={pp} vpp={vpp}", "full_recompute": "recompute full",
                    "moe_recompute": "recompute_modules " + ",".join(modules),
                    "dtype": f"dtype {dtype}", "mtp": f"{mtp_layers} MTP layers"}[name]
            raise InputError("ep_comm_overlap", f"{said} with ep={ep}: {what}", f"{fix}, or --no-ep-comm-overlap")


def batch_runnable(batch, dtype: str, mtp_layers: int) -> np.ndarray:
    """Per row of ``batch`` (a ``ConfigBatch`` of one dtype), whether it breaks no rule with its
    own ``ep_comm_overlap`` (a row with the switch off always runs): the planner's per-dtype
    check, where dtypes of one search differ in the switch (a stack's recipes set it per dtype)
    or in precision, so the search's own rule (``planners.search_space``, over all dtypes)
    cannot drop the row."""
    overlap = np.asarray(batch.ep_comm_overlap, dtype=bool)
    if not overlap.any():
        return ~overlap
    own = np.isin(np.asarray(batch.schedule), [SCHEDULE_CODES[Schedule(s)] for s in ZERO_BUBBLE_SCHEDULES])
    ok = ep_overlap_runnable(ep=np.asarray(batch.ep), pp=np.asarray(batch.pp), vpp=np.asarray(batch.vpp),
                             own_schedule=own,
                             full_recompute=np.asarray(batch.recompute) == RECOMPUTE_CODES[Recompute.FULL],
                             moe_recompute=False, full_precision=dtype in FULL_PRECISION_DTYPES,
                             mtp_layers=mtp_layers)
    return ~overlap | ok
