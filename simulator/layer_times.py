"""Per-layer times of one micro-batch on one GPU, for dense and MoE layers, and the model's ends.

The vectorized step model (``simulator.step_model``) evaluates this once per run of rows that
share a layer key (TP/CP/EP degrees, micro-batch, recomputation, overlap switches, kernel), and
then places layers on pipeline positions (``simulator.stage_layout``). Per layer kind
(``dense``, ``moe``) it returns, in seconds for one micro-batch:

* ``f``: forward (GEMMs, quantisation, attention core, element-wise kernels, and the TP, CP and
  EP communication the stack leaves exposed);
* ``b``: input-gradient backward (data-gradient GEMMs, attention backward, element-wise
  backward, exposed communication);
* ``w``: weight-gradient GEMMs (which reduce over the tokens: M = in-features, N = out-features,
  K = tokens, so a short micro-batch makes them skinny along K);
* ``b_split``, ``w_split``: the same two passes where the schedule runs W apart from B (the
  zero-bubble schedules' B and W ops): ``b`` and ``w`` above are the halves of one fused
  backward, whose backward collectives hide under the data- and weight-gradient GEMMs together
  (and whose host floor counts both passes' kernels), so ``b`` shrinks as ``w`` grows; a B that
  runs alone hides them under its own GEMMs only, each pass floored by its own kernels. Using
  ``b`` for a split B would make faster weight-gradient GEMMs lengthen the B passes on a
  zero-bubble schedule's critical path, i.e. a faster GPU a slower step;
* ``r``: what recomputation repeats before ``b`` when every layer is treated alike;
  ``r_full`` that of a layer recomputed in full (its whole forward with the TP and EP
  communication the stack exposes there), ``r_sel`` that of a layer that recomputes only the
  selected operations (``memory.RECOMPUTE_MODULES``: the attention core, the norms, the MLP
  activation, MLA's up-projections, the MoE dispatch: each its forward kernels, the dispatch
  its all-to-all too);

each at least the pass's kernels times the host's issue time (``EfficiencyModel.cpu_issue_s``):
an eager framework issues kernels one by one from Python, ahead of the GPU, so a small layer's
pass is host-bound (the floor is off under CUDA graphs);

and the parts of each for the step's breakdown, those of ``b_split`` / ``w_split`` apart
(``compute_bwd_split``, ``tp_base_split``, ``ep_base_split``). Communication is exposed as the software stack
decides (``ParallelConfig``): tensor-parallel collectives fully unless ``tp_comm_overlap``
under sequence parallelism (then what exceeds the GEMMs of the linear they pipeline with;
``tp_overlap_applies``, ``tp_exposed_per_linear``), expert all-to-alls fully unless
``ep_comm_overlap`` (then, as Megatron-Core's combined 1F1B pairs one micro-batch's forward
with another's backward, the forward's all-to-alls beyond the backward's compute and the
backward's beyond the forward's; a pass with no partner exposes all of its own,
``ep_unpaired_f`` / ``ep_unpaired_b``; their volume per the stack's dispatcher, ``ep_dispatch_dedup``),
context-parallel rings under the
attention core; the backward TP collectives under their own linear's gradient GEMMs with
``tp_backward_overlap``, except, under sequence parallelism, the all-gather of each
row-parallel output's gradient, which the gradient GEMMs wait for. Nothing here is a fitted
exposure share.
"""
from __future__ import annotations

import numpy as np

from cost_models import context_parallel, layer_costs, mamba, memory, moe as moe_costs
from cost_models.compute import LOW_PRECISION, compute_rates, gemm_time_s, kernel_counting_rates, sixteen_bit_dtype
from cost_models.cross_entropy import loss_tp_collectives
from cost_models.params import routed_expert_width
from cost_models.topology import group_collective_time_s
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import ATTENTION_KERNEL_CODES
from simulator.parallel_config import AttentionKernel

KINDS = ("dense", "moe")


def softmax_exposed_share(attention_kernel, eff: EfficiencyModel):
    """Share of the softmax exponentials added to the attention matmuls, per row: the serial
    kernel (FlashAttention-2) adds all, the pipelined one (FlashAttention-3) hides them while
    the matmuls last, ``auto`` is the generation's usual kernel (``EfficiencyModel``)."""
    return np.select([attention_kernel == ATTENTION_KERNEL_CODES[AttentionKernel.SERIAL],
                      attention_kernel == ATTENTION_KERNEL_CODES[AttentionKernel.PIPELINED]],
                     [1.0, 0.0], eff.exposed_softmax_fraction)


def attention_mma_share(attention_kernel, gpu):
    """Share of the attention matrix rate reached per row: the serial kernel (FlashAttention-2)
    issues warp-synchronous ``mma.sync`` only, which on Hopper reaches
    ``gpu.sync_mma_peak_fraction`` of the tensor peak; the other kernels reach all of it."""
    return np.where(attention_kernel == ATTENTION_KERNEL_CODES[AttentionKernel.SERIAL],
                    gpu.sync_mma_peak_fraction, 1.0)


def tp_overlap_applies(tp_overlap, sp, tp):
    """Whether the stack's TP communication overlap (``tp_comm_overlap``) applies, per row: only
    under sequence parallelism with ``tp > 1``; without it the TP all-reduces are priced as the
    stack runs them unpipelined (``tp_backward_overlap`` still applies).

    The overlap pipelines the all-gather before each column-parallel GEMM and the reduce-scatter
    after each row-parallel GEMM in chunks: collectives that only sequence parallelism has.
    Megatron-Core's switch is "overlapping of Linear layer execution with tensor parallel
    communication collectives like AllGather/ReduceScatter" (``megatron/core/
    model_parallel_config.py`` ``tp_comm_overlap`` at d98e8a64), set on Transformer Engine's
    layers as ``ub_overlap_ag`` / ``ub_overlap_rs`` (``megatron/core/extensions/
    transformer_engine.py`` ``TELinear.__init__``), and Megatron-LM refuses it otherwise
    (``megatron/training/arguments.py`` ``validate_args``: ``if args.tp_comm_overlap: assert
    args.sequence_parallel == True, 'Tensor parallel communication/GEMM overlap can happen only
    when sequence parallelism is enabled'``; the exports' rule ``tp_overlap_needs_sp``);
    Megatron-Bridge turns it off itself when TP < 2 or sequence parallelism is off
    (``comm_overlap.py`` ``_get_model_comm_overlap_cfgs`` at v0.2.0, as the megatron-bridge stack
    profiles cite). torch's
    async TP (torchtitan's ``enable_async_tensor_parallel``) is the same kind of pass:
    ``torch/_inductor/fx_passes/micro_pipeline_tp.py`` fuses all-gather + matmul and matmul +
    reduce-scatter and has no all-reduce pattern. So a stack profile that turns the overlap on
    (its recipes run sequence parallelism) hides nothing of a plan without it."""
    return np.asarray(tp_overlap, dtype=bool) & np.asarray(sp, dtype=bool) & (np.asarray(tp) > 1)


def tp_exposed_per_linear(tp_coll, sp, tp_overlap, tp_backward_overlap, blocks):
    """Exposed seconds of a layer's tensor-parallel collectives, per row: ``(forward, backward,
    backward of a B pass run apart from its W)``, each collective hidden under its own linear's
    GEMMs only, never under the layer's other GEMMs.

    ``tp_coll``: one ring all-reduce of the [tokens, h] activations (a sequence-parallel
    all-gather or reduce-scatter: half of it). ``tp_overlap``: userbuffers pipelining applies
    (``tp_overlap_applies``; sequence parallelism implied). ``blocks``: ``[(weight, windows)]``,
    one column-parallel entry and row-parallel exit pair each (attention, MLP; ``weight`` blocks
    of traffic, a share of one in a hybrid layer's mean), ``windows`` holding that block's
    ``tp_col_gemm_{fwd,dgrad,wgrad}_s`` and ``tp_row_gemm_{fwd,dgrad}_s``
    (``layer_costs._linear_times``; share-weighted where ``weight`` is a share, so a window is
    compared with ``weight`` x the collective).

    Per block: the column-parallel linear's backward collectives (NVIDIA/Megatron-LM@d98e8a64
    megatron/core/tensor_parallel/layers.py ``LinearWithGradAccumulationAndAsyncCommunication.
    backward``: with sequence parallelism the re-gather of its input, started before its
    data-gradient GEMM, and the reduce-scatter of its input gradient, started before its
    weight-gradient GEMM; without it the all-reduce of the input gradient) are waited for before
    that linear's backward returns, so they hide under that linear's own data- and weight-gradient
    GEMMs only (under its data-gradient GEMM alone in a B pass whose W runs later, zero-bubble
    schedules); the row-parallel output gradient's all-gather is synchronous
    (``_ReduceScatterToSequenceParallelRegion.backward``) and stays exposed. Userbuffers
    (Transformer Engine ``ub_overlap_ag`` / ``ub_overlap_rs`` forward, ``ub_bulk_dgrad`` /
    ``ub_bulk_wgrad`` and the row-parallel backward's ``ub_overlap_ag``) pipeline each collective
    with its own linear's GEMM: forward the input all-gather with the column-parallel GEMM and the
    output reduce-scatter with the row-parallel one; backward the column-parallel collectives as
    above and the output gradient's all-gather with the row-parallel data-gradient GEMM.
    (A linear's two backward collectives share its two GEMMs as one window here; Megatron's order
    pairs the re-gather with the data-gradient GEMM and the reduction with the weight-gradient one,
    which can expose a little more when one GEMM is shorter than its collective and the other
    longer.) A block given as ``(weight, windows, row_weight)``: its row-parallel exit carries
    ``row_weight`` blocks of traffic instead of ``weight`` (``parallel_block_tp_blocks``: a
    parallel block's two exits reduced once, by the MLP's). Pooling the layer's traffic under all its GEMMs hid e.g. the two 188 us
    collectives of Llama-3 8B's QKV (GQA: 768 columns a rank at tp 8, 8192 tokens, DGX H100)
    under the MLP's GEMMs, though QKV's own dgrad and wgrad last 115 and 105 us."""
    seq = np.asarray(sp, dtype=bool)
    ub = np.asarray(tp_overlap, dtype=bool)
    fwd = bwd = bwd_split = 0.0 * tp_coll
    for weight, win, *row_weight in blocks:
        c = weight * tp_coll
        half = c / 2.0
        col_f, col_d, col_w = win["tp_col_gemm_fwd_s"], win["tp_col_gemm_dgrad_s"], win["tp_col_gemm_wgrad_s"]
        row_f, row_d = win["tp_row_gemm_fwd_s"], win["tp_row_gemm_dgrad_s"]
        col_b = c                                       # re-gather + reduce-scatter, or the all-reduce
        if row_weight:
            # a parallel block's exit (``parallel_block_tp_blocks``): ``row_weight`` blocks of the
            # row-parallel reduction (its forward all-reduce, or reduce-scatter and its backward
            # all-gather), the column-parallel entry's collectives at ``weight`` as before
            r = row_weight[0] * tp_coll
            row_b = np.where(seq, r / 2.0, 0.0)
            entry = np.where(seq, half, 0.0)           # the input all-gather; identity without SP
            exit_f = np.where(seq, r / 2.0, r)         # the reduce-scatter, or the all-reduce
            fwd = fwd + np.where(ub, np.maximum(half - col_f, 0.0) + np.maximum(r / 2.0 - row_f, 0.0), entry + exit_f)
        else:
            row_b = np.where(seq, half, 0.0)            # the output gradient's all-gather
            fwd = fwd + np.where(ub, np.maximum(half - col_f, 0.0) + np.maximum(half - row_f, 0.0), c)
        fused = np.maximum(col_b - col_d - col_w, 0.0)
        alone = np.maximum(col_b - col_d, 0.0)
        ub_row = np.maximum(row_b - row_d, 0.0)
        bwd = bwd + np.where(ub, fused + ub_row, np.where(tp_backward_overlap, fused + row_b, col_b + row_b))
        bwd_split = bwd_split + np.where(ub, alone + ub_row,
                                         np.where(tp_backward_overlap, alone + row_b, col_b + row_b))
    return fwd, bwd, bwd_split


def parallel_block_tp_blocks(sp):
    """(forward, backward) tensor-parallel collectives of one parallel block
    (``ModelSpec.parallel_attention_mlp``), per row, in all-reduces of the [tokens, h]
    activations (a sequence-parallel all-gather or reduce-scatter: half of one).

    The attention output projection and the MLP down projection leave their outputs un-reduced and
    the sum is reduced once (EleutherAI/gpt-neox megatron/model/transformer.py
    ``ParallelTransformerLayer``: ``RowParallelLinear(..., parallel_output=self.gpt_j_residual)``
    and ``output = residual + self.reduce(output)``, ``reduce_from_model_parallel_region``, whose
    backward passes the gradient on): forward one all-reduce (sequential: two), or under sequence
    parallelism one reduce-scatter, whose backward is one output-gradient all-gather. The
    column-parallel entries keep theirs, one per linear as in the sequential block: forward the
    input all-gather under sequence parallelism (identity without), backward the input gradient's
    all-reduce (``copy_to_model_parallel_region``'s backward; under sequence parallelism the
    re-gather and reduce-scatter), since each column-parallel linear runs its own and no stack
    documents a fused QKV + MLP-input linear. So: forward 1 (sp: 1.5; sequential 2), backward 2
    (sp: 2.5; sequential 2 and 3)."""
    seq = np.asarray(sp, dtype=bool)
    return np.where(seq, 1.5, 1.0), np.where(seq, 2.5, 2.0)


def layer_times(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, rates, tokens, tp, cp, sp, rc,
                ep, etp, imbalance, tp_overlap, cp_kind, attention_kernel, flash_attention, ep_overlap,
                tp_backward_overlap=True, softmax_fusion=True, cuda_graphs=False, modules=0,
                ep_dispatch_dedup=False, fp8_current_scaling=False, attention_unpad=False,
                glu_clamp_eager=False, grouped_gemm_streams=1, cross_entropy="megatron_unfused",
                softmax_scale_pass=True, selective_modules=memory.SELECTIVE_DEFAULT, unfused_block_ops=False,
                yarn_rope_eager=False, cp_allgather_saves_kv=False, ep_carved_from_dp=False,
                nvfp4_rht_cast_fusion=False, expert_output_bias="megatron_eager") -> dict:
    """Per-layer times (seconds, one micro-batch) and FLOPs for the given layer keys; see the
    module docstring for the keys (``f_dense``, ``b_moe``, ...) and the model's ends
    (``emb_f``, ``emb_b``, ``head_f``, ``head_b``, ``head_w``, ``mtp_f``, ``mtp_b``,
    ``mtp_w``). ``modules``: the ``recompute_modules`` bit mask (``memory.MODULE_BITS``).
    ``fp8_current_scaling``: per-tensor current scaling for ``fp8`` GEMM operands
    (``ParallelConfig.fp8_current_scaling``). ``attention_unpad``: the stack copies the attention
    core's inputs into packed rows and its output back (``ParallelConfig.attention_unpad``).
    ``glu_clamp_eager``: a clamped GLU is clamped by separate ops before the activation
    (``ParallelConfig.glu_clamp_eager``; recomputing ``mlp_act`` repeats the clamp).
    ``grouped_gemm_streams``: per-expert GEMMs of a grouped linear that run at once
    (``ParallelConfig.grouped_gemm_streams``); the host still issues every one of them.
    ``cross_entropy``: the loss implementation (``ParallelConfig.cross_entropy``; a name, or codes
    per row, ``cost_models.cross_entropy``). ``softmax_scale_pass``: fp32 scores of a materialised
    core are scaled by their own op (``ParallelConfig.softmax_scale_pass``). ``selective_modules``:
    what ``selective`` recomputes when no modules are named (``ParallelConfig.selective_modules``
    as a modules mask: the stack's selective checkpointing). ``unfused_block_ops``: RoPE, the
    key/value repetition, the attention output's layout copy and the gated activation run as
    eager ops (``ParallelConfig.unfused_block_ops``; ``layer_costs.UNFUSED_*``). ``yarn_rope_eager``:
    RoPE runs as Megatron-Core's eager ops for a YaRN model whose concentration factor is not 1
    (``ParallelConfig.yarn_rope_eager``; ``layer_costs.eager_yarn_rope``). ``nvfp4_rht_cast_fusion``:
    Transformer Engine writes an NVFP4 operand's two copies in one kernel
    (``ParallelConfig.nvfp4_rht_cast_fusion``; ``layer_costs.linear_cast_bytes``).
    ``expert_output_bias``: how a biased MoE adds its routed experts' output bias
    (``ParallelConfig.expert_output_bias``; a name, or codes per row, ``moe.EXPERT_OUTPUT_BIAS_CODES``)."""
    h = float(model.hidden_size)
    s = float(model.seq_len)
    tokens = np.asarray(tokens, dtype=float)
    tp_overlap = tp_overlap_applies(tp_overlap, sp, tp)
    softmax_exposed = softmax_exposed_share(attention_kernel, eff)
    mma_share = attention_mma_share(attention_kernel, cluster.gpu)
    dense_ffn = (model.moe.dense_ffn_hidden_size or model.ffn_hidden_size) if model.moe else None

    hybrid = bool(model.hybrid_pattern)
    shares = mamba.non_moe_kind_shares(model)

    def costs(r, streams):
        """({kind: sequence-mixing block}, {kind: MLP block}) for the two layer slots."""
        a = layer_costs.attention_block_costs(model, r, tokens, s, tp, sp, softmax_exposed, flash_attention,
                                              softmax_fusion, mma_share, fp8_current_scaling, attention_unpad,
                                              softmax_scale_pass, unfused_block_ops, yarn_rope_eager,
                                              nvfp4_rht_cast_fusion)
        b = {"dense": layer_costs.dense_mlp_costs(model, r, tokens, tp, sp, ffn=dense_ffn,
                                                  current_scaling=fp8_current_scaling, unfused_ops=unfused_block_ops,
                                                  rht_cast_fusion=nvfp4_rht_cast_fusion)}
        if model.moe is not None:
            b["moe"] = moe_costs.moe_mlp_costs(model, r, tokens, ep, etp, imbalance, tp, sp, fp8_current_scaling,
                                               glu_clamp_eager, streams, ep_dispatch_dedup, nvfp4_rht_cast_fusion,
                                               expert_output_bias)
        if not hybrid:
            return {"dense": a, "moe": a}, b
        # a hybrid layer is one block: the dense slot holds the Mamba, attention and MLP layers
        # at their mean (``mamba.non_moe_kind_shares``), the moe slot the E layers' MoE alone
        none_a = {k: 0.0 * np.asarray(v) for k, v in a.items()}
        scan_share = cluster.gpu.sync_mma_peak_fraction
        mixers = {"attention": a, **({"mamba": mamba.mamba_block_costs(model, r, tokens, tp, sp, scan_share,
                                                                        fp8_current_scaling, nvfp4_rht_cast_fusion)}
                                     if model.mamba is not None else {})}
        return ({"dense": mamba.mix(mixers, shares), "moe": none_a},
                {**b, "dense": mamba.mix({"mlp": b["dense"]}, shares)})

    attn, blocks = costs(rates, grouped_gemm_streams)
    # the host issues every kernel of an eager pass; it runs ahead of the GPU, so a pass lasts the
    # longer of its GPU time and its kernel count x the host's issue time (no floor under CUDA graphs)
    host_s = np.where(cuda_graphs, 0.0, eff.cpu_issue_s)
    if eff.cpu_issue_s > 0:
        attn_n, blocks_n = costs(kernel_counting_rates(rates), 1)

    # tensor-parallel collectives of one pass: two all-reduces (or reduce-scatter + all-gather
    # pairs under sequence parallelism, the same time); sequence parallelism all-gathers the norm
    # outputs again in backward for the column-parallel weight gradients (Korthikanti et al. 2022,
    # section 4.2.2): together one more all-reduce's time
    # (a hybrid layer is one column/row-parallel block: half of each)
    blocks_per_layer = 1.0 if hybrid else 2.0
    parallel = model.parallel_attention_mlp      # dense layers only (``ModelSpec``)
    act_bytes = tokens * h * rates.act_bytes
    tp_coll = group_collective_time_s("all_reduce", act_bytes, tp, 1, cluster, eff)
    shared_blocks = 1.0 if model.moe is not None and model.moe.num_shared_experts else 0.0

    def mlp_block_tp(kind):
        """TP collectives (in blocks) the MLP / MoE block alone runs, per row: a dense MLP's one;
        an MoE block under sequence parallelism only its shared expert's (``tp_blocks``)."""
        return np.where(sp, shared_blocks, 1.0) if kind == "moe" else 1.0

    def tp_blocks(kind):
        """Column/row-parallel blocks whose TP collectives a layer of ``kind`` runs, per row.

        Under sequence parallelism an MoE block has none of its own: Megatron-Core routes the
        sequence-parallel hidden states as they are (NVIDIA/Megatron-LM@core_v0.15.0
        megatron/core/transformer/moe/moe_layer.py:272-278, ``custom_forward`` hands
        ``hidden_states`` to the router and the dispatcher with no gather), and the
        all-to-all dispatcher's only tensor-parallel traffic is the all-gather / reduce-scatter
        over the *expert* TP group (token_dispatcher.py:67 ``self.tp_group =
        pg_collection.expt_tp``; :656 gather in ``dispatch_postprocess``, :739 reduce-scatter
        in ``combine_preprocess``), which ``moe.moe_all_to_all_time_s`` prices as ``etp_s``.
        A shared expert is a plain tensor-parallel MLP (shared_experts.py:30 ``SharedExpertMLP(MLP)``,
        column- then row-parallel linears, models/gpt/moe_module_specs.py:50-68; its overlapped
        form gathers and reduce-scatters itself, shared_experts.py:159-161, 242-244), so it adds
        one block. Without sequence parallelism Megatron-Core refuses MoE training at tp > 1
        (moe_layer.py:265-269); other stacks keep the dense block's all-reduce pair there.
        """
        if kind != "moe":
            return blocks_per_layer
        return (0.0 if hybrid else 1.0) + mlp_block_tp(kind)
    # under sequence parallelism the backward of each row-parallel output's reduce-scatter is an
    # all-gather of the output gradient (half an all-reduce's ring), and both gradient GEMMs of
    # that linear read the gathered tensor: no GEMM of the layer can run under it, so the
    # asynchronous backward collectives (``tp_backward_overlap``, column-parallel linears only)
    # leave it exposed; only userbuffers pipelining (``tp_comm_overlap``) splits it into chunks
    # under the data-gradient GEMM. NVIDIA/Megatron-LM@d898a8991d megatron/mpu/layers.py
    # ``RowParallelLinear.forward``: ``reduce_scatter_to_sequence_parallel_region``, whose
    # backward (megatron/mpu/mappings.py ``_ReduceScatterToSequenceParallelRegion.backward``)
    # is ``_gather_along_first_dim``, a synchronous ``_all_gather_base``; the column-parallel
    # linear's own backward collectives are the asynchronous ones
    # (``LinearWithGradAccumulationAndAsyncCommunication.backward``: input re-gather under
    # the data-gradient GEMM, gradient reduce-scatter under the weight-gradient GEMM).
    cpcs = {}
    for kind, mixer in list(attn.items()):
        if kind == "moe" and not hybrid:        # the same attention block as the dense slot's
            attn[kind], cpcs[kind] = attn["dense"], cpcs["dense"]
            continue
        if np.any(np.asarray(cp) > 1):
            cpc = context_parallel.context_parallel_costs(model, cp_kind, tokens, cp, tp, mixer["core_fwd_s"],
                                                          mixer["core_bwd_s"], cluster, eff, rates=rates,
                                                          allgather_saves_kv=cp_allgather_saves_kv)
            # the ring runs the attention core as cp block calls and merges the partial outputs
            attn[kind] = dict(mixer, core_fwd_s=mixer["core_fwd_s"] + cpc["fwd_compute_s"],
                              core_bwd_s=mixer["core_bwd_s"] + cpc["bwd_compute_s"])
        else:
            cpc = {"fwd_exposed_s": 0.0 * tokens, "bwd_exposed_s": 0.0 * tokens, "core_attn_recompute_s": 0.0 * tokens}
        cpcs[kind] = cpc

    mods = memory.effective_modules(rc, modules, selective_modules)

    def bit(name):
        return (mods & memory.MODULE_BITS[name]) != 0

    norm_s = layer_costs.norm_forward_s(model, rates, tokens, tp, sp) * (blocks_per_layer / 2.0)
    norm_kernels = 1.0 if hybrid else layer_costs.norms_per_layer(model)
    mla_s, mla_flops = layer_costs.mla_up_projection_forward(model, rates, tokens, tp)
    out = {}
    for kind, mlp in blocks.items():
        attn_k, cpc = attn[kind], cpcs[kind]
        nb = tp_blocks(kind)
        tp_fwd = nb * tp_coll
        tp_bwd = nb * tp_coll + np.where(sp, nb / 2.0 * tp_coll, 0.0)
        # collective kernels a pass issues (the host's floor below), in blocks
        nb_f, nb_b = nb, np.where(sp, 1.5, 1.0) * nb
        if parallel:
            nb_f, nb_b = parallel_block_tp_blocks(sp)
            tp_fwd, tp_bwd = nb_f * tp_coll, nb_b * tp_coll
        tp_rec = np.where(rc == 2, tp_fwd, 0.0)
        gemm_f = attn_k["gemm_fwd_s"] + mlp["gemm_fwd_s"]
        dgrad = attn_k["gemm_dgrad_s"] + mlp["gemm_dgrad_s"]
        wgrad = attn_k["gemm_wgrad_s"] + mlp["gemm_wgrad_s"]
        cast_f = attn_k["cast_fwd_s"] + mlp["cast_fwd_s"]
        cast_b = attn_k["cast_bwd_s"] + mlp["cast_bwd_s"]
        elem_f = attn_k["elem_fwd_s"] + mlp["elem_fwd_s"]
        elem_b = attn_k["elem_bwd_s"] + mlp["elem_bwd_s"]
        fwd = gemm_f + cast_f + attn_k["core_fwd_s"] + elem_f
        bwd = dgrad + cast_b + attn_k["core_bwd_s"] + elem_b
        # the selected operations' forward kernels, for layers not recomputed in full
        if kind == "moe":
            moe = model.moe
            routed = tokens / tp
            rows = routed * moe.top_k * etp * moe_costs.capped_rank_imbalance(imbalance, ep, moe.capacity_factor)
            shared = moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size)
            act_s = (layer_costs.activation_forward_s(model, rates, rows, moe.expert_ffn_hidden_size / etp)
                     + (layer_costs.activation_forward_s(model, rates, tokens, shared / tp) if shared else 0.0))
            # Megatron-Core checkpoints the whole bias_act_func (TEGroupedMLP.forward), clamp included
            act_s = act_s + moe_costs.glu_clamp_forward_s(model, rates, rows, moe.expert_ffn_hidden_size / etp,
                                                          glu_clamp_eager)
        else:
            act_s = layer_costs.activation_forward_s(model, rates, tokens, (dense_ffn or model.ffn_hidden_size) / tp,
                                                     unfused_block_ops)
            act_s = act_s * shares["mlp"] if hybrid else act_s
        # a whole MLP / MoE block recomputed (Megatron's ``mlp`` for dense layers, ``moe`` for MoE
        # layers): its forward again, with its TP collective; it includes the activation
        # (and, for MoE, the dispatch), so those modules add nothing more there
        whole = bit("moe") if kind == "moe" else bit("mlp")
        # (an MoE block under sequence parallelism: its shared expert's only, ``tp_blocks``)
        block_tp = tp_coll * (shares["mlp"] if hybrid and kind == "dense" else mlp_block_tp(kind))
        if parallel:
            # a parallel block's MLP alone reduces nothing (the layer's one reduction follows the
            # sum, ``parallel_block_tp_blocks``): its input's all-gather under SP only
            block_tp = np.where(sp, tp_coll / 2.0, 0.0)
        block_s = mlp["gemm_fwd_s"] + mlp["cast_fwd_s"] + mlp["elem_fwd_s"] + np.where(tp > 1, block_tp, 0.0)
        # the dense MLP's input projections and activation alone (``mlp_fc1``, not in MoE layers):
        # the first GEMM, its share of the block's input casts, the activation, and under
        # sequence parallelism the all-gather of the norm output it reads (half an all-reduce)
        # (timed only when a row recomputes it, as every_second_linear below)
        fc1 = bit("mlp_fc1") & ~whole & (kind != "moe")
        fc1_s = fc1_flops = fc1_kernels = 0.0
        if np.any(fc1):
            up_n, up_k = layer_costs.mlp_gemm_shapes(model.hidden_size, dense_ffn or model.ffn_hidden_size,
                                                     model.gated_mlp, tp)[0]
            share = shares["mlp"] if hybrid else 1.0
            fc1_flops = 2.0 * tokens * up_n * up_k
            fc1_cast = mlp["cast_fwd_s"] * fc1_flops / np.maximum(mlp["gemm_flops_fwd"], 1.0)
            fc1_s = (gemm_time_s(tokens, up_n, up_k, rates) + fc1_cast) * share + act_s \
                + np.where(sp & (tp > 1), block_tp / 2.0, 0.0)
            fc1_flops = fc1_flops * share
            # the GEMM, the activation (one kernel and its extra ones, as mlp_act counts it) and
            # the all-gather under sequence parallelism
            fc1_kernels = 2.0 + layer_costs.activation_units(model, unfused_block_ops)[2] \
                + np.where(sp & (tp > 1), 1.0, 0.0)
        # every second projection with the RoPE and residual adds between them (torchtitan's
        # per-operation checkpoint); an MoE layer's experts are grouped matmuls outside that count.
        # Timed only when a row recomputes it (the planner evaluates this for every layer key)
        alt_s, alt_flops, alt_kernels = layer_costs.every_second_linear_forward(
            model, rates, tokens, tp, sp, ffn=dense_ffn, with_mlp=kind != "moe", unfused_ops=unfused_block_ops) \
            if np.any(bit("every_second_linear")) else (0.0, 0.0, 0.0)
        sel = (np.where(bit("core_attn"), attn_k["core_fwd_s"], 0.0) + np.where(bit("layernorm"), norm_s, 0.0)
               + np.where(bit("mlp_act") & ~whole & ~fc1, act_s, 0.0) + np.where(bit("mla_up_proj"), mla_s, 0.0)
               + np.where(whole, block_s, 0.0) + np.where(bit("every_second_linear"), alt_s, 0.0)
               + np.where(fc1, fc1_s, 0.0))
        # recomputed FLOPs are hardware FLOPs: a materialised core's masked scores included
        masked_flops = attn_k["core_masked_flops_fwd"] + 0.0 * tokens
        sel_flops = (np.where(bit("core_attn"), attn_k["core_flops_fwd"] + masked_flops, 0.0)
                     + np.where(bit("mla_up_proj"), mla_flops, 0.0)
                     + np.where(whole, mlp["gemm_flops_fwd"], 0.0) + np.where(bit("every_second_linear"), alt_flops, 0.0)
                     + np.where(fc1, fc1_flops, 0.0))
        rec_full = fwd
        # exposed TP traffic: userbuffers overlap (tp_comm_overlap) pipelines it with the GEMMs of
        # the same pass; the backward collectives of the column-parallel layers also run under
        # their weight- and data-gradient GEMMs when the stack issues them asynchronously
        # (tp_backward_overlap: Megatron-LM since 2021-08, Transformer Engine)
        # each linear's collectives hide under that linear's own GEMMs only (``tp_exposed_per_linear``):
        # the sequence-mixing block's and the MLP block's (an MoE layer's: its shared experts', or
        # without them and sequence parallelism the whole block's GEMMs as one linear pair)
        if kind == "moe" and not shared_blocks:
            mlp_ends = {"tp_col_gemm_fwd_s": mlp["gemm_fwd_s"], "tp_col_gemm_dgrad_s": mlp["gemm_dgrad_s"],
                        "tp_col_gemm_wgrad_s": mlp["gemm_wgrad_s"], "tp_row_gemm_fwd_s": 0.0 * tokens,
                        "tp_row_gemm_dgrad_s": 0.0 * tokens, "tp_row_gemm_wgrad_s": 0.0 * tokens}
        else:
            mlp_ends = mlp
        mlp_w = (shares["mlp"] if hybrid and kind == "dense" else mlp_block_tp(kind)) + 0.0 * tokens
        mix_w = nb - mlp_w
        # a parallel block: the attention's exit joins the MLP's, reduced once
        tp_windows = ([(mix_w, attn_k, 0.0), (mlp_w, mlp_ends, 1.0)] if parallel
                      else [(mix_w, attn_k), (mlp_w, mlp_ends)])
        tpf, tpb, tpb_split = tp_exposed_per_linear(tp_coll, sp, tp_overlap, tp_backward_overlap, tp_windows)
        tpr_full = tpf
        if kind == "moe":
            dispatch = mlp["a2a_dispatch_buffer_bytes"]       # the routed rows, at the experts' width
            # EP members sit etp ranks apart (folding) or tp * cp apart where the stack carves the EP
            # groups out of data parallelism (Megatron-Core <= 0.9, ``ParallelConfig.ep_carved_from_dp``)
            ep_stride = moe_costs.ep_member_stride(tp, cp, etp, ep_carved_from_dp)
            a2a = moe_costs.moe_all_to_all_time_s(dispatch, ep, etp, cluster, eff, load_imbalance=imbalance,
                                                  stride=ep_stride,
                                                  dedup=ep_dispatch_dedup, num_experts=model.moe.num_experts,
                                                  top_k=model.moe.top_k, capacity_factor=model.moe.capacity_factor,
                                                  num_groups=model.moe.num_groups, group_topk=model.moe.group_topk)
            # overlapped as Megatron-Core's combined 1F1B runs it (``ep_comm_overlap``): the forward
            # of one micro-batch beside the backward of another, the forward's all-to-alls under the
            # backward's compute and the backward's under the forward's (core_v0.14+
            # pipeline_parallel/combined_1f1b.py); a pass with no partner exposes all of its own
            # (``ep_unpaired_f`` / ``_b``, counted per step by ``step_model.ep_unpaired_s``)
            epf = np.where(ep_overlap, np.maximum(a2a["fwd_s"] - bwd - wgrad, 0.0), a2a["fwd_s"])
            epb = np.where(ep_overlap, np.maximum(a2a["bwd_s"] - fwd, 0.0), a2a["bwd_s"])
            epb_split = epb + 0.0
            ep_full_f, ep_full_b = a2a["fwd_s"], a2a["bwd_s"]
            epr_full = epf
            ep_total = a2a["fwd_s"] + a2a["bwd_s"]
            ep_fwd_traffic, ep_bwd_traffic = a2a["fwd_s"], a2a["bwd_s"]
            # recomputing the dispatch permutes the rows and sends them again (not overlapped) and,
            # with etp > 1, all-gathers them over the expert-TP group again: the tensor it drops is
            # that all-gather's output (``moe_activation_bytes_per_layer``: rows = routed * k * etp);
            # recomputing the whole block sends them and combines them again
            # (the rows move at the experts' width: LatentMoE's latent size, else h, as the dispatch sends them)
            permute = (2.0 * routed * moe.top_k * routed_expert_width(model) * rates.act_bytes
                       / rates.hbm_bytes_per_s)
            sel = sel + np.where(bit("moe_dispatch") & ~whole, permute + a2a["dispatch_s"] + a2a["etp_gather_s"],
                                 0.0) \
                + np.where(whole, a2a["fwd_s"], 0.0)
        else:
            epf = epb = epb_split = epr_full = ep_total = ep_fwd_traffic = ep_bwd_traffic = 0.0 * tokens
            ep_full_f = ep_full_b = 0.0 * tokens
        # a forward and a backward with no partner micro-batch expose their whole all-to-alls: what
        # each such pass lasts beyond a paired one (under the host's issue floor below)
        ep_unpaired_f, ep_unpaired_b = ep_full_f - epf, ep_full_b - epb
        flops = attn_k["gemm_flops_fwd"] + mlp["gemm_flops_fwd"] + attn_k["core_flops_fwd"]
        # the backward split as zero-bubble schedules run it: B (data gradients, with the
        # collectives exposed beyond its own GEMMs) and W (weight gradients) as separate passes
        bwd_split, wgrad_split = bwd + 0.0, wgrad + 0.0 * tokens
        if eff.cpu_issue_s > 0:
            # kernels per pass: the layer's compute and quantisation kernels and its TP collectives
            # (NCCL kernels)
            mlp_n = blocks_n[kind]
            n_fwd = (attn_n[kind]["gemm_fwd_s"] + mlp_n["gemm_fwd_s"] + attn_n[kind]["core_fwd_s"] + attn_n[kind]["elem_fwd_s"]
                     + mlp_n["elem_fwd_s"] + attn_n[kind]["cast_fwd_s"] + mlp_n["cast_fwd_s"]
                     + np.where(tp > 1, nb_f, 0.0))
            n_bwd = (attn_n[kind]["gemm_dgrad_s"] + mlp_n["gemm_dgrad_s"] + attn_n[kind]["gemm_wgrad_s"] + mlp_n["gemm_wgrad_s"]
                     + attn_n[kind]["core_bwd_s"] + attn_n[kind]["elem_bwd_s"] + mlp_n["elem_bwd_s"]
                     + attn_n[kind]["cast_bwd_s"] + mlp_n["cast_bwd_s"]
                     + np.where(tp > 1, nb_b, 0.0))
            n_sel = (np.where(bit("core_attn"), attn_n[kind]["core_fwd_s"], 0.0) + norm_kernels * bit("layernorm")
                     + (1.0 + (0.0 if kind == "moe" else layer_costs.activation_units(model, unfused_block_ops)[2]))
                     * (bit("mlp_act") & ~whole & ~fc1)
                     + 2.0 * bit("mla_up_proj")
                     + np.where(whole, mlp_n["gemm_fwd_s"] + mlp_n["elem_fwd_s"] + mlp_n["cast_fwd_s"]
                                + np.where(tp > 1, mlp_block_tp(kind), 0.0), 0.0)
                     + alt_kernels * bit("every_second_linear") + np.where(fc1, fc1_kernels, 0.0))
            # the host-bound share shows as compute: what the floor adds above the GPU's passes
            # a pass is at least its kernels' issue time, paired or not
            f_rest = fwd + tpf + cpc["fwd_exposed_s"]
            b_rest = bwd + wgrad + tpb + cpc["bwd_exposed_s"]
            ep_unpaired_f = np.maximum(n_fwd * host_s, f_rest + ep_full_f) - np.maximum(n_fwd * host_s, f_rest + epf)
            ep_unpaired_b = np.maximum(n_bwd * host_s, b_rest + ep_full_b) - np.maximum(n_bwd * host_s, b_rest + epb)
            host_f = np.maximum(n_fwd * host_s - (fwd + tpf + cpc["fwd_exposed_s"] + epf), 0.0)
            host_b = np.maximum(n_bwd * host_s - (bwd + wgrad + tpb + cpc["bwd_exposed_s"] + epb), 0.0)
            host_r = np.maximum(n_fwd * host_s - (rec_full + tpr_full + epr_full), 0.0)
            host_sel = np.maximum(n_sel * host_s - sel, 0.0)
            # split passes: each is floored by the kernels it issues itself
            n_w = attn_n[kind]["gemm_wgrad_s"] + mlp_n["gemm_wgrad_s"]
            bwd_split = bwd + np.maximum((n_bwd - n_w) * host_s
                                         - (bwd + tpb_split + cpc["bwd_exposed_s"] + epb_split), 0.0)
            wgrad_split = wgrad + np.maximum(n_w * host_s - wgrad, 0.0)
            fwd, bwd = fwd + host_f, bwd + host_b
            rec_full, sel = rec_full + host_r, sel + host_sel
        full = rc == 2
        # a recomputed attention forward runs its CP exchange again (ring steps, Ulysses
        # all-to-alls, the K/V all-gather): a layer recomputed in full always, a layer that
        # recomputes its core attention (``core_attn``) unless the gathered K/V are saved
        cpr_full = cpc["fwd_exposed_s"] + 0.0 * tokens
        cpr_sel = np.where(bit("core_attn"), cpc["core_attn_recompute_s"], 0.0) + 0.0 * tokens
        r_full = rec_full + tpr_full + epr_full + cpr_full
        r_kind = np.where(full, r_full, sel + cpr_sel)
        out.update({
            f"f_{kind}": fwd + tpf + cpc["fwd_exposed_s"] + epf,
            f"b_{kind}": bwd + tpb + cpc["bwd_exposed_s"] + epb,
            f"w_{kind}": wgrad + 0.0 * tokens,
            f"b_split_{kind}": bwd_split + tpb_split + cpc["bwd_exposed_s"] + epb_split,
            f"w_split_{kind}": wgrad_split, f"compute_bwd_split_{kind}": bwd_split,
            f"r_{kind}": r_kind, f"r_full_{kind}": r_full, f"r_sel_{kind}": sel + cpr_sel,
            # breakdown parts (compute excludes communication); the recomputation's TP / EP
            # exposure of a fully recomputed layer apart (``tp_recompute``, ``ep_recompute``)
            f"compute_fwd_{kind}": fwd, f"compute_bwd_{kind}": bwd,
            f"recompute_{kind}": np.where(full, rec_full, sel), f"recompute_full_{kind}": rec_full,
            f"recompute_sel_{kind}": sel + 0.0 * tokens,
            f"tp_exposed_{kind}": tpf + tpb + np.where(full, tpr_full, 0.0), f"tp_base_{kind}": tpf + tpb,
            # the same with the backward run as a B apart from its W (``b_split``): what the B
            # pass leaves exposed beyond its own data-gradient GEMMs
            f"tp_base_split_{kind}": tpf + tpb_split,
            f"tp_recompute_{kind}": tpr_full, f"cp_exposed_{kind}": cpc["fwd_exposed_s"] + cpc["bwd_exposed_s"],
            # the CP exchange a recomputed forward repeats: a layer recomputed in full, the others
            f"cp_recompute_full_{kind}": cpr_full, f"cp_recompute_sel_{kind}": cpr_sel,
            f"ep_exposed_{kind}": epf + epb + np.where(full, epr_full, 0.0), f"ep_base_{kind}": epf + epb,
            f"ep_base_split_{kind}": epf + epb_split + 0.0 * tokens,
            f"ep_recompute_{kind}": epr_full + 0.0 * tokens, f"ep_total_{kind}": ep_total,
            # what a forward and a backward with no partner micro-batch expose beyond a pair's
            f"ep_unpaired_f_{kind}": ep_unpaired_f + 0.0 * tokens, f"ep_unpaired_b_{kind}": ep_unpaired_b + 0.0 * tokens,
            # the whole dispatch + combine of each pass, hidden or not (what it keeps the links busy)
            f"ep_fwd_traffic_{kind}": ep_fwd_traffic + 0.0 * tokens, f"ep_bwd_traffic_{kind}": ep_bwd_traffic + 0.0 * tokens,
            f"tp_total_{kind}": tp_fwd + tp_bwd + tp_rec, f"tp_total_base_{kind}": tp_fwd + tp_bwd,
            f"tp_total_recompute_{kind}": tp_fwd + 0.0 * tokens,
            f"weight_cast_{kind}": attn_k["weight_cast_s"] + mlp["weight_cast_s"],
            # model FLOPs of one layer's forward (the core causal) and what a materialised core
            # computes beyond them (hardware FLOPs only)
            f"flops_{kind}": flops, f"masked_flops_{kind}": masked_flops,
            f"recompute_flops_{kind}": np.where(full, flops + masked_flops, sel_flops),
            f"recompute_full_flops_{kind}": flops + masked_flops,
            f"recompute_sel_flops_{kind}": sel_flops + 0.0 * tokens,
        })
    if model.moe is None:       # a dense model has no MoE layers; keep the keys for uniform code
        for key in [k for k in out if k.endswith("_dense")]:
            out[key[:-len("dense")] + "moe"] = out[key]

    # ---- the model's ends: the output layer stays 16-bit under low-precision recipes ---------
    low_precision = rates.dtype in LOW_PRECISION
    head_rates = compute_rates(cluster.gpu, eff, sixteen_bit_dtype(cluster.gpu)) if low_precision else rates
    head = layer_costs.lm_head_costs(model, head_rates, tokens, tp, cross_entropy)
    emb = layer_costs.embedding_costs(model, rates, tokens)
    ends_tp = ends_tp_collectives(tp, sp, tp_coll, head["dgrad_s"], head["wgrad_s"], tp_backward_overlap,
                                  loss_tp_collective_s(tokens, tp, cross_entropy, cluster, eff),
                                  learned_positions=model.position_embedding == "learned")
    out.update({"emb_f": emb["fwd_s"] + ends_tp["emb_f"], "emb_b": emb["bwd_s"] + ends_tp["emb_b"],
                "head_f": head["fwd_s"] + ends_tp["head_f"], "head_b": head["dgrad_s"] + ends_tp["head_b"],
                "head_w": head["wgrad_s"], "head_flops": head["flops_fwd"],
                # the ends' TP collectives (in the passes above): exposed, and all of them
                "emb_tp_s": ends_tp["emb_f"] + ends_tp["emb_b"], "emb_tp_total_s": ends_tp["emb_total"],
                "head_tp_s": ends_tp["head_f"] + ends_tp["head_b"], "head_tp_total_s": ends_tp["head_total"]})
    if model.mtp_layers:
        # each MTP module: a 2h -> h projection and another pass through the shared LM head (its
        # TP collectives and its loss's too), on top of its transformer layer (counted among the layers)
        proj = layer_costs.mtp_projection_costs(model, rates, tokens, tp)
        out.update({"mtp_f": proj["fwd_s"] + out["head_f"], "mtp_b": proj["dgrad_s"] + out["head_b"],
                    "mtp_w": proj["wgrad_s"] + head["wgrad_s"],
                    "mtp_flops": proj["flops_fwd"] + head["flops_fwd"],
                    "mtp_tp_s": out["head_tp_s"], "mtp_tp_total_s": out["head_tp_total_s"]})
    else:
        zero = 0.0 * tokens
        out.update({"mtp_f": zero, "mtp_b": zero, "mtp_w": zero, "mtp_flops": zero, "mtp_tp_s": zero,
                    "mtp_tp_total_s": zero})
    return out


def loss_tp_collective_s(tokens, tp, cross_entropy, cluster: ClusterSpec, eff: EfficiencyModel):
    """Seconds of the vocabulary-parallel loss's forward collectives over the TP group, per row
    (``cross_entropy.loss_tp_collectives``: Megatron's unfused loss, three all-reduces of
    [tokens] fp32), each priced as the layers' TP collectives are (``group_collective_time_s``
    over the stride-1 TP group; latency-bound at these sizes); 0 at ``tp = 1``."""
    tokens = np.asarray(tokens, dtype=float)
    reduce_bytes, gather_bytes = loss_tp_collectives(cross_entropy)
    t = 0.0 * tokens
    for j in range(reduce_bytes.shape[-1]):
        b = reduce_bytes[..., j]
        if np.any(b > 0):
            t = t + np.where(b > 0, group_collective_time_s("all_reduce", tokens * b, tp, 1, cluster, eff), 0.0)
    if np.any(gather_bytes > 0):
        # the all-gather's buffer is the gathered one (``collectives.all_gather_time_s``)
        t = t + np.where(gather_bytes > 0, group_collective_time_s("all_gather", tokens * gather_bytes * tp, tp, 1,
                                                                   cluster, eff), 0.0)
    return t


def ends_tp_collectives(tp, sp, tp_coll, head_dgrad_s, head_wgrad_s, tp_backward_overlap, loss_s,
                        learned_positions=False) -> dict:
    """The TP collectives of the model's ends, seconds per micro-batch and row, priced with the
    layers' ``tp_coll`` (one ring all-reduce of the [tokens, h] activations; a reduce-scatter or
    an all-gather of them half of it, as the layers' sequence-parallel pairs are priced):
    ``emb_f``, ``emb_b``, ``head_f``, ``head_b`` (exposed, in those passes), ``emb_total``,
    ``head_total`` (all of them, hidden or not). ``loss_s``: the loss's forward collectives
    (``loss_tp_collective_s``), in ``head_f``.

    Embedding (NVIDIA/Megatron-LM@d98e8a64 megatron/core/tensor_parallel/layers.py
    ``VocabParallelEmbedding.forward``, lines 367-383): the partial lookups are all-reduced
    (``reduce_from_tensor_model_parallel_region``, identity backward), or under sequence
    parallelism reduce-scattered into the sequence-parallel layout
    (``reduce_scatter_to_sequence_parallel_region``, whose backward all-gathers the output
    gradient before the embedding's gradient scatter can run: exposed). That reduce-scatter is
    taken only without a learned position table (``LanguageModelEmbedding.__init__``,
    megatron/core/models/common/embeddings/language_model_embedding.py lines 51-56:
    ``reduce_scatter_embeddings = not add_position_embedding and ... sequence_parallel``); with
    one (``learned_positions``) the lookups are all-reduced and the sum split locally
    (``scatter_to_sequence_parallel_region``, lines 144-147), whose backward all-gathers: as
    Megatron-LM 2022 always did (NVIDIA/Megatron-LM@928a200c megatron/mpu/layers.py line 201,
    megatron/model/language_model.py line 238). Nothing overlaps them: the embedding is no
    Transformer Engine linear, so the userbuffers overlap (``tp_comm_overlap``) does not apply.

    Output layer (gpt_model.py lines 273-293: ``tensor_parallel.ColumnParallelLinear``, not TE's,
    unless MXFP8 puts the output projection in FP8): ``ColumnParallelLinear.forward`` (layers.py
    lines 1218-1225) feeds its input through ``copy_to_tensor_model_parallel_region`` (identity
    forward, all-reduce of the input gradient backward), or, where the backward all-reduce is
    the asynchronous ``allreduce_dgrad`` or under sequence parallelism, passes it to
    ``LinearWithGradAccumulationAndAsyncCommunication`` (lines 580-720), which all-gathers the
    sequence-parallel input in forward and in backward re-gathers it under the data-gradient GEMM
    and reduce-scatters the input gradient (or all-reduces it) asynchronously under the
    weight-gradient GEMM: one all-reduce's time either way, hidden under the head's data- and
    weight-gradient passes as far as ``tp_backward_overlap`` says the layers' are (``layer_times``:
    the column-parallel linears' backward collectives), exposed otherwise. Megatron-LM 2021-2022:
    ``parallel_lm_logits`` (megatron/model/language_model.py@928a200c lines 30-49:
    ``copy_to_tensor_model_parallel_region`` or the async / sequence-parallel
    ``LinearWithGradAccumulationAndAsyncCommunication``)."""
    tp = np.asarray(tp)
    seq = np.asarray(sp, dtype=bool) & (tp > 1)
    half = tp_coll / 2.0
    head_bwd = tp_coll + 0.0 * half         # all-reduce, or re-gather + reduce-scatter
    hidden = np.maximum(head_bwd - head_dgrad_s - head_wgrad_s, 0.0)
    head_b = np.where(tp_backward_overlap, hidden, head_bwd)
    emb_f = np.where(seq & ~np.asarray(learned_positions, dtype=bool), half, tp_coll)
    emb_b = np.where(seq, half, 0.0)
    head_f = np.where(seq, half, 0.0) + loss_s
    return {"emb_f": emb_f, "emb_b": emb_b, "head_f": head_f, "head_b": head_b, "emb_total": emb_f + emb_b,
            "head_total": head_f + head_bwd}
