"""Collectives of an inference step: tensor-parallel all-reduce, expert-parallel dispatch and
combine, pipeline send/recv, and the KV-cache transfer of disaggregated serving.

Decode all-reduces are small (batch x hidden x 2 bytes) and latency-bound. Inside one NVLink
domain the engines use their own all-reduce kernels (vLLM ``custom_all_reduce``, SGLang's
custom all-reduce, TensorRT-LLM ``AllReduceStrategy``) rather than NCCL rings: one-shot (every
GPU reads the n-1 peer buffers: one latency, (n-1) x S bytes per GPU) for small messages,
two-shot (reduce-scatter then all-gather: two latencies, 2(n-1)/n x S) for larger ones. Which
one runs is the engine's switch point (``ServingBehaviour.oneshot_allreduce``: vLLM and
SGLang switch on the message's bytes, TensorRT-LLM on its tokens), not the faster of the two:
at 8 GPUs a decode batch of 100 x 16 KiB runs one-shot in TensorRT-LLM although two-shot would
move a quarter of the bytes, so the per-request cost of a decode step grows with (n-1) x the
hidden size. Below the switch point the one-shot kernel is priced even where the two-shot
formula would be cheaper (that is what the engine runs). At and above it the engine runs
two-shot, priced at min(two-shot, one-shot): the switch point is where the engine's authors
measured two-shot to be at least as fast as one-shot, so the formulas' own crossover, which
lies elsewhere (vLLM at 4 GPUs switches at 512 KiB, where the formulas still price two-shot ~37%
dearer), must not make a step dearer for one token more. The cost is thus continuous at the
switch (it never exceeds what the one-shot kernel it replaced would cost), and tokens/s/GPU
does not drop there as the batch grows. Where the engine states no switch point the faster of
the two is taken. Without the custom kernels the NCCL ring applies. Across domains the all-reduce
is hierarchical (reduce-scatter inside the domain, all-reduce of the shard across domains,
all-gather inside), the cross-domain step taking the faster of NCCL's ring and double binary
tree (2 log2 n latency steps; NCCL 2.4 release notes), as NCCL's tuner picks per message size. Achieved bandwidth = link bandwidth x
``ServingEfficiency.link_bw_fraction``.

Groups: a worker's ranks are numbered tensor-parallel fastest; its tp group is contiguous
(stride 1), the expert group (moe_tp x moe_ep = tp x attention-dp ranks) spans the whole stage.
Every function takes numpy arrays for sizes and degrees.
"""
from __future__ import annotations

import numpy as np

from cost_models import collectives as coll
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.serving_efficiency import ServingEfficiency


def _f(x):
    return np.asarray(x, dtype=float)


def link_rates(cluster: ClusterSpec, eff: ServingEfficiency, n_intra=None):
    """Achieved (bw_intra, lat_intra, bw_inter, lat_inter): bytes/s and seconds. ``n_intra``: the
    group's members in one domain, on a full-mesh scale-up tier reaching each other over
    ``n_intra - 1`` peers' links only (``NetworkTier.group_bw_bytes_per_s``); None = the whole
    domain."""
    link = cluster.scaleup.bw_bytes_per_s if n_intra is None else cluster.scaleup.group_bw_bytes_per_s(n_intra)
    bw_i = link * eff.link_bw_fraction
    bw_o = cluster.scaleout.bw_bytes_per_s * eff.link_bw_fraction / cluster.oversubscription
    return bw_i, cluster.scaleup.latency_s, bw_o, cluster.scaleout.latency_s


def allreduce_time_s(bytes_, group, cluster: ClusterSpec, eff: ServingEfficiency, custom: bool = True,
                     oneshot=None, stated=None):
    """All-reduce of a ``bytes_`` buffer over ``group`` contiguous GPUs, seconds (0 for group 1).

    Inside one NVLink domain with ``custom`` kernels: the one-shot kernel where ``oneshot`` is
    True, the two-shot kernel capped at the one-shot kernel's cost where it is False (the
    engine's switch point is its measured crossover; module docstring), and the faster of the
    two where ``oneshot`` is None or ``stated`` is False (``ServingBehaviour.oneshot_allreduce``
    gives both)."""
    n = _f(group)
    s = _f(bytes_)
    per_node = float(cluster.gpus_per_node)
    if np.ndim(n) == 0 or n.size < _SPLIT_ROWS:
        return np.where(n > 1, np.where(n <= per_node, _allreduce_inside(s, n, cluster, eff, custom, oneshot, stated),
                                        _allreduce_across(s, n, cluster, eff)), 0.0)
    # each row priced by the one formula it takes (every operation is per row: the same numbers
    # as pricing every row both ways and picking), 0 for a group of one
    shape = np.broadcast_shapes(n.shape, s.shape, *(np.shape(v) for v in (oneshot, stated) if v is not None))
    rows = lambda v: np.broadcast_to(v, shape).ravel()       # noqa: E731
    nr = rows(n)
    out = np.zeros(shape)
    flat = out.reshape(-1)
    inside = np.flatnonzero((nr > 1) & (nr <= per_node))
    across = np.flatnonzero((nr > 1) & ~(nr <= per_node))
    at = lambda v, idx: None if v is None else rows(v)[idx]      # noqa: E731
    if inside.size:
        flat[inside] = _allreduce_inside(at(s, inside), nr[inside], cluster, eff, custom, at(oneshot, inside),
                                         at(stated, inside))
    if across.size:
        flat[across] = _allreduce_across(at(s, across), nr[across], cluster, eff)
    return out


#: rows from which ``allreduce_time_s`` prices each row by its own formula alone (below it the
#: gathers cost more than pricing every row both ways)
_SPLIT_ROWS = 64


def _allreduce_inside(s, n, cluster: ClusterSpec, eff: ServingEfficiency, custom, oneshot, stated):
    """``allreduce_time_s`` of a group inside one NVLink domain (n <= its GPUs), seconds."""
    bw_i, lat_i, _, _ = link_rates(cluster, eff, np.minimum(n, float(cluster.gpus_per_node)))
    if not custom:
        return coll.ring_allreduce_time_s(s, n, bw_i, lat_i)
    one_shot = lat_i + (n - 1.0) * s / bw_i
    two_shot = 2.0 * lat_i + 2.0 * (n - 1.0) / np.maximum(n, 1.0) * s / bw_i
    t_in = np.minimum(one_shot, two_shot)
    if oneshot is not None:
        # below the engine's switch: its one-shot kernel, as priced; at and above it: two-shot,
        # never dearer than the one-shot kernel it replaced (the switch is the engine's measured
        # crossover; module docstring)
        engine = np.where(oneshot, one_shot, t_in)
        t_in = engine if stated is None else np.where(stated, engine, t_in)
    return t_in


def _allreduce_across(s, n, cluster: ClusterSpec, eff: ServingEfficiency):
    """``allreduce_time_s`` of a group spanning NVLink domains: reduce-scatter inside each, the
    shard across them (NCCL's faster of ring and tree), all-gather inside, seconds."""
    per_node = float(cluster.gpus_per_node)
    bw_i, lat_i, bw_o, lat_o = link_rates(cluster, eff, np.minimum(n, per_node))
    n_intra = np.minimum(n, per_node)
    n_inter = np.ceil(n / np.maximum(n_intra, 1.0))
    shard = s / np.maximum(n_intra, 1.0)
    intra = 2.0 * coll.reduce_scatter_time_s(s, n_intra, bw_i, lat_i)
    across = np.minimum(coll.ring_allreduce_time_s(shard, n_inter, bw_o, lat_o),
                        coll.tree_allreduce_time_s(shard, n_inter, bw_o, lat_o))
    return intra + across


def all_to_all_time_s(bytes_, group, cluster: ClusterSpec, eff: ServingEfficiency):
    """All-to-all where each of ``group`` GPUs holds ``bytes_`` and keeps 1/group of it, seconds
    (the part leaving the NVLink domain goes over each GPU's NIC)."""
    n = _f(group)
    per_node = float(cluster.gpus_per_node)
    bw_i, lat_i, bw_o, lat_o = link_rates(cluster, eff, np.minimum(n, per_node))
    n_intra = np.minimum(n, per_node)
    n_inter = np.ceil(n / np.maximum(n_intra, 1.0))
    # the engines' all-to-all kernels (DeepEP, NVLink one-sided copies) issue every peer at once:
    # the NVLink and NIC parts overlap (the slower sets the time) and each tier pays one start-up
    inside = _f(bytes_) * (n_intra - 1.0) / np.maximum(n, 1.0) / bw_i
    outside = _f(bytes_) * n_intra * (n_inter - 1.0) / np.maximum(n, 1.0) / bw_o
    lat = lat_i + np.where(n_inter > 1, lat_o, 0.0)
    return np.where(n > 1, np.maximum(inside, outside) + lat, 0.0)


def all_gather_time_s(bytes_, group, cluster: ClusterSpec, eff: ServingEfficiency):
    """All-gather over ``group`` contiguous GPUs whose gathered buffer is ``bytes_`` on each GPU,
    seconds (0 for group 1): a ring on the scale-up link inside one domain
    (``collectives.all_gather_time_s``), else inside each domain then across them on the NICs
    (``collectives.hierarchical_all_gather_time_s``)."""
    n = _f(group)
    per_node = float(cluster.gpus_per_node)
    n_intra = np.minimum(n, per_node)
    n_inter = np.ceil(n / np.maximum(n_intra, 1.0))
    bw_i, lat_i, bw_o, lat_o = link_rates(cluster, eff, n_intra)
    t = coll.hierarchical_all_gather_time_s(_f(bytes_), n_intra, n_inter, bw_i, lat_i, bw_o, lat_o)
    return np.where(n > 1, t, 0.0)


def p2p_time_s(bytes_, cross_domain, cluster: ClusterSpec, eff: ServingEfficiency):
    """One send/recv of ``bytes_`` between neighbouring pipeline stages, seconds (inside a
    domain a group of two: one peer's links on a full mesh)."""
    bw_i, lat_i, bw_o, lat_o = link_rates(cluster, eff, 2.0)
    cross = np.asarray(cross_domain, dtype=bool)
    return np.where(cross, _f(bytes_) / bw_o + lat_o, _f(bytes_) / bw_i + lat_i)


def kv_busiest_link_bytes(bytes_, kv_shards, sender_tp, sender_pp, receiver_tp, receiver_pp):
    """Bytes of one request's KV cache (``bytes_``: one unsplit copy of the whole model's) that
    the busiest GPU link of a prefill -> decode transfer carries, the larger of the busiest
    sender's and the busiest receiver's (numpy-friendly).

    Tensor parallelism cuts the cache into K = ``kv_shards`` distinct shards (the KV heads; 1 for
    MLA, whose latent every tp rank holds whole) and holds each on max(1, tp / K) GPUs; pipeline
    stages split it by layer. A receiver GPU needs its stage's layers of its own shard:

        receive = B / (pp_d x min(tp_d, K)).

    Each shard is needed by max(1, tp_d / K) decode GPUs (one copy each); the prefill GPUs
    holding it share the sending (the transfer engine pulls each piece from one of them), so
    the P = tp_p x pp_p prefill GPUs send B x max(1, tp_d / K) in all, evenly:

        send = B x max(1, tp_d / K) / (tp_p x pp_p).

    With K >= both tp degrees this is B / min(tp_p pp_p, tp_d pp_d), the side with fewer GPUs.
    Qwen3-235B (K = 4), tp 4 -> tp 8: each decode GPU gets one head, B / 4, and each prefill GPU
    sends its head twice, B / 2. MLA, tp 1 -> tp 8: every decode GPU needs the whole latent, B,
    and the one prefill GPU sends it 8 times, 8 B."""
    b = _f(bytes_)
    k = np.maximum(_f(kv_shards), 1.0)
    tp_d = np.maximum(_f(receiver_tp), 1.0)
    receive = b / (np.maximum(_f(receiver_pp), 1.0) * np.minimum(tp_d, k))
    send = b * np.maximum(1.0, tp_d / k) / (np.maximum(_f(sender_tp), 1.0) * np.maximum(_f(sender_pp), 1.0))
    return np.maximum(send, receive)


def kv_peers(sender_tp, sender_pp, receiver_tp, receiver_pp):
    """GPUs on the other side that one GPU of the busier side of a prefill -> decode KV transfer
    exchanges with at once (numpy-friendly): with P = tp_p x pp_p senders and D = tp_d x pp_d
    receivers, a sender fans its pieces out to D / P receivers when the decode side is the larger
    and a receiver gathers from P / D senders when the prefill side is: max(1, D / P, P / D).
    One each for tp 1 -> tp 1; MLA tp 1 -> tp 8: the one sender feeds 8 decode GPUs; pp 2 -> pp 1:
    the receiver gathers each stage's layers from its own sender."""
    p = np.maximum(_f(sender_tp), 1.0) * np.maximum(_f(sender_pp), 1.0)
    d = np.maximum(_f(receiver_tp), 1.0) * np.maximum(_f(receiver_pp), 1.0)
    return np.maximum(d / p, p / d)


def kv_transfer_time_s(bytes_, sender_gpus, same_domain, cluster: ClusterSpec, eff: ServingEfficiency,
                       receiver_gpus=None, peers=None):
    """Moving one request's KV cache (``bytes_``, the whole model's) from a prefill worker to a
    decode worker, seconds: each of the ``sender_gpus`` GPUs holding a shard sends it over its
    own link at once to the ``receiver_gpus`` GPUs that will hold it (default: as many), so the
    side with fewer GPUs, hence fewer links, sets the rate (NVLink inside one domain, else the
    NICs; NIXL / Mooncake transfer engines read and write GPU memory directly).
    ``same_domain``: the share of transfers that stay inside one NVLink domain (a bool or a
    fraction in [0, 1]); the rest cross the NICs. Where tensor parallelism replicates KV shards
    (tp above the KV heads, or MLA's latent on every rank) pass the busiest link's bytes
    (``kv_busiest_link_bytes``) with one sender and one receiver.

    ``peers``: the GPUs each busiest GPU exchanges with (``kv_peers``). On a full-mesh scale-up
    tier (MI300X xGMI, ``NetworkTier.mesh_peer_bw_gb_per_s``) a GPU reaches one peer over that
    peer's link only, so the transfer inside a domain gets the bandwidth of a group of peers + 1
    (``NetworkTier.group_bw_bytes_per_s``: MI300X, one peer, 64 GB/s, not the node's 448 GB/s);
    on a switch every peer count gets the whole link. None: the whole domain's bandwidth."""
    n_intra = None if peers is None else np.minimum(np.maximum(_f(peers), 1.0) + 1.0, float(cluster.gpus_per_node))
    bw_i, lat_i, bw_o, lat_o = link_rates(cluster, eff, n_intra)
    same = np.clip(np.asarray(same_domain, dtype=float), 0.0, 1.0)
    links = np.maximum(_f(sender_gpus), 1.0)
    if receiver_gpus is not None:
        links = np.minimum(links, np.maximum(_f(receiver_gpus), 1.0))
    inside = _f(bytes_) / (bw_i * links) + lat_i
    outside = _f(bytes_) / (bw_o * links) + lat_o
    return same * inside + (1.0 - same) * outside
