"""``validate serving`` on rows written unlike the bundled file's: each test takes a bundled row,
changes one cell as another source or deployment would, and checks the row is read as the
original (same prediction), or skipped with a reason that says why, never priced on a layout
that cannot run."""
from __future__ import annotations

import pandas as pd
import pytest

from paraplan.validation.datasets import BUNDLED_DIR
from paraplan.validation.serving import prepare, validate_rows

DSV3_SGLANG_AGG = "dsr1_h200_sglang_fp8_agg_1024x1024_c16_cfg81"
DSV3_SGLANG_DISAGG = "dsr1_h200_sglang_fp8_disagg_8192x1024_c64_cfg434"
LLAMA8_TRTLLM = ("meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm_agg_1024x128_c8_"
                 "tp2_epnone_43")
LLAMA70_VLLM = "2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_1024x8192_c8_tp1_ep1_268"
GIB = 2.0 ** 30


@pytest.fixture(scope="module")
def bundled():
    return pd.read_csv(BUNDLED_DIR / "serving_runs.csv", dtype=str, keep_default_na=False)


def _variants(bundled, base_id, variants: dict) -> pd.DataFrame:
    row = bundled[bundled.id == base_id]
    assert len(row) == 1, base_id
    return pd.concat([row.assign(id="base")] + [row.assign(id=k, **v) for k, v in variants.items()],
                     ignore_index=True)


def _results(df) -> dict:
    """{(id, metric): record}"""
    return {(r["id"], r["metric"]): r for r in validate_rows(df).to_dict("records")}


def test_a_layout_whose_weights_leave_no_kv_cache_is_skipped_not_priced_with_a_queue(bundled):
    # DeepSeek-V3 (671B parameters) in fp8 over 8 H100s: at least 671e9 bytes / 8 = 78.1 GiB of
    # weights a GPU of an 80 GB H100; `serve simulate` refuses it ("leave no room for a KV cache")
    got = _results(_variants(bundled, DSV3_SGLANG_AGG, {"h100": {"system": "h100_sxm"}}))
    assert got[("base", "ttft_ms")]["status"] == "ok"
    reason = got[("h100", "ttft_ms")]["reason"]
    assert got[("h100", "ttft_ms")]["status"] == got[("h100", "tpot_ms")]["status"] == "skipped"
    assert reason.startswith("the weights (") and reason.endswith(
        " GiB per GPU) leave no room for a KV cache on h100-sxm-80gb: the layout cannot serve the model")
    weights_gib = float(reason.split("(")[1].split(" GiB")[0])
    assert 671e9 / 8 / GIB < weights_gib < 80e9 * 1.25 / GIB


def test_a_disaggregated_worker_that_cannot_hold_the_model_skips_its_row_and_names_the_worker(bundled):
    got = _results(_variants(bundled, DSV3_SGLANG_DISAGG, {"h100": {"system": "h100_sxm"}}))
    assert got[("base", "ttft_ms")]["status"] == "ok"
    # the prefill worker is tp 8 (78+ GiB of weights a GPU), the decode worker tp 1 (all 671 GB)
    assert got[("h100", "ttft_ms")]["status"] == "skipped"
    assert got[("h100", "ttft_ms")]["reason"].startswith("prefill worker: the weights (")


def test_backend_and_system_spelled_by_their_full_names_read_as_the_file_s_names(bundled):
    df = _variants(bundled, LLAMA8_TRTLLM, {"full_name": {"backend": "TensorRT-LLM"}, "preset": {"system": "dgx-h100"},
                                            "unknown": {"system": "h100_sxm5"}})
    got = _results(df)
    for name in ("full_name", "preset"):
        for metric in ("ttft_ms", "tpot_ms"):
            assert got[(name, metric)]["status"] == "ok", got[(name, metric)]["reason"]
            assert got[(name, metric)]["predicted"] == got[("base", metric)]["predicted"], (name, metric)
    assert got[("unknown", "ttft_ms")]["reason"] == (
        "system 'h100_sxm5' has no cluster preset (one of a100_sxm, h100_sxm, h200_sxm, b200_sxm, b300_sxm, gb200, "
        "gb300, or a preset of `paraplan hardware list`)")


def test_only_vllm_s_data_parallel_expert_layout_is_read_as_ranks_of_tp_1(bundled):
    # module docstring: tp_size = attention_dp_size = D with moe_ep_size = D x D is D engine
    # ranks of tp 1; a dense model's tp 2 x attention-DP 2 (no experts stated) is read as stated
    df = _variants(bundled, LLAMA70_VLLM, {"dense_dp": {"tp_size": "2", "attention_dp_size": "2", "moe_tp_size": "",
                                                        "moe_ep_size": "", "batch_size": "4"}})
    prep = prepare(df)
    where = {int(i): g for g in prep.groups for i in g.index}
    assert prep.reason[1] == ""
    group = where[1]
    k = list(group.index).index(1)
    assert (group.columns["tp"][k], group.columns["adp"][k]) == (2.0, 2.0)
