"""The per-row memory lower bound (``simulator.memory_rows``: the mean stage) never exceeds the
stage model's peak, equal the static memory of a one-stage row, and let the planner skip the
stage model on rows that cannot fit without changing any row it keeps or the error of a search
where nothing fits."""
from __future__ import annotations

import numpy as np
import pytest

import planners.vectorized as vectorized
from cost_models import memory, params
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from hardware_specs.errors import InputError
from model_specs import ModelSpec
from model_specs.catalog import load_model
from planners import plan
from planners.search_space import SearchConstraints, enumerate_space
from planners.vectorized import config_batch, evaluate_space
from simulator.memory_rows import BOUND_MARGIN, static_lower_bound_bytes
from simulator.step_model import memory_parts

CLUSTER = load_cluster("dgx-h100")
EFF = efficiency_for_cluster(CLUSTER)
LIMIT = CLUSTER.gpu.hbm_bytes * 0.95


def _sample_batch(model, gpus, gbs, dtype, n=2500, defaults=None, seed=18):
    space = enumerate_space(model, SearchConstraints(gpus=gpus, global_batch=gbs, max_tp=8, hsdp_gpus=8,
                                                     dtypes=(dtype,)))
    rows = np.sort(np.random.default_rng(seed).choice(len(space), min(n, len(space)), replace=False))
    return config_batch({k: v[rows] for k, v in space.columns.items()}, dtype, gbs, defaults=defaults)


@pytest.mark.parametrize("name, gpus, gbs, dtype, defaults", [
    ("deepseek-v3", (1024, 1032), 4096, "bf16", None),           # MLA, MoE with dense first layers, MTP
    ("deepseek-v3", (2048, 2048), 4096, "fp8", None),            # quantised weight copies
    ("mixtral-8x7b", (64, 64), 256, "bf16", {"offload_optimizer_fraction": 0.5}),
    ("llama3-70b", (256, 256), 1024, "bf16", None),
    ("gpt3-125m", (8, 16), 64, "bf16", None),
])
def test_bound_never_exceeds_the_peak_of_the_stage_model_with_or_without_the_memory_search(name, gpus, gbs, dtype,
                                                                                           defaults):
    model = load_model(name)
    batch = _sample_batch(model, gpus, gbs, dtype, defaults=defaults)
    bound = static_lower_bound_bytes(model, CLUSTER, EFF, batch)
    searched = memory_parts(model, CLUSTER, EFF, batch, fit_limit_bytes=LIMIT)["memory_bytes"]
    given = memory_parts(model, CLUSTER, EFF, batch)["memory_bytes"]
    assert len(batch) > 500 and (bound > 0).all()
    assert (bound <= searched).all() and (bound <= given).all()


def test_bound_drops_about_half_of_deepseek_v3_rows_at_1024_gpus_and_none_that_fit():
    model = load_model("deepseek-v3")
    batch = _sample_batch(model, (1024, 1032), 4096, "bf16", n=4000)
    bound = static_lower_bound_bytes(model, CLUSTER, EFF, batch)
    mem = memory_parts(model, CLUSTER, EFF, batch, fit_limit_bytes=LIMIT)["memory_bytes"]
    dropped = bound > LIMIT
    assert 0.3 < dropped.mean() < 0.8          # measured: 51% of a 60,000-row sample
    assert not (dropped & (mem <= LIMIT)).any()


def test_with_one_stage_the_bound_is_the_model_states_and_logits_with_the_allocator():
    # 8 layers of h = 1024, untied embeddings, no MTP; pp = 1, ZeRO-0, bf16: 2 + 4 + 12 bytes
    # per parameter (weights, fp32 gradients, Adam with fp32 master weights and moments)
    h, s, vocab = 1024, 2048, 32000
    model = ModelSpec("gpt-8x1024", 8, h, 16, 16, 4 * h, vocab, s)
    batch = config_batch({"dp": np.array([1]), "tp": np.array([1]), "pp": np.array([1]), "cp": np.array([1]),
                          "micro_batch": np.array([1]), "zero_stage": np.array([0])}, "bf16", 8)
    n_params = 8 * params.dense_layer_params(model) + params.embedding_params(model) + params.lm_head_params(model)
    tensors = 18.0 * n_params + s * vocab * memory.LOGIT_BYTES
    expected = (tensors * (1 + memory.ALLOCATOR_FRAGMENTATION) + memory.RUNTIME_RESERVED_BYTES) * (1 - BOUND_MARGIN)
    assert static_lower_bound_bytes(model, CLUSTER, EFF, batch)[0] == pytest.approx(expected, rel=1e-12)
    parts = memory_parts(model, CLUSTER, EFF, batch)
    static = sum(parts[k][0] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "logits_bytes"))
    assert static == pytest.approx(tensors, rel=1e-12)


def test_planner_keeps_the_same_fitting_rows_and_numbers_with_and_without_the_bound():
    model = load_model("mixtral-8x7b")
    space = enumerate_space(model, SearchConstraints(gpus=(64, 64), global_batch=256, max_tp=8, hsdp_gpus=8))
    args = (model, CLUSTER, EFF, space, 256, LIMIT)
    pruned = evaluate_space(*args, workers=1)
    full = evaluate_space(*args, workers=1, prune_by_bound=False)
    assert pruned.bound_pruned > 0.2 * len(space) and full.bound_pruned == 0
    assert len(pruned.rows) == len(full.rows) > 1000 and pruned.evaluated == full.evaluated
    np.testing.assert_array_equal(pruned.rows, full.rows)
    for key, value in full.outputs.items():
        np.testing.assert_array_equal(pruned.outputs[key], value, err_msg=key)


def test_a_search_where_nothing_fits_names_the_smallest_footprint_over_every_row(monkeypatch):
    with pytest.raises(InputError) as pruned:
        plan("llama3-70b", "dgx-h100", 2, global_batch=8)
    monkeypatch.setattr(vectorized, "static_lower_bound_bytes", lambda model, cluster, eff, batch: np.zeros(len(batch)))
    with pytest.raises(InputError) as unpruned:
        plan("llama3-70b", "dgx-h100", 2, global_batch=8)
    assert str(pruned.value) == str(unpruned.value)
    # 631.8 GiB less the one-layer recompute buffer (0.985 GiB x 1.05 allowance): on its one
    # stage the logits (8,192 x 128,256 / 2 x 6 B = 2.94 GiB) are freed before it is recomputed
    assert "needs 630.8 GiB" in str(pruned.value) and "192 configurations" in str(pruned.value)


def test_a_kept_tensor_is_dropped_by_exactly_the_modules_that_name_it():
    """``kept_bytes`` of one-byte terms under every modules mask: a tensor counts unless a module
    of the mask lists it in ``MODULE_DROPS`` (attn_k: mla_up_proj and every_second_linear;
    mlp_fc1_up: mlp, mlp_fc1 and every_second_linear; the layer input never counts)."""
    import numpy as np
    from cost_models.memory import MODULE_BITS, MODULE_DROPS, kept_bytes
    names = ("core", "norm_outputs", "mlp_act_out", "qkv", "attn_k", "mlp_fc1_out", "mlp_fc1_up", "attn_out")
    terms = {name: 2.0 ** i for i, name in enumerate(names)} | {"layer_input": 1e6}
    masks = np.arange(2 ** len(MODULE_BITS))
    got = kept_bytes(terms, masks)
    for mask in (0, 1, 136, 416, int(masks[-1])) + tuple(range(0, 512, 7)):
        dropped = {n for m, drops in MODULE_DROPS.items() if mask & MODULE_BITS[m] for n in drops}
        assert got[mask] == sum(2.0 ** i for i, n in enumerate(names) if n not in dropped), mask
    assert kept_bytes(terms, MODULE_BITS["every_second_linear"]) == 255 - 2 ** 4 - 2 ** 6
