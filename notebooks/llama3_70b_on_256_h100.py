# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # How to train Llama-3-70B on 256 H100 GPUs, and why the winner wins
#
# **Question.** We have 256 H100 SXM GPUs (32 DGX H100 nodes: 8 GPUs on NVLink 4 per node, one
# 400 Gb/s InfiniBand NIC per GPU) and want to pre-train Llama-3-70B (80 layers, hidden 8192,
# GQA with 8 KV heads, 8192-token sequences) with a 4M-token global batch (512 sequences) in
# bf16. Which data / tensor / pipeline / context degrees, micro-batch, ZeRO stage, recomputation
# and schedule should we run, and why?
#
# **Method.** `api.plan` enumerates every valid configuration, scores each with the simulator's
# step model and keeps those that fit in the H100's 80 GiB less the planner's default headroom
# (`simulator.headroom`: 5% of HBM, 4 GiB, so 76.0 GiB a GPU; printed below). We then put the winner next to the plans people
# usually start from and read the step-time breakdown to see *where* the winner saves time, look
# at the whole throughput/memory space, and emit the launch configs.
#
# All numbers are predictions of paraplan's analytical model (see the README for its measured
# error on published runs); they are computed below, and the conclusions are written from them.

# %%
# %matplotlib inline
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from paraplan import api, exports, plots
from paraplan.notebook_helpers import fig_path, figures_dir, pct, say, show_tables

show_tables()
FIGURES = figures_dir()     # a folder: every figure is also saved there as PNG


# %% [markdown]
# ## 1. Search every plan

# %%
MODEL, CLUSTER, GPUS = "llama3-70b", "dgx-h100", 256
BATCH_TOKENS = 4 * 2**20            # 512 sequences of 8192 tokens

# every fitting plan (a search keeps the 20,000 fastest and both frontiers unless told otherwise)
plans = api.plan(MODEL, CLUSTER, GPUS, global_batch_tokens=BATCH_TOKENS, max_plans=None)
# the top plan re-simulated for every column (what api.best_plan does, without searching again)
winner = api.simulate(MODEL, CLUSTER, **{k: plans.iloc[0][k] for k in api.CONFIG_FIELDS if k in plans.columns})
w = winner.iloc[0]
from simulator import headroom

hbm_gib = api.what_if_cluster(CLUSTER).gpu.hbm_bytes / 2**30
kept_gib = hbm_gib - headroom.headroom_gib(hbm_gib * 2**30)
print(f"{len(plans):,} plans fit in {kept_gib:.1f} GiB a GPU ({hbm_gib:.0f} GiB HBM less "
      f"{hbm_gib - kept_gib:.1f} GiB default headroom)")
plans.head(10)[["config", "schedule", "step_time_s", "tokens_per_s", "mfu_bf16_pct", "memory_gib"]]

# %%
print(plans.attrs["explain"])      # the planner's own account: pruning, winner vs runner-up

# %% [markdown]
# ## 2. The winner against the usual starting points
#
# * **Megatron classic**: a typical Megatron-LM starting point for a 70B model -- TP 8 inside
#   the node, PP 4 with 5 virtual stages, sequence parallelism, selective recomputation,
#   distributed optimizer (ZeRO-1).
# * **FSDP**: ZeRO-3 over all 256 GPUs, no model parallelism, full recomputation.
# * The planner's best plan under one restriction each: **TP = 8**, **no pipeline (PP = 1)**,
#   **ZeRO <= 1** (what DeepSpeed's pipeline engine and Megatron's distributed optimizer run).
#   Each is the fastest row of section 1's table of every fitting plan that meets the restriction
#   (its candidates timed exactly, the winner re-simulated): what `api.best_plan` with the restriction
#   returns, without searching again.

# %%
from hardware_specs.catalog import efficiency_for_cluster
from model_specs import load_model
from planners.refine import refine_table

common = dict(gpus=GPUS, global_batch_tokens=BATCH_TOKENS)
h100 = api.what_if_cluster(CLUSTER)


def best_where(restricted):
    """The fastest plan under a restriction, read from ``plans`` (every fitting plan: the plans
    a restricted search ranks are its rows that meet the restriction) instead of searching again:
    the rows that could be the fastest timed exactly (``refine_table``: past its top the table
    carries an estimated pipeline time), the winner re-simulated, as ``api.best_plan`` does."""
    g = refine_table(load_model(MODEL), h100, efficiency_for_cluster(h100), plans[restricted],
                     software=plans.attrs.get("software"))
    top = g.sort_values("step_time_s", kind="stable").iloc[0]
    return api.simulate(MODEL, CLUSTER, **{k: top[k] for k in api.CONFIG_FIELDS if k in plans.columns})


candidates = {
    "winner": winner,
    "best with TP=8": best_where(plans.tp == 8),
    "best without PP": best_where(plans.pp == 1),
    "best with ZeRO<=1": best_where(plans.zero_stage.isin([0, 1])),
    "Megatron classic": api.simulate(MODEL, CLUSTER, tp=8, pp=4, vpp=5, micro_batch=1, zero_stage=1,
                                     recompute="selective", sequence_parallel=True, **common),
    "FSDP (ZeRO-3)": api.simulate(MODEL, CLUSTER, tp=1, pp=1, micro_batch=1, zero_stage=3,
                                  recompute="full", **common),
}
cmp = pd.concat([df.assign(plan=name) for name, df in candidates.items()], ignore_index=True)
cmp["label"] = cmp["plan"] + ": " + cmp["config"]
cmp[["plan", "config", "step_time_s", "tokens_per_s", "mfu_bf16_pct", "memory_gib", "fits"]]

# %%
plots.breakdown(cmp, fig_path("llama70b_breakdown.png"), label="label",
                title=f"Llama-3-70B on {GPUS} H100, {BATCH_TOKENS // 2**20}M-token batch: step time by part")

# %%
plots.memory(cmp, fig_path("llama70b_memory.png"), label="plan",
             title="Peak memory per GPU (the pipeline stage with the most) of the same plans")

# %%
from simulator.report import TIME_PARTS

def why(a, b, n=2):
    """The parts where plan a saves most against plan b (seconds per step)."""
    diff = {p: b[p] - a[p] for p in TIME_PARTS}
    top = sorted(diff.items(), key=lambda kv: -kv[1])[:n]
    return " and ".join(f"{d:.2f} s of {plots.TIME_LABELS[p]}" for p, d in top if d > 0.005) or "nothing large"

lines = []
for name in candidates:
    if name == "winner":
        continue
    r = cmp[cmp.plan == name].iloc[0]
    if r.config == w.config:        # the restriction leaves the winner as it is
        lines.append(f"* **{name}** is the winner itself: the restriction costs nothing here.")
        continue
    lines.append(f"* vs **{name}** (`{r.config}`): that plan's step is {pct(r.step_time_s, w.step_time_s):.1f}% "
                 f"longer; the winner saves {why(w, r)}.")
say(f"""**The winner** is `{w.config}` ({w.schedule} schedule): {w.step_time_s:.2f} s per step,
{w.tokens_per_s:,.0f} tokens/s, MFU {w.mfu_bf16_pct:.1f}% of the bf16 peak, {w.memory_gib:.1f} of {w.hbm_gib:.0f} GiB per GPU.
Compute is {100 * w.compute_s / w.step_time_s:.0f}% of its step; exposed TP communication
{w.tp_comm_exposed_s:.2f} s, pipeline bubble {w.pipeline_bubble_s:.2f} s, recomputation {w.recompute_s:.2f} s.

""" + "\n".join(lines))

# %% [markdown]
# ## 3. The whole space: throughput against memory
#
# Every fitting plan is a point; the red line is the Pareto frontier (no other plan is both
# faster and smaller). Plans far left of the HBM line leave room for a longer sequence or a
# larger micro-batch; the frontier shows what each GiB of memory buys.

# %%
plots.pareto(plans, fig_path("llama70b_pareto.png"), annotate=5)

# %%
front = plans[plots.pareto_mask(plans)].sort_values("memory_gib")
small = front.iloc[0]
half = front[front.memory_gib <= 0.5 * w.hbm_gib].sort_values("tokens_per_s").iloc[-1] \
    if (front.memory_gib <= 0.5 * w.hbm_gib).any() else small
say(f"""The frontier has {len(front)} plans. The smallest fitting plan, `{small.config}`, needs
{small.memory_gib:.1f} GiB and runs at {small.tokens_per_s:,.0f} tokens/s ({pct(small.tokens_per_s, w.tokens_per_s):+.1f}%
vs the winner). The fastest plan within half the HBM ({0.5 * w.hbm_gib:.0f} GiB), `{half.config}`, reaches
{half.tokens_per_s:,.0f} tokens/s ({pct(half.tokens_per_s, w.tokens_per_s):+.1f}%): the winner buys its last
{pct(w.tokens_per_s, half.tokens_per_s):.1f}% of throughput with {w.memory_gib - half.memory_gib:.1f} GiB more per GPU.""")

# %% [markdown]
# ## 4. One layer's operations on the H100 roofline
#
# Each point is one kernel of one transformer layer at the winner's tensor-parallel degree (one
# micro-batch), placed at its arithmetic intensity and the throughput the simulator assumes it
# reaches. The solid line is the datasheet roofline, the dashed one what the fitted efficiency
# model allows.

# %%
ops = api.layer_ops(MODEL, CLUSTER, tp=int(w.tp), micro_batch=int(w.micro_batch), cp=int(w.cp))
plots.roofline(ops, fig_path("llama70b_roofline.png"))

# %%
ridge = ops.peak_tflop_per_s.iloc[0] * 1e12 / (ops.hbm_tb_per_s.iloc[0] * 1e12)
mem_bound = ops[ops.intensity_flop_per_byte < ridge]
gemms = ops[ops.op.str.contains("projection")]
forward = ops[(ops["pass"] == "forward") & ~ops.op.str.startswith("lm head")]
say(f"""At tp={int(w.tp)} the projections run at {gemms.achieved_tflop_per_s.min():.0f}-{gemms.achieved_tflop_per_s.max():.0f}
TFLOP/s ({100 * gemms.achieved_tflop_per_s.min() / ops.peak_tflop_per_s.iloc[0]:.0f}-{100 * gemms.achieved_tflop_per_s.max() / ops.peak_tflop_per_s.iloc[0]:.0f}% of the
{ops.peak_tflop_per_s.iloc[0]:.0f} TFLOP/s peak), with intensities of {gemms.intensity_flop_per_byte.min():.0f}-{gemms.intensity_flop_per_byte.max():.0f} FLOP/byte,
{f"all right of the ridge at {ridge:.0f} FLOP/byte (compute-bound)" if gemms.intensity_flop_per_byte.min() > ridge
   else f"some left of the ridge at {ridge:.0f} FLOP/byte (memory-bound)"}. Memory-bound: {", ".join(dict.fromkeys(mem_bound.op)) or "none"}, taking
{100 * mem_bound[mem_bound["pass"] == "forward"].time_s.sum() / forward.time_s.sum():.1f}% of one layer's forward time;
the attention core reaches {ops[ops.op.str.startswith("attention core")].achieved_tflop_per_s.iloc[0]:.0f} TFLOP/s,
the fitted flash-attention efficiency.""")

# %% [markdown]
# ## 5. Launch it
#
# The plan as Megatron-LM environment and flags, a torchtitan 0.3.0 config module and a
# DeepSpeed 0.19.8 JSON (`paraplan plan ... --emit megatron|torchtitan|deepspeed` writes the
# same for the best plan each framework can run). A framework that cannot run the winner as
# planned says why; we then take the best plan that framework *can* run (`api.best_plan_for`)
# and emit that, with its cost. A framework paraplan has a stack profile of (torchtitan) is
# planned again on it: its overlap, kernels and recomputation are not Megatron-Core's, so the
# winner above is not its plan, and its predicted step is not the one above.

# %%
from hardware_specs.errors import InputError

launch = {}
for framework in exports.FRAMEWORKS:
    own_stack = exports.default_stack(framework) != plans.attrs["stack"]
    try:
        if own_stack:
            raise InputError("stack", f"planned on the {exports.default_stack(framework)} stack profile")
        text, row, note = exports.emit(w, framework), w, "runs the winner as planned"
    except InputError as exc:
        row = api.best_plan_for(framework, MODEL, CLUSTER, GPUS, BATCH_TOKENS,
                                plans=None if own_stack else plans).iloc[0]
        text = exports.emit(row, framework)
        reason = exc.message if own_stack else f"cannot run the winner ({exc.message})"
        note = (f"{reason}; its best plan is `{row.config}`, {row.step_time_s:.2f} s a step, "
                f"{pct(row.tokens_per_s, w.tokens_per_s):+.1f}% tokens/s against the Megatron-Core winner")
    launch[framework] = (text, row, note)
    print(f"===== {framework}: {note}")
    print(text)

# %% [markdown]
# ## Conclusions

# %%
tp8 = cmp[cmp.plan == "best with TP=8"].iloc[0]
classic = cmp[cmp.plan == "Megatron classic"].iloc[0]
fsdp = cmp[cmp.plan == "FSDP (ZeRO-3)"].iloc[0]
structure = [f"ZeRO-{int(w.zero_stage)}"] + [f"{k}={int(w[k])}" for k in ("pp", "cp") if w[k] > 1]
if w.zero_shard_group > 0:
    structure.append(f"ZeRO sharded within groups of {int(w.zero_shard_group)} GPUs (HSDP)")
if w.offload_activation_layers > 0:
    structure.append(f"the activations of {int(w.offload_activation_layers)} layers per chunk offloaded to host memory "
                     f"({w.offload_exposed_s:.2f} s of copies exposed per step)")
if w.recompute == "none":
    recompute = "without recomputation"
elif w.recompute == "full" and w.recompute_num_layers > 0:
    recompute = f"recomputing {int(w.recompute_num_layers)} layers per chunk in full"
else:
    recompute = f"with {w.recompute} recomputation"
memory_note = (f"**Memory is the price:** the winner fills {100 * w.memory_gib / w.hbm_gib:.0f}% of HBM ({w.memory_gib:.1f} GiB) "
               f"against {classic.memory_gib:.1f} GiB for Megatron classic; a run that needs headroom (longer sequences, "
               f"fragmentation) should take a plan from the frontier of section 3."
               if w.memory_gib > classic.memory_gib else
               f"**Memory:** the winner needs {w.memory_gib:.1f} GiB, no more than Megatron classic ({classic.memory_gib:.1f} GiB).")
say(f"""* **Run `{w.config}`** ({w.schedule} schedule): {w.tokens_per_s:,.0f} tokens/s, MFU {w.mfu_bf16_pct:.1f}% of the bf16 peak,
  {w.memory_gib:.1f} GiB per GPU; a {BATCH_TOKENS // 2**20}M-token step takes {w.step_time_s:.2f} s.
* **Why it wins:** against Megatron classic it saves {why(w, classic)}; against FSDP {why(w, fsdp)}; against the
  best TP=8 plan {why(w, tp8)}. Its exposed TP time is {w.tp_comm_exposed_s:.2f} s at tp={int(w.tp)}, against
  {tp8.tp_comm_exposed_s:.2f} s at tp=8. It stays within HBM using {", ".join(structure)}, {recompute}.
* **Against the starting points:** {pct(w.tokens_per_s, classic.tokens_per_s):+.1f}% tokens/s vs Megatron classic,
  {pct(w.tokens_per_s, fsdp.tokens_per_s):+.1f}% vs FSDP.
* {memory_note}
* **Launch:** """ + "; ".join(f"{fw} {note}" for fw, (_, _, note) in launch.items()) + ".")
