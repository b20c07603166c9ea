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

Pipeline parallelism pp: the rank's d decoding requests move as m = min(d, pp) micro-batches
of d / m requests (at least one request each) through pp stages of num_layers/pp layers each;
every request advances once per round, so the step time is that round: with m = pp every stage
is busy all round and the largest stage paces it, pp x its ceil(L / pp) layers at d / pp (pp x
ceil(L / pp) / L of all the layers, ``kv_cache.largest_stage_share``: 1.049x for 61 layers on pp
4), plus pp LM heads (counted on that stage: a bound, as for its memory) and pp stage hand-offs;
with fewer
requests than stages (m < pp) a request's round is its trip through every stage, all layers at
one request, its LM head and the pp hand-offs (the stages idle in between; the last one, back
to the first stage, carries only the sampled token ids), not a fraction of a request. A prompt
chunk moves as one micro-batch through all stages (its latency is all the layers at its full
size, one LM head, pp - 1 activation hand-offs and the token ids back; the stages it leaves
idle are not credited, a conservative bound), and a step of a prompt alone is that one
micro-batch. Each
micro-batch is a forward pass of its own, so a CUDA graph covers it when its d / m requests are
within the engine's graph limit (not the rank's d).

Layers: dense layers use ``ModelSpec.ffn_hidden_size`` (or ``moe.dense_ffn_hidden_size``), MoE
layers their experts. Collectives per layer: the attention output all-reduce over tp, and after
the MLP either the all-reduce over tp (dense, or experts with adp = 1) or, with attention data
parallelism, the expert dispatch and combine all-to-all over the tp x adp expert group.
All arrays broadcast; model, hardware, behaviour and formats are scalars.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np

from cost_models.inference_comm import all_gather_time_s, all_to_all_time_s, allreduce_time_s, p2p_time_s
from cost_models.kv_cache import largest_stage_share, layer_counts
from cost_models.serving_memory import lm_head_dp_share
from cost_models.params import routed_expert_width
from cost_models.topology import group_span
from cost_models.inference_layers import (ACT_BYTES, KERNELS, activation_quant_s, attention_block_s, dense_mlp_s,
                                          elementwise_s, gemm_s, layer_rates, lm_head_s, moe_block_s)
from cost_models.weight_formats import canonical_format, runs_natively
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from model_specs.draft_head import DraftHead
from model_specs.model_spec import ModelSpec

#: bytes of one sampled token id handed from the last pipeline stage back to the first (int64,
#: as the engines' sampled-token tensors hold them)
TOKEN_ID_BYTES = 8.0

#: step-time parts reported by ``step_time``
STEP_PARTS = ("attention_s", "mlp_s", "elementwise_s", "lm_head_s", "comm_s", "kernel_fixed_s", "host_s", "draft_s")


def _f(x):
    return np.asarray(x, dtype=float)


def norm_fusion_runs(behaviour: ServingBehaviour, tp, adp):
    """Whether (numpy bool, per row) a tensor-parallel all-reduce runs fused with the residual add
    and the RMSNorm after it (``ServingBehaviour.allreduce_norm_fusion``): an engine that fuses, an
    all-reduce to run (tp > 1), no attention data parallelism. ``layer_collectives`` counts one
    kernel fewer for it, and the fused norm also quantises the next GEMM's input
    (``activation_quant_s``'s ``norm_fused``)."""
    return behaviour.allreduce_norm_fusion & (np.asarray(tp) > 1) & (np.asarray(adp) <= 1)


def layer_collectives(model: ModelSpec, cluster: ClusterSpec, eff: ServingEfficiency, behaviour: ServingBehaviour,
                      tokens, tp, adp, moe_ep, n_dense, n_moe, moe_tp=1.0):
    """(seconds, kernels) of the collectives of ``n_dense`` dense and ``n_moe`` routed-expert
    layers, ``tokens`` tokens per attention-DP rank: each layer's attention-output all-reduce
    over tp; after a dense MLP an all-reduce over tp; after the experts the same all-reduce, or
    with attention DP the dispatch + combine all-to-all over the tp x adp expert group, where a
    token reaches every GPU holding a slice of an expert it routes to: min(top_k, moe_ep) expert
    groups x their moe_tp slices, at most the whole group (with moe_ep 1 the all-gather of every
    token to all moe_tp GPUs and the reduce-scatter back). An engine
    that fuses the all-reduce with the residual add and the RMSNorm after it
    (``ServingBehaviour.allreduce_norm_fusion``; off under attention data parallelism) runs that
    norm inside the all-reduce kernel: one kernel fewer for each all-reduce a counted norm
    follows: a dense layer's attention output (the MLP's norm) and its MLP output (the next
    layer's input norm, counted with the attention block); a MoE layer's MoE output (the next
    input norm; ``KERNELS["moe"]`` counts no norm before the experts). A parallel block's dense
    layer (``ModelSpec.parallel_attention_mlp``) runs one all-reduce, after its two outputs are summed."""
    h = model.hidden_size
    T = _f(tokens)
    msg = T * h * ACT_BYTES
    oneshot, stated = behaviour.oneshot_allreduce(msg, tp, T)
    ar = allreduce_time_s(msg, tp, cluster, eff, behaviour.custom_allreduce, oneshot, stated)
    n_layers = n_dense + n_moe
    # a parallel block (``ModelSpec.parallel_attention_mlp``, dense layers only) reduces the sum
    # of its attention and MLP outputs once: no all-reduce of its own after the MLP (vLLM
    # model_executor/models/falcon.py: ``reduce_row_parallel_results`` false for ``parallel_attn``,
    # ``mlp_output += attention_output`` then one ``tensor_model_parallel_all_reduce``)
    mlp_reduces = 0.0 if model.parallel_attention_mlp else 1.0
    comm = n_layers * ar + n_dense * ar * mlp_reduces
    ar_kernels = np.where(tp > 1, 1.0, 0.0)
    kernels = (n_layers + n_dense * mlp_reduces) * ar_kernels
    fused = np.where(norm_fusion_runs(behaviour, tp, adp), 1.0, 0.0)
    kernels = kernels - (1.0 + mlp_reduces) * n_dense * fused
    if n_moe:
        group = tp * adp
        k_eff = np.minimum(np.minimum(float(model.moe.top_k), moe_ep) * _f(moe_tp), group)
        a2a = 2.0 * all_to_all_time_s(T * k_eff * routed_expert_width(model) * ACT_BYTES, group, cluster, eff)
        use_a2a = adp > 1
        comm = comm + n_moe * np.where(use_a2a, a2a, ar)
        kernels = kernels + n_moe * np.where(use_a2a, 2.0, ar_kernels - fused)
    return comm, kernels


def lm_head_collectives(model: ModelSpec, cluster: ClusterSpec, eff: ServingEfficiency, behaviour: ServingBehaviour,
                        tp, head_dp, logits_tokens):
    """(seconds, kernels) of the collectives an LM head split over tp x ``head_dp`` GPUs adds
    (``ServingBehaviour.lm_head_split_over_attention_dp``; none where head_dp is 1), for
    ``logits_tokens`` tokens per attention-DP rank, all head_dp ranks alike: the gather of every
    rank's hidden states to the whole group (SGLang ``dp_gather_replicate`` ->
    ``_dp_gather_via_all_reduce``: an all-reduce of the zero-filled head_dp x tokens x h 16-bit
    buffer, through the engine's all-reduce kernels) and the all-gather of the logits' vocabulary
    shards over the group (``tensor_model_parallel_all_gather``: head_dp x tokens x V 16-bit
    gathered on each GPU); ``dp_scatter`` then copies the rank's rows locally."""
    g = _f(head_dp)
    group = _f(tp) * g
    rows = _f(logits_tokens) * g
    msg = rows * model.hidden_size * ACT_BYTES
    oneshot, stated = behaviour.oneshot_allreduce(msg, group, rows)
    gather = allreduce_time_s(msg, group, cluster, eff, behaviour.custom_allreduce, oneshot, stated)
    vocab = all_gather_time_s(rows * model.vocab_size * ACT_BYTES, group, cluster, eff)
    on = g > 1.0
    return np.where(on, gather + vocab, 0.0), np.where(on, 2.0, 0.0)


@lru_cache(maxsize=64)
def mtp_layer_model(model: ModelSpec) -> ModelSpec:
    """The model as its MTP modules' transformer layer sees it: a softmax-attention layer even where
    the model mixes in linear attention (Qwen3-Next / Qwen3.5: vLLM qwen3_next_mtp.py and
    qwen3_5_mtp.py build the module's layer with layer_type="full_attention"), so its attention is
    not the model's mean over layer kinds; the model itself otherwise."""
    return replace(model, linear_attention=None) if model.linear_attention is not None else model


def mtp_draft_pass(model: ModelSpec, cluster: ClusterSpec, eff: ServingEfficiency, behaviour: ServingBehaviour,
                   rates, kv_bytes: float, tp, adp, moe_tp, moe_ep, decode_reqs, decode_ctx, queries=1.0,
                   prefill_tokens=0.0, prefill_keys=0.0):
    """(GPU seconds, kernels) of one pass of the multi-token-prediction module for
    ``decode_reqs`` requests of ``queries`` tokens each (1 for a draft after the first; the first
    pass of a step reads the tokens the main model just kept, E a request, as the engines' MTP /
    EAGLE drafters extend their own KV cache with them) and ``prefill_tokens`` prompt tokens
    (a prompt's step runs the module over the prompt: its KV cache and the first draft): the
    module's projection of [norm(h); norm(embedding)] (2h x h, whole on every GPU, as vLLM's and
    TensorRT-LLM's MTP layers hold it), one transformer layer of the model's last kind (a
    routed-expert layer for a MoE model; attention over the module's own KV cache), its
    collectives, and the shared LM head scoring one draft a request (``cost_models.speculative``)."""
    h = model.hidden_size
    d, q, P = _f(decode_reqs), _f(queries), _f(prefill_tokens)
    T = P + d * q
    proj = gemm_s(T, 2.0 * h * h, rates.dense_flops_per_s, rates.dense_weight_bytes, rates, 2 * h, h)
    attn, attn_kernels = attention_block_s(mtp_layer_model(model), rates, tp, P, prefill_keys, d, decode_ctx,
                                           kv_bytes, q)
    if model.num_moe_layers:
        mlp, mlp_kernels = moe_block_s(model, rates, tp, adp, moe_tp, moe_ep, T)
        comm, comm_kernels = layer_collectives(model, cluster, eff, behaviour, T, tp, adp, moe_ep, 0.0, 1.0, moe_tp)
    else:
        ffn = model.ffn_hidden_size
        mlp, mlp_kernels = dense_mlp_s(model, rates, tp, T, ffn), KERNELS["mlp"]
        comm, comm_kernels = layer_collectives(model, cluster, eff, behaviour, T, tp, adp, moe_ep, 1.0, 0.0)
    # the two input norms and the concatenation: read and write 2h elements a token
    norms = T * 4.0 * h * ACT_BYTES / rates.hbm_bytes_per_s
    logits = d + np.minimum(P, 1.0)
    # the module's shared head is built as the main model's (SGLang deepseek_nextn.py:
    # ``use_attn_tp_group=enable_dp_lm_head``), so it is split and gathered alike
    head_dp = lm_head_dp_share(model, adp, behaviour.lm_head_split_over_attention_dp)
    head_comm, head_kernels = lm_head_collectives(model, cluster, eff, behaviour, tp, head_dp, logits)
    gpu = (proj + attn + mlp + elementwise_s(model, rates, T) + norms + comm
           + lm_head_s(model, rates, tp, logits, head_dp) + head_comm)
    kernels = 3.0 + attn_kernels + mlp_kernels + comm_kernels + KERNELS["head"] + head_kernels
    return gpu + kernels * rates.kernel_fixed_s, kernels


def eagle_draft_pass(head: DraftHead, cluster: ClusterSpec, eff: ServingEfficiency, behaviour: ServingBehaviour,
                     rates, kv_bytes: float, tp, adp, decode_reqs, decode_ctx, queries=1.0, prefill_tokens=0.0,
                     prefill_keys=0.0, fuse=True):
    """(GPU seconds, kernels) of one pass of an EAGLE-3 draft head (``model_specs.draft_head``)
    for ``decode_reqs`` requests of ``queries`` tokens each and ``prefill_tokens`` prompt tokens,
    at the 16-bit ``rates`` of its weights: with ``fuse`` (a step's first pass, which reads the
    target's hidden states of the tokens it kept) the projection of the ``fused_states`` target
    states (3h x h); the embedding half of the attention's 2h-wide query / key / value input
    (h x (a + 2g) d / tp, beside the half ``attention_block_s`` prices); the head's decoder
    layers (attention over its own KV cache, its dense MLP, their all-reduces over tp); and its
    output head over the draft vocabulary, one draft a request. Split over tp like the target
    (vLLM and SGLang build the draft with the target's tensor-parallel group)."""
    m = head.layer
    h, a, g, dh = m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim or m.hidden_size // m.num_heads
    d, q, P = _f(decode_reqs), _f(queries), _f(prefill_tokens)
    T = P + d * q
    fc = gemm_s(T, float(head.fused_states) * h * h, rates.dense_flops_per_s, rates.dense_weight_bytes, rates,
                head.fused_states * h, h) if fuse else 0.0 * T
    qkv_in = (a + 2.0 * g) * dh / _f(tp)
    embed_half = gemm_s(T, h * qkv_in, rates.dense_flops_per_s, rates.dense_weight_bytes, rates, h, qkv_in)
    attn, attn_kernels = attention_block_s(m, rates, tp, P, prefill_keys, d, decode_ctx, kv_bytes, q)
    mlp = dense_mlp_s(m, rates, tp, T, m.ffn_hidden_size)
    n = float(m.num_layers)
    comm, comm_kernels = layer_collectives(m, cluster, eff, behaviour, T, tp, adp, 1.0, n, 0.0)
    logits = d + np.minimum(P, 1.0)
    gpu = (fc + n * (embed_half + attn + mlp + elementwise_s(m, rates, T)) + comm
           + lm_head_s(m, rates, tp, logits))
    kernels = (2.0 if fuse else 1.0) + n * (attn_kernels + KERNELS["mlp"]) + comm_kernels + KERNELS["head"]
    return gpu + kernels * rates.kernel_fixed_s, kernels


def pipeline_domain_crossings(stage_gpus, pp, domain_gpus):
    """How many of a round's pp stage hand-offs (cyclic: the last stage's token goes back to the
    first) leave an NVLink domain of ``domain_gpus`` GPUs, per row: all pp when a stage fills a
    domain or more; else, stages packed floor(domain / stage) to a domain, one per domain the
    pipeline spans when it spans more than one (tp 4 x pp 4 on 8-GPU nodes: 2 of 4), none within
    one domain."""
    stage, pp, dom = _f(stage_gpus), _f(pp), float(domain_gpus)
    _, domains = group_span(pp, stage, dom)      # a stage filling a domain: pp domains
    return np.where(stage >= dom, pp, np.where(domains > 1, domains, 0.0))


def step_time(model: ModelSpec, cluster: ClusterSpec, eff: ServingEfficiency, behaviour: ServingBehaviour,
              dense_format: str, expert_format: str, kv_bytes: float,
              tp, adp, pp, moe_tp, moe_ep, prefill_tokens, prefill_keys, decode_reqs, decode_ctx,
              logits_tokens=None, draft_tokens=0, kept_tokens=None, draft_head: DraftHead | None = None
              ) -> dict[str, np.ndarray]:
    """Seconds of one step and its parts (``STEP_PARTS``, plus ``gpu_s`` and ``step_s``).

    ``prefill_tokens``, ``decode_reqs`` are per attention-DP rank; ``logits_tokens`` (default:
    one per decoding request plus one per started prompt, approximated by ``decode_reqs``
    plus the prompt tokens' share) are the tokens the LM head scores.

    ``draft_tokens`` k > 0: the step speculates (``cost_models.speculative``): each decoding
    request puts k + 1 tokens through the main model (its last token and k drafts, verified in
    one pass: GEMM rows, attention queries and logits k + 1 times a request, its KV cache read
    once), and the MTP module drafts the next k in k passes (``mtp_draft_pass``; reported as
    ``draft_s``, inside ``step_s``): the first over the ``kept_tokens`` (E, default k + 1) each
    request kept and the step's prompt tokens, the others over one token a request. The engines
    capture the drafting in the same CUDA graphs as the step. With ``draft_head`` an EAGLE-3
    head drafts instead of the MTP module (``eagle_draft_pass``, its 16-bit weights' rates).
    """
    attention_format = behaviour.prefill_attention_format(kv_bytes)
    rates = layer_rates(cluster.gpu, eff, dense_format, expert_format, model.int4_group_size, attention_format)
    tp, adp, pp = _f(tp), _f(adp), _f(pp)
    moe_tp, moe_ep = _f(moe_tp), _f(moe_ep)
    q = 1.0 + float(draft_tokens)
    P = _f(prefill_tokens) + 0.0 * pp
    decoding = _f(decode_reqs) + 0.0 * pp
    # decode micro-batches per round m = min(d, pp) of d / m requests (module docstring); a step
    # with no decodes is its prompt chunk alone, one micro-batch (one LM head, one pass of the
    # host's kernels)
    d = np.where(decoding >= pp, decoding / pp, np.minimum(decoding, 1.0))
    m = np.where(d > 0, decoding / np.maximum(d, 1e-12), 1.0)
    T = P + d * q
    logits = (d * q + np.minimum(P, 1.0)) if logits_tokens is None else _f(logits_tokens) / m
    h = model.hidden_size

    attn, attn_kernels = attention_block_s(model, rates, tp, P, prefill_keys, d, decode_ctx, kv_bytes, q)
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

    # activation quantisation in kernels of its own before the W8A8 / W4A4 GEMMs of the softmax
    # attention and dense MLP layers (``ServingBehaviour.activation_quant_inputs``), where the GPU
    # runs the format on its tensor cores (a weight-only fallback keeps 16-bit activations)
    fmt = canonical_format(dense_format)
    quant = behaviour.quant_inputs(fmt)
    quant_s = 0.0
    if quant and model.mla is None and runs_natively(fmt, cluster.gpu):
        full, window, _ = layer_counts(model)
        norm_fused = norm_fusion_runs(behaviour, tp, adp)
        qa_s, qa_k, qm_s, qm_k = activation_quant_s(model, rates, tp, T, quant, fmt, dense_ffn, norm_fused)
        quant_s = (full + window) * qa_s + n_dense * qm_s
        kernels = kernels + (full + window) * qa_k + n_dense * qm_k

    comm, comm_kernels = layer_collectives(model, cluster, eff, behaviour, T, tp, adp, moe_ep, n_dense, n_moe, moe_tp)
    kernels = kernels + comm_kernels
    n_cross = pipeline_domain_crossings(tp * adp, pp, cluster.gpus_per_node)
    hand_in = p2p_time_s(T * h * ACT_BYTES, False, cluster, eff)
    hand_out = p2p_time_s(T * h * ACT_BYTES, True, cluster, eff)
    # pp hand-offs a round: along one request's path when it crosses the stages alone (m < pp);
    # with every stage busy each stage sends all pp micro-batches over its own link, and a stage
    # whose link leaves the domain sends pp over the NIC (counted on the pacing stage: a bound)
    busy = decoding >= pp
    # along one path the last stage's hand-off back to the first carries only the sampled token
    # ids (TOKEN_ID_BYTES each, one a logit row), not activations; it leaves the domain whenever any
    # hand-off does (the last and first stages then sit in different domains)
    cyc_cross = n_cross > 0
    ids = p2p_time_s(logits * TOKEN_ID_BYTES, cyc_cross, cluster, eff)
    path = (n_cross - cyc_cross) * hand_out + (pp - 1.0 - (n_cross - cyc_cross)) * hand_in + ids
    paced_sends = pp * np.where(n_cross > 0, hand_out, hand_in)
    handoffs = np.where(pp > 1, np.where(busy, paced_sends, path), 0.0)

    head_dp = lm_head_dp_share(model, adp, behaviour.lm_head_split_over_attention_dp)
    head = lm_head_s(model, rates, tp, logits, head_dp)
    # a head split over the tp x adp group (SGLang under attention DP): its gather and all-gather,
    # once per micro-batch like the head
    head_comm, head_kernels = lm_head_collectives(model, cluster, eff, behaviour, tp, head_dp, logits)
    # all stages busy (a micro-batch for each): the largest stage's layers, pp times, pace the round
    paced = np.where(busy, pp * largest_stage_share(model.num_layers, pp), 1.0)
    elem = paced * (n_layers * elementwise_s(model, rates, T) + quant_s)
    attn_total = paced * n_layers * attn
    mlp = paced * mlp
    comm = paced * comm
    fixed = (paced * kernels + KERNELS["head"]) * rates.kernel_fixed_s
    # m micro-batches per round: the layers are all traversed once per micro-batch size, the
    # head once per micro-batch, a hand-off at each of the pp stage boundaries
    gpu = (attn_total + mlp + elem + comm + fixed - KERNELS["head"] * rates.kernel_fixed_s
           + m * (head + KERNELS["head"] * rates.kernel_fixed_s) + handoffs)
    gpu = gpu + m * (head_comm + head_kernels * rates.kernel_fixed_s)
    mlp = _f(mlp)
    draft = 0.0 * gpu
    if draft_tokens:
        # each of the m micro-batches of a round drafts for its d requests on the last stage; a
        # prompt chunk (one micro-batch) runs the module over its tokens once
        kept = float(draft_tokens) + 1.0 if kept_tokens is None else _f(kept_tokens)
        # the first pass of the micro-batch that carries the prompt chunk (``first``) and of the
        # other m - 1, which carry only their d decodes (``first_decodes``)
        if draft_head is None:
            first, draft_kernels = mtp_draft_pass(model, cluster, eff, behaviour, rates, kv_bytes, tp, adp, moe_tp,
                                                  moe_ep, d, decode_ctx, kept, P, prefill_keys)
            first_decodes, _ = mtp_draft_pass(model, cluster, eff, behaviour, rates, kv_bytes, tp, adp, moe_tp,
                                              moe_ep, d, decode_ctx, kept)
        else:
            head_rates = layer_rates(cluster.gpu, eff, "bf16", "bf16", prefill_attention_format=attention_format)
            first, draft_kernels = eagle_draft_pass(draft_head, cluster, eff, behaviour, head_rates, kv_bytes, tp, adp,
                                                    d, decode_ctx, kept, P, prefill_keys)
            first_decodes, _ = eagle_draft_pass(draft_head, cluster, eff, behaviour, head_rates, kv_bytes, tp, adp,
                                                d, decode_ctx, kept)
        rest = 0.0
        if draft_tokens > 1:
            if draft_head is None:
                rest, _ = mtp_draft_pass(model, cluster, eff, behaviour, rates, kv_bytes, tp, adp, moe_tp, moe_ep, d,
                                         decode_ctx)
            else:
                rest, _ = eagle_draft_pass(draft_head, cluster, eff, behaviour, head_rates, kv_bytes, tp, adp, d,
                                           decode_ctx, fuse=False)
        # the prompt chunk rides one micro-batch, so its drafting is charged once: that
        # micro-batch's first pass, the other m - 1's over their decodes alone, and the later
        # drafts (one token a decode) in every micro-batch
        draft = np.where(d > 0, first + (m - 1.0) * first_decodes + m * (float(draft_tokens) - 1.0) * rest,
                         np.where(P > 0, first, 0.0))
        gpu = gpu + draft
        kernels = kernels + float(draft_tokens) * draft_kernels

    # host: eager launches of the kernels a CUDA graph does not cover, and per-step work. A graph
    # replays one forward pass, so its coverage is the batch of one micro-batch (d requests), not
    # the rank's m x d: under pipeline parallelism each engine schedules and runs every micro-batch
    # as a batch of its own and picks the graph by that batch's size (TensorRT-LLM
    # tensorrt_llm/_torch/pyexecutor/py_executor.py ``_executor_loop_pp``: one ``_schedule`` and
    # ``_forward_step`` per micro-batch, and model_engine.py ``_maybe_get_cuda_graph`` keys the
    # graph by ``len(batch.generation_requests)``; vLLM V1 vllm/v1/engine/core.py
    # ``step_with_batch_queue``, a queue of ``max_concurrent_batches`` = pp scheduler outputs each
    # run on its own; SGLang python/sglang/srt/managers/scheduler_pp_mixin.py ``event_loop_pp``,
    # pp running micro-batches each its own ScheduleBatch). Without stages d is the rank's batch.
    mixed = _f(prefill_tokens) > 0
    graphed = behaviour.graph_covers(d, mixed)
    all_kernels = m * (kernels + KERNELS["head"] + head_kernels)
    if behaviour.cuda_graphs == "full_and_piecewise":
        eager_kernels = np.where(graphed, 0.0, m * n_layers * 1.0)   # attention launched outside the pieces
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
        "lm_head_s": m * head, "comm_s": _f(comm) + handoffs + m * head_comm,
        "kernel_fixed_s": fixed + (m - 1.0) * KERNELS["head"] * rates.kernel_fixed_s + m * head_kernels * rates.kernel_fixed_s,
        "host_s": host, "draft_s": draft, "gpu_s": gpu, "step_s": step,
    }
