"""Serving layouts are the expert splits the stack's engine runs (``ServingBehaviour.expert_splits``).

vLLM runs a worker's routed experts either expert-parallel over all of its tp x adp ranks or
tensor-parallel over all of them (vllm FusedMoEParallelConfig.make); SGLang and TensorRT-LLM
take any etp x ep = tp x adp. Counts below are by hand."""
import io

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from hardware_specs.catalog import load_stack
from hardware_specs.errors import InputError
from hardware_specs.serving_behaviour import ServingBehaviour
from model_specs.catalog import load_model
from paraplan.cli import main
from paraplan.validation.serving import prepare, read_rows
from planners.serving import plan_serving
from planners.serving.space import worker_layouts
from simulator.serving.context import ServingContext


def test_each_serving_stack_states_its_expert_splits():
    assert load_stack("vllm-0.11").serving.expert_splits == "all_ep_or_all_tp"
    assert load_stack("vllm-0.14").serving.expert_splits == "all_ep_or_all_tp"
    assert load_stack("sglang-0.5").serving.expert_splits == "any"
    assert load_stack("trtllm-1").serving.expert_splits == "any"
    with pytest.raises(InputError, match="serving.expert_splits"):
        ServingBehaviour(expert_splits="some")


def test_runs_expert_split_is_columnwise():
    vllm = ServingBehaviour(expert_splits="all_ep_or_all_tp")
    etp = np.array([1.0, 8.0, 2.0, 4.0, 1.0])
    ep = np.array([8.0, 1.0, 4.0, 2.0, 1.0])
    assert vllm.runs_expert_split(etp, ep).tolist() == [True, True, False, False, True]
    assert ServingBehaviour(expert_splits="any").runs_expert_split(etp, ep).tolist() == [True] * 5


def test_deepseek_r1_layouts_on_4_gpus_hand_count():
    # DeepSeek-R1: 128 heads, 256 experts of width 2048; 4 GPUs, no pipeline. (tp, adp) with
    # tp x adp = G <= 4: G 1 (1,1); G 2 (1,2) (2,1); G 4 (1,4) (2,2) (4,1). Expert parallel ep a
    # power of two <= G: 1 + 2 x 2 + 3 x 3 = 14 layouts. vLLM drops etp 2 x ep 2 at G 4: 11.
    # TensorRT-LLM runs every expert split but no attention-DP rank of 2 GPUs: it drops the 3
    # expert splits of (tp 2, adp 2): 11.
    model = load_model("deepseek-r1")
    free = worker_layouts(model, 4, 8, allow_pp=False, behaviour=load_stack("sglang-0.5").serving)
    pure = worker_layouts(model, 4, 8, allow_pp=False, behaviour=load_stack("vllm-0.14").serving)
    trt = worker_layouts(model, 4, 8, allow_pp=False, behaviour=load_stack("trtllm-1").serving)
    assert len(worker_layouts(model, 4, 8, allow_pp=False)) == len(free) == 14
    assert len(pure) == 11 and len(trt) == 11
    dropped = {tuple(r) for r in free.tolist()} - {tuple(r) for r in pure.tolist()}
    assert dropped == {(1.0, 1.0, 4.0, 2.0, 2.0), (2.0, 1.0, 2.0, 2.0, 2.0), (4.0, 1.0, 1.0, 2.0, 2.0)}
    dropped = {tuple(r) for r in free.tolist()} - {tuple(r) for r in trt.tolist()}
    assert dropped == {(2.0, 1.0, 2.0, 4.0, 1.0), (2.0, 1.0, 2.0, 2.0, 2.0), (2.0, 1.0, 2.0, 1.0, 4.0)}


def test_deepseek_r1_layouts_on_64_gpus_with_vllm_hand_count():
    # (tp, adp) = (2^a, 2^b), a <= 3 (tp inside the 8-GPU node), s = a + b <= 6, and every pp up
    # to the 61 layers and 64 / 2^s: n(s) = 61, 32, 16, 8, 4, 2, 1 for s = 0..6. Triples: a = 0
    # sums n(0..6) = 124, a = 1 n(1..6) = 63, a = 2 31, a = 3 15: 233. vLLM: two splits (all-EP,
    # all-TP) each, one where tp x adp = 1 (the 61 triples of s = 0): 2 x 233 - 61 = 405
    lay = worker_layouts(load_model("deepseek-r1"), 64, 8, True, load_stack("vllm-0.14").serving)
    assert len(lay) == 405
    group = lay[:, 0] * lay[:, 2]
    assert np.all((lay[:, 3] == 1) | (lay[:, 4] == 1)) and np.all(lay[:, 3] * lay[:, 4] == group)


def test_serve_plan_of_the_review_proposes_only_layouts_vllm_runs():
    # `serve plan -m deepseek-r1 -s b200_sxm -n 64 --isl 1024 --osl 1024 --tpot-ms 30` proposed
    # tp1-adp8-etp4xep2 before; every candidate, agg and both disagg sides, is now etp 1 or ep 1
    ctx = ServingContext.build("deepseek-r1", "dgx-b200", "vllm-0.14", "fp8")
    plan = plan_serving(ctx, 64, 1024, 1024, 1000.0, 30.0)
    c = plan.candidates
    for side in ("", "prefill_", "decode_"):
        rows = c[c[f"{side}moe_tp"].notna()]
        assert len(rows) and ((rows[f"{side}moe_tp"] == 1) | (rows[f"{side}moe_ep"] == 1)).all(), side
    labels = pd.concat([c.layout, c.prefill_layout, c.decode_layout]).dropna()
    assert not labels.str.contains(r"etp(?:[2-9]|\d\d)xep(?:[2-9]|\d\d)").any()


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_serve_simulate_refuses_a_split_vllm_does_not_run_and_names_the_ones_it_does():
    base = ["serve", "simulate", "-m", "deepseek-r1", "-s", "dgx-b200", "--precision", "fp8", "--tp", "8"]
    r = _run(*base, "--moe-tp", "2", "--moe-ep", "4")
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --moe-ep: vllm-0.14 does not run the experts as etp2 x ep4")
    assert "etp1 x ep8 (all expert-parallel) or etp8 x ep1 (all tensor-parallel)" in lines[0]
    assert "expert_splits: all_ep_or_all_tp" in lines[0] and "use --moe-ep 8 or --moe-tp 8" in lines[0]
    # the disaggregated sides name their own options
    r = _run("serve", "simulate", "-m", "deepseek-r1", "-s", "dgx-b200", "--precision", "fp8", "--mode", "disagg",
             "--prefill-adp", "4", "--prefill-moe-tp", "2", "--prefill-moe-ep", "2", "--decode-adp", "8",
             "--decode-moe-ep", "8")
    assert r.exit_code == 2 and r.stderr.startswith("error: --prefill-moe-ep: vllm-0.14"), r.output
    # the splits vLLM runs, and the same mixed split on engines that run it
    assert _run(*base, "--moe-ep", "8").exit_code == 0
    assert _run(*base, "--moe-tp", "8").exit_code == 0
    for backend in ("sglang", "trtllm"):
        r = _run(*base, "--moe-tp", "2", "--moe-ep", "4", "--backend", backend)
        assert r.exit_code == 0, (backend, r.output)


def _one_row(backend, version, **fields):
    row = {"id": "r", "backend": backend, "backend_version": version, "model_path": "deepseek-ai/DeepSeek-R1",
           "system": "b200_sxm", "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 1024,
           "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0,
           "pp_size": 1, "silicon_data_source": "", "batch_size": 4, **fields}
    buf = io.StringIO()
    pd.DataFrame([row]).to_csv(buf, index=False)
    buf.seek(0)
    return prepare(read_rows(buf))


def test_a_measured_vllm_row_in_a_mixed_split_is_skipped_with_the_reason_not_dropped():
    prep = _one_row("vllm", "0.14.0", tp_size=4, attention_dp_size=1, moe_tp_size=2, moe_ep_size=2)
    assert not prep.groups
    assert "expert split etp2 x ep2 is not one vllm-0.14 runs" in prep.reason[0]
    # the same split measured on TensorRT-LLM is predicted; vLLM's all-EP split too
    assert _one_row("trtllm", "1.1.0", tp_size=4, attention_dp_size=1, moe_tp_size=2, moe_ep_size=2).groups
    assert _one_row("vllm", "0.14.0", tp_size=4, attention_dp_size=1, moe_tp_size=1, moe_ep_size=4).groups


def test_a_measured_trtllm_row_with_attention_dp_ranks_of_two_gpus_is_skipped_with_the_reason():
    prep = _one_row("trtllm", "1.1.0", tp_size=2, attention_dp_size=4, moe_tp_size=1, moe_ep_size=8)
    assert not prep.groups
    assert "attention-DP ranks of one GPU" in prep.reason[0]
    # SGLang runs dp-attention groups of tp_size / dp_size GPUs: predicted
    assert _one_row("sglang", "0.5.6", tp_size=2, attention_dp_size=4, moe_tp_size=1, moe_ep_size=8).groups


def test_no_measured_row_of_the_file_is_in_a_split_its_engine_does_not_run():
    from paraplan.validation.datasets import SERVING_RUNS, validation_file
    prep = prepare(read_rows(validation_file(SERVING_RUNS)))
    # vLLM: none; the 2 TensorRT-LLM and 12 SGLang rows in mixed splits are predicted (those
    # engines run any split), as before (TensorRT-LLM had 17 until session 72: the gpt-oss-dev
    # family's 15 in-node "tp 4 = experts 2 x 2" rows are its 2-GPU worker, experts 2-way EP)
    assert not any("expert split" in why or "attention-DP ranks" in why for why in prep.reason)
    mixed = {}
    for g in prep.groups:
        for side in ("", "prefill_", "decode_"):
            if f"{side}moe_tp" in g.columns:
                n = int(((g.columns[f"{side}moe_tp"] > 1) & (g.columns[f"{side}moe_ep"] > 1)).sum())
                mixed[g.context.stack.name] = mixed.get(g.context.stack.name, 0) + n
    assert {k: v for k, v in mixed.items() if v} == {"trtllm-1": 2, "sglang-0.5": 12}
