"""How ``paraplan validate published`` turns one row into model and configuration inputs."""
import pytest
from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file


def _llama31_8b_row(**overrides):
    """A published-runs row for Llama 3.1 8B on 8 H100 with the vocab column left empty."""
    row = {"id": "X-1:tokens_per_s_per_gpu", "run_id": "X-1", "gpu_profile": "h100-sxm-80gb",
           "dtype_norm": "bf16", "zero_norm": "1", "flops_convention": "none", "model": "Llama 3.1 8B",
           "layers": 32, "hidden": 4096, "ffn_hidden": 14336, "heads": 32, "kv_heads": 8,
           "vocab": float("nan"), "seq_len": 8192, "moe_experts": "", "moe_topk": "", "n_gpus": 8,
           "tp": 1, "pp": 1, "dp": 8, "cp": "", "ep": "", "vpp": "", "micro_batch": 1,
           "global_batch": 64, "recompute": "none", "seq_parallel": "n",
           "measured_metric": "tokens_per_s_per_gpu", "measured_value": 10000.0}
    row.update(overrides)
    return row


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


def test_unstated_precision_on_an_fp8_capable_gpu_is_skipped_not_guessed():
    from paraplan.validation.published import Skip, row_inputs
    with pytest.raises(Skip, match="dtype_norm empty on an FP8-capable GPU"):
        row_inputs(_llama31_8b_row(dtype_norm=float("nan"), vocab=128256))
    # A100 has no FP8 tensor cores: 16-bit is the only training rate, so bf16 is assumed
    inputs = row_inputs(_llama31_8b_row(dtype_norm=float("nan"), vocab=128256, gpu_profile="a100-sxm-80gb"))
    assert inputs.config.dtype == "bf16"
    assert "dtype=bf16" in inputs.assumptions


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
    assert checked["with"] >= 10 and checked["without"] == 3


def test_gpt_oss_flop_count_matches_megatron_bridge_from_26_06():
    """From release 26.06 Megatron-Bridge counts GPT-OSS 120B with its gated MLP and its
    sliding-window layers (window 128 on every other layer): 3.26e10 FLOPs per token,
    which our convention reproduces; the earlier releases' 2.72e10 per token (plain MLP,
    full attention everywhere) is 17% below the model's FLOPs."""
    from paraplan.validation.flops_conventions import CONVENTIONS
    from paraplan.validation.published import read_runs, row_inputs
    df = read_runs(validation_file(PUBLISHED_RUNS))
    oss = df[df.run_id.str.contains("GPTOSS120B") & df.dtype_norm.notna()]
    ratios = {}
    for run_id, rows in oss.groupby("run_id"):
        by_metric = rows.set_index("measured_metric").measured_value
        theirs = by_metric["tflops_per_gpu"] * 1e12 / by_metric["tokens_per_s_per_gpu"]
        row = rows[rows.measured_metric == "tflops_per_gpu"].iloc[0].to_dict()
        inputs = row_inputs(row)
        ratios[run_id] = CONVENTIONS[row["flops_convention"]](inputs.model, 1) / inputs.model.seq_len / theirs
    new = [r for k, r in ratios.items() if k.startswith(("MBRIDGE-26.06", "MBRIDGE-26.08"))]
    old = [r for k, r in ratios.items() if not k.startswith(("MBRIDGE-26.06", "MBRIDGE-26.08"))]
    assert len(new) == 4 and all(r == pytest.approx(1.0, abs=0.005) for r in new)
    assert len(old) == 13 and all(r == pytest.approx(1.20, abs=0.01) for r in old)


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
        peak = load_cluster(inputs.cluster_name).gpu.peak_flops(inputs.config.dtype)
        theirs_per_token = by_metric["mfu"] / 100 * peak / by_metric["tokens_per_s_per_gpu"]
        ours_per_token = CONVENTIONS["palm_6n_attn"](inputs.model, 1) / inputs.model.seq_len
        ratios.append(ours_per_token / theirs_per_token)
    ratios = np.array(ratios)
    assert len(ratios) >= 100
    assert abs(ratios.mean() - 1) < 0.01 and np.abs(ratios - 1).max() < 0.04


def test_a_row_naming_deepspeed_zero3_with_full_recompute_gathers_again_for_the_recompute():
    from paraplan.validation.published import row_inputs
    row = _llama31_8b_row(vocab=128256, zero_norm="3", recompute="full", dp=8, global_batch=64,
                          gpu_profile="a100-sxm-80gb")
    assert row_inputs(row).config.zero3_recompute_gather is False          # FSDP-style by default
    inputs = row_inputs({**row, "notes": "ZeRO-3 without model parallelism (DeepSpeed)"})
    assert inputs.config.zero3_recompute_gather is True
    assert any("zero3_recompute_gather" in a for a in inputs.assumptions)
    # ZeRO-1 under DeepSpeed shards no parameters: nothing to gather
    assert row_inputs({**row, "zero_norm": "1", "notes": "DeepSpeed"}).config.zero3_recompute_gather is False


def test_unstated_sequence_parallelism_follows_the_nemo_recipes_only_with_tp():
    from paraplan.validation.published import row_inputs
    row = _llama31_8b_row(vocab=128256, tp=2, dp=4, seq_parallel="")
    assert row_inputs(row).config.sequence_parallel is False                # no framework named
    nemo = row_inputs({**row, "notes": "NeMo container 26.04"})
    assert nemo.config.sequence_parallel is True
    assert any("sequence_parallel" in a for a in nemo.assumptions)
    bridge = {**row, "source": "github NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"}
    assert row_inputs(bridge).config.sequence_parallel is True
    # a stated 'n' is kept, and without tensor parallelism there is nothing to split
    assert row_inputs({**row, "seq_parallel": "n", "notes": "NeMo"}).config.sequence_parallel is False
    no_tp = _llama31_8b_row(vocab=128256, seq_parallel="", notes="NeMo container")
    assert row_inputs(no_tp).config.sequence_parallel is False


def test_llm_foundry_rows_run_flash_attention_2():
    from paraplan.validation.published import row_inputs
    row = _llama31_8b_row(vocab=128256, zero_norm="3")
    assert row_inputs(row).config.attention_kernel.value == "auto"
    foundry = row_inputs({**row, "source": "github mosaicml/llm-foundry@8c8dd48 scripts/train/benchmarking/README.md"})
    assert foundry.config.attention_kernel.value == "serial"
    assert any("FlashAttention-2" in a for a in foundry.assumptions)
