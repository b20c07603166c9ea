# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Training a 70B model on A100s and H100s together
#
# **Question.** A fleet has 512 GPUs: some H100 (DGX H100, 400 Gb/s per GPU) and the rest A100
# (DGX A100 80GB, 200 Gb/s per GPU), the two pods joined at the A100 pod's 200 Gb/s. Is it worth
# training Llama-3-70B on all of them rather than on the H100s alone, and how does the answer change
# as the H100 share grows?
#
# **Method.** For each H100 count, `planners.heterogeneous.plan_heterogeneous` searches plans on
# the pooled cluster: pipelines on one pool, each pool running its own replicas with batch shares in
# proportion to their speed (Poplar, HexiScale), and pipelines whose first stages run on one pool and
# last stages on the other, the layers split by speed (Metis, Sailor). It reports the best plan next
# to the best on only the H100s and only the A100s, each scored by the same composition of the step
# model's per-layer costs. Global batch: 4M tokens (512 sequences of 8192), bf16, ZeRO 0-1 (the
# search's default `zeros`), one 8192-token sequence per micro-batch (`max_micro_batch=1`: GEMMs of
# 8192 rows already, and the most micro-batches to fill a pipeline; searching every divisor of 512
# finds the same best plans on every fleet below, each at micro-batch 1, and the same pools-alone
# plans, in about three times the time).
#
# **Assumptions.** Each pool's efficiency model is its generation's fitted one (ampere, hopper);
# pipelines cross pools over the slowest link on the path; a mix of replica groups needs a framework
# that accepts uneven per-rank batches (as Poplar's and HexiScale's do).

# %%
# %matplotlib inline
import pandas as pd
from IPython.display import display
from matplotlib.figure import Figure

from hardware_specs.catalog import load_cluster
from hardware_specs.pools import Pool, PooledCluster, PoolLink
from paraplan.notebook_helpers import fig_path, say, show_tables
from planners.heterogeneous import plan_heterogeneous

show_tables()


A100, H100 = load_cluster("dgx-a100-80gb"), load_cluster("dgx-h100")
TOTAL, TOKENS = 512, 4 * 2**20
#: the search of every fleet: the global batch and one sequence per micro-batch
SEARCH = dict(global_batch_tokens=TOKENS, max_micro_batch=1)


def fleet(h100_gpus):
    """The 512-GPU fleet with ``h100_gpus`` H100 and the rest A100."""
    pools = []
    if TOTAL - h100_gpus:
        pools.append(Pool("a100", A100, TOTAL - h100_gpus))
    if h100_gpus:
        pools.append(Pool("h100", H100, h100_gpus))
    links = (PoolLink(("a100", "h100"), 200e9 / 8, 5e-6),) if len(pools) == 2 else ()
    return PooledCluster(f"{h100_gpus}h100", tuple(pools), links)


# %% [markdown]
# ## Half and half: 256 A100 + 256 H100

# %%
half = plan_heterogeneous("llama3-70b", fleet(256), **SEARCH)
display(half.comparison())
print(half.explain)

# %%
best, h_only, a_only = half.best_report, half.fastest_only[1], half.largest_only[1]
gain_h = best.tokens_per_s / h_only.tokens_per_s - 1
ceiling = h_only.tokens_per_s + a_only.tokens_per_s
say(f"On 256 + 256 GPUs the best plan reaches **{best.tokens_per_s:,.0f} tokens/s**, "
    f"**{100 * gain_h:+.1f}%** over the best plan on the 256 H100 alone ({h_only.tokens_per_s:,.0f}) and "
    f"{best.tokens_per_s / a_only.tokens_per_s:.1f}x the A100s alone ({a_only.tokens_per_s:,.0f}). "
    f"The two pools alone add up to {ceiling:,.0f} tokens/s; the mix gets "
    f"{100 * best.tokens_per_s / ceiling:.0f}% of that: its step has {best.time_breakdown_s['pipeline_bubble_s']:.2f} s "
    f"of pipeline fill and drain and {best.time_breakdown_s['dp_comm_exposed_s']:.2f} s of exposed gradient traffic "
    f"of {best.step_time_s:.2f} s, against {h_only.time_breakdown_s['pipeline_bubble_s']:.2f} s and "
    f"{h_only.time_breakdown_s['dp_comm_exposed_s']:.2f} s of {h_only.step_time_s:.2f} s on the H100 pool alone.")

# %% [markdown]
# ## As the H100 share grows
#
# The fleet stays at 512 GPUs; H100s replace A100s in steps of 64.

# %%
rows, reports = [], {}
for h in range(64, TOTAL, 64):
    # 256 + 256 is the fleet searched above: its plans again, not a second search
    r = half if h == 256 else plan_heterogeneous("llama3-70b", fleet(h), **SEARCH)
    reports[h] = r
    alone = {name: (pair[1].tokens_per_s if pair else 0.0) for name, pair in r.pool_only.items()}
    rows.append({"h100_gpus": h, "a100_gpus": TOTAL - h, "best_tokens_per_s": r.best_report.tokens_per_s,
                 "h100_only_tokens_per_s": alone["h100"], "a100_only_tokens_per_s": alone["a100"],
                 "best_gpus": r.best_report.n_gpus, "best_kind": r.plans.iloc[0]["kind"],
                 "best_layout": r.plans.iloc[0]["layout"]})
sweep = pd.DataFrame(rows)
sweep["gain_over_best_subset_pct"] = 100 * (sweep.best_tokens_per_s
                                            / sweep[["h100_only_tokens_per_s", "a100_only_tokens_per_s"]].max(axis=1) - 1)
sweep["share_of_sum_pct"] = 100 * sweep.best_tokens_per_s / (sweep.h100_only_tokens_per_s + sweep.a100_only_tokens_per_s)
display(sweep[["h100_gpus", "a100_gpus", "best_tokens_per_s", "h100_only_tokens_per_s", "a100_only_tokens_per_s",
               "gain_over_best_subset_pct", "share_of_sum_pct", "best_gpus", "best_kind"]])

# %%
fig = Figure(figsize=(7.5, 3.6))
ax = fig.subplots()
share = sweep.h100_gpus / TOTAL
ax.plot(share, sweep.best_tokens_per_s / 1e3, "o-", label="best plan on the whole fleet")
ax.plot(share, sweep.h100_only_tokens_per_s / 1e3, "s--", label="only the H100s")
ax.plot(share, sweep.a100_only_tokens_per_s / 1e3, "^--", label="only the A100s")
ax.set_xlabel("H100 share of the 512 GPUs")
ax.set_ylabel("thousand tokens/s")
ax.set_title("Llama-3-70B, 4M-token batches")
ax.grid(alpha=0.3)
ax.legend()
fig.tight_layout()
if fig_path("heterogeneous_a100_h100.png"):
    fig.savefig(fig_path("heterogeneous_a100_h100.png"), dpi=120)
display(fig)

# %%
top = sweep.loc[sweep.gain_over_best_subset_pct.idxmax()]
low = sweep.loc[sweep.gain_over_best_subset_pct.idxmin()]
crossing = sweep[sweep.h100_only_tokens_per_s >= sweep.a100_only_tokens_per_s].h100_gpus.min()
lowest = sweep.loc[sweep.share_of_sum_pct.idxmin()]
low_best = reports[int(lowest.h100_gpus)].best_report
# the largest parts of that plan's step other than compute: what the output shows, not a cause
overheads = sorted(((v, k) for k, v in low_best.time_breakdown_s.items() if k != "compute_s" and v > 0), reverse=True)[:2]
pays = ("Using the whole fleet pays at every share" if (sweep.gain_over_best_subset_pct > 0).all() else
        "Using the whole fleet does not pay at every share")
say(f"{pays}: the gain over the better of the two pools alone runs from "
    f"**{low.gain_over_best_subset_pct:+.1f}%** (at {int(low.h100_gpus)} H100) to "
    f"**{top.gain_over_best_subset_pct:+.1f}%** (at {int(top.h100_gpus)} H100). "
    f"The H100s alone overtake the A100s alone from {int(crossing)} H100 on, since one H100 here does the work of "
    f"{sweep.h100_only_tokens_per_s.iloc[-1] / sweep.h100_gpus.iloc[-1] / (sweep.a100_only_tokens_per_s.iloc[0] / sweep.a100_gpus.iloc[0]):.1f} A100s. "
    f"The mix reaches {sweep.share_of_sum_pct.min():.1f}-{sweep.share_of_sum_pct.max():.1f}% of the two pools' "
    f"throughputs added up (lowest at {int(lowest.h100_gpus)} H100, where the best plan is a {lowest.best_kind} "
    f"plan whose {low_best.step_time_s:.2f} s step has, besides compute, "
    + " and ".join(f"{v:.2f} s of {k.removesuffix('_s').replace('_', ' ')}" for v, k in overheads)
    + "; the sweep does not split the shortfall by cause)"
    + ("; above 100%, a pool too small to hold the model well alone does better inside a crossing pipeline"
       if sweep.share_of_sum_pct.max() > 100 else "")
    + ". The best plans are " + ", ".join(f"{k} ({n})" for k, n in sweep.best_kind.value_counts().items()) + ".")
