"""Per-layer costs of one pool, from the training step model's own per-layer times.

``simulator.layer_times.layer_times`` times one transformer layer (forward, input-gradient and
weight-gradient backward, recomputation, the TP traffic the stack leaves exposed) and the
model's ends (LM head and loss, embedding) for a layer key (tensor-parallel degree,
micro-batch, recomputation, sequence parallelism, precision, kernels) on one GPU kind: the
figures ``step_model.evaluate`` lays its pipeline out from. Each pool is evaluated once per
key, with every layer-key switch of the plan's settings (``step_model.LAYER_KEY_FIELDS``: the
stack's loss implementation, kernels, FP8 scaling, ...) through the step model's own call, and
the heterogeneous composition (``compose``) lays the stages out from them. Nothing here
re-derives a layer's time.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from hardware_specs.catalog import efficiency_for_cluster
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError, suggest
from hardware_specs.pools import PooledCluster
from model_specs.model_spec import ModelSpec
from cost_models.compute import compute_rates
from simulator.config_batch import ConfigBatch
from simulator.heterogeneous.plan import pool_dtype
from simulator.parallel_config import ParallelConfig
from simulator.step_model import _layer_times as step_layer_times

#: per-layer and per-end outputs of ``UnitCosts`` (seconds per micro-batch on one GPU)
UNIT_FIELDS = ("fwd_s", "bwd_s", "w_s", "tp_s", "recompute_s", "compute_s", "weight_cast_s",
               "head_s", "head_bwd_s", "embedding_s", "embedding_bwd_s", "head_tp_s", "embedding_tp_s",
               "model_flops_mb")


@dataclass(frozen=True)
class UnitCosts:
    """Layer costs per (pool, layer key) row, seconds per micro-batch on one GPU.

    Attributes:
        pool, tp, micro_batch, recompute, sequence_parallel: the key of each row.
        fwd_s: one layer's forward incl. its exposed TP traffic; bwd_s: its input-gradient
            backward incl. recomputation and exposed TP traffic; w_s: its weight-gradient part.
        tp_s, recompute_s: the exposed TP traffic and the recomputation inside fwd+bwd+w.
        compute_s: fwd + bwd + w less TP traffic and recomputation.
        weight_cast_s: low-precision weight quantisation, once per step per layer (0 in 16/32-bit).
        head_s, embedding_s: LM head + loss, and embedding, forward + backward (head_bwd_s,
            embedding_bwd_s: their backward alone, the weight gradient's included; head_tp_s,
            embedding_tp_s: the exposed TP collectives inside head_s and embedding_s,
            ``layer_times.ends_tp_collectives``).
        model_flops_mb: model FLOPs of one micro-batch through the whole model (forward and
            backward, no recomputation), as the step model counts them.

    (``tp_s`` and ``recompute_s`` are parts of fwd + bwd + w; ``compute_s`` is the rest, the
    layer's own kernels.)
    """

    pool: np.ndarray
    tp: np.ndarray
    micro_batch: np.ndarray
    recompute: np.ndarray
    sequence_parallel: np.ndarray
    values: dict

    def __getitem__(self, name: str) -> np.ndarray:
        return self.values[name]

    def __len__(self) -> int:
        return int(len(self.pool))


def pool_efficiencies(cluster: PooledCluster, overrides: Mapping | None = None) -> tuple[EfficiencyModel, ...]:
    """Each pool's efficiency model: ``overrides[pool]`` if given, else its cluster's own or its
    GPU generation's. ``overrides`` maps pool names of ``cluster`` to ``EfficiencyModel``s: a
    list, a name ('hopper') or a pool the cluster lacks is one ``InputError`` (they failed as an
    AttributeError inside the cost model, or an override for a misspelt pool was silently unused)."""
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, Mapping):
        raise InputError("efficiency", f"must map pool names to efficiency models, got {type(overrides).__name__}",
                         "e.g. {'h100': hardware_specs.catalog.load_efficiency('hopper')}")
    for name, eff in overrides.items():
        if name not in cluster.pool_names:
            raise InputError(f"efficiency.{name}", f"{cluster.name} has no pool '{name}'",
                             suggest(str(name), cluster.pool_names))
        if eff is not None and not isinstance(eff, EfficiencyModel):
            raise InputError(f"efficiency.{name}", f"must be an EfficiencyModel, got {type(eff).__name__}",
                             "pass hardware_specs.catalog.load_efficiency(generation or file)")
    return tuple(overrides.get(p.name) or efficiency_for_cluster(p.cluster) for p in cluster.pools)


def unit_costs(model: ModelSpec, cluster: PooledCluster, effs, pool, tp, micro_batch, recompute_code,
               sequence_parallel, settings: ParallelConfig) -> UnitCosts:
    """Time each (pool, tp, micro_batch, recompute, sp) row with ``layer_times`` on its pool.

    ``settings`` supplies the dtype and the software switches; ``recompute_code`` is
    ``config_batch.RECOMPUTE_CODES``'s code. Rows of one pool are timed as one batch.
    """
    pool = np.asarray(pool, dtype=np.int64)
    n = len(pool)
    tp = np.broadcast_to(np.asarray(tp, dtype=np.int64), (n,))
    mb = np.broadcast_to(np.asarray(micro_batch, dtype=np.int64), (n,))
    rc = np.broadcast_to(np.asarray(recompute_code, dtype=np.int64), (n,))
    sp = np.broadcast_to(np.asarray(sequence_parallel, dtype=bool), (n,)) & (tp > 1)
    values = {k: np.zeros(n) for k in UNIT_FIELDS}
    L = float(model.num_layers)
    template = ConfigBatch.from_configs([settings])
    for p in np.unique(pool):
        rows = np.flatnonzero(pool == p)
        cl = cluster.pools[int(p)].cluster
        dtype = pool_dtype(cl.gpu, settings.dtype) or settings.dtype
        rates = compute_rates(cl.gpu, effs[int(p)], dtype)
        t = tp[rows].astype(float)
        tokens = mb[rows].astype(float) * float(model.seq_len)
        # the settings' every layer-key switch (the stack's loss, kernels, FP8 scaling, ...) with
        # each row's key, timed by the step model's own call
        keyed = replace(template.take(np.zeros(len(rows), dtype=np.int64)), tp=tp[rows], micro_batch=mb[rows],
                        recompute=rc[rows], sequence_parallel=sp[rows])
        lay = step_layer_times(model, cl, effs[int(p)], rates, keyed, tokens)
        f, b, w, r = lay["f_dense"], lay["b_dense"], lay["w_dense"], lay["r_dense"]
        values["fwd_s"][rows] = f
        values["bwd_s"][rows] = b + r              # recomputation runs just before the input gradient
        values["w_s"][rows] = w
        values["tp_s"][rows] = lay["tp_exposed_dense"]
        values["recompute_s"][rows] = lay["recompute_dense"]
        values["compute_s"][rows] = lay["compute_fwd_dense"] + lay["compute_bwd_dense"] + w
        values["weight_cast_s"][rows] = lay["weight_cast_dense"]
        values["head_s"][rows] = lay["head_f"] + lay["head_b"] + lay["head_w"]
        values["embedding_s"][rows] = lay["emb_f"] + lay["emb_b"]
        values["head_bwd_s"][rows] = lay["head_b"] + lay["head_w"]
        values["embedding_bwd_s"][rows] = lay["emb_b"]
        values["head_tp_s"][rows] = lay["head_tp_s"]
        values["embedding_tp_s"][rows] = lay["emb_tp_s"]
        # model FLOPs of one micro-batch through the whole model, as step_model counts them
        values["model_flops_mb"][rows] = 3.0 * t * (L * lay["flops_dense"] + lay["head_flops"])
    return UnitCosts(pool=pool, tp=np.asarray(tp), micro_batch=np.asarray(mb), recompute=np.asarray(rc),
                     sequence_parallel=np.asarray(sp), values=values)
