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
# # Aggregated or disaggregated serving? Pareto fronts on H100 and B200
#
# For one mixture-of-experts model (Qwen3-235B-A22B, 128 experts top-8) and one dense model
# (Llama-3.1-70B), served by TensorRT-LLM with FP8 weights on 16 GPUs, `paraplan serve plan`
# searches aggregated workers (one pool doing prefill and decode) and disaggregated pools
# (prefill workers + decode workers, KV cache moved between them), and draws the Pareto front
# of output tokens/s per GPU against tokens/s per user (1 / TPOT), among layouts meeting a
# TTFT objective. Two objectives: an interactive one (TTFT <= 500 ms, TPOT <= 20 ms) and a
# batch one (TTFT <= 3 s, TPOT <= 60 ms). Requests: 4096 prompt and 1024 output tokens.
#
# Every number below comes from the simulator (`simulator.serving`) with the serving efficiency
# fitted per GPU generation (`hardware_specs/serving_efficiency/`); the text is computed from it.
# This file is the source; `notebooks/serving_pareto.ipynb` is it executed
# (`python tools/notebooks.py notebooks/serving_pareto.py` refreshes it).

# %%
import io
import os

import pandas as pd
from IPython.display import Image, Markdown, display
from matplotlib.figure import Figure

from hardware_specs.errors import InputError
from paraplan.serving_plots import serving_pareto
from planners.serving import plan_serving
from simulator.serving.context import ServingContext

MODELS = {"MoE": "qwen3-235b-a22b", "dense": "llama3.1-70b"}
SYSTEMS = {"H100": "dgx-h100", "B200": "dgx-b200"}
SLOS = {"interactive": (500.0, 20.0), "batch": (3000.0, 60.0)}
GPUS, ISL, OSL = 16, 4096, 1024

plans = {}
for kind, model in MODELS.items():
    for gpu, system in SYSTEMS.items():
        ctx = ServingContext.build(model, system, "trtllm", "fp8", "fp8")
        for slo, (ttft_ms, tpot_ms) in SLOS.items():
            try:
                plans[kind, gpu, slo] = plan_serving(ctx, GPUS, ISL, OSL, ttft_ms, tpot_ms)
            except InputError as exc:         # no layout fits, or none meets the objective: the message says which
                plans[kind, gpu, slo] = exc
rows = []
for (kind, gpu, slo), plan in plans.items():
    if isinstance(plan, InputError):
        rows.append({"model": kind, "gpu": gpu, "slo": slo, "best_mode": None, "note": str(plan)})
        continue
    best = plan.best
    other = plan.candidates[plan.candidates.meets_slo & (plan.candidates["mode"] != best["mode"])]
    rows.append({"model": kind, "gpu": gpu, "slo": slo, "best_mode": best["mode"],
                 "tokens_per_s_per_gpu": round(best.tokens_per_s_per_gpu),
                 "ttft_ms": round(best.ttft_ms), "tpot_ms": round(best.tpot_ms, 1),
                 "other_mode_best_tokens_per_s_per_gpu": round(other.tokens_per_s_per_gpu.max()) if len(other) else None})
summary = pd.DataFrame(rows)
summary

# %%
fig = Figure(figsize=(12, 8), dpi=100)
axes = fig.subplots(2, 2)
for i, (kind, model) in enumerate(MODELS.items()):
    for j, gpu in enumerate(SYSTEMS):
        ax = axes[i][j]
        for (slo, (ttft_ms, tpot_ms)), style in zip(SLOS.items(), ("-", "--")):
            plan = plans[kind, gpu, slo]
            if isinstance(plan, InputError):
                continue
            serving_pareto(plan.front, ax=ax, tpot_ms=tpot_ms, label_prefix=f"{slo} (TTFT <= {ttft_ms:g} ms): ",
                           linestyle=style, title=f"{MODELS[kind]} on {GPUS} x {gpu}")
fig.tight_layout()
if os.environ.get("PARAPLAN_FIGURES"):
    fig.savefig(os.path.join(os.environ["PARAPLAN_FIGURES"], "serving_pareto.png"))
png = io.BytesIO()
fig.savefig(png, format="png")
display(Image(data=png.getvalue()))

# %% [markdown]
# ## What the fronts say

# %%
lines = []
for kind in MODELS:
    for gpu in SYSTEMS:
        for slo in SLOS:
            r = summary[(summary.model == kind) & (summary.gpu == gpu) & (summary.slo == slo)].iloc[0]
            if r.best_mode is None:
                lines.append(f"- {kind} on {gpu}, {slo}: no layout qualifies ({r.note}).")
                continue
            versus = (f"{r.tokens_per_s_per_gpu / r.other_mode_best_tokens_per_s_per_gpu:.2f}x the best "
                      f"{'disaggregated' if r.best_mode == 'agg' else 'aggregated'} layout"
                      if pd.notna(r.other_mode_best_tokens_per_s_per_gpu) else "the other mode meets no layout")
            lines.append(f"- {kind} on {gpu}, {slo} objective: **{r.best_mode}** wins with "
                         f"{r.tokens_per_s_per_gpu:,} tokens/s/GPU (TTFT {r.ttft_ms} ms, TPOT {r.tpot_ms} ms), "
                         f"{versus}.")
ok = summary.dropna(subset=["best_mode"])
gain = {}
for kind in MODELS:
    h = ok[(ok.model == kind) & (ok.gpu == "H100") & (ok.slo == "batch")]
    b = ok[(ok.model == kind) & (ok.gpu == "B200") & (ok.slo == "batch")]
    if len(h) and len(b):
        gain[kind] = b.tokens_per_s_per_gpu.iloc[0] / h.tokens_per_s_per_gpu.iloc[0]
disagg_wins = int((ok.best_mode == "disagg").sum())
lines.append("")
lines.append(f"Disaggregation wins {disagg_wins} of the {len(ok)} cases that some layout meets; "
             + "; ".join(f"at the batch objective B200 serves {g:.1f}x the tokens/s per GPU of H100 for the {k} model"
                         for k, g in gain.items()) + ".")
display(Markdown("\n".join(lines)))

# %% [markdown]
# ## Speculative decoding: where an EAGLE-3 head pays
#
# The same question for Llama-3.1-8B on one H100 (vLLM, FP8 weights, 1024 + 1024 tokens) with
# the public EAGLE-3 head (`examples/drafts/eagle3-llama3.1-8b`): TPOT with 3 drafted tokens a
# step against TPOT without, over the number of clients, for three per-token acceptances (no
# measured row prices a head, so the acceptance is an input: measure yours). The head's passes
# and the 4-token verification cost the same however many tokens are kept; what they save is
# the weights and the KV cache a step reads, once for every kept token.

# %%
from pathlib import Path

import numpy as np

from simulator.serving.aggregated import evaluate_agg

import paraplan

# the repository's examples/, found from the paraplan package whatever the working directory
HEAD = Path(paraplan.__file__).resolve().parents[1] / "examples" / "drafts" / "eagle3-llama3.1-8b"
BATCHES = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0])
ones = np.ones_like(BATCHES)


def tpot_ms(ctx):
    return 1e3 * evaluate_agg(ctx, ones, ones, ones, ones, ones, BATCHES, 1024, 1024)["tpot_s"]


plain = tpot_ms(ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "fp8", "fp8"))
speedup = {p: plain / tpot_ms(ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "fp8", "fp8",
                                                   speculative_tokens=3, draft_acceptance=p, draft_head=str(HEAD)))
           for p in (0.6, 0.7, 0.8)}
fig = Figure(figsize=(7, 4), dpi=100)
ax = fig.add_subplot()
for p, s in speedup.items():
    ax.plot(BATCHES, s, "-o", label=f"acceptance {p}")
ax.axhline(1.0, color="0.5", linewidth=1)
ax.set_xscale("log", base=2)
ax.set_xticks(BATCHES, [f"{b:g}" for b in BATCHES])
ax.set_xlabel("clients (requests in flight)")
ax.set_ylabel("TPOT without drafts / TPOT with 3 drafts")
ax.set_title("Llama-3.1-8B FP8 on one H100, vLLM, EAGLE-3 head, K = 3", fontsize=10)
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
if os.environ.get("PARAPLAN_FIGURES"):
    fig.savefig(os.path.join(os.environ["PARAPLAN_FIGURES"], "serving_eagle3.png"))
png = io.BytesIO()
fig.savefig(png, format="png")
display(Image(data=png.getvalue()))

# %%
s7 = speedup[0.7]
display(Markdown(
    f"At acceptance 0.7 the head speeds a lone client's TPOT up {s7[0]:.2f}x and {int(BATCHES[-1])} clients' "
    f"{s7[-1]:.2f}x (plain TPOT {plain[0]:.1f} and {plain[-1]:.1f} ms). The gain at many clients is an upper "
    "bound: the engines' own drafting overheads (scheduling the proposer, rejection sampling) are not modelled, "
    "and `paraplan serve plan` with drafts also reports the same search without them."))
