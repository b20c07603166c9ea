"""Regression bounds on the published-run validation (../shared/validation/published_runs.csv).

The bounds are the errors measured when this test was last updated plus a small margin (or
the issue's target where it is met), so a change that makes predictions drift fails here
(measured at the refit with FlashAttention-2's mma.sync rate on Hopper and the BLOOM, NeMo
24.07 and Kimi K2 rows: KOR22 step time 5.74% mean / 11.0% worst, NAR21 11.2% (Table 1 2.6%, the DeepSpeed ZeRO-3 rows 19-68% fast), dense
rows with their own fields 6.31%, vTrain single-node 8.66%, MoE rows 9.01%, context-parallel
rows 7.66%, FP8/MXFP8/NVFP4 rows 11.52%; after the deduplicated MoE dispatch and the NeMo
long-sequence B200 rows joined the Blackwell fit). The issue targets: KOR22 <= 3% mean and 6% worst,
NAR21 <= 6%, dense rows <= 10%, MoE, CP and low precision <= 12%. Row sets are selected by
their columns, and counts are lower bounds, so rows added to the shared file are bounded too;
where rows of a named source in another layout would enter a bound set on its own rows (the
Narayanan tables), the bound names the runs it was set on, and the rows no bound claims have a
loose bound of their own (test_rows_no_bound_claims_are_predicted_or_say_why).
"""
from pathlib import Path

import numpy as np
import pandas as pd

import pytest

from paraplan.validation.published import TIME_METRICS, read_runs, speed_error, summarize, validate_rows
from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file

CSV = validation_file(PUBLISHED_RUNS)
DENSE_GPUS = ("a100-sxm-40gb", "a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "v100-sxm-32gb")



@pytest.fixture(scope="module")
def results():
    return validate_rows(read_runs(CSV))


def _mean_abs_pct(rows):
    return float((rows.rel_error.abs() * 100).mean())


#: Korthikanti et al. 2022 (arXiv 2205.05198) Table 5: the step times of the 22B, 175B, 530B and
#: 1T models with full recomputation and with selective recomputation + sequence parallelism, the
#: eight runs the bound below was set on; named, as the Narayanan runs are, so that another layout
#: of this source entering the shared file is bounded by the dense rows' or the unclaimed rows' test
KOR22_TABLE5_STEPS = frozenset(f"KOR22-T5-{size}-{kind}:iter_time_s"
                               for size in ("22B", "175B", "530B", "1T") for kind in ("full", "selsp"))


def _korthikanti_steps(results):
    return results.id.isin(KOR22_TABLE5_STEPS)


def test_korthikanti_step_times_stay_within_bound(results):
    ok = results[(results.status == "ok") & _korthikanti_steps(results)]
    assert len(ok) == 8
    # the target is 3% mean / 6% worst, met (2.7% / 5.8%) until the 28 BLOOM
    # preliminary runs (Megatron-DeepSpeed 2022, predicted 17% fast) joined the Ampere fit and
    # pulled its 16-bit GEMM plateau from 0.79 to 0.75 (5.74% / 11.0%); the fitter run to its
    # fixed point moves it to 0.716 (vTrain's 721 rows want faster memory-bound kernels, HBM at
    # its 0.95 bound), and the largest models here (pp 35 and 64) come out slow (8.02% / 14.7%).
    # Counting the materialised attention's score traffic once (the batched GEMMs' own reads and
    # writes were counted twice) took the HBM fraction off its bound (0.81) and the plateau to
    # 0.70: the error grows with the model (22B 3%, 175B 7%, 530B 12%, 1T 16% slow), larger
    # GEMMs reaching more of the peak than the tile model gives; measured 9.37% / 16.4%. With
    # the unfused gradient accumulation priced in the buffer's own dtype (Megatron-LM's fp16
    # main grads: 6 bytes a parameter and micro-batch, not 10): 7.45% / 13.3% (22B -2%, 175B
    # +4%, 530B +8%, 1T +13% slow). Each row fits at a GEMM plateau growing with the model:
    # 0.67-0.72 (22B), 0.73-0.76 (175B), 0.77-0.79 (530B), 0.81 (1T) against the fitted 0.70.
    # The refit that followed (plateau 0.716, HBM 0.778): 6.52% / 11.5% (22B +2% / -3%, 175B +6%
    # / +3%, 530B +9% / +6%, 1T +12% / +11%). The fourteenth round's (more memory-bound traffic
    # counted, plateau 0.731, HBM 0.847): 5.19% / 9.5%. With sequence parallelism's row-parallel
    # gradient all-gather exposed (the GEMMs read it; simulator/layer_times.py), at those factors:
    # 5.42% / 10.6%, full and selective rows of a size now within 1 point of each other (22B +0.4 /
    # -2.5%, 175B +4.3 / +3.4%, 530B +6.8 / +5.8%, 1T +9.5 / +10.6%): what is left grows with the
    # model alone. Eighteenth round's refit (Ampere HBM 0.847 -> 0.864): 5.34% / 10.5% (22B -0.1 /
    # -2.8%, 175B +4.1 / +3.3%, 530B +6.7 / +5.8%, 1T +9.4 / +10.5%). Session 61's code: 4.60% /
    # 9.05% (22B -0.8 / -3.4%, 175B +3.0 / +2.0%, 530B +6.1 / +4.5%, 1T +7.9 / +9.1%); the same
    # 1T layout as NAR21-T1-1T (predicted 1.8% slow) measures 8% faster in 2022 than in 2021
    assert _mean_abs_pct(ok) <= 5.0
    assert float((ok.rel_error.abs() * 100).max()) <= 10.0


def _bloom(results):
    return results.source.isin(["BLOOMPRE", "BLOOM176"])


def test_bloom_runs_on_jean_zay_stay_within_bound(results):
    ok = results[(results.status == "ok") & _bloom(results)]
    assert len(ok) >= 32
    # on a DGX A100's 200 Gb/s per GPU these rows were 15.1% / 13.2% off (BLOOMPRE / BLOOM176,
    # all fast); on Jean Zay's own fabric (4 x 100 Gb/s Omni-Path per 8-GPU node, the cluster
    # their gpu column names) 11.35% / 10.33%, 11.2% together; with the 5.07 GB/s one NCCL
    # communicator was measured to reach there (BigScience's all_reduce_bench, jean-zay-a100.yaml)
    # 10.36% together (10.85% / 6.95%); with DeepSpeed's BF16_Optimizer all-reducing the fp32
    # gradients whole (megatron-deepspeed's bf16_zero1_grad_reduce) 8.23% (8.80% / 4.18%); the
    # data-parallel 24 rows are still 15-22% fast; 9.00% (9.47% / 5.74%) since session 51's refit
    # (Ampere's 16-bit plateau 0.7469 -> 0.7625 with HBM 0.8468 -> 0.7952: these fast rows faster)
    assert _mean_abs_pct(ok) <= 9.5


#: the runs of Narayanan et al. 2021 (arXiv 2104.04473) the bounds below were set on: Table 1's ten
#: weak-scaling runs and Table 2's PTD and ZeRO-3 runs at the GPU counts the paper gives. Named,
#: not selected by source: rows of this source in other layouts (a later transcription's other
#: micro-batches or scales) share its source, framework release and GPU, and entering these
#: bounds would move a mean measured on these 22; they are bounded where their columns put them
#: (the dense rows' bound) or by test_rows_no_bound_claims_are_predicted_or_say_why
NAR21_TABLE_RUNS = frozenset(
    [f"NAR21-T1-{size}" for size in ("1.7B", "3.6B", "7.5B", "18B", "39B", "76B", "145B", "310B", "530B", "1T")]
    + [f"NAR21-T2-{kind}-174.6B-{n}" for kind in ("ptd", "zero3") for n in (384, 768, 1536)]
    + [f"NAR21-T2-ptd-529.6B-{n}" for n in (560, 1120, 2240)]
    + [f"NAR21-T2-zero3-529.6B-{n}" for n in (640, 1120, 2240)])


def _narayanan_tables(results):
    return (results.source == "NAR21") & results.run_id.isin(NAR21_TABLE_RUNS)


def test_narayanan_tables_stay_within_bound(results):
    ok = results[(results.status == "ok") & _narayanan_tables(results)]
    assert len(ok) == 22
    zero3 = ok[ok.id.str.contains("zero3")]
    megatron = ok[~ok.id.str.contains("zero3")]
    # Megatron-LM's own rows (Table 1, Table 2 PTD); the target is 6%
    # measured 3.10% (4.2% with fp32 accumulation buffers), 2.45% after the refit that followed
    assert _mean_abs_pct(megatron) <= 3.0
    # Table 2's DeepSpeed ZeRO-3 rows with DeepSpeed 0.3's per-rank copies of its list-based
    # collectives, persistent small tensors and gradients all-reduced per bucket, and rings
    # paying the NIC's start-up only on their cross-node steps: measured 9.72% mean, -6.6% ..
    # +20.0% (22.3% and up to 45% fast before); 175B +1%, +5%, -7% and 530B +13%, +12%, +20%
    # over 384/768/1536 and 640/1120/2240 ranks; with fp16 accumulation buffers 10.16% mean,
    # 529.6B at 2,240 ranks +20.9%; after the refit (per-kernel time 12.6 -> 15.9 us) 8.33%:
    # 174.6B +0.1 / -1.0 / -17.2%, 529.6B +12.8 / +8.7 / +10.2% (TFLOP/s, + = predicted fast);
    # after the fourteenth round's refit (Ampere's 16-bit plateau 0.716 -> 0.731, HBM 0.778 ->
    # 0.847) 9.91%: 174.6B +2.3 / +2.4 / -13.7%, 529.6B +15.4 / +12.7 / +13.0%; 10.81% (worst
    # 17.2%) since the fitter moves the 16-bit plateau and the HBM fraction together (Ampere
    # 0.7313 / 0.9156 -> 0.7469 / 0.8468, objective 7.08% -> 7.05%, Korthikanti's steps 5.50% ->
    # 4.40%): these rows' gathers stay unexplained (docs/accuracy_training.md); 12.18% (worst
    # 18.46%, 529.6B at 2,240 ranks) since the tree all-reduce pipelines its in-node chain with
    # the trees across nodes as NCCL's tuner models it (no refit): the gradient all-reduces
    # that already ran on the tree got faster, these rows were already predicted fast; 12.97%
    # (worst 19.71%) since session 51's Ampere refit (16-bit plateau 0.7469 -> 0.7625): faster
    # GEMMs make these fast rows faster
    assert _mean_abs_pct(zero3) <= 13.5
    assert float((zero3.rel_error.abs() * 100).max()) <= 20.0
    # the 6% target for the source: measured 5.71% over all 22 rows, 5.03% with fp16
    # accumulation buffers, 4.05% after the refit
    assert _mean_abs_pct(ok) <= 6.0


def _dense_modelable(results):
    """Dense-GPU rows (not vTrain's single-node ones) that state what a prediction needs."""
    dense = results.gpu_profile.isin(DENSE_GPUS) & ~_is_vtrain_single_node(results)
    unpredictable = results.reason.fillna("").str.contains(
        "needed field|gpu_profile|metric|convention|preset|ep > 1", regex=True)
    # rows whose whole architecture came from a preset (the row states no layers / hidden /
    # heads); not rows that took only details (norm, biases, vocab) or a release's recompute /
    # ZeRO setting from one: matching any "preset" had shrunk this set to 222 rows once those
    # assumptions were written out (seventeenth round)
    from_preset = results.assumptions.fillna("").str.contains(r"(?:^|; )architecture from preset", regex=True)
    return dense & ~unpredictable & ~from_preset


def test_dense_rows_with_their_fields_are_predicted(results):
    modelable = results[_dense_modelable(results)]
    assert len(modelable) >= 300
    assert (modelable.status == "ok").mean() >= 0.90      # measured 372/372 (2026-12-03)
    assert _mean_abs_pct(modelable[modelable.status == "ok"]) <= 10.0   # the target; measured 5.82%


def _is_vtrain_single_node(results):
    """vTrain's 721 single-node Megatron-DeepSpeed runs (2-8 A100, small GPT models): the
    small-GEMM, kernel-overhead regime, bounded on their own."""
    return results.id.str.startswith("VTRAIN-S-")


def test_vtrain_single_node_rows_are_predicted_within_bound(results):
    vt = results[_is_vtrain_single_node(results)]
    ok = vt[vt.status == "ok"]
    assert len(vt) >= 721 and len(ok) == len(vt)
    # measured 21.07% when these rows arrived (16% too fast on average), 8.36% with the host-issue
    # floor, GEMM waves), 8.66% after the BLOOM rows joined the Ampere fit; the target is 8%,
    # met since (7.76% on session 61's code): the bound is the target
    assert _mean_abs_pct(ok) <= 8.0


def _with_columns(results):
    """The validation results joined with the CSV columns that select the issue's row sets."""
    cols = read_runs(CSV)[["id", "moe_experts", "cp", "dtype_norm", "model"]]
    return results.merge(cols, on="id")


def _moe(r):
    return (r.id.str.startswith("MBRIDGE") & r.moe_experts.notna()) | (r.id.str.startswith("DGXC2411") & r.id.str.contains("grok"))


def test_moe_rows_are_predicted_within_bound(results):
    r = _with_columns(results)
    moe = r[_moe(r)]
    ok = moe[moe.status == "ok"]
    assert len(moe) >= 53
    assert len(ok) >= 0.8 * len(moe)          # measured 48/53
    # the target is 12%: measured 10.37%, 10.58% after the thirteenth round's refit, 12.08%
    # after the fourteenth's (more memory-bound traffic per layer, the fit from two starts: larger
    # GEMM plateaus on Hopper, 0.67 -> 0.70, so Grok-1 under NeMo 24.09 is 15-29% fast), 11.85%
    # since the GPT-OSS row its source footnotes as a known regression is skipped (sixteenth round);
    # 12.31% since the rows run their release presets' recomputation (seventeenth round: whole MoE
    # blocks and MLA up-projections recomputed on rows the model already gave too slow; the target
    # is missed by that much, recorded in docs/accuracy_training.md); 11.38% (worst 28.5%) in the eighteenth round
    # (GPT-OSS's eager GLU clamp, current scaling's scalar launches unpriced, Transformer Engine's
    # per-expert GEMMs on 4 streams, refitted)
    assert _mean_abs_pct(ok) <= 12.5


def _context_parallel(r):
    return r.id.str.startswith("NEMOLS") | (r.cp.fillna(1) > 1)


def test_context_parallel_rows_are_predicted_within_bound(results):
    r = _with_columns(results)
    cp = r[_context_parallel(r)]
    ok = cp[cp.status == "ok"]
    assert len(ok) >= 70                      # measured 77 of 87
    assert _mean_abs_pct(ok) <= 10.0          # measured 7.55%


def _low_precision(r):
    return r.dtype_norm.isin(["fp8", "mxfp8", "nvfp4"]) & r.gpu_profile.isin(["h100-sxm-80gb", "b200", "b300", "gb200", "gb300"])


def test_low_precision_rows_are_predicted_within_bound(results):
    r = _with_columns(results)
    lp = r[_low_precision(r)]
    ok = lp[lp.status == "ok"]
    assert len(ok) >= 275                     # measured 285 (265 + the 20 Nemotron 3 Nano rows)
    # the target is 12%: measured 9.27% (10.94% before FP8 current scaling's and the
    # grouped GEMMs' kernels were counted; GPT-OSS on Blackwell still runs up to 2.1x slower
    # than the model); 8.99% -> 8.71% once current scaling's one-thread scale launches are not
    # priced as tensor kernels (two of its four launches, low_precision.SCALAR_QUANTISE_KERNELS);
    # 8.42% (worst 31.7%) after the eighteenth round's refit
    assert _mean_abs_pct(ok) <= 12.0


def _hybrid(r):
    return r.model.fillna("").str.startswith("Nemotron_3_Nano")


def test_hybrid_mamba_moe_rows_are_predicted_within_bound(results):
    # Nemotron 3 Nano (Megatron-Bridge tables, 8-16 GPUs, EP 8): every row predicted, its
    # TFLOP/s rows by Megatron-Bridge's hybrid FLOP count; measured 8.58% mean, worst 24.3%:
    # Blackwell's 16 rows 2-8% fast, Hopper's 4 FP8 rows 23-24% slow since the grouped GEMM's
    # per-expert launches and current scaling's quantisation kernels are counted and Hopper's
    # refit per-kernel time is 25 us (4.16% before, with 40 us and fewer kernels)
    r = _with_columns(results)
    hybrid = r[_hybrid(r)]
    ok = hybrid[hybrid.status == "ok"]
    assert len(hybrid) >= 20
    assert len(ok) == len(hybrid)             # measured 20 of 20
    # measured 8.58%, 8.03% with the host's time shared, 8.54% at the sixteenth round; 11.88% since
    # the H100 rows run their preset's recomputation (core_attn|layernorm|moe|moe_act: the whole MoE
    # block again in backward): they were 20% slow in the model, now 39%; Blackwell's 16 rows 2-8% fast;
    # 10.90% (H100 rows 34-35% slow) once current scaling's one-thread scale launches are not priced;
    # 9.80% (worst 30.1%) with the per-expert GEMMs on 4 streams and the eighteenth round's refit
    assert _mean_abs_pct(ok) <= 12.5


def test_every_skipped_row_says_why(results):
    skipped = results[results.status == "skipped"]
    assert (skipped.reason.str.len() > 0).all()
    assert not results[results.status == "ok"].predicted.isna().any()


def test_summary_has_one_row_per_source_plus_all(results):
    summary = summarize(results)
    assert summary.iloc[-1].source == "ALL"
    assert summary.rows_ok.iloc[:-1].sum() == summary.rows_ok.iloc[-1]



def test_speed_error_is_positive_when_predicted_faster_for_time_and_rate_metrics():
    # a step predicted at 11 s that took 10 s ran 10/11 of the predicted speed: the model is
    # 9.09% slow; 110 tokens/s predicted for 100 measured is 10% fast
    assert speed_error("iter_time_s", 11.0, 10.0) == pytest.approx(10.0 / 11.0 - 1.0)
    assert speed_error("iter_time_s", 11.0, 10.0) == pytest.approx(-0.090909, abs=1e-6)
    assert speed_error("tokens_per_s_per_gpu", 110.0, 100.0) == pytest.approx(0.10)
    assert speed_error("mfu", 45.0, 50.0) == pytest.approx(-0.10)


def test_a_runs_time_row_and_rate_row_agree_in_speed_error_sign(results):
    ok = results[results.status == "ok"]
    timed = ok.metric.isin(TIME_METRICS)
    assert timed.any() and (~timed).any()
    # rates: the same number as rel_error; durations: 1 / (1 + rel_error) - 1, the other sign
    assert (ok[~timed].speed_error - ok[~timed].rel_error).abs().max() < 1e-12
    t = ok[timed]
    assert ((t.speed_error - (1.0 / (1.0 + t.rel_error) - 1.0)).abs() < 1e-12).all()
    assert (t.speed_error * t.rel_error <= 0).all()


def _fit_share(rows):
    return float(rows.fits.astype(bool).mean())


def test_published_runs_fit_in_their_gpus_memory(results):
    """Every published run ran, so its configuration fit in its GPUs' memory: the share of
    predicted rows the memory model says fit is a check of the memory model on data. Measured
    (2026-12-07, session 64): all predicted rows 99.3% (1,339 of 1,348; 99.1% before NeMo 1.x's Apex
    remainders and Nemotron-340B's bf16 optimizer, stack input master_weights; 97.0% before flash-attn's
    fused loss held the logits and their 16-bit gradient rather than an fp32 softmax, and before
    NeMo 24.09's dgxc runs kept a bf16 gradient buffer and FP8-only weights, both read from the
    frameworks' code); Megatron-Bridge 99.6% (230 of 231: 28.6% before the rows took their
    release presets' distributed optimizer, recomputation and offloading, the bf16 gradient
    buffer and FP8-only parameters; 94.4% before Megatron-Core >= 0.13's MoE probabilities
    inside the experts, stack input moe_probs_in_expert, which fits its DeepSeek-V3 and Kimi K2
    rows on GB200 / GB300), vTrain and Korthikanti 100%, Narayanan 95.5%, BLOOM 92.9%,
    llm-foundry 99.1% (218 of 220: 89.1% with the fp32 softmax copy; the 2 over are MPT-1B at
    micro-batch 10 on A100-40GB), DGX Cloud 100% (98.4% with an fp32 master for its 340B bf16 run; 88.9%
    with the fp32 gradient buffer and 16-bit weights beside the FP8 copies). Row sets by source; each bound is the measured share
    less a margin, so rows added to the shared file are bounded too."""
    ok = results[results.status == "ok"]
    assert len(ok) >= 1348
    assert _fit_share(ok) >= 0.98
    for source, bound in (("MBRIDGE", 0.97), ("VTRAIN", 0.99), ("KOR22", 0.99), ("NAR21", 0.9),
                          ("LFOUNDRY", 0.97), ("DGXC2411", 0.98)):
        rows = ok[ok.source == source]
        assert len(rows) >= 20, source
        assert _fit_share(rows) >= bound, (source, _fit_share(rows))


def test_a_row_without_a_framework_keeps_its_tp_beyond_the_kv_heads_and_says_so(results):
    """PaLM 540B ran multi-query attention (one key/value head) at tp 12 on TPU v4, its framework
    not stated: the default stack (megatron-core) would refuse tp 12, but the run used it, so its
    heads count as replicated over tp, noted, and the row stays predicted."""
    palm = results[results.id.isin(["PALM540:tokens_per_s", "PALM540:mfu"])]
    assert len(palm) == 2 and (palm.status == "ok").all() and palm.predicted.notna().all()
    assert all("kv heads replicated over tp 12 (1 key/value head; framework not stated" in a
               for a in palm.assumptions)


def test_cross_validate_with_source_fits_without_it_on_every_other_source_of_the_file(tmp_path, monkeypatch):
    """``--source KOR22 --cross-validate`` filtered the file before the leave-one-source-out fits,
    so the fit without KOR22 saw no row at all (the middle of every range, and the note 'no other
    source'). The held-out fit is replaced here by one that predicts each held-out row as the
    number of rows it was fitted on plus one (no refit: minutes); the filtered run must give the KOR22 rows
    of the unfiltered one: the NAR21 rows' count + 1, and a basis of 'fit' (>= 20 Ampere rows left)."""
    import json

    import numpy as np
    import pandas as pd
    from click.testing import CliRunner

    from paraplan.cli import main
    from paraplan.validation import fit
    from paraplan.validation.fit_search import MIN_ROWS_FOR_FULL_FIT

    df = pd.read_csv(CSV, dtype=str, keep_default_na=False)
    path = tmp_path / "two_sources.csv"
    df[df.run_id.str.startswith(("KOR22", "NAR21"))].to_csv(path, index=False)
    held = []

    def rows_fitted_on(prepared, src, sweeps):
        held.append(src)
        sources = np.asarray(prepared.sources)
        return np.full(int((sources == src).sum()), 1.0 + (sources != src).sum())     # never 0
    monkeypatch.setattr(fit, "_held_out_prediction", rows_fitted_on)

    def rows(*args):
        result = CliRunner().invoke(main, ["validate", "published", str(path), "--cross-validate", "--json", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)
    everything = rows()
    assert held == ["KOR22", "NAR21"]
    held.clear()
    kor = rows("--source", "KOR22")
    assert held == ["KOR22"]                                   # only the reported source is refitted
    nar_ok = sum(r["status"] == "ok" and r["source"] == "NAR21" for r in everything)
    assert nar_ok >= MIN_ROWS_FOR_FULL_FIT
    assert kor == [r for r in everything if r["source"] == "KOR22"] and kor
    assert {r["predicted"] for r in kor if r["status"] == "ok"} == {1.0 + nar_ok}
    assert not any("no fit" in (r["assumptions"] or "") or "no other source" in (r["assumptions"] or "") for r in kor)


def test_rows_on_an_unfitted_efficiency_prior_say_so_in_the_rows_and_the_table(tmp_path):
    """Volta and TPU v4 keep unfitted priors (``fitted_factors: []``): their rows carry
    ``efficiency_fitted`` false (``EfficiencyModel.is_fitted`` of their generation), the Ampere
    KOR22 rows true, a skipped row null; the table marks MEG20, PALM540 and ALL with ``*`` and
    says why in a footnote. The predicted values are those of the run without the marks."""
    import csv as csv_module
    import io
    import json

    import pandas as pd
    from click.testing import CliRunner

    from hardware_specs.catalog import load_efficiency
    from paraplan.cli import main

    df = pd.read_csv(CSV, dtype=str, keep_default_na=False)
    path = tmp_path / "priors.csv"
    df[df.run_id.str.startswith(("KOR22", "MEG20", "PALM540"))].to_csv(path, index=False)
    assert not load_efficiency("volta").is_fitted and not load_efficiency("tpu-v4").is_fitted
    assert load_efficiency("ampere").is_fitted

    def cli(*args):
        result = CliRunner().invoke(main, ["validate", "published", str(path), *args])
        assert result.exit_code == 0, result.output
        return result.stdout
    rows = json.loads(cli("--json"))
    results = validate_rows(read_runs(path))
    want = {r["id"]: (None if r["status"] != "ok" else load_efficiency(r["generation"]).is_fitted)
            for r in results.to_dict("records")}
    assert {r["id"]: r["efficiency_fitted"] for r in rows} == want
    by_source = {(r["source"], r["efficiency_fitted"]) for r in rows if r["status"] == "ok"}
    assert by_source == {("KOR22", True), ("MEG20", False), ("PALM540", False)}
    assert all(r["efficiency_fitted"] is None for r in rows if r["status"] != "ok")
    assert [r["predicted"] for r in rows] == [None if pd.isna(v) else v for v in results.predicted]
    table = cli()
    n_meg = sum(r["status"] == "ok" and r["source"] == "MEG20" for r in rows)
    n_palm = sum(r["status"] == "ok" and r["source"] == "PALM540" for r in rows)
    marked = {line.split()[0] for line in table.splitlines() if line.split()[1:2] == ["*"]}
    assert marked == {"MEG20", "PALM540", "ALL"}
    assert (f"MEG20: {n_meg} rows on volta; PALM540: {n_palm} rows on tpu-v4" in table
            and "unfitted efficiency prior" in table), table
    header = next(csv_module.reader(io.StringIO(cli("--csv"))))
    assert "efficiency_fitted" in header


#: every row set a bound above claims (each selects on the results joined with the file's columns)
BOUNDED_ROW_SETS = (_korthikanti_steps, _bloom, _narayanan_tables, _dense_modelable, _is_vtrain_single_node,
                    _moe, _context_parallel, _low_precision, _hybrid)


def test_rows_no_bound_claims_are_predicted_or_say_why(results):
    """The rows outside every bounded set above: those of the sources no bound names (GPT-3,
    PaLM, MT-NLG, ...) and what the shared file gains between sessions (a new source, a GPU with
    no profile yet, another layout of a named source). Each is predicted, finite and positive,
    or skipped with its reason; together they stay within a loose bound, so new data is checked
    the day it arrives without entering a bound set on other rows. Measured (session 72, the
    committed model, the shared file): 121 such rows, 21 predicted at 13.8% mean |error| (worst
    51.3%, GPT-OSS 120B BF16 on B300 under Megatron-Bridge 26.02, its TFLOP/s rows skipped for
    their convention), 100 skipped (no precision on an FP8-capable GPU, no GPU profile, an
    unconvertible FLOP count, an inference metric). With 60 synthetic rows added to a copy
    (another layout of four named sources, a new source, a Megatron-Bridge release, MI300A runs)
    the predicted ones fall in the sets above and the MI300A rows are skipped here, no profile."""
    r = _with_columns(results)
    claimed = pd.concat([select(r) for select in BOUNDED_ROW_SETS], axis=1).any(axis=1)
    rest = r[~claimed]
    ok = rest[rest.status == "ok"]
    skipped = rest[rest.status != "ok"]
    assert len(ok) + len(skipped) == len(rest) >= 1
    assert (skipped.reason.str.len() > 10).all()
    assert np.isfinite(ok.predicted.astype(float)).all() and (ok.predicted.astype(float) > 0).all()
    # a loose bound, 35%: the unfitted priors and unprofiled releases these rows may rest on
    # are expected to be off by more than the fitted sets' 3-13%, not by a factor
    assert ok.empty or _mean_abs_pct(ok) <= 35.0, ok.assign(e=ok.rel_error * 100)[["id", "e"]].to_string()
