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
# # MoE what-if: expert parallelism inside a node or across nodes?
#
# **Question.** DeepSeek-V3 (671B parameters, 256 routed experts of which each token uses 8, plus
# one shared expert; 58 MoE layers) on 256 H100 (32 DGX nodes), 4M-token batch. Expert
# parallelism (EP) splits the experts over `ep` GPUs and moves every routed token twice per layer
# with all-to-all. Is EP better kept inside one NVLink node (`ep <= 8`) or spread across nodes
# (`ep` = 16..64, all-to-all over the 400 Gb/s NICs)? Does an 800 Gb/s network change the answer?
#
# **Method.** First we check that the simulator prices experts at all (a model that ignored
# them would give the same step time for every `ep`). Then one MoE layer's all-to-all time from
# the cost model, and the planner's best plan for each `ep` at 400 and 800 Gb/s.

# %%
# %matplotlib inline
import numpy as np
import pandas as pd
from IPython.display import display
from matplotlib.figure import Figure

from paraplan import api, exports, plots
from paraplan.notebook_helpers import fig_path, figures_dir, pct, say, show_tables

show_tables()
FIGURES = figures_dir()     # a folder: every figure is also saved there as PNG


# %%
MODEL, CLUSTER, GPUS, BATCH_TOKENS = "deepseek-v3", "dgx-h100", 256, 4 * 2**20
EPS = [1, 2, 4, 8, 16, 32, 64]
MOE_MODELLED = api.moe_is_modelled(MODEL, CLUSTER)
say("**The simulator models the expert layers** (step time depends on `ep`): the step-level study below applies."
    if MOE_MODELLED else
    "**The simulator does not model the expert layers yet**: `simulate` gives the same step time for every `ep`, "
    "so it prices an MoE layer as a dense one. Only the per-layer all-to-all cost below is real; "
    "the step-level study is skipped rather than filled with numbers the model does not produce.")

# %% [markdown]
# ## 1. One MoE layer's all-to-all, by EP degree
#
# `cost_models.moe`: each GPU routes its tokens (one 4096-token micro-batch) to 8 experts, the
# dispatch all-to-all sends them to the GPUs holding those experts and the combine all-to-all
# brings them back (forward; backward repeats both). Up to 8 GPUs the group is inside a node
# (NVLink); beyond, the share addressed to other nodes crosses the NICs. Two dispatchers:
# Megatron's `alltoall` sends one row per (token, expert) pair; DeepEP / HybridEP (Megatron's
# `flex`) send a token once to each node holding one of its experts and forward it over NVLink
# there (`moe.deduplicated_dispatch_volumes`).

# %%
from cost_models import moe
from hardware_specs.catalog import efficiency_for_cluster
from model_specs import load_model

spec = load_model(MODEL)
tokens = spec.seq_len                                 # one sequence per micro-batch, no TP/CP split
dispatch_bytes = moe.moe_dispatch_bytes(tokens, spec.moe.top_k, spec.hidden_size, 2)
DISPATCHERS = {"alltoall": False, "DeepEP": True}      # name -> sends a token once per GPU and node
a2a = []
for bw in (400, 800):
    cluster = api.what_if_cluster(CLUSTER, scaleout_gbit_per_s=bw)
    eff = efficiency_for_cluster(cluster)
    for dispatcher, dedup in DISPATCHERS.items():
        for ep in EPS[1:]:
            t = moe.moe_all_to_all_time_s(dispatch_bytes, ep, 1, cluster, eff, dedup=dedup,
                                          num_experts=spec.moe.num_experts, top_k=spec.moe.top_k)
            a2a.append({"scaleout_gbit_per_s": bw, "dispatcher": dispatcher, "ep": ep,
                        "inside_node": ep <= cluster.gpus_per_node, "fwd_ms": 1e3 * float(t["fwd_s"]),
                        "fwd_plus_bwd_ms": 1e3 * float(t["fwd_s"] + t["bwd_s"])})
a2a = pd.DataFrame(a2a)
# all-to-all time of one MoE layer, forward + backward, in ms
a2a.pivot(index="ep", columns=["dispatcher", "scaleout_gbit_per_s"], values="fwd_plus_bwd_ms").rename(
    columns=lambda b: f"{b} Gb/s fwd+bwd (ms)" if isinstance(b, (int, np.integer)) else b).rename_axis(
    columns=["dispatcher", "scale-out"])

# %%
fig = Figure(figsize=(8, 4.5), dpi=110)
ax = fig.add_subplot()
for (bw, dispatcher), g in a2a.groupby(["scaleout_gbit_per_s", "dispatcher"]):
    ax.plot(g.ep, g.fwd_plus_bwd_ms, "-o" if dispatcher == "alltoall" else "--s",
            label=f"{bw} Gb/s per GPU scale-out, {dispatcher} dispatcher")
ax.axvspan(1.5, 8.5, color="#55A868", alpha=0.08, label="EP group inside one node (NVLink)")
ax.set_xscale("log", base=2)
ax.set_xticks(EPS[1:], [str(e) for e in EPS[1:]])
ax.set_xlabel("expert-parallel degree (GPUs sharing the experts)")
ax.set_ylabel("all-to-all time, forward + backward (ms)")
ax.set_title(f"{spec.name}: dispatch + combine all-to-all of one MoE layer, one {tokens}-token micro-batch",
             fontsize=10)
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
if FIGURES:
    fig.savefig(fig_path("moe_all_to_all.png"), bbox_inches="tight")
fig

# %% [markdown]
# ## 2. The whole step: the best plan for each EP degree
#
# For each `ep`, the planner searches every other degree (and ZeRO, recomputation, micro-batch)
# and keeps the fastest plan that fits; the same at 800 Gb/s. Each EP rank holds whole experts
# (`etp=[1]`: the experts are not split over the tensor-parallel group; the default stack,
# Megatron-Core >= 0.10, would otherwise also search its default etp = tp). An `ep` with no plan that fits in
# HBM is listed as "does not fit", with what its smallest plan needs. The planner times only its top rows
# exactly (the rest carry an estimated pipeline makespan), so each `ep`'s candidates that could be
# its fastest are timed exactly (`planners.refine.refine_table`) and the winner is re-simulated. This is where the all-to-all is
# weighed against what a larger EP saves (fewer experts per GPU: less memory for weights,
# gradients and optimizer states).

# %%
import re

from hardware_specs.errors import InputError
from planners.refine import refine_table


def smallest_need(ep: int, bw: int) -> tuple[float, str]:
    """(GiB per GPU, configuration) of the smallest plan with this ``ep``, read from the planner's
    refusal (``the smallest of N configurations (...) needs X GiB``); (NaN, "") when it gives none."""
    try:
        api.plan(MODEL, CLUSTER, GPUS, BATCH_TOKENS, ep=[ep], etp=[1], scaleout_gbit_per_s=bw, max_plans=1)
    except InputError as err:
        need = re.search(r"configurations \(([^)]*)\) needs ([0-9.]+) GiB", err.message)
        return (float(need.group(2)), need.group(1)) if need else (float("nan"), "")
    return float("nan"), ""


if MOE_MODELLED:
    best_per_ep, no_plan, smallest_fit = [], [], {}
    for bw in (400, 800):
        # every fitting plan (max_plans=None): the best of each ep, however slow, is read below
        plans = api.plan(MODEL, CLUSTER, GPUS, BATCH_TOKENS, ep=EPS, etp=[1], scaleout_gbit_per_s=bw,
                         max_plans=None)
        cluster = api.what_if_cluster(CLUSTER, scaleout_gbit_per_s=bw)
        smallest_fit.update({(f"{bw} Gb/s", int(ep)): float(m) for ep, m in plans.groupby("ep").memory_gib.min().items()})
        # an ep with no fitting plan has no rows: say so (and what its smallest plan needs), not drop it
        for ep in sorted(set(EPS) - set(plans.ep.astype(int))):
            need, smallest = smallest_need(ep, bw)
            no_plan.append({"network": f"{bw} Gb/s", "ep": ep, "needs_gib": need, "smallest_config": smallest,
                            "config": f"does not fit (smallest plan needs {need:.1f} GiB)"})
        for ep, g in plans.groupby("ep"):
            # rows past the table's top carry an estimated pipeline time (pipeline_exact False):
            # time exactly every row of this ep that could be its fastest, then re-rank
            g = refine_table(spec, cluster, efficiency_for_cluster(cluster), g, software=plans.attrs.get("software"))
            top = g.sort_values("step_time_s", kind="stable").iloc[0]
            # the winner re-simulated: every number below is simulate's exact step
            row = api.simulate(MODEL, CLUSTER, scaleout_gbit_per_s=bw,
                               **{k: top[k].item() if hasattr(top[k], "item") else top[k]
                                  for k in api.CONFIG_FIELDS if k in top})
            best_per_ep.append(row.assign(network=f"{bw} Gb/s"))
    ep_study = pd.concat(best_per_ep, ignore_index=True)          # the EP degrees that fit
    no_fit = pd.DataFrame(no_plan, columns=["network", "ep", "needs_gib", "smallest_config", "config"])
    # every EP degree of EPS, those with no fitting plan included
    display(pd.concat([ep_study, no_fit], ignore_index=True).sort_values(["network", "ep"], kind="stable")[
        ["network", "ep", "config", "step_time_s", "tokens_per_s", "mfu_bf16_pct", "memory_gib",
         "ep_comm_exposed_s"]].reset_index(drop=True))
else:
    ep_study = None
    print("skipped: the simulator does not model expert layers")

# %%
if MOE_MODELLED:
    fig = Figure(figsize=(8, 4.5), dpi=110)
    ax = fig.add_subplot()
    for net, g in ep_study.groupby("network"):
        ax.plot(g.ep, g.tokens_per_s / 1e3, "-o", label=f"best plan per ep, {net} scale-out")
    for ep, g in no_fit.groupby("ep"):          # an EP degree with no plan that fits: marked, not blank
        ax.plot([ep], [0], "x", color="#C44E52", markersize=9, clip_on=False,
                label="no plan fits in HBM" if ep == no_fit.ep.min() else None)
        ax.annotate(f"does not fit\n(needs {g.needs_gib.min():.0f} GiB)", (ep, 0), xytext=(0, 10),
                    textcoords="offset points", ha="center", fontsize=7, color="#C44E52")
    ax.axvspan(0.8, 8.5, color="#55A868", alpha=0.08, label="EP inside one node")
    ax.set_xscale("log", base=2)
    ax.set_xticks(EPS, [str(e) for e in EPS])
    ax.set_xlabel("expert-parallel degree")
    ax.set_ylabel("throughput (thousand tokens/s)")
    ax.set_title(f"{spec.name} on {GPUS} H100, {BATCH_TOKENS // 2**20}M-token batch", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if FIGURES:
        fig.savefig(fig_path("moe_ep_throughput.png"), bbox_inches="tight")
    display(fig)

# %%
if MOE_MODELLED:
    at400 = ep_study[(ep_study.network == "400 Gb/s") & ep_study.ep.isin([8, 16, 64])].copy()
    at400["label"] = "ep " + at400.ep.astype(str) + ": " + at400.config
    display(plots.breakdown(at400, fig_path("moe_ep_breakdown.png"), label="label",
                            title="Best plans with EP inside (8) and across nodes (16, 64), 400 Gb/s"))

# %% [markdown]
# ## Conclusions

# %%
l = a2a[a2a.dispatcher == "alltoall"].set_index(["scaleout_gbit_per_s", "ep"]).fwd_plus_bwd_ms
d = a2a[a2a.dispatcher == "DeepEP"].set_index(["scaleout_gbit_per_s", "ep"]).fwd_plus_bwd_ms
same_inside = np.isclose(l[400, 8], l[800, 8], rtol=0.01)
text = f"""* **One layer's all-to-all:** at 400 Gb/s it takes {l[400, 8]:.1f} ms with EP inside a node (ep=8) and
  {l[400, 16]:.1f} ms once the group spans two nodes (ep=16), {l[400, 16] / l[400, 8]:.1f}x; at 800 Gb/s ep=16 takes
  {l[800, 16]:.1f} ms. Inside the node the NICs {"do not matter" if same_inside else "matter little"} ({l[400, 8]:.1f} vs
  {l[800, 8]:.1f} ms).
* **Dispatcher:** DeepEP's once-per-node dispatch cuts ep=16 at 400 Gb/s to {d[400, 16]:.1f} ms
  ({l[400, 16] / d[400, 16]:.1f}x less: per pair, {spec.moe.top_k / 2:g} of a token's {spec.moe.top_k} copies cross to the
  other node on average; deduplicated, at most one) and ep=64 to {d[400, 64]:.1f} ms ({l[400, 64] / d[400, 64]:.1f}x); inside the node ep=8 takes
  {d[400, 8]:.1f} ms. The plans below use the default stack's `alltoall` dispatcher."""
if MOE_MODELLED:
    s = ep_study.set_index(["network", "ep"])
    b400 = ep_study[ep_study.network == "400 Gb/s"].sort_values("tokens_per_s").iloc[-1]
    b800 = ep_study[ep_study.network == "800 Gb/s"].sort_values("tokens_per_s").iloc[-1]
    gap400 = pct(s.loc[("400 Gb/s", 16)].tokens_per_s, s.loc[("400 Gb/s", 8)].tokens_per_s)
    gap800 = pct(s.loc[("800 Gb/s", 16)].tokens_per_s, s.loc[("800 Gb/s", 8)].tokens_per_s)
    if np.sign(gap800) != np.sign(gap400):
        closes = f"reverses the order of ep=16 and ep=8 ({gap400:+.1f}% at 400 Gb/s)"
    elif abs(gap800) < abs(gap400):
        closes = f"narrows the gap between ep=16 and ep=8 (from {gap400:+.1f}% at 400 Gb/s)"
    else:
        closes = f"does not narrow the gap between ep=16 and ep=8 ({gap400:+.1f}% at 400 Gb/s)"
    # over every EP degree of EPS: those with no fitting plan first
    fit_eps = sorted(ep_study.ep.astype(int).unique())
    mem = ep_study.memory_gib
    small = {ep: smallest_fit[("400 Gb/s", ep)] for ep in fit_eps}
    mem_note = ""
    if len(no_fit):
        nofit_eps = sorted(no_fit.ep.astype(int).unique())
        at400 = no_fit[no_fit.network == "400 Gb/s"]
        needs = ", ".join(f"{r.needs_gib:.1f} GiB at ep={r.ep} ({r.smallest_config})" for r in at400.itertuples())
        mem_note = (f"EP decides what fits: with ep={', '.join(map(str, nofit_eps))} no plan fits at all (the smallest "
                    f"plan needs {needs} per GPU): fewer GPUs share the experts, so each holds more expert weights, "
                    f"gradients and optimizer states, and no other degree of the search, ZeRO-3 included, brings "
                    f"them under the budget. ")
    mem_note += (f"With ep={fit_eps[0]}..{fit_eps[-1]} the smallest fitting plan needs {small[fit_eps[0]]:.1f} GiB "
                 f"(ep={fit_eps[0]}) down to {small[fit_eps[-1]]:.1f} GiB (ep={fit_eps[-1]}), while the fastest plan of "
                 f"each EP degree needs {mem.min():.0f}-{mem.max():.0f} GiB")
    per_node = api.what_if_cluster(CLUSTER).gpus_per_node

    def placement(b):
        ep = int(b.ep)
        return (f"keeps EP inside one node (ep={ep})" if ep <= per_node else
                f"spreads EP across nodes (ep={ep}, {ep // per_node} nodes per EP group)")

    text += f"""
* **Whole step:** the best plan at 400 Gb/s uses ep={int(b400.ep)} (`{b400.config}`, {b400.tokens_per_s:,.0f} tokens/s,
  MFU {b400.mfu_bf16_pct:.1f}% of the bf16 peak). The best plan with ep=16 (two nodes per EP group) is {gap400:+.1f}% against the best ep=8
  plan, and ep=64 {pct(s.loc[("400 Gb/s", 64)].tokens_per_s, s.loc[("400 Gb/s", 8)].tokens_per_s):+.1f}%; exposed all-to-all
  grows from {s.loc[("400 Gb/s", 8)].ep_comm_exposed_s:.2f} s (ep=8) to {s.loc[("400 Gb/s", 16)].ep_comm_exposed_s:.2f} s (ep=16) per step.
* **800 Gb/s {closes}:** ep=16 is then {gap800:+.1f}% against ep=8; the best plan uses ep={int(b800.ep)}
  ({b800.tokens_per_s:,.0f} tokens/s).
* **Memory:** {mem_note}.
* **Placement, by network:** at 400 Gb/s the fastest plan {placement(b400)}; at 800 Gb/s it {placement(b800)}."""
else:
    text += """
* **Whole step:** not available -- the simulator does not price expert layers yet, so it cannot say whether the
  all-to-all above outweighs what a larger EP saves in memory."""
say(text)
