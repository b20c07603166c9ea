"""What a ZeRO-3 stack's collectives cost beyond the ring itself: the per-rank copies of
list-based collectives and the parameter tensors kept whole (persistent) on every rank.

DeepSpeed 0.3 (``hardware_specs/stacks/deepspeed-2021.yaml``) does both: it hands PyTorch's
``all_gather`` / ``reduce_scatter`` a list of one tensor per rank, and keeps tensors under
``stage3_param_persistence_threshold`` elements whole, gathering them once after each optimizer
step. Functions of a ``ConfigBatch`` (arrays over its rows), used by ``simulator.step_model``.
"""
from __future__ import annotations

import numpy as np

from cost_models import params
from cost_models.topology import group_collective_time_s
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import ConfigBatch


def rank_copies_s(batch: ConfigBatch, group, eff: EfficiencyModel):
    """GPU time of the per-rank copies of one list-based ZeRO collective over ``group`` ranks,
    seconds: a stack that hands ``all_gather`` / ``reduce_scatter`` a list of one tensor per rank
    (DeepSpeed 0.3's ``_allgather_param`` and ``_reduce_scatter_gradient``) makes PyTorch's
    ProcessGroupNCCL flatten the list and copy each rank's slice in or out in its own kernel
    (pytorch/pytorch@v1.8.0 torch/lib/c10d/ProcessGroupNCCL.cpp ``allgather`` /
    ``reduce_scatter``: ``flatten_for_scatter_gather`` and one ``copy_`` per output / input
    tensor): ``group`` kernels of ``kernel_overhead_s`` each (the bytes are the collective's
    own, at HBM speed, and left out). 0 unless ``collective_per_rank_copies``."""
    return np.where(batch.collective_per_rank_copies, np.asarray(group, dtype=float) * eff.kernel_overhead_s, 0.0)


def persistent_layer_tensors(model: ModelSpec, batch: ConfigBatch):
    """(tensors, elements) per layer and rank that stay whole under ZeRO-3 because they hold
    fewer than ``zero3_persistence_elements`` elements after the TP split
    (``params.layer_param_tensor_shapes``; DeepSpeed ``stage3_param_persistence_threshold``,
    1e5 by default: GPT-3 175B's biases and norm weights, 8 tensors and 135,168 elements a
    layer at tp 1). Arrays over the batch; (0, 0) where ZeRO-3 is off or nothing persists."""
    tp = np.asarray(batch.tp, dtype=float)
    threshold = np.asarray(batch.zero3_persistence_elements, dtype=float)
    on = np.asarray(batch.zero_stage) >= 3
    count = np.zeros(len(batch))
    elements = np.zeros(len(batch))
    if not on.any():                    # the planner's usual batch: no ZeRO-3 row, nothing to size
        return count, elements
    for size, split in params.layer_param_tensor_shapes(model):
        local = size / tp if split else size + 0.0 * tp
        small = on & (local < threshold)
        count = count + small
        elements = elements + np.where(small, local, 0.0)
    return count, elements


def persistent_gather_s(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch,
                        shard, param_bytes):
    """Exposed time of re-gathering the persistent ZeRO-3 tensors after each optimizer step,
    seconds (DeepSpeed@v0.3.16 stage3.py ``_post_step``: ``persistent_parameters[0].all_gather``,
    synchronous, nothing left to overlap). One all-gather of the stage's persistent elements (the
    busiest stage's ``ceil(L / pp)`` layers and the final norm); with per-rank copies also
    DeepSpeed's ``_allgather_params`` loop, one copy per persistent tensor and rank, and the list
    API's one per rank. 0 where nothing persists."""
    n_persist, elements = persistent_layer_tensors(model, batch)
    if not n_persist.any():
        return np.zeros(len(batch))
    pp = np.asarray(batch.pp, dtype=float)
    layers = np.ceil(model.num_layers / pp)
    final_norm = np.where(n_persist > 0, float(params.norm_tensors(model)), 0.0)
    tensors = layers * n_persist + final_norm
    total = layers * elements + final_norm * model.hidden_size
    gather = group_collective_time_s("all_gather", total * param_bytes, shard, batch.tp, cluster, eff)
    copies = rank_copies_s(batch, shard, eff) * (1.0 + tensors)
    return np.where(tensors > 0, gather + copies, 0.0)


def bucket_calls(n_params, bucket_elements):
    """All-reduce calls of ``n_params`` gradients reduced one bucket of ``bucket_elements`` at a
    time (at least one; one when the stack sets no bucket, ``bucket_elements`` 0)."""
    bucket = np.asarray(bucket_elements, dtype=float)
    return np.where(bucket > 0, np.maximum(np.asarray(n_params, dtype=float) / np.maximum(bucket, 1.0), 1.0), 1.0)
