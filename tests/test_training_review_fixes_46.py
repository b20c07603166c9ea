"""Review 46 of the training simulator and planner: DualPipe's layer rule, ZB-H1 with activation
offload, pooled ``plan --schedule`` and the "fits: NO" advice."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from paraplan import api
from paraplan.cli import main
from simulator.validate_config import needs_uneven_split


def _cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def _step(*args):
    code, out = _cli("simulate", *args, "--json")
    assert code == 0, out
    return json.loads(out)["step_time_s"]


# --- 1. DualPipe: each model copy lies over the pp ranks (pp positions), not 2 pp ----------------

def test_dualpipe_needs_the_layers_to_divide_by_pp_not_2pp():
    # two copies of the model, each over pp positions (``_positions``): 40 layers on pp 8 is 5 a
    # position, even; ZB-V's one V-shaped copy has 2 pp = 16 positions and does need a split
    assert needs_uneven_split(40, 8, 1, "dualpipe") is False
    assert needs_uneven_split(40, 8, 1, "zb-v") is True
    assert needs_uneven_split(61, 8, 1, "dualpipe") is True
    assert needs_uneven_split(64, 8, 1, "dualpipe") is False


def test_dualpipe_takes_an_even_split_and_it_is_the_uneven_layouts_step():
    # was refused: "dualpipe puts 2 chunks on each of pp=8 ranks; 40 layers do not divide by 16";
    # --uneven-layers lays 5 a position anyway, so the even split is that same step
    args = ("-m", "gpt3-13b", "-c", "dgx-h100", "-n", 8, "--pp", 8, "--schedule", "dualpipe",
            "--global-batch", 16, "--seq-len", 1024)
    even = _step(*args)
    assert even > 0 and even == _step(*args, "--uneven-layers")


def test_dualpipe_runs_pp_up_to_the_layer_count_in_simulate_and_plan_alike():
    # pp 32 on 40 layers: 32 positions per copy (1 or 2 layers each); was "needs 2*pp = 64 chunks"
    args = ("-m", "gpt3-13b", "-c", "dgx-h100", "-n", 32, "--pp", 32, "--schedule", "dualpipe",
            "--global-batch", 64, "--seq-len", 1024)
    step = _step(*args, "--uneven-layers")
    ranked = api.plan("gpt3-13b", "dgx-h100", 32, seq_len=1024, global_batch=64, pp=32, schedules=["dualpipe"])
    assert len(ranked) > 0
    assert set(ranked.schedule) == {"dualpipe"}
    row = ranked[(ranked.recompute == "none")].iloc[0]
    assert int(row.pp) == 32
    assert float(row.step_time_s) == pytest.approx(step, rel=1e-12)
    # ZB-V's rule is unchanged: 2 pp positions
    code, out = _cli("simulate", *[a if a != "dualpipe" else "zb-v" for a in args], "--uneven-layers")
    assert code == 2 and "zb-v needs 2*pp = 64 chunks, more than the 40 layers" in out


def test_dualpipe_refuses_a_layer_count_that_pp_does_not_divide_by_its_own_rule():
    code, out = _cli("simulate", "-m", "gpt3-13b", "-c", "dgx-h100", "-n", 16, "--pp", 16, "--schedule",
                     "dualpipe", "--global-batch", 32, "--seq-len", 1024)
    assert code == 2
    assert "dualpipe lays each of its two model copies over pp=16 ranks; 40 layers do not divide by 16" in out


# --- 2. ZB-H1 + activation offload: the DP window widens only by the stall the makespan paid --

# etp 1 stated: the cases below were found with whole experts on each expert rank, simulate's
# default before a760eee; megatron-core now defaults to etp = tp = 4 when none is given (a layout
# whose smaller step leaves the 4-layer offload copy exposed, 2.283 -> 3.316 s: another case)
_ZB_H1 = dict(gpus=256, tp=4, pp=8, ep=4, etp=1, global_batch=64, zero_stage=1, sequence_parallel=True,
              schedule="zb-h1")


def _host_cluster(tmp_path, gb_per_s):
    """dgx-b200 with its host (PCIe) link at ``gb_per_s`` GB/s (64 in the catalogue)."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "hardware_specs/clusters/dgx-b200.yaml").read_text()
    assert "link_bw_gb_per_s: 64 " in text
    path = tmp_path / f"b200-host-{gb_per_s}.yaml"
    path.write_text(text.replace("link_bw_gb_per_s: 64 ", f"link_bw_gb_per_s: {gb_per_s} "))
    return str(path)


def _zb_step(cluster, offload):
    return float(api.simulate("deepseek-v3", cluster, offload_activation_layers=offload, **_ZB_H1).step_time_s.iloc[0])


def test_zb_h1_activation_offload_is_not_faster_than_keeping_the_activations():
    # stage 0's first forward, which every path of the flush starts from, waits its whole
    # offload copy stall (the makespan grows by it, 0.0137 s) and the next step's parameter
    # gather hides under it in equal measure; the reload stall in stage 0's backward the ZB-H1
    # flush absorbs in its slack (it ends on another stage), so the gradient reduction's window
    # may not widen by it: the step is the unoffloaded one. It was 3.46333 s against 3.47652 s
    # (the window widened by the 0.0132 s stall the makespan never paid)
    base = _zb_step("dgx-b200", 0)
    assert base > 0 and _zb_step("dgx-b200", 4) == pytest.approx(base, rel=1e-12)


def test_zb_h1_with_offload_never_slows_with_a_faster_host_link(tmp_path):
    # was 3.46333 -> 3.47262 -> 3.47652 s for 64 -> 128 -> 256 GB/s
    base = _zb_step("dgx-b200", 0)
    steps = [_zb_step(_host_cluster(tmp_path, bw), 4) for bw in (16, 32, 64, 128, 256)]
    for slower_link, faster_link in zip(steps, steps[1:]):
        assert faster_link <= slower_link * (1 + 1e-12)
    assert min(steps) >= base * (1 - 1e-12)
    assert steps[0] > base + 1.0        # a 16 GB/s link stalls seconds: the check is not vacuous


# --- 3. pooled plan --schedule: a schedule is no degree ---------------------------------------

_POOLED = ("plan", "-m", "llama3-70b", "-c", "examples/clusters/a100-h100.yaml", "--global-batch", 512)


@pytest.fixture
def _repo_cwd(monkeypatch):
    from pathlib import Path
    monkeypatch.chdir(Path(__file__).resolve().parents[1])


def test_pooled_plan_refuses_a_zero_bubble_schedule_for_pooled_simulates_reason(_repo_cwd):
    # was "the degrees differ per pool in a mixed plan; ... (--max-tp limits tensor parallelism)"
    code, out = _cli(*_POOLED, "--schedule", "zb-h1")
    assert code == 2
    assert out == ("error: --schedule: zb-h1 is not modelled across unequal stages (use 1f1b or gpipe (the "
                   "mixed-plan search prices 1f1b))\n")
    code, out = _cli(*_POOLED, "--schedule", "gpipe")
    assert code == 2
    assert out.startswith("error: --schedule: the mixed-plan search prices 1f1b only, not gpipe (")


def test_pooled_plan_takes_1f1b_the_schedule_it_searches(_repo_cwd, tmp_path):
    # the example's two pods at 32 GPUs each, not 256 (whether --schedule 1f1b is taken as the
    # schedule the mixed search prices does not depend on the pods' size; the best plan still
    # spans both pools): 1,103 rows searched, not 14,095
    from pathlib import Path
    text = Path(_POOLED[4]).read_text()
    assert text.count("gpus: 256") == 2
    small = tmp_path / "a100-h100-32.yaml"
    small.write_text(text.replace("gpus: 256", "gpus: 32"))
    pooled = (*_POOLED[:4], small, *_POOLED[5:])
    code, given = _cli(*pooled, "--schedule", "1f1b", "--top", 1, "--json")
    assert code == 0, given
    code, default = _cli(*pooled, "--top", 1, "--json")
    assert code == 0
    assert json.loads(given)["best_plan"] == json.loads(default)["best_plan"]
    assert json.loads(given)["best_plan"]["schedule"] == "1f1b"
    assert [p["gpus"] for p in json.loads(given)["request"]["pools"]] == [32, 32]
    assert json.loads(given)["comparison"][0]["n_gpus"] == 64        # the best plan spans both pools


@pytest.mark.parametrize("flag, fix", [("--pp", "drop it"), ("--tp", "drop it (--max-tp limits tensor parallelism)")])
def test_pooled_plan_names_max_tp_only_for_tp(_repo_cwd, flag, fix):
    code, out = _cli(*_POOLED, flag, 2)
    assert code == 2
    assert out == f"error: {flag}: the degrees differ per pool in a mixed plan; the search chooses them ({fix})\n"


# --- 4. "fits: NO" advises only what is not already at its most -------------------------------

_405B = ("-m", "llama3.1-405b", "-c", "dgx-h100", "-n", 8, "--global-batch", 8, "--seq-len", 2048)


def _fits_line(*args):
    code, out = _cli("simulate", *_405B, *args)
    assert code == 0, out
    text = " ".join(out.split())
    return text[text.index("fits: NO"):text.index("why:")].strip()


def test_fits_no_leaves_out_zero_recompute_and_optimizer_offload_already_at_their_most():
    # ZeRO-3, full recompute of every layer, the whole optimizer on the host: what is left is
    # offloading activations (none offloaded; 126 layers in the one chunk) and trading dp 8 for
    # tp/pp; pp 1 has no stages to make uneven. It advised all five options
    line = _fits_line("--zero", 3, "--offload-optimizer-fraction", 1, "--recompute", "full")
    assert line.endswith("GiB; try activation offload (--offload-activation-layers) or more tp/pp)")


def test_fits_no_says_when_nothing_is_left_to_trade():
    # tp 8 on the 8 GPUs (dp 1), every layer recomputed and offloaded, ZeRO-3, optimizer on host
    line = _fits_line("--tp", 8, "--zero", 3, "--offload-optimizer-fraction", 1, "--recompute", "full",
                      "--offload-activation-layers", 126)
    assert line.endswith("GiB; nothing left to trade on these GPUs: use more GPUs, or a shorter sequence)")


def test_fits_no_keeps_the_whole_list_for_a_plain_run_and_drops_zero_without_a_group():
    plain = _fits_line("--zero", 0)
    assert plain.endswith("try recompute (--recompute-num-layers), offload, more tp/pp, or a ZeRO stage)")
    # tp 4 x pp 2 on 8 GPUs: dp 1, so neither more tp/pp nor a ZeRO stage (nothing to shard over);
    # a pipeline can take uneven stages
    piped = _fits_line("--tp", 4, "--pp", 2, "--zero", 1)
    assert piped.endswith("try recompute (--recompute-num-layers), offload, or uneven stages)")
    # recompute_num_layers below the chunk's 63 layers still leaves recompute to add
    partial = _fits_line("--tp", 4, "--pp", 2, "--zero", 1, "--recompute", "full", "--recompute-num-layers", 10)
    assert partial.endswith("try recompute (--recompute-num-layers), offload, or uneven stages)")
    whole = _fits_line("--tp", 4, "--pp", 2, "--zero", 1, "--recompute", "full", "--recompute-num-layers", 63)
    assert whole.endswith("try offload or uneven stages)")


def test_fits_no_leaves_out_uneven_stages_already_taken_and_names_a_smaller_micro_batch():
    # a pipeline already laid out unevenly has no uneven stages left to offer; a micro-batch of 16
    # (its activations the largest part) can shrink. It advised "offload or uneven stages"
    line = _fits_line("--tp", 4, "--pp", 2, "--uneven-layers", "--zero", 1, "--recompute", "full",
                      "--micro-batch", 16, "--global-batch", 32)
    assert line.endswith("try offload or a smaller micro-batch (--micro-batch))")
