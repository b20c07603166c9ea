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
# # How much does the scale-out network matter for a 405B model?
#
# **Question.** Llama-3.1-405B on 2,048 H100 (256 DGX nodes) with a 16M-token batch (the batch
# Meta's 405B pre-training reached), bf16, 8192-token sequences. What do 100, 200, 400 and 800 Gb/s per GPU of scale-out
# bandwidth buy? NVLink inside the node stays at 450 GB/s; only the NICs change.
#
# **Method.** Two views: (1) the plan that is best at 400 Gb/s, kept fixed while the network
# changes (what an existing job sees), and (2) the planner's best plan for each network (what a
# job tuned for its network gets).

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
MODEL, CLUSTER, GPUS = "llama3.1-405b", "dgx-h100", 2048
BATCH_TOKENS = 16 * 2**20
BANDWIDTHS = [100, 200, 400, 800]              # Gb/s per GPU, one direction

# the planner's best plan for each network; the one for 400 Gb/s is the "existing job" held fixed
replanned = api.sweep(dict(model=MODEL, cluster=CLUSTER, gpus=GPUS, global_batch_tokens=BATCH_TOKENS),
                      "scaleout_gbit_per_s", BANDWIDTHS, best=True)
replanned["strategy"] = "re-planned per network"
at400 = replanned[replanned.scaleout_gbit_per_s == 400].iloc[0]
fixed_config = {k: at400[k] for k in api.CONFIG_FIELDS}
fixed = api.sweep(dict(model=MODEL, cluster=CLUSTER, **fixed_config), "scaleout_gbit_per_s", BANDWIDTHS)
fixed["strategy"] = f"fixed plan ({at400.config})"
both = pd.concat([fixed, replanned], ignore_index=True)
both[["strategy", "scaleout_gbit_per_s", "config", "step_time_s", "tokens_per_s", "mfu_bf16_pct", "memory_gib",
      "tp_comm_exposed_s", "pp_comm_s", "pipeline_bubble_s", "dp_comm_exposed_s", "zero3_comm_exposed_s"]]

# %%
plots.bandwidth(both, fig_path("network_sensitivity.png"), hue="strategy",
                title=f"Llama-3.1-405B on {GPUS} H100, {BATCH_TOKENS // 2**20}M-token batch: scale-out bandwidth")

# %%
replanned["label"] = replanned.scaleout_gbit_per_s.map(lambda b: f"{b:g} Gb/s") + ": " + replanned.config
plots.breakdown(replanned, fig_path("network_breakdown.png"), label="label",
                title="Best plan for each network: where the step goes")

# %% [markdown]
# ## Conclusions

# %%
f = fixed.set_index("scaleout_gbit_per_s")
r = replanned.set_index("scaleout_gbit_per_s")
comm = lambda row: row.dp_comm_exposed_s + row.pp_comm_s + row.zero3_comm_exposed_s + row.cp_comm_exposed_s
low, high = pct(f.loc[400].tokens_per_s, f.loc[100].tokens_per_s), pct(f.loc[800].tokens_per_s, f.loc[400].tokens_per_s)
returns = "diminishing returns" if high < low / 2 else "returns that do not diminish"
gain_low, gain_high = pct(r.loc[100].tokens_per_s, f.loc[100].tokens_per_s), pct(r.loc[800].tokens_per_s, f.loc[800].tokens_per_s)
changed = [f"{b:g} Gb/s `{r.loc[b].config}`" for b in BANDWIDTHS]
tp_times = f.tp_comm_exposed_s.to_numpy()
tp_note = (f"the fixed plan's exposed TP time is {tp_times[0]:.2f} s at every bandwidth (its TP groups stay inside a node)"
           if np.allclose(tp_times, tp_times[0]) else
           f"the fixed plan's exposed TP time moves from {tp_times.max():.2f} s to {tp_times.min():.2f} s")
say(f"""* **Fixed plan (`{at400.config}`): 100 -> 400 Gb/s is worth {low:+.1f}% tokens/s, 400 -> 800 Gb/s {high:+.1f}%** --
  {returns}. Its exposed inter-node communication (data-parallel reduction, pipeline sends, ZeRO-3 gathers, CP) falls
  from {comm(f.loc[100]):.2f} s at 100 Gb/s to {comm(f.loc[400]):.2f} s at 400 and {comm(f.loc[800]):.2f} s at 800, in a
  {f.loc[400].step_time_s:.0f}-second step.
* **Re-planning for the network** gains {gain_low:+.1f}% over the fixed plan at 100 Gb/s and {gain_high:+.1f}% at 800 Gb/s.
  Even with its best plan, a 100 Gb/s network costs {-pct(r.loc[100].tokens_per_s, r.loc[400].tokens_per_s):.1f}% of the
  400 Gb/s throughput; 800 Gb/s adds {pct(r.loc[800].tokens_per_s, r.loc[400].tokens_per_s):+.1f}%.
* **The best plan per network:** {"; ".join(changed)}.
* **NVLink traffic is unaffected:** {tp_note}.""")
