"""Hybrid sharded data parallelism (HSDP): ZeRO inside groups of G ranks, replicas across them.

The dp data-parallel ranks (dp * cp in the simulator, which shards over both) split into
R = dp / G replica groups of G consecutive ranks. Parameters, gradients and optimizer states
are sharded over a group as ZeRO / FSDP shards them over all ranks (stage 1: optimizer, 2:
+ gradients, 3: + parameters), and every group holds a full copy (torchtitan
``dp_replicate x dp_shard``; PyTorch FSDP ``HYBRID_SHARD``; MiCS, Zhang et al. 2022; ZeRO++'s
hpZ keeps such a secondary parameter partition inside a node, Wang et al. 2023). G = dp is
plain ZeRO, G = 1 plain data parallelism.

Traffic of one optimizer step (Zhao et al. 2023, "PyTorch FSDP", section 3.2.2): inside a
group, the ZeRO collectives of its stage over G ranks (ZeRO-3: all-gather the parameters
before each layer's forward and backward, reduce-scatter its gradients after the backward;
ZeRO-1/2: reduce-scatter the gradients, all-gather the updated parameters); across groups, one
all-reduce of each rank's gradient shard (1/G of the gradients) over the R ranks holding the
same shard. Buffer sizes are the collectives' inputs as ``cost_models.collectives`` takes them;
``wire_bytes`` is what one rank sends for them on a ring ((n-1)/n of the buffer for a gather
or scatter, 2(n-1)/n for an all-reduce).
"""
from __future__ import annotations

import numpy as np

from cost_models.moe import expert_data_parallel_size


def _f(x):
    return np.asarray(x, dtype=float)


def largest_zero_group(dp, cp, tp, ep, etp, is_moe: bool):
    """Ranks ZeRO can shard some state over (integers, scalars or arrays): the data-parallel
    ``dp * cp``, or for a MoE model the experts' data-parallel group ``dp * cp * tp / (ep * etp)``
    (``moe.expert_data_parallel_size``) when that is larger (expert states shard over it). 1
    means ZeRO has nothing to shard."""
    shard = _f(dp) * _f(cp)
    return np.maximum(shard, expert_data_parallel_size(dp, cp, tp, ep, etp)) if is_moe else shard


def shard_size(dp, zero_shard_group):
    """Ranks ZeRO shards over: ``zero_shard_group``, or all ``dp`` when it is 0."""
    g = _f(zero_shard_group)
    return np.where(g > 0, g, _f(dp))


def replicas(dp, zero_shard_group):
    """Replica groups R = dp / G."""
    return _f(dp) / shard_size(dp, zero_shard_group)


def hsdp_step_traffic(params, zero_stage, dp, zero_shard_group, micro_batches, param_bytes=2.0,
                      grad_bytes=4.0) -> dict:
    """Collective buffers (bytes) and wire bytes per rank of one optimizer step for ``params``
    parameters a rank holds before sharding.

    Returns ``gather_buffer_bytes`` (one all-gather of the parameters inside the group, the
    full 16-bit parameters), ``gathers`` (how many per step: ZeRO-3 two per micro-batch, forward
    and backward; ZeRO-1/2 one after the step), ``reduce_scatter_buffer_bytes`` (the gradients)
    and ``reduce_scatters`` (ZeRO-2/3 one per micro-batch, ZeRO-1 one per step),
    ``all_reduce_buffer_bytes`` (the gradient shard, 1/G of the gradients, across the R
    replicas: 0 when R = 1), and ``wire_bytes_intra`` / ``wire_bytes_inter`` (sent per rank
    per step inside the group / across groups).
    """
    p = _f(params)
    z = np.asarray(zero_stage)
    g = shard_size(dp, zero_shard_group)
    r = replicas(dp, zero_shard_group)
    m = _f(micro_batches)
    gather_buf = p * _f(param_bytes)
    rs_buf = p * _f(grad_bytes)
    gathers = np.where(z >= 3, 2.0 * m, np.where(z >= 1, 1.0, 0.0))
    reduce_scatters = np.where(z >= 2, m, np.where(z >= 1, 1.0, 0.0))
    ar_buf = np.where((r > 1) & (z >= 1), rs_buf / g, 0.0)
    intra = (gathers * gather_buf + reduce_scatters * rs_buf) * (g - 1.0) / g
    inter = ar_buf * 2.0 * (r - 1.0) / np.maximum(r, 1.0)
    return {"gather_buffer_bytes": gather_buf, "gathers": gathers, "reduce_scatter_buffer_bytes": rs_buf,
            "reduce_scatters": reduce_scatters, "all_reduce_buffer_bytes": ar_buf,
            "wire_bytes_intra": intra, "wire_bytes_inter": inter, "shard": g, "replicas": r}


def prefetched_layers(depth, max_elements, layer_elements):
    """Layers whose ZeRO-3 / FSDP parameter gathers run ahead of the layer computing (numpy-
    friendly): the stack's prefetch ``depth`` in layers, capped where the stack caps the
    prefetched elements (``max_elements`` > 0: DeepSpeed's ``stage3_prefetch_bucket_size``) at
    that many of ``layer_elements`` a layer. The step model hides that many layers' gathers and
    the memory holds that many layers gathered beside the computing one."""
    depth, cap = _f(depth), _f(max_elements)
    return np.where(cap > 0, np.minimum(depth, cap / np.maximum(_f(layer_elements), 1.0)), depth)
