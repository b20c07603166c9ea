"""Context parallelism: the attention communication of a sequence split over ``cp`` GPUs.

Each GPU holds ``tokens_local = micro_batch * seq / cp`` tokens of every sequence; the
attention core needs every earlier token's keys and values. Three flavours:

* **Ring** (Liu et al. 2023, "Ring Attention with Blockwise Transformers", arXiv 2310.01889;
  Megatron-Core / Transformer Engine ``cp_comm_type="p2p"``). The K/V block circulates around
  the CP ring: ``cp - 1`` steps, each sending the local K and V to the next rank while the
  attention of the block received last is computed. Backward circulates K/V and the
  accumulated dK/dV: twice the bytes per step. Causal load balancing (each rank holds chunks
  i and 2cp-1-i of the 2cp chunks, Megatron-Core's layout) gives every rank 1/cp of the causal
  attention and every step the same work, 1/cp of the rank's attention time, so per step the
  exposed time is ``max(0, comm_step - attention / cp)``.
* **Ulysses** (Jacobs et al. 2023, "DeepSpeed Ulysses", arXiv 2309.14509). Four all-to-alls per
  layer forward (Q, K, V scatter heads / gather the sequence; the output back) and four in
  backward, over the CP group; not overlapped. Needs the TP-local heads to divide by cp; K/V
  heads fewer than cp are replicated up to cp.
* **Hybrid** (Fang and Zhao 2024, "USP", arXiv 2405.07719; Megatron-Core
  ``hierarchical_context_parallel_sizes`` / ``cp_comm_type="a2a+p2p"``). Ulysses over ``u``
  ranks inside the NVLink domain, ring over ``cp / u`` groups across it.
* **All-gather** (Llama Team 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, section
  3.3.2: "our CP implementation adopts an all-gather based method where we first all-gather the
  key and value (K, V) tensors, and then compute attention output for the local query (Q)
  tensor chunk", with the same 2 x CP load-balanced chunks, "the all-gather communication
  latency is exposed in the critical path"; Transformer Engine ``cp_comm_type="all_gather"``,
  ``AttnFuncWithCPAndKVAllGather``). One all-gather of ``cp`` ranks' K/V blocks forward, the dK/dV
  reduce-scatter backward, exposed; one attention call per pass, no partial-output merges. What
  backward has of the K/V depends on the implementation (``saves_kv``):

  - *regather*: autograd saved only the local K/V and backward all-gathers them again.
    NVIDIA/TransformerEngine@v2.9 (70f536662a)
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py:2693-2694
    forward ``gather_along_first_dim(k / v, cp_group)``, :2837-2840 ``ctx.save_for_backward(q, k,
    v, ...)`` the local chunks, :2901-2902 backward gathers again, :3061-3062 reduce-scatters dK /
    dV. PyTorch's SDPA context_parallel (torchtitan 0.2, ``rotate_method`` allgather) likewise: the
    all-gather runs inside the SDPA op's DTensor handler, so autograd saves the op's local inputs
    and ``_templated_ring_attention_backward`` builds a new all-gather rotater (pytorch/pytorch@
    09b101c59a torch/distributed/tensor/experimental/_context_parallel/_attention.py).
  - *saved*: the gather is an autograd op of its own before the attention, so the attention saves
    its gathered K/V inputs (``cp`` x the local chunk, per layer until its backward) and the
    gather's backward is only the reduce-scatter: pytorch/pytorch@222ec71c89
    torch/distributed/tensor/experimental/_context_parallel/_cp_custom_ops.py:8-20
    ``flex_cp_allgather`` (all_gather_tensor of k and v), :36-50 its backward
    ``flex_cp_allgather_backward`` (reduce_scatter_tensor only; ``_flex_cp_setup_context`` saves no
    tensor); torchtitan 0.3
    (pytorch/torchtitan@56e7b652cf torchtitan/distributed/context_parallel/api.py:73-74
    ``global_k, global_v = flex_cp_allgather(k, v, 1, pg_name)`` then FlexAttention on them).
    A layer recomputed in full drops them and gathers again in its recomputed forward.

The CP group's members are ``tp`` ranks apart (rank order tp-cp-dp-pp). Activation memory of
long sequences is ``memory.activation_bytes_per_layer`` with seq/cp; ``cp_transient_bytes`` gives
the exchange buffers CP adds to the computing layer, by flavour (a transient beside its recompute
buffer, ``simulator.stage_activations``). Every function takes numpy arrays or scalars.
"""
from __future__ import annotations

import numpy as np

from cost_models.collectives import p2p_time_s
from cost_models.params import kv_heads_per_tp_rank
from cost_models.topology import group_collective_time_s, group_span, tier_bandwidths
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec

#: codes for vectorized flavour selection (same names as ``simulator.parallel_config.CPKind``).
CP_KIND_CODES = {"ring": 0, "ulysses": 1, "hybrid": 2, "allgather": 3}


def _f(x):
    return np.asarray(x, dtype=float)


def attention_kv_dims(model: ModelSpec):
    """(kv_heads, qk_head_dim, v_head_dim) of the K and V tensors attention exchanges.

    MLA (DeepSeek) exchanges the up-projected per-head K (nope + rope) and V, one per query head.
    """
    if model.mla is not None:
        m = model.mla
        return model.num_heads, m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    return model.num_kv_heads, model.head_dim, model.head_dim


# ---- ring -------------------------------------------------------------------------------------

def ring_attention_comm_bytes(tokens_local, kv_heads, head_dim, tp=1, bytes_per_element=2, v_head_dim=None):
    """Bytes one GPU sends (and receives) in one forward ring step: its K and V block.

    ``tokens_local * kv_heads_per_tp_rank * (head_dim + v_head_dim) * bytes``; with equal K and
    V head sizes that is ``2 * tokens_local * (kv_heads / tp) * head_dim * bytes``.
    """
    v = head_dim if v_head_dim is None else v_head_dim
    return (_f(tokens_local) * kv_heads_per_tp_rank(kv_heads, tp) * (_f(head_dim) + _f(v))
            * _f(bytes_per_element))


def ring_attention_step_bytes(model: ModelSpec, tokens_local, tp, bytes_per_element=2):
    """``ring_attention_comm_bytes`` with the model's K/V heads and head sizes."""
    g, dk, dv = attention_kv_dims(model)
    return ring_attention_comm_bytes(tokens_local, g, dk, tp, bytes_per_element, dv)


def ring_attention_volume_bytes(step_bytes, ring_size):
    """(forward, backward) bytes one GPU sends per layer: (n-1) steps, backward twice the bytes."""
    steps = np.maximum(_f(ring_size) - 1.0, 0.0)
    return steps * _f(step_bytes), 2.0 * steps * _f(step_bytes)


def ring_step_time_s(step_bytes, ring_size, stride, cluster: ClusterSpec, eff: EfficiencyModel):
    """One ring step's send/recv, seconds: every hop runs at once, so the slowest sets it.

    Over the NIC when the ring spans more than one NVLink domain, else over NVLink (one peer's
    links on a full mesh, one link on a torus: each hop is a send to one neighbour).
    """
    _, n_inter = group_span(ring_size, stride, cluster.gpus_per_node)
    bw_i, lat_i, bw_o, lat_o = tier_bandwidths(cluster, eff, 2.0, stride)
    kind = eff.collective_fraction("p2p")
    t = np.where(n_inter > 1, p2p_time_s(step_bytes, kind * bw_o, lat_o), p2p_time_s(step_bytes, kind * bw_i, lat_i))
    return np.where(_f(ring_size) > 1, t, 0.0)


def ring_attention_time_s(step_bytes, cp, tp, core_fwd_s, core_bwd_s, cluster: ClusterSpec,
                          eff: EfficiencyModel, ring_size=None, ring_stride=None):
    """Ring-attention communication of one layer, total and exposed, seconds.

    ``core_fwd_s`` / ``core_bwd_s`` are this rank's attention-core times for its whole local
    sequence (already 1/cp of the causal attention under load balancing). The ring has
    ``ring_size`` members (default cp) ``ring_stride`` ranks apart (default tp); it takes
    ``ring_size - 1`` steps, each hidden behind ``1/ring_size`` of the attention:
    exposed = (n-1) * max(0, step - core/n), forward with K/V, backward with K/V and dK/dV.

    Returns a dict: ``step_s``, ``fwd_s``, ``bwd_s`` (totals), ``fwd_exposed_s``, ``bwd_exposed_s``.
    """
    n = _f(cp) if ring_size is None else _f(ring_size)
    stride = _f(tp) if ring_stride is None else _f(ring_stride)
    step = ring_step_time_s(step_bytes, n, stride, cluster, eff)
    steps = np.maximum(n - 1.0, 0.0)
    per_fwd = _f(core_fwd_s) / n
    per_bwd = _f(core_bwd_s) / n
    return {"step_s": step, "fwd_s": steps * step, "bwd_s": steps * 2.0 * step,
            "fwd_exposed_s": steps * np.maximum(step - per_fwd, 0.0),
            "bwd_exposed_s": steps * np.maximum(2.0 * step - per_bwd, 0.0)}


# ---- Ulysses ----------------------------------------------------------------------------------

def ulysses_heads_ok(num_heads, kv_heads, tp, cp):
    """Whether Ulysses can split a TP rank's query heads and its key/value heads over cp.

    Transformer Engine's all-to-all context parallelism (``cp_comm_type="a2a"``, the Ulysses that
    Megatron-Core runs) asserts both: ``AttnFuncWithCPAndQKVOA2A.forward`` checks
    ``q.shape[-2] % cp == 0`` and ``k.shape[-2] % cp == 0`` ("The number of attention heads needs
    to be divisible by CP size!", NVIDIA/TransformerEngine@015d22571b
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py), and it
    replicates no K/V heads. So ``num_heads % (tp * cp) == 0`` and the TP rank's key/value heads
    (``cost_models.params.kv_heads_per_tp_rank``: ``kv_heads / tp``, one whole head where tp
    exceeds them) divisible by cp. Vectorised over numpy arrays.
    """
    kv_local = kv_heads_per_tp_rank(kv_heads, tp)
    return (np.mod(_f(num_heads), _f(tp) * _f(cp)) == 0) & (np.mod(kv_local, _f(cp)) == 0)


def ulysses_comm_bytes(tokens_local, num_heads, kv_heads, head_dim, tp, cp, bytes_per_element=2,
                       v_head_dim=None):
    """Per-GPU buffer bytes of the four forward Ulysses all-to-alls of one layer, summed.

    Q (``a/tp`` heads), K and V (``g/tp`` heads, at least cp: replicated when fewer) and the
    output (``a/tp`` heads of v_head_dim), each ``tokens_local`` rows. Each all-to-all keeps
    1/cp of its buffer, so ~(cp-1)/cp of this leaves the GPU: 4 * N * h / cp for MHA, the
    paper's per-link volume (Jacobs et al. 2023, section 3.2). Backward moves five buffers
    (``ulysses_bwd_comm_bytes``).
    """
    v = head_dim if v_head_dim is None else v_head_dim
    q_heads = _f(num_heads) / _f(tp)
    kv = np.maximum(kv_heads_per_tp_rank(kv_heads, tp), _f(cp))
    per_token = q_heads * (_f(head_dim) + _f(v)) + kv * (_f(head_dim) + _f(v))
    return _f(tokens_local) * per_token * _f(bytes_per_element)


def ulysses_bwd_comm_bytes(tokens_local, num_heads, kv_heads, head_dim, tp, cp, bytes_per_element=2,
                           v_head_dim=None):
    """Per-GPU buffer bytes of the five backward Ulysses all-to-alls of one layer, summed.

    Transformer Engine's ``AttnFuncWithCPAndQKVOA2A.backward`` (NVIDIA/TransformerEngine@015d22571b
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py) all-to-alls
    ``[out, dout]`` (``a/tp`` heads of v_head_dim each) before the attention kernel and
    ``[dq, dk, dv]`` (``a/tp`` heads of head_dim, ``g/tp`` of head_dim and of v_head_dim, K/V
    heads at least cp as in ``ulysses_comm_bytes``) after it; ``AttnFuncWithCPAndKVP2P`` does the
    same for the all-to-all part of ``a2a+p2p``. Each ``tokens_local`` rows. Forward moves four
    buffers (q, k, v, out): for MHA 5 vs 4 buffers; for llama3-8b (32 query, 8 K/V heads of 128)
    112 vs 80 x 128 elements a token, 1.4x.
    """
    v = head_dim if v_head_dim is None else v_head_dim
    q_heads = _f(num_heads) / _f(tp)
    kv = np.maximum(kv_heads_per_tp_rank(kv_heads, tp), _f(cp))
    per_token = q_heads * (2.0 * _f(v) + _f(head_dim)) + kv * (_f(head_dim) + _f(v))
    return _f(tokens_local) * per_token * _f(bytes_per_element)


def ulysses_time_s(fwd_bytes, bwd_bytes, group_size, stride, cluster: ClusterSpec, eff: EfficiencyModel):
    """(forward, backward) seconds of the Ulysses all-to-alls (exposed: on the critical path).

    ``fwd_bytes`` is ``ulysses_comm_bytes`` (the four forward buffers summed), ``bwd_bytes``
    ``ulysses_bwd_comm_bytes`` (the five backward ones). All-to-all time is linear in the buffer,
    plus one latency term per further separate call: 3 in forward (four calls), 4 in backward
    (five calls: ``flash_attn_a2a_communicate`` issues one ``all_to_all_single`` per tensor).
    """
    # each further call's start-up: (n-1) steps at the latency of the tier the group spans
    _, n_inter = group_span(group_size, stride, cluster.gpus_per_node)
    lat = np.where(n_inter > 1, cluster.scaleout.latency_s, cluster.scaleup.latency_s)
    many = _f(group_size) > 1
    extra_fwd = np.where(many, 3.0 * (_f(group_size) - 1.0) * lat, 0.0)
    extra_bwd = np.where(many, 4.0 * (_f(group_size) - 1.0) * lat, 0.0)
    return (group_collective_time_s("all_to_all", fwd_bytes, group_size, stride, cluster, eff) + extra_fwd,
            group_collective_time_s("all_to_all", bwd_bytes, group_size, stride, cluster, eff) + extra_bwd)


# ---- all-gather (Llama 3) ------------------------------------------------------------------------

def allgather_kv_bytes(step_bytes, cp):
    """Bytes of one layer's gathered K/V on one GPU: ``cp`` ranks' blocks of ``step_bytes``
    (``ring_attention_comm_bytes``, the rank's own K and V), the all-gather's full output buffer."""
    return _f(cp) * _f(step_bytes)


def allgather_attention_time_s(step_bytes, cp, tp, cluster: ClusterSpec, eff: EfficiencyModel, saves_kv=False):
    """(forward, backward) seconds of all-gather CP's collectives for one layer, all exposed
    (Llama 3 paper, section 3.3.2: "the all-gather communication latency is exposed in the
    critical path").

    Forward: the all-gather of the K/V, ``allgather_kv_bytes`` (each GPU receives
    ``(cp - 1) / cp`` of it once: ``cost_models.collectives.all_gather_time_s``) over the CP
    group, ``cp`` members ``tp`` ranks apart. Backward: that all-gather again plus the
    reduce-scatter of the gathered-size dK/dV (Transformer Engine ``AttnFuncWithCPAndKVAllGather``
    backward), in the same dtype. ``saves_kv`` (per row): the forward's gathered K/V were kept for
    backward, which then only reduce-scatters (the module docstring's *saved*).
    """
    full = allgather_kv_bytes(step_bytes, cp)
    ag = group_collective_time_s("all_gather", full, cp, tp, cluster, eff)
    rs = group_collective_time_s("reduce_scatter", full, cp, tp, cluster, eff)
    return ag, rs + np.where(np.asarray(saves_kv, dtype=bool), 0.0, ag)


def allgather_saved_kv_bytes(step_bytes, cp, saves_kv):
    """Bytes of gathered K/V one layer keeps from its forward to its backward on one GPU: the
    all-gather's output, ``allgather_kv_bytes``, where the implementation saves it (``saves_kv``,
    the module docstring's *saved*), else 0. Per layer in flight, beside
    ``memory.activation_bytes_per_layer``; none for a layer recomputed in full."""
    return np.where(np.asarray(saves_kv, dtype=bool), allgather_kv_bytes(step_bytes, cp), 0.0)


def allgather_buffer_bytes(step_bytes, cp, saves_kv=False):
    """Transient bytes all-gather CP holds on one GPU at its peak, one layer at a time: in
    backward the gathered K/V and the gathered-size dK/dV before its reduce-scatter,
    ``2 * allgather_kv_bytes`` (forward holds the gathered K/V only, half that), when backward
    gathers again. Where the gathered K/V are saved (``saves_kv``) they are the layer's
    activation (``allgather_saved_kv_bytes``) and the transient is the dK/dV alone."""
    return np.where(np.asarray(saves_kv, dtype=bool), 1.0, 2.0) * allgather_kv_bytes(step_bytes, cp)


# ---- hybrid and dispatch ------------------------------------------------------------------------

def hybrid_cp_split(cp, tp, gpus_per_node, num_heads):
    """(ulysses, ring) degrees of hybrid CP: Ulysses over the largest u dividing cp, the
    NVLink domain's room for the CP group (gpus_per_node / tp) and the TP-local heads."""
    cp_i = np.asarray(cp).astype(np.int64)
    tp_i = np.asarray(tp).astype(np.int64)
    room = np.maximum(int(gpus_per_node) // tp_i, 1)
    heads = np.maximum(int(num_heads) // tp_i, 1)
    u = np.gcd(np.gcd(cp_i, room), heads)
    return u.astype(float), (cp_i // u).astype(float)


#: bytes per (token, head, value element) that merging one ring step's partial attention output
#: into the running result moves: read the running output and the step's output, write the running
#: output, plus the unfused product's temporary (2 + 2 + 2 and 2 + 2 at 16 bits), the log-sum-exp
#: rescale riding along. Transformer Engine keeps the running output in the inputs' 16-bit dtype:
#: NVIDIA/TransformerEngine@v1.5 (6a9edc38bf) transformer_engine/pytorch/attention.py:682
#: ``out = torch.empty_like(q).zero_()``, :474-480 ``flash_attn_fwd_out_correction``; @v2.3
#: (5de3e1481c) transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py:101
#: ``out_corrected.to(out_init_step.dtype)``, :105-116
RING_MERGE_BYTES_PER_ELEMENT = 10.0

#: bytes per element of a full local 16-bit tensor that copying half of its rows into a contiguous
#: buffer moves: half the rows, read 2 + write 2 bytes each. The load-balanced causal ring feeds
#: the kernel of a later step either the second half of Q (and, in backward, of O and dO) or the
#: first half of K and V as contiguous copies: TE@v1.5 attention.py:591 / :620 (forward: K/V
#: half, Q half), :840 / :880-883 (backward: K/V half; Q, O, dO halves); TE@v2.3
#: context_parallel.py:863 / :1004 (forward), :1802 / :1929 (backward)
RING_HALF_COPY_BYTES_PER_ELEMENT = 2.0

#: bytes per element that accumulating one later ring step's 16-bit gradient into the running one
#: moves: read both, write one (2 + 2 + 2). Backward runs one attention kernel per step and adds
#: its dQ into the running dQ and its dK/dV into the dK/dV buffer that travels on, each into the
#: half its kernel covered: a step on the second half of Q adds ``dq[:, 1, ...]`` (half of dQ) and
#: all of dK/dV, a step on the first half of K/V all of dQ and ``dkv[:, :, 0, ...]`` (half of
#: dK/dV): TE@v1.5 attention.py:958-973 ``dq.add_(dq_)``, :996-1010 ``dkv.add_(dkv_)``; TE@v2.3
#: context_parallel.py:2153-2184 (``dq[:, 1, ...].add_(dq_)`` / ``dq.add_(dq_)``) and :2225-2276
#: (``dkv[:, :, 0, ...]`` / ``dkv``) (v1.5 also copies dK and dV into one tensor first, :981
#: ``torch.cat``; v2.3 views them, ``combine_tensors``; not priced)
RING_GRAD_ACCUM_BYTES_PER_ELEMENT = 6.0

#: bytes per K/V element of the one copy of the local K and V into the ring's first buffer, once
#: a pass (read 2 + write 2): TE@v1.5 attention.py:536 (forward ``torch.cat((k, v))``), :761
#: (backward ``p2p_comm_buffers[0][0].copy_(kv)``); TE@v2.3 context_parallel.py:668-670, :1556
RING_KV_STAGE_BYTES_PER_ELEMENT = 4.0


def ring_attention_extra_bytes(tokens_local, heads_local, kv_heads_local, qk_dim, v_dim, ring_size):
    """(forward, backward) HBM bytes a load-balanced causal ring-attention layer moves on its
    busiest rank beyond one fused attention call over the same work, one layer, one micro-batch.

    Per later step (``ring_size - 1`` of them; the diagonal step is the one call a rank without CP
    runs), with ``q = tokens * heads_local * qk_dim``, ``o = tokens * heads_local * v_dim`` and
    ``kv = tokens * kv_heads_local * (qk_dim + v_dim)`` 16-bit elements:

    * forward: the merge of the partial output, ``RING_MERGE_BYTES_PER_ELEMENT * o``, run after
      the last step on the layer's stream (TE@v1.5 attention.py:699-713, TE@v2.3
      context_parallel.py:1270-1320). The half copies of Q or K/V run on the step's own stream
      of the two the forward alternates (TE@v1.5 :531/:541, TE@v2.3 :662/:676), beside the
      previous step's compute-bound kernel, and are not priced;
    * backward, one stream, the costlier of a rank's two kinds of later step (every step of the
      ring waits for its slowest rank): on the second half of Q, ``RING_GRAD_ACCUM_BYTES_PER_ELEMENT
      * (q / 2 + kv)`` of accumulation and ``RING_HALF_COPY_BYTES_PER_ELEMENT * (q + 2 o)`` of Q, O
      and dO half copies; on the first half of K/V, ``RING_GRAD_ACCUM_BYTES_PER_ELEMENT * (q + kv /
      2)`` and ``RING_HALF_COPY_BYTES_PER_ELEMENT * kv``.

    Each pass also stages the local K/V once (``RING_KV_STAGE_BYTES_PER_ELEMENT * kv``). All
    grow as tokens while the attention grows as tokens squared: at 1M tokens of Llama3-8B on
    CP16 x TP4 (65,536 tokens, 8 query and 2 K/V heads of 128 a rank) they are 0.67 GB forward and
    0.81 GB backward a step against 8.8 and 22 TFLOP of attention, about 1.5% and 0.7% of the step's
    time on a B200. Zero at ``ring_size`` 1.
    """
    t = _f(tokens_local)
    q = t * _f(heads_local) * _f(qk_dim)
    o = t * _f(heads_local) * _f(v_dim)
    kv = t * _f(kv_heads_local) * (_f(qk_dim) + _f(v_dim))
    steps = np.maximum(_f(ring_size) - 1.0, 0.0)
    stage = np.where(steps > 0, RING_KV_STAGE_BYTES_PER_ELEMENT * kv, 0.0)
    fwd = steps * RING_MERGE_BYTES_PER_ELEMENT * o + stage
    half_q = RING_GRAD_ACCUM_BYTES_PER_ELEMENT * (0.5 * q + kv) + RING_HALF_COPY_BYTES_PER_ELEMENT * (q + 2.0 * o)
    half_kv = RING_GRAD_ACCUM_BYTES_PER_ELEMENT * (q + 0.5 * kv) + RING_HALF_COPY_BYTES_PER_ELEMENT * kv
    bwd = steps * np.maximum(half_q, half_kv) + stage
    return fwd, bwd


def ring_attention_compute_s(tokens_local, heads_local, kv_heads_local, qk_dim, v_dim, ring_size, rates):
    """(forward, backward) seconds a ring-attention layer spends beyond one fused attention call:
    the core runs as ``ring_size`` block calls instead of one (``ring_size - 1`` more launches per
    pass, twice in backward), and each later step's memory-bound passes
    (``ring_attention_extra_bytes``: the forward merge, the backward gradient accumulation and
    half copies) at the achieved HBM bandwidth."""
    steps = np.maximum(_f(ring_size) - 1.0, 0.0)
    fwd_b, bwd_b = ring_attention_extra_bytes(tokens_local, heads_local, kv_heads_local, qk_dim, v_dim, ring_size)
    fwd = steps * 2.0 * rates.kernel_overhead_s + fwd_b / rates.hbm_bytes_per_s
    bwd = steps * 2.0 * rates.kernel_overhead_s + bwd_b / rates.hbm_bytes_per_s
    return fwd, bwd


def context_parallel_costs(model: ModelSpec, kind, tokens_local, cp, tp, core_fwd_s, core_bwd_s,
                           cluster: ClusterSpec, eff: EfficiencyModel, bytes_per_element=2, rates=None,
                           allgather_saves_kv=False):
    """Communication of one layer's attention under CP flavour ``kind``, seconds and bytes.

    ``kind``: "ring", "ulysses", "hybrid", "allgather" or an array of ``CP_KIND_CODES``. Returns a
    dict: ``fwd_s``, ``bwd_s`` (totals), ``fwd_exposed_s``, ``bwd_exposed_s``, ``ring_step_bytes``,
    ``ulysses_bytes``, ``allgather_bytes`` (see ``ring_attention_comm_bytes``,
    ``ulysses_comm_bytes``, ``allgather_kv_bytes``), and with
    ``rates`` the ring's extra compute ``fwd_compute_s`` / ``bwd_compute_s``
    (``ring_attention_compute_s``), and ``core_attn_recompute_s``: the exchange a recomputed
    core attention alone runs again (Megatron-Core's selective ``core_attn`` checkpoints Transformer
    Engine's whole CP attention call, exchange included), the forward's exposed exchange except
    where all-gather CP saved its gathered K/V (``allgather_saves_kv``: the recomputation reads
    them). A layer recomputed in full runs its whole forward again, exchange included:
    ``fwd_exposed_s`` once more, whatever the flavour. All zero at cp = 1.
    """
    code = _f(CP_KIND_CODES[kind] if isinstance(kind, str) else kind)
    cp, tp = _f(cp), _f(tp)
    g, dk, dv = attention_kv_dims(model)
    a = model.num_heads
    kv_local = kv_heads_per_tp_rank(g, tp)      # K/V heads a TP rank holds before any exchange
    step = ring_attention_comm_bytes(tokens_local, g, dk, tp, bytes_per_element, dv)
    ring = ring_attention_time_s(step, cp, tp, core_fwd_s, core_bwd_s, cluster, eff)

    # a flavour no row uses is not computed (the planner often searches ring only); its
    # entries would be discarded by ``pick`` anyway
    unused = 0.0 * step
    has_ulysses, has_hybrid = bool(np.any(code == 1)), bool(np.any(code == 2))
    has_allgather = bool(np.any(code == 3))
    if has_allgather:
        ag_bytes = allgather_kv_bytes(step, cp)
        ag_f, ag_b = allgather_attention_time_s(step, cp, tp, cluster, eff, allgather_saves_kv)
        # a recomputed core attention reads the saved gathered K/V, a regathering one gathers
        ag_r = np.where(np.asarray(allgather_saves_kv, dtype=bool), 0.0, ag_f)
    else:
        ag_bytes = ag_f = ag_b = ag_r = unused
    if has_ulysses:
        uly_bytes = ulysses_comm_bytes(tokens_local, a, g, dk, tp, cp, bytes_per_element, dv)
        uly_bwd = ulysses_bwd_comm_bytes(tokens_local, a, g, dk, tp, cp, bytes_per_element, dv)
        uly_f, uly_b = ulysses_time_s(uly_bytes, uly_bwd, cp, tp, cluster, eff)
    else:
        uly_bytes = uly_f = uly_b = unused
    if has_hybrid:
        u, r = hybrid_cp_split(cp, tp, cluster.gpus_per_node, a)
        h_uly_bytes = ulysses_comm_bytes(tokens_local, a, g, dk, tp, u, bytes_per_element, dv)
        h_uly_bwd = ulysses_bwd_comm_bytes(tokens_local, a, g, dk, tp, u, bytes_per_element, dv)
        h_uf, h_ub = ulysses_time_s(h_uly_bytes, h_uly_bwd, u, tp, cluster, eff)
        # after the Ulysses exchange a rank holds (seq/r) tokens of (heads/u): the same K/V
        # bytes as a pure ring's block unless K/V heads had to be replicated up to u
        h_step = step * np.maximum(kv_local, u) / kv_local
        h_ring = ring_attention_time_s(h_step, cp, tp, core_fwd_s, core_bwd_s, cluster, eff,
                                       ring_size=r, ring_stride=tp * u)
    else:
        h_uly_bytes = h_uf = h_ub = h_step = unused
        h_ring = {"fwd_s": unused, "bwd_s": unused, "fwd_exposed_s": unused, "bwd_exposed_s": unused}

    ring_only = not (has_ulysses or has_hybrid or has_allgather)

    def pick(ring_v, uly_v, hyb_v, ag_v=0.0):
        if ring_only:
            return np.where(cp > 1, ring_v, 0.0)
        return np.where(cp > 1, np.select([code == 1, code == 2, code == 3], [uly_v, hyb_v, ag_v],
                                          default=ring_v), 0.0)

    if rates is not None:
        heads_local = _f(a) / tp
        r_f, r_b = ring_attention_compute_s(tokens_local, heads_local, kv_local, dk, dv, cp, rates)
        if has_hybrid:
            # after the Ulysses exchange: u times the tokens, 1/u of the heads (K/V heads at least u)
            hr_f, hr_b = ring_attention_compute_s(tokens_local * u, heads_local / u, np.maximum(kv_local, u) / u,
                                                  dk, dv, r, rates)
        else:
            hr_f = hr_b = unused
        compute = {"fwd_compute_s": pick(r_f, 0.0 * step, hr_f), "bwd_compute_s": pick(r_b, 0.0 * step, hr_b)}
    else:
        compute = {"fwd_compute_s": 0.0 * step, "bwd_compute_s": 0.0 * step}
    return {
        **compute,
        "fwd_s": pick(ring["fwd_s"], uly_f, h_uf + h_ring["fwd_s"], ag_f),
        "bwd_s": pick(ring["bwd_s"], uly_b, h_ub + h_ring["bwd_s"], ag_b),
        "fwd_exposed_s": pick(ring["fwd_exposed_s"], uly_f, h_uf + h_ring["fwd_exposed_s"], ag_f),
        "bwd_exposed_s": pick(ring["bwd_exposed_s"], uly_b, h_ub + h_ring["bwd_exposed_s"], ag_b),
        "ring_step_bytes": pick(step, 0.0 * step, h_step),
        "ulysses_bytes": pick(0.0 * uly_bytes, uly_bytes, h_uly_bytes),
        "allgather_bytes": pick(0.0 * step, 0.0 * step, 0.0 * step, ag_bytes),
        "core_attn_recompute_s": pick(ring["fwd_exposed_s"], uly_f, h_uf + h_ring["fwd_exposed_s"], ag_r),
    }


def cp_transient_bytes(model: ModelSpec, kind, tokens_local, cp, tp, gpus_per_node, allgather_saves_kv=False,
                       bytes_per_element=2):
    """Transient bytes one GPU holds for its computing layer's CP exchange, by flavour (``kind``:
    a name or an array of ``CP_KIND_CODES``), at the peak of the layer's passes (backward):

    * ring: ``cp_buffer_bytes`` of the ring step, ``4 * ring_step_bytes`` (K/V and dK/dV double
      buffered: Transformer Engine ``AttnFuncWithCPAndKVP2P.backward`` receives the next step's
      K/V and sends the accumulated dK/dV while computing the current step);
    * Ulysses: the all-to-all outputs of backward's five buffers (``ulysses_bwd_comm_bytes``);
    * hybrid: its Ulysses part over ``u`` ranks plus, where the ring part has more than one
      rank, the ring buffers of the step after the Ulysses exchange (``hybrid_cp_split``);
    * all-gather: ``allgather_buffer_bytes`` (the gathered K/V and dK/dV, or dK/dV alone where
      the gathered K/V are saved as an activation).

    Zero at cp = 1.
    """
    code = _f(CP_KIND_CODES[kind] if isinstance(kind, str) else kind)
    cp, tp = _f(cp), _f(tp)
    g, dk, dv = attention_kv_dims(model)
    a = model.num_heads
    step = ring_attention_comm_bytes(tokens_local, g, dk, tp, bytes_per_element, dv)
    ring = cp_buffer_bytes(step)
    uly = ulysses_bwd_comm_bytes(tokens_local, a, g, dk, tp, cp, bytes_per_element, dv)
    u, r = hybrid_cp_split(cp, tp, gpus_per_node, a)
    kv_local = kv_heads_per_tp_rank(g, tp)
    h_step = step * np.maximum(kv_local, u) / kv_local
    hybrid = (ulysses_bwd_comm_bytes(tokens_local, a, g, dk, tp, u, bytes_per_element, dv) * (u > 1)
              + cp_buffer_bytes(h_step) * (r > 1))
    gather = allgather_buffer_bytes(step, cp, allgather_saves_kv)
    out = np.select([code == 1, code == 2, code == 3], [uly, hybrid, gather], default=ring)
    return np.where(cp > 1, out, 0.0)


def cp_buffer_bytes(ring_step_bytes):
    """Transient bytes a ring adds on one GPU at its peak (one layer at a time, not per layer):
    backward double-buffers K/V and dK/dV (receive the next block while computing the current
    one), ``4 * ring_step_bytes``; forward needs only the K/V pair (2x). The received blocks are
    not kept for backward (it re-circulates them), so the ring adds no per-layer stored
    activations beyond ``memory.activation_bytes_per_layer`` at seq/cp. Every flavour's:
    ``cp_transient_bytes``.
    """
    return 4.0 * _f(ring_step_bytes)
