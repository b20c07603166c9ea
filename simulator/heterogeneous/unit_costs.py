"""Per-layer costs of one pool, from the training step model itself.

``step_model.evaluate`` times one transformer layer (forward, input-gradient and weight-gradient
backward, recomputation, exposed tensor-parallel traffic) and the model's ends (LM head and
loss, embedding) for a layer key (tensor-parallel degree, micro-batch, recomputation, sequence
parallelism, precision) on one GPU kind. Those figures depend on nothing else, so each pool is
evaluated once per key on a one-stage, one-replica row, and the heterogeneous composition
(``compose``) lays the stages out from them. Nothing here re-derives a layer's time.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hardware_specs.catalog import efficiency_for_cluster
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.pools import PooledCluster
from model_specs.model_spec import ModelSpec
from simulator.config_batch import ConfigBatch
from simulator.heterogeneous.plan import pool_dtype
from simulator.parallel_config import ParallelConfig
from simulator.step_model import evaluate

#: per-layer and per-end outputs of ``UnitCosts`` (seconds per micro-batch on one GPU)
UNIT_FIELDS = ("fwd_s", "bwd_s", "w_s", "tp_s", "recompute_s", "compute_s", "weight_cast_s",
               "head_s", "embedding_s", "model_flops_mb")


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
        head_s, embedding_s: LM head + loss, and embedding, forward + backward.
        model_flops_mb: model FLOPs of one micro-batch through the whole model (forward and
            backward, no recomputation), as the step model counts them.
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


def pool_efficiencies(cluster: PooledCluster, overrides: dict | None = None) -> tuple[EfficiencyModel, ...]:
    """Each pool's efficiency model: ``overrides[pool]`` if given, else its cluster's own or its
    GPU generation's."""
    overrides = overrides or {}
    return tuple(overrides.get(p.name) or efficiency_for_cluster(p.cluster) for p in cluster.pools)


def unit_costs(model: ModelSpec, cluster: PooledCluster, effs, pool, tp, micro_batch, recompute_code,
               sequence_parallel, settings: ParallelConfig) -> UnitCosts:
    """Evaluate each (pool, tp, micro_batch, recompute, sp) row once with ``step_model.evaluate``.

    ``settings`` supplies the dtype and the software switches; ``recompute_code`` is
    ``config_batch.RECOMPUTE_CODES``'s code. Rows of one pool are evaluated as one batch.
    """
    pool = np.asarray(pool, dtype=np.int64)
    n = len(pool)
    tp = np.broadcast_to(np.asarray(tp, dtype=np.int64), (n,))
    mb = np.broadcast_to(np.asarray(micro_batch, dtype=np.int64), (n,))
    rc = np.broadcast_to(np.asarray(recompute_code, dtype=np.int64), (n,))
    sp = np.broadcast_to(np.asarray(sequence_parallel, dtype=bool), (n,)) & (tp > 1)
    values = {k: np.zeros(n) for k in UNIT_FIELDS}
    L = float(model.num_layers)
    for p in np.unique(pool):
        rows = np.flatnonzero(pool == p)
        k = len(rows)
        dtype = pool_dtype(cluster.pools[int(p)].cluster.gpu, settings.dtype) or settings.dtype
        template = ConfigBatch.from_configs([replace(settings, dtype=dtype)])
        cols = {}
        for name, v in template.__dict__.items():
            if name == "dtype":
                continue
            cols[name] = np.full(k, v[0])
        cols.update(dp=np.ones(k), tp=tp[rows].astype(float), pp=np.ones(k), cp=np.ones(k), vpp=np.ones(k),
                    micro_batch=mb[rows].astype(float), global_batch=mb[rows].astype(float),
                    recompute=rc[rows], sequence_parallel=sp[rows], zero_stage=np.zeros(k, dtype=np.int64))
        batch = ConfigBatch(dtype=dtype, **cols)
        out = evaluate(model, cluster.pools[int(p)].cluster, effs[int(p)], batch)
        # one replica, one stage, one micro-batch: the *_s totals are L layers' worth
        tp_l = out["tp_comm_exposed_s"] / L
        rc_l = out["recompute_s"] / L
        fwd, bwd_all, rec, w = out["layer_fwd_s"], out["layer_bwd_s"], out["layer_recompute_s"], out["layer_w_s"]
        total = fwd + bwd_all + rec
        compute = total - tp_l - rc_l - out["cp_comm_exposed_s"] / L
        ends = out["head_s"] + out["embedding_s"]
        # compute_s = L (f + b + w) + ends + gradient accumulation + L x weight cast (step_model)
        cast = np.maximum(out["compute_s"] - L * compute - ends - out["grad_accum_per_microbatch_s"], 0.0) / L
        values["fwd_s"][rows] = fwd
        values["bwd_s"][rows] = bwd_all - w + rec
        values["w_s"][rows] = w
        values["tp_s"][rows] = tp_l
        values["recompute_s"][rows] = rc_l
        values["compute_s"][rows] = compute
        values["weight_cast_s"][rows] = cast
        values["head_s"][rows] = out["head_s"]
        values["embedding_s"][rows] = out["embedding_s"]
        values["model_flops_mb"][rows] = out["model_flops"]
    return UnitCosts(pool=pool, tp=np.asarray(tp), micro_batch=np.asarray(mb), recompute=np.asarray(rc),
                     sequence_parallel=np.asarray(sp), values=values)
