"""Time of one engine step (one forward pass) of a serving worker, with its breakdown.

One step of one attention-data-parallel rank processes ``P`` prompt tokens (queries attending
to ``Kp`` keys on average) and one token for each of ``d`` decoding requests with ``Ld``
tokens of context. Its time is the sum over layers of ``cost_models.inference_layers``, the
collectives of ``cost_models.inference_comm``, the LM head, and ``kernel_fixed_s`` per kernel,
then the host: a step not covered by a CUDA graph cannot finish before the host has launched
its kernels one by one (``host_launch_s`` each; vLLM's piecewise graphs launch only the
attention kernels eagerly), and the host's per-step work (``host_step_s``) adds to the step
unless the engine's overlap scheduler runs it under the previous step, where only what exceeds
the GPU time shows (SGLang v0.4 blog, TensorRT-LLM "Overlap Scheduler" doc).

Pipeline parallelism pp: the rank's decoding requests move as pp micro-batches through pp
stages of num_layers/pp layers each; every request advances once per round of pp micro-batch
steps, so the step time is that round: all layers at decodes/pp, plus pp LM heads and pp stage
hand-offs. A prompt chunk moves as one micro-batch through all stages (its latency is all the
layers at its full size; the stages it leaves idle are not credited, a conservative bound).

Layers: dense layers use ``ModelSpec.ffn_hidden_size`` (or ``moe.dense_ffn_hidden_size``), MoE
layers their experts. Collectives per layer: the attention output all-reduce over tp, and after
the MLP either the all-reduce over tp (dense, or experts with adp = 1) or, with attention data
parallelism, the expert dispatch and combine all-to-all over the tp x adp expert group.
All arrays broadcast; model, hardware, behaviour and formats are scalars.
"""
from __future__ import annotations

import numpy as np

from cost_models.inference_comm import all_to_all_time_s, allreduce_time_s, p2p_time_s
from cost_models.params import routed_expert_width
from cost_models.inference_layers import (ACT_BYTES, KERNELS, attention_block_s, dense_mlp_s, elementwise_s,
                                          layer_rates, lm_head_s, moe_block_s)
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from model_specs.model_spec import ModelSpec

#: step-time parts reported by ``step_time``
STEP_PARTS = ("attention_s", "mlp_s", "elementwise_s", "lm_head_s", "comm_s", "kernel_fixed_s", "host_s")


def _f(x):
    return np.asarray(x, dtype=float)


def step_time(model: ModelSpec, cluster: ClusterSpec, eff: ServingEfficiency, behaviour: ServingBehaviour,
              dense_format: str, expert_format: str, kv_bytes: float,
              tp, adp, pp, moe_tp, moe_ep, prefill_tokens, prefill_keys, decode_reqs, decode_ctx,
              logits_tokens=None) -> dict[str, np.ndarray]:
    """Seconds of one step and its parts (``STEP_PARTS``, plus ``gpu_s`` and ``step_s``).

    ``prefill_tokens``, ``decode_reqs`` are per attention-DP rank; ``logits_tokens`` (default:
    one per decoding request plus one per started prompt, approximated by ``decode_reqs``
    plus the prompt tokens' share) are the tokens the LM head scores.
    """
    rates = layer_rates(cluster.gpu, eff, dense_format, expert_format)
    tp, adp, pp = _f(tp), _f(adp), _f(pp)
    moe_tp, moe_ep = _f(moe_tp), _f(moe_ep)
    P = _f(prefill_tokens) + 0.0 * pp
    d = _f(decode_reqs) / pp
    T = P + d
    logits = (d + np.minimum(P, 1.0)) if logits_tokens is None else _f(logits_tokens) / pp
    h = model.hidden_size

    attn, attn_kernels = attention_block_s(model, rates, tp, P, prefill_keys, d, decode_ctx, kv_bytes)
    n_layers = float(model.num_layers)
    n_moe = float(model.num_moe_layers)
    n_dense = n_layers - n_moe
    dense_ffn = model.ffn_hidden_size
    if model.moe is not None and model.moe.dense_ffn_hidden_size:
        dense_ffn = model.moe.dense_ffn_hidden_size
    mlp = n_dense * dense_mlp_s(model, rates, tp, T, dense_ffn) if n_dense else 0.0
    kernels = n_layers * attn_kernels + n_dense * KERNELS["mlp"]
    if n_moe:
        moe_s, moe_kernels = moe_block_s(model, rates, tp, adp, moe_tp, moe_ep, T)
        mlp = mlp + n_moe * moe_s
        kernels = kernels + n_moe * moe_kernels

    # collectives: attention output all-reduce over tp; after the MLP, an all-reduce over tp or
    # (with attention DP and experts) dispatch + combine over the expert group
    msg = T * h * ACT_BYTES
    oneshot, stated = behaviour.oneshot_allreduce(msg, tp, T)
    ar = allreduce_time_s(msg, tp, cluster, eff, behaviour.custom_allreduce, oneshot, stated)
    comm = n_layers * ar + n_dense * ar
    ar_kernels = np.where(tp > 1, 1.0, 0.0)
    kernels = kernels + (n_layers + n_dense) * ar_kernels
    # an engine that fuses the all-reduce with the residual add and the RMSNorm after it runs
    # that norm inside the all-reduce kernel (``ServingBehaviour.allreduce_norm_fusion``; off
    # under attention data parallelism): one kernel fewer for each all-reduce a counted norm
    # follows: a dense layer's attention output (the MLP's norm) and its MLP output (the next
    # layer's input norm, counted with the attention block); a MoE layer's MoE output (the next
    # input norm; ``KERNELS["moe"]`` counts no norm before the experts)
    fused = np.where(behaviour.allreduce_norm_fusion & (adp <= 1), ar_kernels, 0.0)
    kernels = kernels - 2.0 * n_dense * fused
    if n_moe:
        group = tp * adp
        k_eff = np.minimum(float(model.moe.top_k), moe_ep)
        a2a = 2.0 * all_to_all_time_s(T * k_eff * routed_expert_width(model) * ACT_BYTES, group, cluster, eff)
        use_a2a = adp > 1
        comm = comm + n_moe * np.where(use_a2a, a2a, ar)
        kernels = kernels + n_moe * np.where(use_a2a, 2.0, ar_kernels - fused)
    stage_cross = (tp * adp) >= cluster.gpus_per_node
    p2p = np.where(pp > 1, p2p_time_s(T * h * ACT_BYTES, stage_cross, cluster, eff), 0.0)

    head = lm_head_s(model, rates, tp, logits)
    elem = n_layers * elementwise_s(model, rates, T)
    attn_total = n_layers * attn
    fixed = (kernels + KERNELS["head"]) * rates.kernel_fixed_s
    # pp micro-batches per round: layers are all traversed once per micro-batch, the head and
    # hand-off once per stage per micro-batch
    gpu = (attn_total + mlp + elem + comm + fixed - KERNELS["head"] * rates.kernel_fixed_s
           + pp * (head + KERNELS["head"] * rates.kernel_fixed_s + p2p))
    mlp = _f(mlp)

    # host: eager launches of the kernels a CUDA graph does not cover, and per-step work
    mixed = _f(prefill_tokens) > 0
    graphed = behaviour.graph_covers(_f(decode_reqs), mixed)
    all_kernels = pp * (kernels + KERNELS["head"])
    if behaviour.cuda_graphs == "full_and_piecewise":
        eager_kernels = np.where(graphed, 0.0, pp * n_layers * 1.0)   # attention launched outside the pieces
    else:
        eager_kernels = np.where(graphed, 0.0, all_kernels)
    launch = eager_kernels * behaviour.host_launch_s
    busy = np.maximum(gpu, launch)
    if behaviour.overlap_scheduler:
        host_exposed = np.maximum(behaviour.host_step_s - busy, 0.0)
    else:
        host_exposed = np.full_like(busy, behaviour.host_step_s)
    step = busy + host_exposed
    host = step - gpu
    return {
        "attention_s": _f(attn_total), "mlp_s": mlp * np.ones_like(gpu), "elementwise_s": _f(elem),
        "lm_head_s": pp * head, "comm_s": _f(comm) + pp * p2p, "kernel_fixed_s": pp * 0 + fixed,
        "host_s": host, "gpu_s": gpu, "step_s": step,
    }
