"""How ``paraplan validate published`` turns one row into model and configuration inputs."""
import pytest
from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
from published_row import llama31_8b_row


def _llama31_8b_row(**overrides):
    """A published-runs row for Llama 3.1 8B on 8 H100 with the vocab column left empty."""
    return llama31_8b_row(**{"vocab": float("nan"), **overrides})


def test_empty_vocab_comes_from_the_named_preset_of_the_same_shape():
    from paraplan.validation.published import row_inputs
    inputs = row_inputs(_llama31_8b_row())
    assert inputs.model.vocab_size == 128256          # Llama 3 tokenizer (Meta model card)
    assert any("vocab=128256 from preset llama3.1-8b" in a for a in inputs.assumptions)


def test_empty_vocab_of_a_differently_shaped_model_is_skipped():
    from paraplan.validation.published import Skip, row_inputs
    with pytest.raises(Skip, match="vocab"):
        row_inputs(_llama31_8b_row(layers=40))
    with pytest.raises(Skip, match="vocab"):
        row_inputs(_llama31_8b_row(model="Some 8B model"))


def test_a_candidate_shape_takes_its_familys_vocabulary_only_when_its_stated_size_confirms_it():
    """BigScience benchmarked BLOOM-176B candidate shapes without restating the vocabulary. With
    BLOOM's tokenizer (250880, tied output layer: preset bloom-176b) the 72 x 14336 shape has
    181.2B parameters and the 84 x 13312 one 182.0B, the sizes the table states (181, 182); a
    GPT-2 vocabulary would give 178.3B. Their own TFLOP/s and step times (eq. 3 with full
    recompute) imply a vocabulary of 249.7k-251.7k. A proxy with a stated size that is not its
    own (Llama 3.1 405B with 42 layers, '405') gets nothing."""
    from paraplan.validation.published import Skip, read_runs, row_inputs
    df = read_runs(validation_file(PUBLISHED_RUNS))
    pre = df[df.model.astype(str).str.startswith("BLOOM-176B candidate")]
    sizes = {}
    for _, row in pre.iterrows():
        inputs = row_inputs(row.to_dict())
        m = inputs.model
        assert (m.vocab_size, m.tied_embeddings) == (250880, True)
        line = next(a for a in inputs.assumptions if a.startswith("vocab=250880"))
        sizes[(m.num_layers, m.hidden_size)] = line.split("shape has ")[1].split(",")[0]
    assert sizes == {(72, 14336): "181.2B parameters", (84, 13312): "182.0B parameters"}
    for run_id, rows in pre.groupby("run_id"):
        by_metric = rows.set_index("measured_metric").measured_value
        r = rows.iloc[0]
        l, h, s, b = r.layers, r.hidden, r.seq_len, r.global_batch
        flops = by_metric["tflops_per_gpu"] * 1e12 * by_metric["iter_time_s"] * r.n_gpus
        implied_vocab = (flops / (96 * b * s * l * h * h) - 1 - s / (6 * h)) * 16 * l * h
        assert 249_000 < implied_vocab < 252_000, run_id
    row = pre.iloc[0].to_dict()
    with pytest.raises(Skip, match=r"gives 181B parameters, the row states 178B"):
        row_inputs({**row, "params_b": "178"})
    with pytest.raises(Skip, match="needed field"):
        row_inputs({**row, "params_b": float("nan")})
    proxy = df[df.id == "DGXC2411-405b-bf16-192g:iter_time_s"].iloc[0].to_dict()
    with pytest.raises(Skip, match=r"vocabulary 128256 gives 139B parameters, the row states 405B"):
        row_inputs(proxy)


def test_a_runs_time_row_recomputes_when_its_tflops_row_counts_recompute():
    """A run's step-time row and its TFLOP/s row measure the same step: when the TFLOP/s row's
    convention counts the recomputed forward pass (eq. 3's 4 x 2 coefficient, which BigScience's
    counter uses only with activation checkpointing), the time row with an empty recompute column
    recomputes too; alone it does not."""
    from paraplan.validation.predict import prepare
    from paraplan.validation.published import read_runs, row_inputs, run_conventions
    df = read_runs(validation_file(PUBLISHED_RUNS))
    run = df[df.run_id == "BLOOMPRE-L72H14336A64-tp8pp6dp8mbs4gbs2048-02-25-line773-r1"]
    records = run.to_dict("records")
    time_row = next(r for r in records if r["measured_metric"] == "iter_time_s")
    assert run_conventions(records) == {time_row["run_id"]: frozenset({"none", "megatron_hw_eq3"})}
    assert row_inputs(time_row).config.recompute == "none"
    prepared = prepare(records)
    assert [i.config.recompute for i in prepared.inputs] == ["full", "full"]


def test_unstated_precision_on_an_fp8_capable_gpu_is_skipped_not_guessed():
    from paraplan.validation.published import Skip, row_inputs
    with pytest.raises(Skip, match="dtype_norm empty on an FP8-capable GPU"):
        row_inputs(_llama31_8b_row(dtype_norm=float("nan"), vocab=128256))
    # A100 has no FP8 tensor cores: 16-bit is the only training rate, so bf16 is assumed
    inputs = row_inputs(_llama31_8b_row(dtype_norm=float("nan"), vocab=128256, gpu_profile="a100-sxm-80gb"))
    assert inputs.config.dtype == "bf16"
    assert "dtype=bf16" in inputs.assumptions


def test_unstated_precision_is_the_releases_own_preset_for_that_layout_when_it_has_one():
    """Megatron-Bridge 25.09's page has no precision column. Its Llama 3 8B preset on 8 H100 with
    Megatron-FSDP and micro-batch 1 exists only in FP8 (its BF16 preset uses CP 2 without FSDP):
    such a row runs fp8, citing the preset. On GB200 with micro-batch 2 the release runs that
    layout in BF16, FP8 and MXFP8: skipped, naming them. A layout no preset has: skipped."""
    from paraplan.validation.published import Skip, row_inputs
    row = _llama31_8b_row(model="LLAMA3_8B (Megatron-Bridge 25.09)", dtype_norm=float("nan"), vocab=128256,
                          zero_norm="3", global_batch=128, framework="megatron-bridge", framework_version="25.09")
    inputs = row_inputs(row)
    assert inputs.config.dtype == "fp8"
    why = next(a for a in inputs.assumptions if a.startswith("dtype=fp8"))
    assert "preset fp8_cs/fp8_ds" in why and "perf_matrix.h100.num_gpus_8.fp8_cs" in why
    with pytest.raises(Skip, match="presets run this layout in bf16, fp8, mxfp8"):
        row_inputs({**row, "gpu_profile": "gb200", "zero_norm": "0", "micro_batch": 2})
    with pytest.raises(Skip, match="no preset of megatron-bridge-25.09 has this layout"):
        row_inputs({**row, "zero_norm": "0"})
    with pytest.raises(Skip, match="megatron-core-0.12 lists no preset"):
        row_inputs({**row, "framework": "megatron-core", "framework_version": "2024"})


def test_deepseek_v3_flop_count_matches_megatron_bridge_with_and_without_mtp():
    """Megatron-Bridge reports TFLOP/s and tokens/s of the same run; their ratio is the FLOPs
    per token it counts. Our megatron_core_model_causal count must equal it: 2.60e11 when
    the run trains the MTP module (unlabelled and 'w/MTP' runs), 2.49e11 for 'w/oMTP'."""
    from paraplan.validation.flops_conventions import CONVENTIONS
    from paraplan.validation.published import read_runs, row_inputs
    df = read_runs(validation_file(PUBLISHED_RUNS))
    ds = df[df.run_id.str.contains("DeepSeekV3") & df.dtype_norm.notna()]
    checked = {"with": 0, "without": 0}
    for run_id, rows in ds.groupby("run_id"):
        by_metric = rows.set_index("measured_metric").measured_value
        if not {"tflops_per_gpu", "tokens_per_s_per_gpu"} <= set(by_metric.index):
            continue
        theirs = by_metric["tflops_per_gpu"] * 1e12 / by_metric["tokens_per_s_per_gpu"]
        row = rows[rows.measured_metric == "tflops_per_gpu"].iloc[0].to_dict()
        inputs = row_inputs(row)
        ours = CONVENTIONS[row["flops_convention"]](inputs.model, 1) / inputs.model.seq_len
        assert ours == pytest.approx(theirs, rel=0.005), run_id
        checked["with" if inputs.model.mtp_layers else "without"] += 1
        assert (inputs.model.mtp_layers == 0) == ("w/oMTP" in run_id)
    # lower bounds: the shared file gains DeepSeek-V3 runs between sessions
    assert checked["with"] >= 10 and checked["without"] >= 3


def test_kimi_k2_preset_matches_its_published_size_and_megatron_bridges_flop_count():
    """Kimi K2 (a DeepSeek-V3-style MLA + MoE model, config.json of moonshotai/Kimi-K2-Base)
    has 1.04T parameters, 32.6B active (Kimi K2 report, arXiv 2507.20534): the preset counts
    1026.4B and 32.9B. Megatron-Bridge's GB300 runs report 1088 TFLOP/s at 5328 tokens/s
    (26.04.01) and 1037 at 5072 (26.02.01): 2.042e11 and 2.045e11 FLOPs per token, which the
    causal Megatron-Core count of the preset (no MTP module: num_nextn_predict_layers 0)
    gives as 2.045e11."""
    from cost_models.params import total_params
    from paraplan.validation.flops_conventions import CONVENTIONS
    from paraplan.validation.published import read_runs, row_inputs
    df = read_runs(validation_file(PUBLISHED_RUNS))
    kimi = df[df.model.astype(str).str.startswith("Kimi_K2")]
    runs = 0
    for run_id, rows in kimi.groupby("run_id"):
        by_metric = rows.set_index("measured_metric").measured_value
        if not {"tflops_per_gpu", "tokens_per_s_per_gpu"} <= set(by_metric.index):
            continue                  # a run with one metric states no FLOPs per token
        theirs = by_metric["tflops_per_gpu"] * 1e12 / by_metric["tokens_per_s_per_gpu"]
        row = rows[rows.measured_metric == "tflops_per_gpu"].iloc[0].to_dict()
        inputs = row_inputs(row)
        assert "architecture from preset kimi-k2" in inputs.assumptions
        ours = CONVENTIONS[row["flops_convention"]](inputs.model, 1) / inputs.model.seq_len
        assert ours == pytest.approx(theirs, rel=0.005), run_id
        runs += 1
    assert runs >= 2                  # the two runs above, and any the shared file gained
    m = inputs.model
    assert total_params(m) / 1e9 == pytest.approx(1040, rel=0.015)
    assert total_params(m, active=True) / 1e9 == pytest.approx(32.6, rel=0.015)
    assert (m.moe.num_experts, m.moe.top_k, m.moe.first_dense_layers, m.num_heads) == (384, 8, 1, 64)


def test_nemo_24_07_models_come_from_the_launcher_configs_and_match_nemos_flop_count():
    """NeMo 24.07's performance table names GPT3-20B, Nemotron-8B, Nemotron-22B and Nemotron-340B
    without their shapes; the presets (NeMo-Framework-Launcher 24.07 conf/training) have 20.2B,
    8.5B, 21.3B and 341B parameters, and the Megatron-Core model count of each gives the FLOPs per
    token NeMo reported (its TFLOP/s over tokens/s) within 0.1%: 1.2818e11 (GPT3-20B, GPT-2 BPE
    vocabulary), 5.141e10 and 1.3017e11 (Nemotron 8B and 22B: only a vocabulary within ~1000 of
    256000 gives this), 2.1056e12 (Nemotron-340B, the alias of nemotron-4-340b)."""
    from cost_models.params import total_params
    from paraplan.validation.flops_conventions import CONVENTIONS
    from paraplan.validation.published import read_runs, row_inputs
    df = read_runs(validation_file(PUBLISHED_RUNS))
    nemo = df[df.run_id.str.match(r"NEMO2407-(GPT3-20B|Nemotron-(8B|22B|340B))-")]
    sizes = {"gpt3-20b": 20.2, "nemotron-8b": 8.54, "nemotron-22b": 21.3, "nemotron-4-340b": 341.0}
    seen = set()
    for run_id, rows in nemo.groupby("run_id"):
        by_metric = rows.set_index("measured_metric").measured_value
        theirs = by_metric["tflops_per_gpu"] * 1e12 / by_metric["tokens_per_s_per_gpu"]
        row = rows[rows.measured_metric == "tflops_per_gpu"].iloc[0].to_dict()
        inputs = row_inputs(row)
        ours = CONVENTIONS[row["flops_convention"]](inputs.model, 1) / inputs.model.seq_len
        assert ours == pytest.approx(theirs, rel=0.001), run_id
        name = next(n for n in sizes if f"preset {n}" in "; ".join(inputs.assumptions))
        assert total_params(inputs.model) / 1e9 == pytest.approx(sizes[name], abs=0.05)
        seen.add(name)
    assert seen == set(sizes)


def _from_26_06(versions):
    """Whether each Megatron-Bridge ``framework_version`` (26.04.01, 26.06, 26.10, ...) is release
    26.06 or later, compared as numbers (year, month): the releases that count GPT-OSS's FLOPs
    as the model has them."""
    import re
    return versions.map(lambda v: tuple(int(x) for x in re.findall(r"\d+", str(v))[:2]) >= (26, 6))


def test_gpt_oss_flop_count_matches_megatron_bridge_from_26_06():
    """From release 26.06 Megatron-Bridge counts GPT-OSS 120B with its gated MLP and its
    sliding-window layers (window 128 on every other layer): 3.26e10 FLOPs per token,
    which our convention reproduces; the earlier releases' 2.72e10 per token (plain MLP,
    full attention everywhere) is 17% below the model's FLOPs."""
    from paraplan.validation.flops_conventions import CONVENTIONS
    from paraplan.validation.published import KNOWN_REGRESSION_NOTE, read_runs, row_inputs
    df = read_runs(validation_file(PUBLISHED_RUNS))
    flagged = df.notes.fillna("").map(lambda n: bool(KNOWN_REGRESSION_NOTE.search(n)))
    oss = df[df.run_id.str.contains("GPTOSS120B") & df.dtype_norm.notna() & ~flagged]
    ratios = {}
    for run_id, rows in oss.groupby("run_id"):
        by_metric = rows.set_index("measured_metric").measured_value
        theirs = by_metric["tflops_per_gpu"] * 1e12 / by_metric["tokens_per_s_per_gpu"]
        row = rows[rows.measured_metric == "tflops_per_gpu"].iloc[0].to_dict()
        inputs = row_inputs(row)
        ratios[run_id] = CONVENTIONS[row["flops_convention"]](inputs.model, 1) / inputs.model.seq_len / theirs
    late = _from_26_06(oss.drop_duplicates("run_id").set_index("run_id").framework_version)
    new = [r for k, r in ratios.items() if late[k]]
    old = [r for k, r in ratios.items() if not late[k]]
    assert len(new) >= 3 and all(r == pytest.approx(1.0, abs=0.005) for r in new)
    assert len(old) >= 13 and all(r == pytest.approx(1.20, abs=0.01) for r in old)


def test_flop_rows_of_a_counter_unlike_their_convention_give_way_to_the_runs_tokens_row():
    """The validation keeps a run's TFLOP/s row only when the FLOPs per token it implies (with
    the run's own tokens/s row) match the convention within 5%: Megatron-Bridge GPT-OSS rows
    before 26.06 (17% fewer FLOPs) are left out with the ratio named, their tokens/s rows and
    the later releases' TFLOP/s rows are kept."""
    from paraplan.validation.predict import prepare
    from paraplan.validation.published import KNOWN_REGRESSION_NOTE, read_runs
    df = read_runs(validation_file(PUBLISHED_RUNS))
    # rows their source flags as a known regression are skipped for that (tested above)
    flagged = df.notes.fillna("").map(lambda n: bool(KNOWN_REGRESSION_NOTE.search(n)))
    oss = df[df.run_id.str.contains("GPTOSS120B") & df.dtype_norm.notna() & ~flagged].reset_index(drop=True)
    reasons = {}
    prepared = prepare(oss.to_dict("records"), on_skip=lambda i, why: reasons.__setitem__(oss.id[i], why))
    late = _from_26_06(oss.framework_version)
    early_flops = oss.id[~late & (oss.measured_metric == "tflops_per_gpu")]
    assert len(early_flops) >= 13
    for row_id in early_flops:
        why = reasons[row_id]
        assert "FLOP counter" in why, why
        assert 0.82 <= float(why.split("counted ")[1].split("x")[0]) <= 0.85, why
    kept = set(prepared.ids)
    assert set(oss.id[late]) <= kept
    assert set(oss.id[oss.measured_metric == "tokens_per_s_per_gpu"]) <= kept


def test_llm_foundry_mfu_counts_parameters_that_do_matmuls():
    """llm-foundry reports MFU and tokens/s of each run; the MFU implies its FLOPs per token.
    The palm_6n_attn count with N = parameters that take part in matmuls (input table left out)
    matches them: 0.6% apart on average over its runs, at most 4% (rounded two-digit MFUs of
    the 125M model at 64K tokens); counting the input table as well overstated the small
    models by up to 29%."""
    import numpy as np
    from hardware_specs.catalog import load_cluster
    from paraplan.validation.flops_conventions import CONVENTIONS
    from paraplan.validation.published import read_runs, row_inputs
    df = read_runs(validation_file(PUBLISHED_RUNS))
    lf = df[df.run_id.str.startswith("LFOUNDRY") & df.gpu_profile.notna()]
    ratios = []
    for run_id, rows in lf.groupby("run_id"):
        by_metric = rows.set_index("measured_metric").measured_value
        if not {"mfu", "tokens_per_s_per_gpu"} <= set(by_metric.index):
            continue
        inputs = row_inputs(rows[rows.measured_metric == "mfu"].iloc[0].to_dict())
        peak = inputs.cluster.gpu.peak_flops(inputs.config.dtype)
        theirs_per_token = by_metric["mfu"] / 100 * peak / by_metric["tokens_per_s_per_gpu"]
        ours_per_token = CONVENTIONS["palm_6n_attn"](inputs.model, 1) / inputs.model.seq_len
        ratios.append(ours_per_token / theirs_per_token)
    ratios = np.array(ratios)
    assert len(ratios) >= 100
    assert abs(ratios.mean() - 1) < 0.01 and np.abs(ratios - 1).max() < 0.04


def test_the_framework_columns_name_the_stack_and_its_documented_behaviour():
    """A row's software stack comes from its framework and framework_version columns, never from
    source or notes text: DeepSpeed 2021's ZeRO-3 gathers again for the recompute and gathers
    per parameter tensor; llm-foundry runs flash-attn 2 (serial softmax); Megatron-LM 2021 has a
    materialised softmax, fp16 gradients reduced in fp16 once after the backward; an empty
    framework runs the default stack, noted."""
    from paraplan.validation.published import row_inputs
    row = _llama31_8b_row(vocab=128256, zero_norm="3", recompute="full", dp=8, global_batch=64,
                          gpu_profile="a100-sxm-80gb")
    default = row_inputs(row)
    assert default.stack == "megatron-core" and default.config.zero3_recompute_gather is False
    assert any("stack=megatron-core (framework not stated)" in a for a in default.assumptions)
    ds = row_inputs({**row, "framework": "deepspeed", "framework_version": "2021",
                     "notes": "nothing about the framework here"})
    assert ds.stack == "deepspeed-2021"
    assert ds.config.zero3_recompute_gather is True and ds.config.param_gather_per_tensor is True
    # the notes alone decide nothing
    assert row_inputs({**row, "notes": "DeepSpeed ZeRO-3"}).config.zero3_recompute_gather is False
    foundry = row_inputs({**row, "framework": "llm-foundry"})
    assert foundry.config.attention_kernel.value == "serial" and foundry.config.grad_reduce_bytes == 4.0
    meg = row_inputs({**row, "zero_norm": "0", "dtype_norm": "fp16", "framework": "megatron-lm",
                      "framework_version": "2021"})
    assert meg.config.flash_attention is False and meg.config.grad_reduce_bytes == 2.0
    assert meg.config.overlap_grad_reduce is False
    unknown = {**row, "framework": "jax"}
    with pytest.raises(Exception, match="software stack"):
        row_inputs(unknown)


def test_unstated_sequence_parallelism_follows_the_stack_recipes_only_with_tp():
    from paraplan.validation.published import row_inputs
    row = _llama31_8b_row(vocab=128256, tp=2, dp=4, seq_parallel="")
    assert row_inputs(row).config.sequence_parallel is False                # megatron-core: opt-in
    nemo = row_inputs({**row, "framework": "nemo", "framework_version": "24.09"})
    assert nemo.config.sequence_parallel is True
    assert any("sequence_parallel (nemo-24.09 recipes" in a for a in nemo.assumptions)
    bridge = {**row, "framework": "megatron-bridge", "framework_version": "26.04"}
    assert row_inputs(bridge).config.sequence_parallel is True
    # a stated 'n' is kept, and without tensor parallelism there is nothing to split
    assert row_inputs({**bridge, "seq_parallel": "n"}).config.sequence_parallel is False
    no_tp = _llama31_8b_row(vocab=128256, seq_parallel="", framework="megatron-bridge", framework_version="26.04")
    assert row_inputs(no_tp).config.sequence_parallel is False


def test_row_clusters_take_the_stated_node_size_and_nic_bandwidth():
    from paraplan.validation.published import row_inputs
    row = _llama31_8b_row(vocab=128256, gpu_profile="a100-sxm-80gb")
    base = row_inputs(row).cluster
    assert (base.gpus_per_node, base.scaleout.bw_bytes_per_s) == (8, 200e9 / 8)
    custom = row_inputs({**row, "gpus_per_node": 4, "scaleout_gbps_per_gpu": 100}).cluster
    assert (custom.gpus_per_node, custom.scaleout.bw_bytes_per_s) == (4, 100e9 / 8)
    assert custom.gpu is base.gpu
    # a GPU kind with no system preset runs on a generic node of its generation
    generic = row_inputs({**row, "gpu_profile": "h100-sxm-96gb", "dtype_norm": "bf16"}).cluster
    assert generic.gpus_per_node == 8 and generic.scaleout.bw_bytes_per_s == 400e9 / 8


def test_a_system_the_gpu_column_names_runs_on_its_own_preset():
    """BLOOM's rows say "A100-SXM-80GB (Jean Zay)": four 100 Gb/s Omni-Path links per 8-GPU node
    (BLOOM, arXiv 2211.05100, section 3.4.1) = 50 Gb/s per GPU, not a DGX A100's 200; the row's
    own columns still win, and a GPU kind the named system does not have keeps its usual system."""
    from paraplan.validation.published import named_system, row_inputs
    row = {**_llama31_8b_row(vocab=128256, gpu_profile="a100-sxm-80gb"), "gpu": "A100-SXM-80GB (Jean Zay)"}
    inputs = row_inputs(row)
    assert inputs.cluster.name == "jean-zay-a100"
    assert (inputs.cluster.gpus_per_node, inputs.cluster.scaleout.bw_bytes_per_s) == (8, 50e9 / 8)
    assert "cluster=jean-zay-a100 (the system the gpu column names)" in inputs.assumptions
    stated = row_inputs({**row, "scaleout_gbps_per_gpu": 100}).cluster
    # the preset's measured communicator bandwidth belongs to its 50 Gb/s links, not the row's
    assert inputs.cluster.scaleout.communicator_bus_bw_bytes_per_s == 5.07e9
    assert stated.scaleout.communicator_bus_bw_bytes_per_s is None
    assert stated.scaleout.bw_bytes_per_s == 100e9 / 8 and stated.name.startswith("jean-zay-a100[")
    assert named_system("A100-SXM-80GB (Jean Zay, Omni-Path)", "a100-sxm-80gb") == "jean-zay-a100"
    assert named_system("H100 (Jean Zay)", "h100-sxm-80gb") is None
    assert named_system("A100-SXM-80GB (Selene)", "a100-sxm-80gb") is None


def test_a_data_parallel_all_reduce_over_jean_zay_takes_four_times_a_dgx_a100s():
    """A bandwidth-bound ring all-reduce across nodes, one GPU per node: the NIC is the
    bottleneck, 2 (n-1)/n S / B; 50 against 200 Gb/s per GPU would be 4x the time, and Jean Zay's
    measured communicator bus bandwidth, 5.07 GB/s, is a little under its 50 Gb/s x 0.85 =
    5.3125 GB/s: 21.25 / 5.07 = 4.191x."""
    from cost_models.topology import group_collective_time_s
    from hardware_specs.catalog import efficiency_for_cluster, load_cluster
    s = 4e9
    times = {}
    for name in ("jean-zay-a100", "dgx-a100-80gb"):
        cluster = load_cluster(name)
        eff = efficiency_for_cluster(cluster)
        times[name] = float(group_collective_time_s("all_reduce", s, 8, 8, cluster, eff))
    assert times["jean-zay-a100"] / times["dgx-a100-80gb"] == pytest.approx(200e9 / 8 * 0.85 / 5.07e9, rel=0.005)


def test_gated_mlp_and_gqa_come_from_the_architecture_not_from_ffn_width():
    """PaLM is SwiGLU at ffn = 4h (Chowdhery et al. 2022, section 2): the family decides, not
    ffn != 4h; a GPT at ffn != 4h stays ungated; a GQA preset keeps its key/value heads when the
    row states the same heads."""
    from paraplan.validation.published import row_inputs
    palm = {**_llama31_8b_row(vocab=256000, gpu_profile="a100-sxm-80gb"), "model": "PaLM 540B", "layers": 118,
            "hidden": 18432, "ffn_hidden": 73728, "heads": 48, "kv_heads": 1, "seq_len": 2048}
    assert row_inputs(palm).model.gated_mlp is True
    gpt = {**palm, "model": "GPT (some 1B)", "ffn_hidden": 3 * 18432}
    assert row_inputs(gpt).model.gated_mlp is False
    llama = _llama31_8b_row(vocab=128256, kv_heads="")
    assert row_inputs(llama).model.num_kv_heads == 8


def test_a_per_gpu_rate_row_whose_gpu_count_contradicts_its_layout_keeps_the_printed_degrees():
    # NeMo's long-sequence B200 table prints TP*PP*DP*CP = n_gpus / 4 on every row; what one GPU
    # does depends on its own layout and micro-batch count, so a per-GPU rate is predicted on
    # dp*tp*pp*cp GPUs with the reason recorded. A step time or a global rate is not.
    from paraplan.validation.published import Skip, row_inputs
    inputs = row_inputs(_llama31_8b_row(n_gpus=32, dp=2, tp=2, cp=2, global_batch=16))
    c = inputs.config
    assert (c.dp, c.tp, c.cp, c.n_gpus) == (2, 2, 2, 8)
    assert any("n_gpus 32 contradicts dp*tp*pp*cp = 8" in a for a in inputs.assumptions)
    for metric in ("iter_time_s", "tokens_per_s"):
        with pytest.raises(Skip, match="dp\\*tp\\*pp\\*cp = 8 != n_gpus 32"):
            row_inputs(_llama31_8b_row(n_gpus=32, dp=2, tp=2, cp=2, global_batch=16, measured_metric=metric,
                                       id=f"X-1:{metric}"))


def test_a_row_its_source_marks_as_a_known_performance_regression_is_skipped_with_the_reason():
    """Megatron-Bridge's 26.06.01 table footnotes its GPT-OSS 120B GB200 row as "a known issue"
    (cudnn-frontend issue 256: a grouped-GEMM kernel 10x slower in one release): the number
    measures a bug the source expects fixed, so it is neither predicted nor fitted."""
    from paraplan.validation.published import Skip, read_runs, row_inputs
    note = ("page footnote [gpt-oss-note]: Performance regression in GPT-OSS 120B pre-training is a "
            "[known issue](https://github.com/NVIDIA/cudnn-frontend/issues/256).")
    row = _llama31_8b_row(vocab=128256)
    with pytest.raises(Skip, match="known performance regression"):
        row_inputs({**row, "notes": note})
    assert row_inputs({**row, "notes": "a regression test of the launcher; no known issue"}).model.vocab_size == 128256
    df = read_runs(validation_file(PUBLISHED_RUNS))
    flagged = df[df["notes"].fillna("").str.contains("Performance regression", case=False)]
    assert len(flagged) >= 2
    for _, r in flagged.iterrows():
        with pytest.raises(Skip, match="known performance regression"):
            row_inputs(r)


def _bundled_row(prefix: str) -> dict:
    from paraplan.validation.published import read_runs
    df = read_runs(validation_file(PUBLISHED_RUNS))
    return df[df.id.astype(str).str.startswith(prefix)].iloc[0].to_dict()


def test_a_same_shape_preset_gives_the_details_no_column_holds():
    """Llama 3.1 8B trains without dropout (Hugging Face config: attention_dropout 0.0; no
    residual dropout in the modeling code), so the row of that shape keeps no dropout masks;
    a shape no preset has keeps the generic defaults."""
    from paraplan.validation.published import row_inputs
    llama = row_inputs(_llama31_8b_row()).model
    assert (llama.attention_dropout, llama.hidden_dropout) == (False, False)
    assert llama.name == "Llama 3.1 8B" and llama.num_kv_heads == 8
    other = row_inputs(_llama31_8b_row(model="Some 8B model", vocab=128256)).model
    assert (other.attention_dropout, other.hidden_dropout) == (True, True)


def test_fsdp_off_in_a_megatron_bridge_row_is_the_releases_distributed_optimizer():
    """The Megatron-Bridge tables have a Megatron-FSDP column and nothing on the optimizer's
    sharding; the row records 'ddp (FSDP=0)'. Every executed preset of those releases runs
    use_distributed_optimizer=True (megatron_bridge_presets.csv), i.e. ZeRO-1; a row that
    states its stage plainly keeps it."""
    import csv
    from hardware_specs.stack_presets import PRESETS_CSV
    from paraplan.validation.published import row_inputs
    with open(PRESETS_CSV, newline="") as fh:
        gpt = [r for r in csv.DictReader(fh) if r["container"] == "26.04" and r["recipe"] == "gpt_oss_120b"]
    assert {r["use_distributed_optimizer"] for r in gpt} == {"true"}
    row = _bundled_row("MBRIDGE-26.04-GPTOSS120B-DGX-GB200-64g-BF16")
    assert row["zero_stage"] == "ddp (FSDP=0)" and row["zero_norm"] == 0
    inputs = gpt = row_inputs(row)
    assert inputs.config.zero_stage == 1
    assert any("use_distributed_optimizer=True; the row's zero_stage 'ddp (FSDP=0)' says only that "
               "Megatron-FSDP was off" in a for a in inputs.assumptions)
    # Kimi K2's presets train with Muon and use_distributed_optimizer=False: replicated states,
    # and (without the distributed optimizer's parameter all-gather) no FP8 parameter gather
    kimi = row_inputs(_bundled_row("MBRIDGE-26.04.01-Kimi_K2-DGX-GB300"))
    assert kimi.config.zero_stage == 0 and kimi.config.dtype == "mxfp8"
    assert kimi.config.fp8_param_gather is False
    assert gpt.config.dtype == "bf16" and not gpt.config.fp8_param_gather
    plain = row_inputs(_llama31_8b_row(zero_norm="0", zero_stage="0", n_gpus=8, dp=8))
    assert plain.config.zero_stage == 0


def test_a_row_without_recompute_takes_what_its_releases_preset_for_that_layout_saves():
    """Megatron-Bridge 26.04's GB200 BF16 preset for GPT-OSS 120B (EP 64, micro-batch 4, global
    batch 1280) recomputes layernorm and moe_act; 26.04.01's GB200 FP8-CS preset for Llama 3
    70B (Megatron-FSDP, micro-batch 2) offloads 40 layers' activations; Nemotron 3 Nano's H100
    preset also recomputes whole MoE layers (Megatron's 'moe')."""
    from paraplan.validation.published import row_inputs
    gpt = row_inputs(_bundled_row("MBRIDGE-26.04-GPTOSS120B-DGX-GB200-64g-BF16"))
    assert gpt.config.recompute.value == "selective"
    assert gpt.config.recompute_modules == ("layernorm", "mlp_act")
    llama = row_inputs(_bundled_row("MBRIDGE-26.04.01-LLAMA3_70B-DGX-GB200-64g-FP8-tp1pp1"))
    assert (llama.config.zero_stage, llama.config.offload_activation_layers) == (3, 40)
    assert llama.config.recompute.value == "none"
    nano = row_inputs(_bundled_row("MBRIDGE-26.04.01-Nemotron_3_Nano-DGX-H100"))
    assert nano.config.recompute_modules == ("core_attn", "layernorm", "mlp_act", "moe")
    assert not any("not modelled" in a for a in nano.assumptions)
    # a layout no preset of the release runs: nothing assumed beyond "none"
    other = row_inputs(_bundled_row("MBRIDGE-25.11-GPTOSS120B-DGX-H100-64g-BF16-tp1pp4cp1ep8vp1-gbs512-mbs4"))
    assert other.config.recompute.value == "none" and other.config.offload_activation_layers == 0


def test_a_layout_no_preset_runs_takes_no_memory_savings():
    from dataclasses import replace
    from hardware_specs.catalog import load_stack
    from hardware_specs.stack_presets import MemorySavings, all_presets, memory_savings_of_layout
    stack = load_stack("megatron-bridge-26.04")
    gpt = next(p for p in all_presets() if p.container == "26.04" and p.model == "gptoss120b"
               and p.gpu == "gb200" and p.dtype == "bf16" and p.layout.global_batch == 1280)
    found, presets = memory_savings_of_layout(stack, "gpt-oss-120b", "gb200", gpt.layout, "bf16", "26.04")
    assert found == MemorySavings(recompute="selective", recompute_modules=("layernorm", "moe_act"))
    assert memory_savings_of_layout(stack, "gpt-oss-120b", "gb200", replace(gpt.layout, micro_batch=3),
                                    "bf16")[0] is None


def test_a_row_naming_a_stack_that_splits_whole_kv_heads_is_skipped_at_a_tp_beyond_them():
    """A Megatron-Core row at tp 16 on Llama 3.1 8B's 8 key/value heads could not have run
    (num_query_groups % tp == 0): skipped, saying so; the same row without a framework ran that
    layout on a framework that replicated the heads, and is kept with the assumption noted."""
    from paraplan.validation.published import Skip, row_inputs
    row = _llama31_8b_row(n_gpus=16, tp=16, dp=1, global_batch=16, framework="megatron-core",
                          framework_version="0.14")
    with pytest.raises(Skip, match="8 key/value heads"):
        row_inputs(row)
    kept = row_inputs({**row, "framework": "", "framework_version": ""})
    assert kept.config.kv_head_replication and kept.config.tp == 16
    assert any(a.startswith("kv heads replicated over tp 16") for a in kept.assumptions)
