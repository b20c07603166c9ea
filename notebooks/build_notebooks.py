"""Write the what-if notebooks from the cell sources below (the reviewable source of truth).

    python notebooks/build_notebooks.py                  # (re)write notebooks/*.ipynb, no outputs
    python notebooks/build_notebooks.py --execute        # ... and run them, saving the outputs
    PARAPLAN_FIGURES=/tmp/figs python notebooks/build_notebooks.py --execute   # also save PNGs

Every number in the notebooks' conclusions is computed in the notebook and formatted from
variables (``say(f"...")`` renders Markdown), so the prose follows the model when it changes.
Static Markdown cells state the question, the method and the assumptions only.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = '''\
%matplotlib inline
import os

import numpy as np
import pandas as pd
from IPython.display import Markdown, display
from matplotlib.figure import Figure

from paraplan import api, exports, plots

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 40)
pd.set_option("display.precision", 3)
FIGURES = os.environ.get("PARAPLAN_FIGURES")     # a folder: every figure is also saved there as PNG


def fig_path(name):
    return os.path.join(FIGURES, name) if FIGURES else None


def say(text):
    """Render a conclusion (an f-string of computed values) as Markdown."""
    display(Markdown(text))


def pct(a, b):
    """Relative change from b to a, in percent."""
    return 100.0 * (a / b - 1.0)'''


# --------------------------------------------------------------------------------------------
# (a) Llama-3-70B on 256 H100
# --------------------------------------------------------------------------------------------

LLAMA70B = [
    ("md", '''\
# How to train Llama-3-70B on 256 H100 GPUs, and why the winner wins

**Question.** We have 256 H100 SXM GPUs (32 DGX H100 nodes: 8 GPUs on NVLink 4 per node, one
400 Gb/s InfiniBand NIC per GPU) and want to pre-train Llama-3-70B (80 layers, hidden 8192,
GQA with 8 KV heads, 8192-token sequences) with a 4M-token global batch (512 sequences) in
bf16. Which data / tensor / pipeline / context degrees, micro-batch, ZeRO stage, recomputation
and schedule should we run, and why?

**Method.** `api.plan` enumerates every valid configuration, scores each with the simulator's
step model and keeps those that fit in 80 GiB. We then put the winner next to the plans people
usually start from and read the step-time breakdown to see *where* the winner saves time, look
at the whole throughput/memory space, and emit the launch configs.

All numbers are predictions of paraplan's analytical model (see the README for its measured
error on published runs); they are computed below, and the conclusions are written from them.'''),
    ("code", SETUP),
    ("md", "## 1. Search every plan"),
    ("code", '''\
MODEL, CLUSTER, GPUS = "llama3-70b", "dgx-h100", 256
BATCH_TOKENS = 4 * 2**20            # 512 sequences of 8192 tokens

plans = api.plan(MODEL, CLUSTER, GPUS, global_batch_tokens=BATCH_TOKENS)
winner = api.best_plan(MODEL, CLUSTER, GPUS, global_batch_tokens=BATCH_TOKENS)
w = winner.iloc[0]
print(f"{len(plans):,} plans fit in memory")
plans.head(10)[["config", "schedule", "step_time_s", "tokens_per_s", "mfu", "memory_gib"]]'''),
    ("code", '''\
print(plans.attrs["explain"])      # the planner's own account: pruning, winner vs runner-up'''),
    ("md", '''\
## 2. The winner against the usual starting points

* **Megatron classic**: a typical Megatron-LM starting point for a 70B model -- TP 8 inside
  the node, PP 4 with 5 virtual stages, sequence parallelism, selective recomputation,
  distributed optimizer (ZeRO-1).
* **FSDP**: ZeRO-3 over all 256 GPUs, no model parallelism, full recomputation.
* The planner's best plan under one restriction each: **TP = 8**, **no pipeline (PP = 1)**,
  **ZeRO <= 1** (what DeepSpeed's pipeline engine and Megatron's distributed optimizer run).'''),
    ("code", '''\
common = dict(gpus=GPUS, global_batch_tokens=BATCH_TOKENS)
candidates = {
    "winner": winner,
    "best with TP=8": api.best_plan(MODEL, CLUSTER, GPUS, BATCH_TOKENS, tp=8),
    "best without PP": api.best_plan(MODEL, CLUSTER, GPUS, BATCH_TOKENS, pp=1),
    "best with ZeRO<=1": api.best_plan(MODEL, CLUSTER, GPUS, BATCH_TOKENS, zero_stage=[0, 1]),
    "Megatron classic": api.simulate(MODEL, CLUSTER, tp=8, pp=4, vpp=5, micro_batch=1, zero_stage=1,
                                     recompute="selective", sequence_parallel=True, **common),
    "FSDP (ZeRO-3)": api.simulate(MODEL, CLUSTER, tp=1, pp=1, micro_batch=1, zero_stage=3,
                                  recompute="full", **common),
}
cmp = pd.concat([df.assign(plan=name) for name, df in candidates.items()], ignore_index=True)
cmp["label"] = cmp["plan"] + ": " + cmp["config"]
cmp[["plan", "config", "step_time_s", "tokens_per_s", "mfu", "memory_gib", "fits"]]'''),
    ("code", '''\
plots.breakdown(cmp, fig_path("llama70b_breakdown.png"), label="label",
                title=f"Llama-3-70B on {GPUS} H100, {BATCH_TOKENS // 2**20}M-token batch: step time by part")'''),
    ("code", '''\
plots.memory(cmp, fig_path("llama70b_memory.png"), label="plan",
             title="Peak memory per GPU (first pipeline stage) of the same plans")'''),
    ("code", '''\
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
    lines.append(f"* vs **{name}** (`{r.config}`): that plan's step is {pct(r.step_time_s, w.step_time_s):.1f}% "
                 f"longer; the winner saves {why(w, r)}.")
say(f"""**The winner** is `{w.config}` ({w.schedule} schedule): {w.step_time_s:.2f} s per step,
{w.tokens_per_s:,.0f} tokens/s, MFU {100 * w.mfu:.1f}%, {w.memory_gib:.1f} of {w.hbm_gib:.0f} GiB per GPU.
Compute is {100 * w.compute_s / w.step_time_s:.0f}% of its step; exposed TP communication
{w.tp_comm_exposed_s:.2f} s, pipeline bubble {w.pipeline_bubble_s:.2f} s, recomputation {w.recompute_s:.2f} s.

""" + "\\n".join(lines))'''),
    ("md", '''\
## 3. The whole space: throughput against memory

Every fitting plan is a point; the red line is the Pareto frontier (no other plan is both
faster and smaller). Plans far left of the HBM line leave room for a longer sequence or a
larger micro-batch; the frontier shows what each GiB of memory buys.'''),
    ("code", '''\
plots.pareto(plans, fig_path("llama70b_pareto.png"), annotate=5)'''),
    ("code", '''\
front = plans[plots.pareto_mask(plans)].sort_values("memory_gib")
small = front.iloc[0]
half = front[front.memory_gib <= 0.5 * w.hbm_gib].sort_values("tokens_per_s").iloc[-1] \\
    if (front.memory_gib <= 0.5 * w.hbm_gib).any() else small
say(f"""The frontier has {len(front)} plans. The smallest fitting plan, `{small.config}`, needs
{small.memory_gib:.1f} GiB and runs at {small.tokens_per_s:,.0f} tokens/s ({pct(small.tokens_per_s, w.tokens_per_s):+.1f}%
vs the winner). The fastest plan within half the HBM ({0.5 * w.hbm_gib:.0f} GiB), `{half.config}`, reaches
{half.tokens_per_s:,.0f} tokens/s ({pct(half.tokens_per_s, w.tokens_per_s):+.1f}%): the winner buys its last
{pct(w.tokens_per_s, half.tokens_per_s):.1f}% of throughput with {w.memory_gib - half.memory_gib:.1f} GiB more per GPU.""")'''),
    ("md", '''\
## 4. One layer's operations on the H100 roofline

Each point is one kernel of one transformer layer at the winner's tensor-parallel degree (one
micro-batch), placed at its arithmetic intensity and the throughput the simulator assumes it
reaches. The solid line is the datasheet roofline, the dashed one what the fitted efficiency
model allows.'''),
    ("code", '''\
ops = api.layer_ops(MODEL, CLUSTER, tp=int(w.tp), micro_batch=int(w.micro_batch), cp=int(w.cp))
plots.roofline(ops, fig_path("llama70b_roofline.png"))'''),
    ("code", '''\
ridge = ops.peak_tflop_per_s.iloc[0] * 1e12 / (ops.hbm_tb_per_s.iloc[0] * 1e12)
mem_bound = ops[ops.intensity_flop_per_byte < ridge]
gemms = ops[ops.op.str.contains("projection")]
forward = ops[(ops["pass"] == "forward") & ~ops.op.str.startswith("lm head")]
say(f"""At tp={int(w.tp)} the projections run at {gemms.achieved_tflop_per_s.min():.0f}-{gemms.achieved_tflop_per_s.max():.0f}
TFLOP/s ({100 * gemms.achieved_tflop_per_s.min() / ops.peak_tflop_per_s.iloc[0]:.0f}-{100 * gemms.achieved_tflop_per_s.max() / ops.peak_tflop_per_s.iloc[0]:.0f}% of the
{ops.peak_tflop_per_s.iloc[0]:.0f} TFLOP/s peak), with intensities of {gemms.intensity_flop_per_byte.min():.0f}-{gemms.intensity_flop_per_byte.max():.0f} FLOP/byte,
{f"all right of the ridge at {ridge:.0f} FLOP/byte (compute-bound)" if gemms.intensity_flop_per_byte.min() > ridge
   else f"some left of the ridge at {ridge:.0f} FLOP/byte (memory-bound)"}. Memory-bound: {", ".join(mem_bound.op) or "none"}, taking
{100 * mem_bound[mem_bound["pass"] == "forward"].time_s.sum() / forward.time_s.sum():.1f}% of one layer's forward time;
the attention core reaches {ops[ops.op.str.startswith("attention core")].achieved_tflop_per_s.iloc[0]:.0f} TFLOP/s,
the fitted flash-attention efficiency.""")'''),
    ("md", '''\
## 5. Launch it

The plan as Megatron-LM environment and flags, a torchtitan 0.3.0 config module and a
DeepSpeed 0.19.8 JSON (`paraplan plan ... --emit megatron|torchtitan|deepspeed` writes the
same for the best plan each framework can run). A framework that cannot run the winner as
planned says why; we then take the best plan that framework *can* run (`api.best_plan_for`)
and emit that, with its cost.'''),
    ("code", '''\
from hardware_specs.errors import InputError

launch = {}
for framework in exports.FRAMEWORKS:
    try:
        text, row, note = exports.emit(w, framework), w, "runs the winner as planned"
    except InputError as exc:
        row = api.best_plan_for(framework, MODEL, CLUSTER, GPUS, BATCH_TOKENS).iloc[0]
        text = exports.emit(row, framework)
        note = (f"cannot run the winner ({exc.message}); its best plan is `{row.config}`, "
                f"{pct(row.tokens_per_s, w.tokens_per_s):+.1f}% tokens/s")
    launch[framework] = (text, row, note)
    print(f"===== {framework}: {note}")
    print(text)'''),
    ("md", "## Conclusions"),
    ("code", '''\
tp8 = cmp[cmp.plan == "best with TP=8"].iloc[0]
classic = cmp[cmp.plan == "Megatron classic"].iloc[0]
fsdp = cmp[cmp.plan == "FSDP (ZeRO-3)"].iloc[0]
structure = [f"ZeRO-{int(w.zero_stage)}"] + [f"{k}={int(w[k])}" for k in ("pp", "cp") if w[k] > 1]
recompute = "without recomputation" if w.recompute == "none" else f"with {w.recompute} recomputation"
memory_note = (f"**Memory is the price:** the winner fills {100 * w.memory_gib / w.hbm_gib:.0f}% of HBM ({w.memory_gib:.1f} GiB) "
               f"against {classic.memory_gib:.1f} GiB for Megatron classic; a run that needs headroom (longer sequences, "
               f"fragmentation) should take a plan from the frontier of section 3."
               if w.memory_gib > classic.memory_gib else
               f"**Memory:** the winner needs {w.memory_gib:.1f} GiB, no more than Megatron classic ({classic.memory_gib:.1f} GiB).")
say(f"""* **Run `{w.config}`** ({w.schedule} schedule): {w.tokens_per_s:,.0f} tokens/s, MFU {100 * w.mfu:.1f}%,
  {w.memory_gib:.1f} GiB per GPU; a {BATCH_TOKENS // 2**20}M-token step takes {w.step_time_s:.2f} s.
* **Why it wins:** against Megatron classic it saves {why(w, classic)}; against FSDP {why(w, fsdp)}; against the
  best TP=8 plan {why(w, tp8)}. Its exposed TP time is {w.tp_comm_exposed_s:.2f} s at tp={int(w.tp)}, against
  {tp8.tp_comm_exposed_s:.2f} s at tp=8. It stays within HBM using {", ".join(structure)}, {recompute}.
* **Against the starting points:** {pct(w.tokens_per_s, classic.tokens_per_s):+.1f}% tokens/s vs Megatron classic,
  {pct(w.tokens_per_s, fsdp.tokens_per_s):+.1f}% vs FSDP.
* {memory_note}
* **Launch:** """ + "; ".join(f"{fw} {note}" for fw, (_, _, note) in launch.items()) + ".")'''),
]


# --------------------------------------------------------------------------------------------
# (b) GPU comparison
# --------------------------------------------------------------------------------------------

GPU_COMPARISON = [
    ("md", '''\
# H100 vs H200 vs B200 vs MI300X: throughput and tokens per dollar

**Question.** For the same model and the same budget, which accelerator trains fastest, and
which gives the most tokens per dollar?

**Method.** Llama-3-70B, 4M-token batch, bf16. Each accelerator sits in its usual 8-GPU
node (DGX H100, HGX H200, DGX B200, MI300X platform), all with one 400 Gb/s NIC per GPU, and
each gets the planner's best plan for it (a fair comparison re-plans per chip: more HBM allows
less model parallelism). Part 1 compares 256 GPUs of each; part 2 spends the same dollars per
hour on each. Prices are inputs: **edit `PRICE_USD_PER_GPU_HOUR` below** with your quotes.

**Caveat.** H100 (Hopper) and B200 (Blackwell) use efficiency models fitted on published runs;
the validation file has no MI300X (CDNA3) run, so MI300X runs on an *unfitted prior* efficiency
model (`hardware_specs/efficiency/cdna3.yaml`): read its numbers as an optimistic sketch, not a
validated prediction.'''),
    ("code", SETUP),
    ("code", '''\
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
MODEL, GPUS, BATCH_TOKENS = "llama3-70b", 256, 4 * 2**20'''),
    ("md", "## 1. Same GPU count: 256 of each"),
    ("code", '''\
rows = []
for name, cluster in SYSTEMS.items():
    best = api.best_plan(MODEL, cluster, GPUS, BATCH_TOKENS).assign(accelerator=name)
    rows.append(best)
same_n = pd.concat(rows, ignore_index=True)
same_n["usd_per_hour"] = same_n.n_gpus * same_n.accelerator.map(PRICE_USD_PER_GPU_HOUR)
same_n["tokens_per_usd"] = same_n.tokens_per_s * 3600 / same_n.usd_per_hour
same_n["usd_per_billion_tokens"] = 1e9 / same_n.tokens_per_usd
same_n["label"] = same_n.accelerator + ": " + same_n.config
same_n[["accelerator", "config", "step_time_s", "tokens_per_s", "mfu", "memory_gib", "hbm_gib",
        "usd_per_hour", "tokens_per_usd", "usd_per_billion_tokens"]]'''),
    ("code", '''\
fig = Figure(figsize=(11, 4.2), dpi=110)
ax1, ax2 = fig.subplots(1, 2)
colors = ["#4C72B0", "#8172B3", "#55A868", "#C44E52"]
ax1.bar(same_n.accelerator, same_n.tokens_per_s / 1e3, color=colors)
ax1.set_ylabel("throughput (thousand tokens/s)")
ax1.set_title(f"{GPUS} GPUs each, best plan per GPU", fontsize=10)
for i, r in same_n.iterrows():
    ax1.text(i, r.tokens_per_s / 1e3, f"MFU {100 * r.mfu:.0f}%", ha="center", va="bottom", fontsize=8)
ax2.bar(same_n.accelerator, same_n.tokens_per_usd / 1e6, color=colors)
ax2.set_ylabel("million tokens per dollar")
ax2.set_title("tokens per dollar at the prices above", fontsize=10)
for i, r in same_n.iterrows():
    ax2.text(i, r.tokens_per_usd / 1e6, f"${PRICE_USD_PER_GPU_HOUR[r.accelerator]:.2f}/GPU-h", ha="center",
             va="bottom", fontsize=8)
for a in (ax1, ax2):
    a.set_xlabel("accelerator")
    a.grid(axis="y", alpha=0.3)
    a.set_axisbelow(True)
fig.suptitle(f"Llama-3-70B, {BATCH_TOKENS // 2**20}M-token batch, bf16", fontsize=11)
fig.tight_layout()
if FIGURES:
    fig.savefig(fig_path("gpus_throughput_and_cost.png"), bbox_inches="tight")
fig'''),
    ("code", '''\
plots.breakdown(same_n, fig_path("gpus_breakdown.png"), label="label",
                title=f"Where each accelerator's step goes ({GPUS} GPUs, best plan each)")'''),
    ("code", '''\
plots.memory(same_n, fig_path("gpus_memory.png"), label="accelerator",
             title="Memory per GPU of each best plan against its own HBM (dashed)")'''),
    ("md", '''\
**Break-even prices.** The ranking by tokens per dollar depends on the prices; the price at which
each accelerator would give exactly the H100's tokens per dollar does not (it only scales with
the H100 price you enter): `break_even = H100 price x (its tokens/s per GPU) / (H100 tokens/s per GPU)`.'''),
    ("code", '''\
ref = same_n.set_index("accelerator").loc["H100"]
same_n["speedup_vs_h100"] = same_n.tokens_per_s_per_gpu / ref.tokens_per_s_per_gpu
same_n["break_even_usd_per_gpu_hour"] = PRICE_USD_PER_GPU_HOUR["H100"] * same_n.speedup_vs_h100
same_n[["accelerator", "tokens_per_s_per_gpu", "speedup_vs_h100", "break_even_usd_per_gpu_hour"]]'''),
    ("md", '''\
## 2. Same budget: what one hourly budget rents of each

The budget below is what 256 H100 cost at the price above. For each accelerator it rents as
many whole 8-GPU nodes as it pays for, and the planner searches every GPU count up to that (it
may use fewer if that is faster).'''),
    ("code", '''\
BUDGET_USD_PER_HOUR = 256 * PRICE_USD_PER_GPU_HOUR["H100"]
rows = []
for name, cluster in SYSTEMS.items():
    max_gpus = int(BUDGET_USD_PER_HOUR // PRICE_USD_PER_GPU_HOUR[name]) // 8 * 8
    best = api.best_plan(MODEL, cluster, f"8-{max_gpus}", BATCH_TOKENS)
    rows.append(best.assign(accelerator=name, gpus_affordable=max_gpus))
budget = pd.concat(rows, ignore_index=True)
budget["usd_per_hour"] = budget.n_gpus * budget.accelerator.map(PRICE_USD_PER_GPU_HOUR)
budget["tokens_per_usd"] = budget.tokens_per_s * 3600 / budget.usd_per_hour
budget["hours_per_trillion_tokens"] = 1e12 / budget.tokens_per_s / 3600
budget[["accelerator", "gpus_affordable", "n_gpus", "config", "tokens_per_s", "mfu", "usd_per_hour",
        "tokens_per_usd", "hours_per_trillion_tokens"]]'''),
    ("md", "## Conclusions"),
    ("code", '''\
from hardware_specs.catalog import load_gpu

fast = same_n.sort_values("tokens_per_s", ascending=False)
cheap = same_n.sort_values("tokens_per_usd", ascending=False)
bud = budget.sort_values("tokens_per_s", ascending=False)
h = same_n.set_index("accelerator")
lines = [f"* **{r.accelerator}**: `{r.config}`, {r.tokens_per_s:,.0f} tokens/s ({r.speedup_vs_h100:.2f}x H100 per GPU), "
         f"MFU {100 * r.mfu:.0f}%, {r.memory_gib:.0f} of {r.hbm_gib:.0f} GiB; {r.tokens_per_usd / 1e6:.1f}M tokens/$; "
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

""" + "\\n".join(lines) + f"""

* **Fastest:** {fast.iloc[0].accelerator}, {pct(fast.iloc[0].tokens_per_s, fast.iloc[1].tokens_per_s):+.0f}% tokens/s over
  {fast.iloc[1].accelerator}. **Most tokens per dollar at the prices entered:** {cheap.iloc[0].accelerator}
  ({cheap.iloc[0].tokens_per_usd / 1e6:.1f}M tokens/$, {pct(cheap.iloc[0].tokens_per_usd, cheap.iloc[1].tokens_per_usd):+.0f}% over
  {cheap.iloc[1].accelerator}).
* {hbm_note}
* **Same budget (${BUDGET_USD_PER_HOUR:,.0f}/hour):** {bud.iloc[0].accelerator} trains fastest, on {int(bud.iloc[0].n_gpus)} GPUs
  ({bud.iloc[0].tokens_per_s:,.0f} tokens/s, {bud.iloc[0].hours_per_trillion_tokens:,.0f} hours per trillion tokens);
  slowest is {bud.iloc[-1].accelerator} on {int(bud.iloc[-1].n_gpus)} GPUs ({bud.iloc[-1].tokens_per_s:,.0f} tokens/s).
* The rankings by cost follow from the prices in the first cell; the break-even prices above say where each one flips.""")'''),
]


# --------------------------------------------------------------------------------------------
# (c) Network sensitivity
# --------------------------------------------------------------------------------------------

NETWORK = [
    ("md", '''\
# How much does the scale-out network matter for a 405B model?

**Question.** Llama-3.1-405B on 2,048 H100 (256 DGX nodes) with a 16M-token batch (the batch
Meta's 405B pre-training reached), bf16, 8192-token sequences. What do 100, 200, 400 and 800 Gb/s per GPU of scale-out
bandwidth buy? NVLink inside the node stays at 450 GB/s; only the NICs change.

**Method.** Two views: (1) the plan that is best at 400 Gb/s, kept fixed while the network
changes (what an existing job sees), and (2) the planner's best plan for each network (what a
job tuned for its network gets).'''),
    ("code", SETUP),
    ("code", '''\
MODEL, CLUSTER, GPUS = "llama3.1-405b", "dgx-h100", 2048
BATCH_TOKENS = 16 * 2**20
BANDWIDTHS = [100, 200, 400, 800]              # Gb/s per GPU, one direction

at400 = api.best_plan(MODEL, CLUSTER, GPUS, BATCH_TOKENS, scaleout_gbit_per_s=400).iloc[0]
fixed_config = {k: at400[k] for k in api.CONFIG_FIELDS}
fixed = api.sweep(dict(model=MODEL, cluster=CLUSTER, **fixed_config), "scaleout_gbit_per_s", BANDWIDTHS)
fixed["strategy"] = f"fixed plan ({at400.config})"
replanned = api.sweep(dict(model=MODEL, cluster=CLUSTER, gpus=GPUS, global_batch_tokens=BATCH_TOKENS),
                      "scaleout_gbit_per_s", BANDWIDTHS, best=True)
replanned["strategy"] = "re-planned per network"
both = pd.concat([fixed, replanned], ignore_index=True)
both[["strategy", "scaleout_gbit_per_s", "config", "step_time_s", "tokens_per_s", "mfu", "memory_gib",
      "tp_comm_exposed_s", "pp_comm_s", "pipeline_bubble_s", "dp_comm_exposed_s", "zero3_comm_exposed_s"]]'''),
    ("code", '''\
plots.bandwidth(both, fig_path("network_sensitivity.png"), hue="strategy",
                title=f"Llama-3.1-405B on {GPUS} H100, {BATCH_TOKENS // 2**20}M-token batch: scale-out bandwidth")'''),
    ("code", '''\
replanned["label"] = replanned.scaleout_gbit_per_s.map(lambda b: f"{b:g} Gb/s") + ": " + replanned.config
plots.breakdown(replanned, fig_path("network_breakdown.png"), label="label",
                title="Best plan for each network: where the step goes")'''),
    ("md", "## Conclusions"),
    ("code", '''\
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
* **NVLink traffic is unaffected:** {tp_note}.""")'''),
]


# --------------------------------------------------------------------------------------------
# (d) MoE: expert parallelism inside vs across nodes
# --------------------------------------------------------------------------------------------

MOE = [
    ("md", '''\
# MoE what-if: expert parallelism inside a node or across nodes?

**Question.** DeepSeek-V3 (671B parameters, 256 routed experts of which each token uses 8, plus
one shared expert; 58 MoE layers) on 256 H100 (32 DGX nodes), 4M-token batch. Expert
parallelism (EP) splits the experts over `ep` GPUs and moves every routed token twice per layer
with all-to-all. Is EP better kept inside one NVLink node (`ep <= 8`) or spread across nodes
(`ep` = 16..64, all-to-all over the 400 Gb/s NICs)? Does an 800 Gb/s network change the answer?

**Method.** First we check that the simulator prices experts at all (a model that ignored
them would give the same step time for every `ep`). Then one MoE layer's all-to-all time from
the cost model, and the planner's best plan for each `ep` at 400 and 800 Gb/s.'''),
    ("code", SETUP),
    ("code", '''\
MODEL, CLUSTER, GPUS, BATCH_TOKENS = "deepseek-v3", "dgx-h100", 256, 4 * 2**20
EPS = [1, 2, 4, 8, 16, 32, 64]
MOE_MODELLED = api.moe_is_modelled(MODEL, CLUSTER)
say("**The simulator models the expert layers** (step time depends on `ep`): the step-level study below applies."
    if MOE_MODELLED else
    "**The simulator does not model the expert layers yet**: `simulate` gives the same step time for every `ep`, "
    "so it prices an MoE layer as a dense one. Only the per-layer all-to-all cost below is real; "
    "the step-level study is skipped rather than filled with numbers the model does not produce.")'''),
    ("md", '''\
## 1. One MoE layer's all-to-all, by EP degree

`cost_models.moe`: each GPU routes its tokens (one 4096-token micro-batch) to 8 experts, the
dispatch all-to-all sends them to the GPUs holding those experts and the combine all-to-all
brings them back (forward; backward repeats both). Up to 8 GPUs the group is inside a node
(NVLink); beyond, the share addressed to other nodes crosses the NICs.'''),
    ("code", '''\
from cost_models import moe
from hardware_specs.catalog import efficiency_for_cluster
from model_specs import load_model

spec = load_model(MODEL)
tokens = spec.seq_len                                 # one sequence per micro-batch, no TP/CP split
dispatch_bytes = moe.moe_dispatch_bytes(tokens, spec.moe.top_k, spec.hidden_size, 2)
a2a = []
for bw in (400, 800):
    cluster = api.what_if_cluster(CLUSTER, scaleout_gbit_per_s=bw)
    eff = efficiency_for_cluster(cluster)
    for ep in EPS[1:]:
        t = moe.moe_all_to_all_time_s(dispatch_bytes, ep, 1, cluster, eff)
        a2a.append({"scaleout_gbit_per_s": bw, "ep": ep, "inside_node": ep <= cluster.gpus_per_node,
                    "fwd_ms": 1e3 * float(t["fwd_s"]), "fwd_plus_bwd_ms": 1e3 * float(t["fwd_s"] + t["bwd_s"])})
a2a = pd.DataFrame(a2a)
a2a.pivot(index="ep", columns="scaleout_gbit_per_s", values="fwd_plus_bwd_ms").rename(
    columns=lambda b: f"{b} Gb/s: ms per layer per micro-batch")'''),
    ("code", '''\
fig = Figure(figsize=(8, 4.5), dpi=110)
ax = fig.add_subplot()
for bw, g in a2a.groupby("scaleout_gbit_per_s"):
    ax.plot(g.ep, g.fwd_plus_bwd_ms, "-o", label=f"{bw} Gb/s per GPU scale-out")
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
fig'''),
    ("md", '''\
## 2. The whole step: the best plan for each EP degree

For each `ep`, the planner searches every other degree (and ZeRO, recomputation, micro-batch)
and keeps the fastest plan that fits; the same at 800 Gb/s. This is where the all-to-all is
weighed against what a larger EP saves (fewer experts per GPU: less memory for weights,
gradients and optimizer states).'''),
    ("code", '''\
if MOE_MODELLED:
    best_per_ep = []
    for bw in (400, 800):
        plans = api.plan(MODEL, CLUSTER, GPUS, BATCH_TOKENS, ep=EPS, scaleout_gbit_per_s=bw)
        top = plans.groupby("ep", sort=False).head(1).sort_values("ep")
        best_per_ep.append(top.assign(network=f"{bw} Gb/s"))
    ep_study = pd.concat(best_per_ep, ignore_index=True)
    display(ep_study[["network", "ep", "config", "step_time_s", "tokens_per_s", "mfu", "memory_gib",
                      "ep_comm_exposed_s"]])
else:
    ep_study = None
    print("skipped: the simulator does not model expert layers")'''),
    ("code", '''\
if MOE_MODELLED:
    fig = Figure(figsize=(8, 4.5), dpi=110)
    ax = fig.add_subplot()
    for net, g in ep_study.groupby("network"):
        ax.plot(g.ep, g.tokens_per_s / 1e3, "-o", label=f"best plan per ep, {net} scale-out")
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
    display(fig)'''),
    ("code", '''\
if MOE_MODELLED:
    at400 = ep_study[(ep_study.network == "400 Gb/s") & ep_study.ep.isin([8, 16, 64])].copy()
    at400["label"] = "ep " + at400.ep.astype(str) + ": " + at400.config
    display(plots.breakdown(at400, fig_path("moe_ep_breakdown.png"), label="label",
                            title="Best plans with EP inside (8) and across nodes (16, 64), 400 Gb/s"))'''),
    ("md", "## Conclusions"),
    ("code", '''\
l = a2a.set_index(["scaleout_gbit_per_s", "ep"]).fwd_plus_bwd_ms
same_inside = np.isclose(l[400, 8], l[800, 8], rtol=0.01)
text = f"""* **One layer's all-to-all:** at 400 Gb/s it takes {l[400, 8]:.1f} ms with EP inside a node (ep=8) and
  {l[400, 16]:.1f} ms once the group spans two nodes (ep=16), {l[400, 16] / l[400, 8]:.1f}x; at 800 Gb/s ep=16 takes
  {l[800, 16]:.1f} ms. Inside the node the NICs {"do not matter" if same_inside else "matter little"} ({l[400, 8]:.1f} vs
  {l[800, 8]:.1f} ms)."""
if MOE_MODELLED:
    s = ep_study.set_index(["network", "ep"])
    b400 = ep_study[ep_study.network == "400 Gb/s"].sort_values("tokens_per_s").iloc[-1]
    b800 = ep_study[ep_study.network == "800 Gb/s"].sort_values("tokens_per_s").iloc[-1]
    gap400 = pct(s.loc[("400 Gb/s", 16)].tokens_per_s, s.loc[("400 Gb/s", 8)].tokens_per_s)
    gap800 = pct(s.loc[("800 Gb/s", 16)].tokens_per_s, s.loc[("800 Gb/s", 8)].tokens_per_s)
    closes = ("narrows the gap" if abs(gap800) < abs(gap400) else "does not narrow the gap") + \\
             (" but does not close it" if gap800 < 0 else " and closes it")
    mem = ep_study.memory_gib
    mem_note = (f"the best plans need {mem.min():.0f}-{mem.max():.0f} GiB whatever the EP degree: with ZeRO-"
                f"{int(b400.zero_stage)} the expert states are sharded over all GPUs anyway, so larger EP buys no memory here"
                if mem.max() - mem.min() < 0.05 * mem.max() else
                f"the best plans need {mem.min():.0f}-{mem.max():.0f} GiB across EP degrees")
    inside = int(b400.ep) <= 8 and int(b800.ep) <= 8
    text += f"""
* **Whole step:** the best plan at 400 Gb/s uses ep={int(b400.ep)} (`{b400.config}`, {b400.tokens_per_s:,.0f} tokens/s,
  MFU {100 * b400.mfu:.1f}%). The best plan with ep=16 (two nodes per EP group) is {gap400:+.1f}% against the best ep=8
  plan, and ep=64 {pct(s.loc[("400 Gb/s", 64)].tokens_per_s, s.loc[("400 Gb/s", 8)].tokens_per_s):+.1f}%; exposed all-to-all
  grows from {s.loc[("400 Gb/s", 8)].ep_comm_exposed_s:.2f} s (ep=8) to {s.loc[("400 Gb/s", 16)].ep_comm_exposed_s:.2f} s (ep=16) per step.
* **800 Gb/s {closes}:** ep=16 is then {gap800:+.1f}% against ep=8; the best plan uses ep={int(b800.ep)}
  ({b800.tokens_per_s:,.0f} tokens/s).
* **Memory:** {mem_note}.
* """ + (f"**Keep expert parallelism inside the node** for {spec.name} on this cluster, at both network speeds."
          if inside else
          f"**The search puts EP across nodes** (ep={int(b400.ep)} at 400 Gb/s, ep={int(b800.ep)} at 800 Gb/s).")
else:
    text += """
* **Whole step:** not available -- the simulator does not price expert layers yet, so it cannot say whether the
  all-to-all above outweighs what a larger EP saves in memory."""
say(text)'''),
]


NOTEBOOKS = {
    "llama3_70b_on_256_h100.ipynb": LLAMA70B,
    "gpu_comparison.ipynb": GPU_COMPARISON,
    "network_sensitivity.ipynb": NETWORK,
    "moe_ep_placement.ipynb": MOE,
}


def build(cells) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, source in cells:
        nb.cells.append(new_markdown_cell(source) if kind == "md" else new_code_cell(source))
    for i, cell in enumerate(nb.cells):       # stable ids keep regenerated files identical
        cell["id"] = f"cell-{i:02d}"
    return nb


def execute(nb: nbformat.NotebookNode, cwd: Path, timeout_s: int = 120) -> nbformat.NotebookNode:
    """Run ``nb`` in a fresh python3 kernel (raises ``nbclient.exceptions.CellExecutionError``)."""
    from nbclient import NotebookClient
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", action="store_true", help="run each notebook and save its outputs")
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write the notebooks to")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, cells in NOTEBOOKS.items():
        nb = build(cells)
        if args.execute:
            nb = execute(nb, HERE.parent)
        nbformat.write(nb, args.out / name)
        print(f"wrote {args.out / name}{' (executed)' if args.execute else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
