"""Simulator behaviour: breakdowns sum, invariants hold, bad configs are rejected."""
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hardware_specs import InputError, load_cluster
from hardware_specs.catalog import efficiency_for_cluster
from model_specs import ModelSpec
from simulator import ParallelConfig, simulate

GPT_22B = ModelSpec("gpt-22b", 48, 6144, 64, 64, 24576, 51200, 2048)
LLAMA_LIKE = ModelSpec("llama-like", 32, 4096, 32, 8, 14336, 128256, 8192, gated_mlp=True)

configs = st.builds(
    lambda tp, pp, dp, mbs, m, zero, rc, sp: ParallelConfig(
        dp=dp, tp=tp, pp=pp, micro_batch=mbs, global_batch=dp * mbs * m, zero_stage=zero,
        recompute=rc, sequence_parallel=sp),
    tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4, 8]),
    dp=st.sampled_from([1, 2, 8, 32]), mbs=st.sampled_from([1, 2, 4]), m=st.sampled_from([1, 4, 16]),
    zero=st.sampled_from([0, 1, 2, 3]), rc=st.sampled_from(["none", "selective", "full"]),
    sp=st.booleans())


@settings(max_examples=60, deadline=None)
@given(configs)
def test_time_and_memory_parts_sum_to_totals(config):
    r = simulate(GPT_22B, load_cluster("dgx-a100-80gb"), config)
    assert sum(r.time_breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    assert sum(r.memory_breakdown_bytes.values()) == pytest.approx(r.memory_bytes, rel=1e-9)
    assert all(v >= 0 for v in r.time_breakdown_s.values())


@settings(max_examples=40, deadline=None)
@given(configs, st.floats(1.0, 8.0), st.floats(1.0, 8.0))
def test_more_bandwidth_never_slows_a_step(config, up, out):
    cluster = load_cluster("dgx-h100")
    faster = replace(cluster, scaleup=replace(cluster.scaleup, bw_bytes_per_s=cluster.scaleup.bw_bytes_per_s * up),
                     scaleout=replace(cluster.scaleout, bw_bytes_per_s=cluster.scaleout.bw_bytes_per_s * out))
    assert simulate(LLAMA_LIKE, faster, config).step_time_s <= simulate(LLAMA_LIKE, cluster, config).step_time_s * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(configs, st.floats(1.0, 4.0))
def test_more_flops_never_slows_a_step(config, factor):
    cluster = load_cluster("dgx-h100")
    gpu = replace(cluster.gpu, peak_flops_per_s={k: v * factor for k, v in cluster.gpu.peak_flops_per_s.items()})
    assert simulate(LLAMA_LIKE, cluster.with_gpu(gpu), config).step_time_s <= \
        simulate(LLAMA_LIKE, cluster, config).step_time_s * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(configs, st.floats(1.0, 4.0))
def test_more_hbm_never_makes_a_fitting_config_not_fit(config, factor):
    cluster = load_cluster("dgx-a100-40gb")
    bigger = cluster.with_gpu(replace(cluster.gpu, hbm_bytes=cluster.gpu.hbm_bytes * factor))
    if simulate(GPT_22B, cluster, config).fits:
        assert simulate(GPT_22B, bigger, config).fits


def test_recompute_costs_time_and_saves_memory():
    cluster = load_cluster("dgx-a100-80gb")
    base = dict(dp=1, tp=8, pp=1, micro_batch=4, global_batch=4)
    none = simulate(GPT_22B, cluster, ParallelConfig(**base, recompute="none"))
    full = simulate(GPT_22B, cluster, ParallelConfig(**base, recompute="full"))
    assert full.step_time_s > none.step_time_s
    assert full.memory_breakdown_bytes["activations_bytes"] < none.memory_breakdown_bytes["activations_bytes"]
    # full recompute re-runs the forward: hardware FLOPs exceed model FLOPs by ~1/3
    assert full.hardware_flops / full.model_flops == pytest.approx(4 / 3, rel=0.02)


def test_an_mtp_module_adds_a_layer_a_projection_and_a_head_pass():
    """Multi-token prediction (DeepSeek-V3 report, section 2.2) on a dense model: the FLOPs
    added equal one more layer (the L+1-layer model's extra) plus 3 x (2 h V) for the shared
    head and 3 x (2 x 2h x h) for the projection, per token; the step gets slower."""
    cluster = load_cluster("dgx-a100-80gb")
    cfg = ParallelConfig(dp=1, tp=8, pp=1, micro_batch=2, global_batch=8)
    base = simulate(GPT_22B, cluster, cfg)
    deeper = simulate(replace(GPT_22B, num_layers=GPT_22B.num_layers + 1), cluster, cfg)
    mtp = simulate(replace(GPT_22B, mtp_layers=1), cluster, cfg)
    h, V, tokens = GPT_22B.hidden_size, GPT_22B.vocab_size, 8 * GPT_22B.seq_len
    extra = (deeper.model_flops - base.model_flops) + 3 * tokens * (2 * h * V + 2 * 2 * h * h)
    assert mtp.model_flops - base.model_flops == pytest.approx(extra, rel=1e-9)
    assert mtp.step_time_s > deeper.step_time_s > base.step_time_s


def test_pipeline_bubble_matches_1f1b_closed_form():
    cluster = load_cluster("dgx-a100-80gb")
    r = simulate(GPT_22B, cluster, ParallelConfig(dp=1, tp=8, pp=4, micro_batch=1, global_batch=16),
                 event_level=False)
    t_mb = r.extras["microbatch_stage_time_s"]
    assert r.time_breakdown_s["pipeline_bubble_s"] == pytest.approx(3 * t_mb, rel=1e-9)


def test_interleaving_divides_the_bubble_by_vpp():
    cluster = load_cluster("dgx-a100-80gb")
    one = simulate(GPT_22B, cluster, ParallelConfig(dp=1, tp=8, pp=4, micro_batch=1, global_batch=16),
                   event_level=False)
    two = simulate(GPT_22B, cluster, ParallelConfig(dp=1, tp=8, pp=4, vpp=2, micro_batch=1, global_batch=16),
                   event_level=False)
    # same compute; the bubble halves (p2p per micro-batch doubles and is counted in t_mb)
    ratio = two.time_breakdown_s["pipeline_bubble_s"] / one.time_breakdown_s["pipeline_bubble_s"]
    assert 0.45 < ratio < 0.55


def test_gradient_reduction_hides_only_under_the_last_backward():
    """Gradients are final only after the last micro-batch, so the bucketed reduction overlaps
    that micro-batch's backward and no more: with no fitted exposed share, what shows is the
    reduction minus one backward of the stage, the same for 4 or 16 micro-batches."""
    cluster = load_cluster("dgx-a100-80gb")
    eff = replace(efficiency_for_cluster(cluster), exposed_dp_fraction=0.0)
    shown = []
    for m in (4, 16):
        r = simulate(GPT_22B, cluster, ParallelConfig(dp=16, tp=1, pp=1, micro_batch=1, global_batch=16 * m),
                     efficiency=eff)
        backward = GPT_22B.num_layers * r.layer_bwd_s
        expected = max(0.0, r.extras["dp_comm_total_s"] - backward)
        assert expected > 0                      # 22B of fp32 gradients over 2 nodes: not hidden
        assert r.time_breakdown_s["dp_comm_exposed_s"] == pytest.approx(expected, rel=1e-9)
        shown.append(r.time_breakdown_s["dp_comm_exposed_s"])
    assert shown[0] == pytest.approx(shown[1], rel=1e-9)


@pytest.mark.parametrize("kwargs, field", [
    (dict(tp=3), "tp"),                                  # 3 does not divide 64 heads
    (dict(dp=3, tp=8, pp=1, global_batch=6), "dp"),      # 24 GPUs asked, 16 given
    (dict(dp=2, micro_batch=3, global_batch=8), "global_batch"),
    (dict(tp=0), "tp"),
    (dict(micro_batch=-1), "micro_batch"),
    (dict(zero_stage=4), "zero_stage"),
    (dict(dp=1, tp=1, pp=1, cp=3), "cp"),
])
def test_bad_configs_raise_input_error_naming_the_field(kwargs, field):
    with pytest.raises(InputError) as info:
        cfg = ParallelConfig(**kwargs)
        simulate(GPT_22B, load_cluster("dgx-a100-80gb"), cfg, n_gpus=16 if "dp" in kwargs and kwargs["dp"] == 3 else None)
    assert info.value.field == field


def test_efficiency_model_is_per_generation():
    assert efficiency_for_cluster(load_cluster("dgx-a100-40gb")) is efficiency_for_cluster(load_cluster("dgx-a100-80gb"))


def test_event_level_pipeline_agrees_with_closed_form_when_stages_are_even():
    # tied embeddings and a tiny vocabulary make the end stages (almost) as fast as the others
    even = ModelSpec("even", 32, 4096, 32, 32, 16384, 8, 2048, tied_embeddings=True)
    cluster = load_cluster("dgx-a100-80gb")
    for schedule, vpp in (("1f1b", 1), ("gpipe", 1), ("interleaved", 2)):
        cfg = ParallelConfig(dp=1, tp=8, pp=4, vpp=vpp, micro_batch=1, global_batch=32, schedule=schedule)
        closed = simulate(even, cluster, cfg, event_level=False)
        event = simulate(even, cluster, cfg)
        assert event.step_time_s == pytest.approx(closed.step_time_s, rel=2e-3)
        assert sum(event.time_breakdown_s.values()) == pytest.approx(event.step_time_s, rel=1e-9)


def test_event_level_zero_bubble_beats_1f1b_at_equal_work():
    cluster = load_cluster("dgx-a100-80gb")
    base = dict(dp=1, tp=8, pp=4, micro_batch=1, global_batch=32)
    one = simulate(GPT_22B, cluster, ParallelConfig(**base, schedule="1f1b"))
    zb = simulate(GPT_22B, cluster, ParallelConfig(**base, schedule="zb-h1"))
    # ZB-H1's bubble is (p-1)(F+B-W) against 1F1B's (p-1)(F+B+W) (Qi et al. 2023): the ratio
    # follows from the per-layer times, up to the LM head on the last stage
    f, w = one.layer_fwd_s, one.extras["layer_w_s"]
    b = one.layer_bwd_s - w
    expected = (f + b - w) / (f + b + w)
    ratio = zb.time_breakdown_s["pipeline_bubble_s"] / one.time_breakdown_s["pipeline_bubble_s"]
    assert ratio == pytest.approx(expected, rel=0.1)
    assert ratio < 0.8
    assert zb.time_breakdown_s["compute_s"] == pytest.approx(one.time_breakdown_s["compute_s"], rel=1e-12)


def test_deepspeed_zero3_gathers_a_recomputed_layer_three_times():
    """ZeRO-3 moves each layer's 16-bit parameters as all-gathers (forward, backward) and a
    reduce-scatter of its gradients; DeepSpeed's per-module hooks also gather for the recompute
    forward. Hand-derived flat ring over 16 GPUs on two DGX A100 nodes (one 200 Gb/s NIC per
    GPU at the generation's scale-out fraction, 5 us per step): (n-1)/n * bytes / bw + (n-1) * latency.
    With pp = 1 the rank also holds the embedding and the untied output layer, whose gathers the
    model spreads over the layers (per-layer bytes = all local parameters / layers)."""
    cluster = load_cluster("dgx-a100-80gb")
    eff = efficiency_for_cluster(cluster)
    n, h, v, layers = 16, 6144, 51200, 48
    layer_params = 12 * h * h + 2 * h                     # four attention + two MLP matrices, two norms
    per_layer_bytes = (layers * layer_params + 2 * v * h) * 2 / layers
    ring = (n - 1) / n * per_layer_bytes / (200e9 / 8 * eff.scaleout_fraction) + (n - 1) * 5e-6
    base = ParallelConfig(dp=n, micro_batch=1, global_batch=n, zero_stage=3, recompute="full", dtype="fp16",
                          overlap_param_gather=False)
    for regather, collectives in ((False, 3), (True, 4)):
        r = simulate(GPT_22B, cluster, replace(base, zero3_recompute_gather=regather), efficiency=eff)
        assert r.time_breakdown_s["zero3_comm_exposed_s"] == pytest.approx(layers * collectives * ring, rel=1e-9)
    # without full recomputation there is nothing to gather again
    selective = replace(base, recompute="selective")
    assert simulate(GPT_22B, cluster, replace(selective, zero3_recompute_gather=True), efficiency=eff).step_time_s == \
        simulate(GPT_22B, cluster, selective, efficiency=eff).step_time_s


def test_fp8_weight_quantisation_is_paid_once_per_step_and_once_per_upstream_stage():
    """The quantised weight copies are made in each stage's first forward and reused by every
    later micro-batch and by recomputation. With W the per-layer weight cast from the layer cost
    model and 8 layers per stage (32 layers, pp 4): the compute part holds 8 W once (its
    intercept in the micro-batch count), and the pipeline fill holds it once per upstream stage
    on top of (pp - 1) micro-batch stage times (1F1B)."""
    from cost_models import layer_costs
    from cost_models.compute import compute_rates
    cluster = load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cluster)
    rates = compute_rates(cluster.gpu, eff, "fp8")
    w = (layer_costs.attention_block_costs(LLAMA_LIKE, rates, 8192.0, 8192.0, 8, True)["weight_cast_s"]
         + layer_costs.dense_mlp_costs(LLAMA_LIKE, rates, 8192.0, 8, True)["weight_cast_s"])
    assert w > 0
    base = ParallelConfig(dp=1, tp=8, pp=4, micro_batch=1, global_batch=8, dtype="fp8", recompute="full",
                          sequence_parallel=True)
    r8 = simulate(LLAMA_LIKE, cluster, base, efficiency=eff, event_level=False)
    r16 = simulate(LLAMA_LIKE, cluster, replace(base, global_batch=16), efficiency=eff, event_level=False)
    assert sum(r8.time_breakdown_s.values()) == pytest.approx(r8.step_time_s, rel=1e-12)
    c8, c16 = r8.time_breakdown_s["compute_s"], r16.time_breakdown_s["compute_s"]
    assert 2 * c8 - c16 == pytest.approx(8 * w, rel=1e-6)
    fill = r8.time_breakdown_s["pipeline_bubble_s"] - 3 * r8.extras["microbatch_stage_time_s"]
    assert fill == pytest.approx(3 * 8 * w, rel=1e-6)
    # recomputation repeats the forward without casting again
    assert r16.time_breakdown_s["recompute_s"] == pytest.approx(2 * r8.time_breakdown_s["recompute_s"], rel=1e-9)


# ---- bounds of a configuration -------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("global_batch", 2**63), ("etp", 10**30), ("dp", 2**25),
                                          ("moe_load_imbalance", float("nan")), ("moe_load_imbalance", float("inf"))])
def test_parallel_config_refuses_values_beyond_its_bounds_naming_the_field(field, value):
    from hardware_specs.errors import InputError
    from simulator.parallel_config import ParallelConfig
    kwargs = {"global_batch": 2**20} if field != "global_batch" else {}
    with pytest.raises(InputError) as err:
        ParallelConfig(**kwargs, **{field: value})
    assert err.value.field == field


def test_a_job_of_more_gpus_than_supported_is_refused_even_when_each_degree_is_in_range():
    from hardware_specs.errors import InputError
    from simulator.parallel_config import MAX_GPUS, ParallelConfig
    with pytest.raises(InputError, match="GPUs is above"):
        ParallelConfig(dp=MAX_GPUS, tp=2, global_batch=MAX_GPUS)


def test_moe_load_imbalance_is_at_most_experts_over_top_k():
    from hardware_specs.errors import InputError
    from model_specs.catalog import load_model
    from simulator.parallel_config import ParallelConfig
    from simulator.validate_config import check_config
    model = load_model("mixtral-8x7b")                 # 8 experts, top-2: at most 4
    check_config(model, ParallelConfig(dp=8, global_batch=8, moe_load_imbalance=4.0))
    with pytest.raises(InputError) as err:
        check_config(model, ParallelConfig(dp=8, global_batch=8, moe_load_imbalance=4.5))
    assert err.value.field == "moe_load_imbalance"


@pytest.mark.parametrize("field, value", [("num_layers", 2**17), ("hidden_size", 10**30), ("seq_len", 2**31),
                                          ("vocab_size", 1.5)])
def test_model_spec_refuses_sizes_beyond_its_bounds_naming_the_field(field, value):
    from dataclasses import replace
    from hardware_specs.errors import InputError
    from model_specs.catalog import load_model
    with pytest.raises(InputError) as err:
        replace(load_model("gpt3-125m"), **{field: value})
    assert err.value.field == f"model.{field}"
