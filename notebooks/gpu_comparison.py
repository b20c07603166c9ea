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
# # H100 vs H200 vs B200 vs MI300X: throughput and tokens per dollar
#
# **Question.** For the same model and the same budget, which accelerator trains fastest, and
# which gives the most tokens per dollar?
#
# **Method.** Llama-3-70B, 4M-token batch, bf16. Each accelerator sits in its usual 8-GPU
# node (DGX H100, HGX H200, DGX B200, MI300X platform), all with one 400 Gb/s NIC per GPU, and
# each gets the planner's best plan for it (a fair comparison re-plans per chip: more HBM allows
# less model parallelism). Part 1 compares 256 GPUs of each; part 2 spends the same dollars per
# hour on each. Prices are inputs: **edit `PRICE_USD_PER_GPU_HOUR` below** with your quotes.
#
# **Caveat.** H100 (Hopper) and B200 (Blackwell) use efficiency models fitted on published runs;
# the validation file has no MI300X (CDNA3) run, so MI300X runs on an *unfitted prior* efficiency
# model (`hardware_specs/efficiency/cdna3.yaml`: H100's fitted factors, the fitter's rule for a
# generation no run measures), on MI300X's datasheet rates times the 0.64 of them its GEMMs sustain
# relative to H100's in the same matmul benchmark (`hardware_specs/gpus/mi300x.yaml`: 51.4% of
# its datasheet against H100's 80.3%): read its numbers as a sketch, not a validated prediction.

# %%
# %matplotlib inline
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from paraplan import api, exports, plots
from paraplan.notebook_helpers import fig_path, figures_dir, pct, say, show_tables

show_tables()
FIGURES = figures_dir()     # a folder: every figure is also saved there as PNG


# %%
# ======================= EDIT ME: $ per GPU-hour (your quotes) =======================
# Placeholders for illustration only, not quotes: rental prices vary by provider, term and volume.
PRICE_USD_PER_GPU_HOUR = {
    "H100": 2.50,
    "H200": 3.20,
    "B200": 4.80,
    "MI300X": 2.30,
}
# ======================================================================================

SYSTEMS = {"H100": "dgx-h100", "H200": "hgx-h200", "B200": "dgx-b200", "MI300X": "mi300x-node"}
MODEL, GPUS, BATCH_TOKENS = "llama3-70b", 256, 4 * 2**20
_searched = {}


def best_plan(cluster, gpus):
    """``api.best_plan`` of the model and batch on ``gpus`` GPUs of ``cluster``, searched once per
    request (part 2 asks again for a count part 1 already searched). Keyed on everything the
    search reads, so editing MODEL or BATCH_TOKENS and re-running a cell searches again."""
    key = (MODEL, cluster, gpus, BATCH_TOKENS)
    if key not in _searched:
        _searched[key] = api.best_plan(MODEL, cluster, gpus, BATCH_TOKENS)
    return _searched[key]

# %% [markdown]
# ## 1. Same GPU count: 256 of each

# %%
rows = []
for name, cluster in SYSTEMS.items():
    best = best_plan(cluster, GPUS).assign(accelerator=name)
    rows.append(best)
same_n = pd.concat(rows, ignore_index=True)
same_n["usd_per_hour"] = same_n.n_gpus * same_n.accelerator.map(PRICE_USD_PER_GPU_HOUR)
same_n["tokens_per_usd"] = same_n.tokens_per_s * 3600 / same_n.usd_per_hour
same_n["usd_per_billion_tokens"] = 1e9 / same_n.tokens_per_usd
same_n["label"] = same_n.accelerator + ": " + same_n.config
# an accelerator whose efficiency model is an unfitted prior is marked wherever it is named
PRIORS = sorted(same_n.loc[~same_n.efficiency_fitted, "accelerator"])
same_n["shown_as"] = same_n.accelerator + np.where(same_n.efficiency_fitted, "", " *")
same_n[["accelerator", "efficiency_fitted", "config", "step_time_s", "tokens_per_s", "mfu_bf16_pct", "memory_gib", "hbm_gib",
        "usd_per_hour", "tokens_per_usd", "usd_per_billion_tokens"]]

# %%
fig = Figure(figsize=(11, 4.2), dpi=110)
ax1, ax2 = fig.subplots(1, 2)
colors = ["#4C72B0", "#8172B3", "#55A868", "#C44E52"]
ax1.bar(same_n.shown_as, same_n.tokens_per_s / 1e3, color=colors)
ax1.set_ylabel("throughput (thousand tokens/s)")
ax1.set_title(f"{GPUS} GPUs each, best plan per GPU", fontsize=10)
for i, r in same_n.iterrows():
    ax1.text(i, r.tokens_per_s / 1e3, f"MFU {r.mfu_bf16_pct:.0f}%", ha="center", va="bottom", fontsize=8)
ax2.bar(same_n.shown_as, same_n.tokens_per_usd / 1e6, color=colors)
ax2.set_ylabel("million tokens per dollar")
ax2.set_title("tokens per dollar at the prices above", fontsize=10)
for i, r in same_n.iterrows():
    ax2.text(i, r.tokens_per_usd / 1e6, f"${PRICE_USD_PER_GPU_HOUR[r.accelerator]:.2f}/GPU-h", ha="center",
             va="bottom", fontsize=8)
for a in (ax1, ax2):
    a.set_xlabel("accelerator")
    a.grid(axis="y", alpha=0.3)
    a.set_axisbelow(True)
fig.suptitle(f"Llama-3-70B, {BATCH_TOKENS // 2**20}M-token batch, bf16"
             + (f"  (* unfitted prior efficiency model: {', '.join(PRIORS)})" if PRIORS else ""), fontsize=11)
fig.tight_layout()
if FIGURES:
    fig.savefig(fig_path("gpus_throughput_and_cost.png"), bbox_inches="tight")
fig

# %%
plots.breakdown(same_n, fig_path("gpus_breakdown.png"), label="label",
                title=f"Where each accelerator's step goes ({GPUS} GPUs, best plan each)")

# %%
fig = plots.memory(same_n, label="accelerator",
                   title="Memory per GPU of each best plan against its own HBM (dashed)")
fig.axes[0].set_xlabel(f"accelerator (best plan on {GPUS} GPUs)")
if FIGURES:
    fig.savefig(fig_path("gpus_memory.png"), dpi=fig.dpi, bbox_inches="tight")
fig

# %% [markdown]
# **Break-even prices.** The ranking by tokens per dollar depends on the prices; the price at which
# each accelerator would give exactly the H100's tokens per dollar does not (it only scales with
# the H100 price you enter): `break_even = H100 price x (its tokens/s per GPU) / (H100 tokens/s per GPU)`.

# %%
ref = same_n.set_index("accelerator").loc["H100"]
same_n["speedup_vs_h100"] = same_n.tokens_per_s_per_gpu / ref.tokens_per_s_per_gpu
same_n["break_even_usd_per_gpu_hour"] = PRICE_USD_PER_GPU_HOUR["H100"] * same_n.speedup_vs_h100
same_n[["accelerator", "tokens_per_s_per_gpu", "speedup_vs_h100", "break_even_usd_per_gpu_hour"]]

# %% [markdown]
# ## 2. Same budget: what one hourly budget rents of each
#
# The budget below is what 256 H100 cost at the price above. For each accelerator it rents as
# many whole 8-GPU nodes as it pays for, and the planner finds the best plan on all of them
# (`paraplan plan -n 8-N` would also compare every smaller count, at many times the search
# time).

# %%
BUDGET_USD_PER_HOUR = 256 * PRICE_USD_PER_GPU_HOUR["H100"]
rows = []
for name, cluster in SYSTEMS.items():
    max_gpus = int(BUDGET_USD_PER_HOUR // PRICE_USD_PER_GPU_HOUR[name]) // 8 * 8
    best = best_plan(cluster, max_gpus)
    rows.append(best.assign(accelerator=name, gpus_affordable=max_gpus))
budget = pd.concat(rows, ignore_index=True)
budget["usd_per_hour"] = budget.n_gpus * budget.accelerator.map(PRICE_USD_PER_GPU_HOUR)
budget["tokens_per_usd"] = budget.tokens_per_s * 3600 / budget.usd_per_hour
budget["hours_per_trillion_tokens"] = 1e12 / budget.tokens_per_s / 3600
budget[["accelerator", "gpus_affordable", "n_gpus", "config", "tokens_per_s", "mfu_bf16_pct", "usd_per_hour",
        "tokens_per_usd", "hours_per_trillion_tokens"]]

# %% [markdown]
# ## Conclusions

# %%
from hardware_specs.catalog import load_gpu

fast = same_n.sort_values("tokens_per_s", ascending=False)
cheap = same_n.sort_values("tokens_per_usd", ascending=False)
bud = budget.sort_values("tokens_per_s", ascending=False)
h = same_n.set_index("accelerator")


def named(r):
    """The accelerator's name, marked when its numbers rest on an unfitted prior."""
    return r.accelerator + ("" if r.efficiency_fitted else " (*unfitted prior*)")


lines = [f"* **{named(r)}**: `{r.config}`, {r.tokens_per_s:,.0f} tokens/s ({r.speedup_vs_h100:.2f}x H100 per GPU), "
         f"MFU {r.mfu_bf16_pct:.0f}% of the bf16 peak, {r.memory_gib:.0f} of {r.hbm_gib:.0f} GiB; {r.tokens_per_usd / 1e6:.1f}M tokens/$; "
         f"matches the H100's tokens/$ at ${r.break_even_usd_per_gpu_hour:.2f}/GPU-hour"
         for r in fast.itertuples()]
peak_ratio = load_gpu(h.loc["H200"].gpu).peak_flops("bf16") / load_gpu(h.loc["H100"].gpu).peak_flops("bf16")
if h.loc["H200"].config != h.loc["H100"].config:
    hbm_note = (f"**More HBM changes the plan, not only the speed:** H200 ({h.loc['H200'].hbm_gib:.0f} GiB) runs "
                f"`{h.loc['H200'].config}` where H100 ({h.loc['H100'].hbm_gib:.0f} GiB) runs `{h.loc['H100'].config}`: "
                f"{pct(h.loc['H200'].tokens_per_s, h.loc['H100'].tokens_per_s):+.1f}% tokens/s at {peak_ratio:.2f}x the bf16 peak.")
else:
    hbm_note = (f"H200 runs the same plan as H100 (`{h.loc['H100'].config}`): its extra HBM buys no better plan here "
                f"({pct(h.loc['H200'].tokens_per_s, h.loc['H100'].tokens_per_s):+.1f}% tokens/s at {peak_ratio:.2f}x the bf16 peak).")
say(f"""**At {GPUS} GPUs each** (fastest first):

""" + "\n".join(lines) + f"""

* **Fastest:** {named(fast.iloc[0])}, {pct(fast.iloc[0].tokens_per_s, fast.iloc[1].tokens_per_s):+.0f}% tokens/s over
  {named(fast.iloc[1])}. **Most tokens per dollar at the prices entered:** {named(cheap.iloc[0])}
  ({cheap.iloc[0].tokens_per_usd / 1e6:.1f}M tokens/$, {pct(cheap.iloc[0].tokens_per_usd, cheap.iloc[1].tokens_per_usd):+.0f}% over
  {named(cheap.iloc[1])}).
* {hbm_note}
* **Same budget (${BUDGET_USD_PER_HOUR:,.0f}/hour):** {named(bud.iloc[0])} trains fastest, on {int(bud.iloc[0].n_gpus)} GPUs
  ({bud.iloc[0].tokens_per_s:,.0f} tokens/s, {bud.iloc[0].hours_per_trillion_tokens:,.0f} hours per trillion tokens);
  slowest is {named(bud.iloc[-1])} on {int(bud.iloc[-1].n_gpus)} GPUs ({bud.iloc[-1].tokens_per_s:,.0f} tokens/s).
* The rankings by cost follow from the prices in the first cell; the break-even prices above say where each one flips.""" + (
    f"""
* **Unfitted priors:** {", ".join(PRIORS)} run on an efficiency model no measured run has checked
  (`hardware_specs/efficiency/`, no `fitted_factors`); every conclusion above that names them is a sketch, not a
  validated prediction.""" if PRIORS else ""))
