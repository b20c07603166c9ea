"""The layouts a serving search considers, as numpy columns.

Worker layouts: attention tensor parallelism ``tp`` (a divisor of the attention heads, powers of
two up to the NVLink domain), attention data parallelism ``adp`` (MoE models only: it pays when
the experts are shared by ranks holding their own requests), pipeline stages ``pp`` (every
count up to the layers and the GPUs left: ``serve simulate`` runs any, the last stage holding
fewer layers where they do not divide, ``cost_models.kv_cache.largest_stage_share``; a powers-of-
two grid had missed Llama-3.1-405B bf16 on 12 H100, which fits only as tp 4 x pp 3), expert parallelism ``moe_ep`` (a power of two dividing tp x adp and the
expert count; ``moe_tp`` = tp x adp / moe_ep), keeping only the expert splits the serving
stack runs (``ServingBehaviour.expert_splits``: vLLM runs its experts all expert-parallel or
all tensor-parallel over the worker, never etp 2 x ep 4) and the attention splits it runs
(``ServingBehaviour.attention_dp_with_tp``: TensorRT-LLM's attention-DP ranks are one GPU each). Per-rank concurrency ``batch`` runs
over powers of two from 1 to ``max_batch`` (the search adds each layout's largest fitting batch). A worker never exceeds the GPUs given.
"""
from __future__ import annotations

import itertools

import numpy as np

from cost_models.params import serving_tp_splits_kv_heads
from cost_models.weight_formats import slice_holds_whole_blocks

from hardware_specs.serving_behaviour import ServingBehaviour
from model_specs.model_spec import ModelSpec

def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def worker_layouts(model: ModelSpec, gpus: int, domain: int, allow_pp: bool = True,
                   behaviour: ServingBehaviour | None = None, expert_format: str = "bf16") -> np.ndarray:
    """Rows (tp, pp, adp, moe_tp, moe_ep) of the worker layouts of ``model`` on at most ``gpus``
    GPUs, tensor parallelism inside one ``domain`` (NVLink) of GPUs; with ``behaviour``, only
    the expert splits its engine runs (``ServingBehaviour.runs_expert_split``); expert slices
    that hold whole scale blocks of ``expert_format`` only
    (``cost_models.weight_formats.slice_holds_whole_blocks``)."""
    rows = []
    heads = model.num_heads
    for tp in _pow2_upto(min(domain, gpus)):
        if heads % tp or not serving_tp_splits_kv_heads(model, tp):
            continue
        adps = _pow2_upto(gpus // tp) if model.moe is not None else [1]
        for adp in adps:
            for pp in (range(1, min(model.num_layers, gpus // (tp * adp)) + 1) if allow_pp else (1,)):
                if model.moe is None:
                    rows.append((tp, pp, adp, tp * adp, 1))
                    continue
                group = tp * adp
                for ep in _pow2_upto(group):
                    if model.moe.num_experts % ep or group % ep:
                        continue
                    etp = group // ep
                    if model.moe.expert_ffn_hidden_size % etp or \
                            not slice_holds_whole_blocks(model.moe.expert_ffn_hidden_size, etp, expert_format):
                        continue
                    rows.append((tp, pp, adp, etp, ep))
    layouts = np.array(rows, dtype=float).reshape(-1, 5)
    if behaviour is not None:
        layouts = layouts[behaviour.runs_expert_split(layouts[:, 3], layouts[:, 4])
                          & behaviour.runs_attention_split(layouts[:, 0], layouts[:, 2])]
    return layouts


def with_batches(layouts: np.ndarray, max_batch: int) -> dict[str, np.ndarray]:
    """Every layout crossed with batch = 1, 2, 4, ... <= ``max_batch``: columns tp, pp, adp,
    moe_tp, moe_ep, batch."""
    batches = np.array(_pow2_upto(max_batch), dtype=float)
    li, bi = np.meshgrid(np.arange(len(layouts)), np.arange(len(batches)), indexing="ij")
    li, bi = li.ravel(), bi.ravel()
    cols = {name: layouts[li, k] for k, name in enumerate(("tp", "pp", "adp", "moe_tp", "moe_ep"))}
    cols["batch"] = batches[bi]
    return cols


def worker_count_pairs(gpus: int, prefill_gpus: np.ndarray, decode_gpus: np.ndarray):
    """For each (prefill worker size, decode worker size) pair, every (n_prefill, n_decode) with
    n_prefill x prefill + n_decode x decode <= gpus, both >= 1: yields index arrays into the
    inputs and the two counts."""
    pi, di, npw, ndw = [], [], [], []
    for i, j in itertools.product(range(len(prefill_gpus)), range(len(decode_gpus))):
        gp, gd = int(prefill_gpus[i]), int(decode_gpus[j])
        for n_p in range(1, gpus // gp + 1):
            left = gpus - n_p * gp
            for n_d in range(1, left // gd + 1):
                pi.append(i)
                di.append(j)
                npw.append(n_p)
                ndw.append(n_d)
    return (np.array(pi, dtype=int), np.array(di, dtype=int), np.array(npw, dtype=float), np.array(ndw, dtype=float))
