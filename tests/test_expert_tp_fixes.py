"""Expert tensor parallelism (etp) as the CLI, the API and sweeps take and check it: one explained
error where the stack's default etp does not fit, the same from each entry point; the experts
error first where no etp would fit; Megatron-Core <= 0.9's carved EP layout refused at etp != tp.

Hand cases: Mixtral 8x7B (8 experts) on 8 H100 at tp 2, ep 8: dp 4, dp*cp*tp = 8; megatron-core's
default etp = tp = 2 gives ep*etp = 16, which does not divide 8, where etp 1 (8) would.
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from hardware_specs.errors import InputError
from paraplan.cli import main

MIXTRAL = ["-m", "mixtral-8x7b", "-c", "dgx-h100"]


def _last_line(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    return res.exit_code, res.output.strip().splitlines()[-1]


def test_an_ep_that_does_not_divide_the_experts_is_said_before_the_default_etp():
    # 16 GPUs, tp 2, ep 16: 16 does not divide Mixtral's 8 experts; ep*etp = 32 does not divide
    # dp*cp*tp = 16 either, and etp 1 (16) would tile the ranks, but no etp makes 16 ranks of 8 experts
    code, line = _last_line("simulate", *MIXTRAL, "--gpus", 16, "--tp", 2, "--ep", 16, "--global-batch", 64)
    assert code != 0
    assert line.startswith("error: ep: ep=16 does not divide the 8 experts"), line
    assert "--etp 1" not in line


def test_the_api_says_the_default_etp_does_not_fit_as_simulate_does():
    from paraplan import api
    with pytest.raises(InputError) as err:
        api.simulate("mixtral-8x7b", "dgx-h100", gpus=8, tp=2, ep=8, global_batch=64)
    assert err.value.field == "etp"
    assert err.value.message.startswith("2 is megatron-core's default") and "ep*etp = 8*2" in err.value.message
    assert err.value.fix.startswith("etp=1")
    # stated, etp 1 runs (the check is of the default only)
    assert len(api.simulate("mixtral-8x7b", "dgx-h100", gpus=8, tp=2, ep=8, etp=1, global_batch=64)) == 1


def test_a_sweep_says_the_default_etp_does_not_fit_as_simulate_does():
    from paraplan.sweeps import evaluate as ev
    from paraplan.sweeps import spec_from_dict
    spec = spec_from_dict({"kind": "training", "search": "simulate", "models": ["mixtral-8x7b"],
                           "clusters": ["dgx-h100"], "gpus": [8], "global_batch": [64],
                           "config": {"tp": [2], "ep": [8]}})
    df = ev.evaluate_points(list(enumerate(spec.points())), "training", "simulate")
    assert list(df["status"]) == ["invalid"]
    reason = df["reason"].iloc[0]
    assert "megatron-core's default" in reason and "etp=1" in reason, reason


def test_a_carved_ep_stack_refuses_an_etp_other_than_tp():
    """NeMo 24.09 (Megatron-Core 0.9) has no expert-TP setting: the experts split over the whole tp
    group (NVIDIA/Megatron-LM@core_r0.9.0 megatron/core/transformer/moe/experts.py:67-71), so
    tp 4 with --etp 1 is a layout it cannot run; it was priced and exited 0."""
    code, line = _last_line("simulate", *MIXTRAL, "-n", 8, "--seq-len", 4096, "--global-batch", 64, "--tp", 4,
                            "--ep", 8, "--etp", 1, "--stack", "nemo-24.09")
    assert code != 0 and line.startswith("error: etp: etp=1") and "etp = tp = 4 only" in line, line
    from paraplan import api
    with pytest.raises(InputError) as err:
        api.simulate("mixtral-8x7b", "dgx-h100", gpus=8, tp=4, ep=8, etp=1, global_batch=64, stack="nemo-24.09")
    assert err.value.field == "etp"
    # etp = tp runs (dp 2, ep 2 divides it)
    assert len(api.simulate("mixtral-8x7b", "dgx-h100", gpus=8, tp=4, ep=2, etp=4, global_batch=64,
                            stack="nemo-24.09")) == 1


def test_a_carved_ep_stack_needs_an_ep_dividing_dp():
    """Megatron-Core 0.9 cuts the EP groups out of the data-parallel ranks (parallel_state.py
    initialize_model_parallel: data_parallel_size % expert_model_parallel_size == 0; rank order
    tp-cp-ep-dp-pp): 16 GPUs at tp 2, cp 2 leave dp 4, which ep 8 does not divide, though
    ep*etp = 16 divides dp*cp*tp = 16 (a folding stack runs it)."""
    args = ["simulate", *MIXTRAL, "-n", 16, "--global-batch", 64, "--tp", 2, "--cp", 2, "--ep", 8]
    code, line = _last_line(*args, "--stack", "nemo-24.09")
    assert code != 0 and line.startswith("error: ep: ep=8 does not divide dp=4"), line
    assert "choose ep from 1, 2, 4" in line
    assert _last_line(*args, "--stack", "megatron-core")[0] == 0


def test_a_carved_ep_search_keeps_only_what_simulate_runs():
    """The search under NeMo 24.09 keeps rows with etp = tp and an ep dividing dp: a row with
    cp 2 at ep 8 on 16 GPUs (dp 4) was a plan check_config now refuses."""
    from paraplan import api
    rows = api.plan("mixtral-8x7b", "dgx-h100", 16, 64 * 4096, stack="nemo-24.09", max_plans=None)
    assert len(rows)
    assert (rows.etp == rows.tp).all()
    assert (rows.dp % rows.ep == 0).all()
    assert ((rows.ep > 1) & (rows.cp > 1)).any()      # carved EP with cp still searched, at ep | dp


def test_simulate_says_where_a_default_etp_came_from():
    """As zero= and cp_kind= do: etp taken from the stack is noted; a stated one is not."""
    base = ["simulate", "-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "64", "--global-batch", "256", "--tp", "4",
            "--ep", "8"]
    out = CliRunner().invoke(main, base).output
    assert "ep=8 etp=4 (megatron-core's default; --etp sets another) vpp=1" in out
    out = CliRunner().invoke(main, base + ["--stack", "nemo-24.09"]).output
    assert "etp=4 (nemo-24.09's default: it runs etp = tp only)" in out
    out = CliRunner().invoke(main, base + ["--etp", "1"]).output
    assert "ep=8 etp=1 vpp=1" in out


def test_a_fixed_etp_the_search_does_not_run_says_so():
    """The search runs etp at the row's tp or 1 (SearchConstraints.expert_tp_choices); tp 4
    with etp 2 is a layout simulate runs (--tp 4 --ep 2 --etp 2 on 16 GPUs), so 'no layout there
    has both' was wrong: the message says what is searched and where another etp is priced."""
    code, line = _last_line("plan", *MIXTRAL, "-n", 16, "--global-batch", 64, "--fix", "etp=2", "--fix", "tp=4")
    assert code != 0 and line.startswith("error: etp:"), line
    assert "no layout there has both" not in line
    assert "etp only at the row's tp or 1" in line and "simulate --etp" in line
    assert _last_line("simulate", *MIXTRAL, "-n", 16, "--global-batch", 64, "--tp", 4, "--ep", 2, "--etp", 2)[0] == 0
    code, line = _last_line("plan", *MIXTRAL, "-n", 16, "--global-batch", 64, "--fix", "etp=3")
    assert code != 0 and "etp only at the row's tp or 1" in line, line


def test_plan_help_names_etp_among_the_fix_names():
    out = CliRunner().invoke(main, ["plan", "--help"]).output
    names = " ".join(out.split("Names:", 1)[1].split())
    assert names.startswith("dp tp pp cp ep etp ")


def test_megatron_export_refuses_a_carved_ep_plan_whose_groups_it_would_place_elsewhere():
    """A NeMo 24.09 plan at tp 2, cp 2, ep 8 prices EP members tp x cp = 4 ranks apart (Megatron-Core
    0.9's rank order tp-cp-ep-dp-pp); the Megatron-LM the export targets folds EP, members etp = 2
    apart: --emit megatron said the winner 'runs in megatron as planned'."""
    res = CliRunner().invoke(main, ["plan", *MIXTRAL, "-n", "64", "--global-batch", "256", "--stack", "nemo-24.09",
                                    "--emit", "megatron", "--fix", "cp=2", "--fix", "ep=8"])
    assert res.exit_code != 0
    assert "the unrestricted winner runs in megatron as planned" not in res.output
    assert "by ep" in res.output and "folds EP" in res.output
    # at cp 1 the members are tp = etp apart in both: the same placement, exported
    res = CliRunner().invoke(main, ["plan", *MIXTRAL, "-n", "64", "--global-batch", "256", "--stack", "nemo-24.09",
                                    "--emit", "megatron", "--fix", "cp=1", "--fix", "ep=8"])
    assert res.exit_code == 0, res.output


def test_torchtitan_stacks_take_the_expert_tp_its_export_runs():
    """torchtitan 0.3.0 shards the routed experts over the TP ranks without expert parallelism
    (etp = tp) and splits them over EP only with it (etp 1): models/common/moe_sharding.py
    _routed_experts_sharding_configs, as paraplan.exports.torchtitan.expert_tp cites. The stacks
    said etp 1 always, so a tp 2, ep 1 run was priced at a layout the export refused."""
    from paraplan import api, exports
    for stack in ("torchtitan", "torchtitan-0.3", "torchtitan-compile"):
        for ep, etp in ((1, 2), (8, 1)):
            row = api.simulate("deepseek-v3", "dgx-h100", gpus=16, tp=2, ep=ep, global_batch=64,
                               stack=stack).iloc[0].to_dict()
            assert row["etp"] == etp, (stack, ep)
            assert exports.refusal(row, "torchtitan") is None, (stack, ep)
    code, line = _last_line("simulate", *MIXTRAL, "-n", 16, "--global-batch", 64, "--tp", 2, "--stack", "torchtitan")
    assert code == 0
    out = CliRunner().invoke(main, ["simulate", *MIXTRAL, "-n", "16", "--global-batch", "64", "--tp", "2",
                                    "--stack", "torchtitan", "--json"]).output
    import json
    assert json.loads(out)["config"]["etp"] == 2


def test_a_torchtitan_search_runs_its_expert_tp_rule():
    from paraplan import api
    rows = api.plan("mixtral-8x7b", "dgx-h100", 16, 64 * 4096, stack="torchtitan", max_plans=None)
    assert len(rows)
    assert ((rows.ep == 1) <= (rows.etp == rows.tp)).all() and (rows[rows.ep > 1].etp == 1).all()
    assert ((rows.ep == 1) & (rows.tp > 1)).any()


def test_simulate_says_torchtitan_has_no_etp_setting_and_what_it_runs():
    """torchtitan shards the experts over tp without expert parallelism and keeps them whole with
    it (``expert_tp_default: tp_without_ep``); it has no expert-TP option, so the table must not
    suggest one: etp = tp = 2 at ep 1, etp 1 at ep 8, and no '--etp sets another'."""
    base = ["simulate", "-m", "deepseek-v3", "-c", "dgx-h100", "-n", "256", "--seq-len", "4096",
            "--global-batch", "256", "--tp", "2", "--pp", "16", "--zero", "3", "--stack", "torchtitan-0.3"]
    for extra, etp in (([], 2), (["--ep", "8"], 1)):
        out = CliRunner().invoke(main, base + extra).output
        config = " ".join(line.strip() for line in out.splitlines() if line.startswith(("config", "         ")))
        assert f"etp={etp} (torchtitan-0.3: experts split over tp at ep 1, whole with ep > 1; no etp setting)" in config
        assert "--etp sets another" not in out


def test_the_search_space_docstring_names_the_expert_tp_axis():
    """The raw space crosses each ep with ``SearchConstraints.expert_tp_choices`` and prunes a
    repeated choice as ``etp_repeat``: the module's description of the raw space says so."""
    import planners.search_space as space
    assert "expert_tp_choices" in space.__doc__ and "etp_repeat" in space.__doc__


def test_the_expert_tp_modes_are_listed_once():
    """The stack's expert_tp_default values (hardware_specs.stack_spec.EXPERT_TP_DEFAULTS) are the
    choices a search accepts; planners keeps no second copy, and the infeasibility message has a
    text for each (one dict), so a mode added to the stack cannot go unnamed or unaccepted."""
    import planners.infeasible as infeasible
    import planners.search_space as space
    from hardware_specs.stack_spec import EXPERT_TP_DEFAULTS
    assert not hasattr(space, "EXPERT_TP_CHOICES")
    assert set(infeasible.EXPERT_TP_CHOICE_TEXT) == set(EXPERT_TP_DEFAULTS)


def test_expert_tp_for_is_the_one_rule_for_ints_and_rows():
    """torchtitan 0.3.0 splits the experts over tp at ep 1 and runs them whole with ep > 1
    (expert_param_placement_dense / _sparse): tp 2 ep 1 -> 2, tp 2 ep 8 -> 1, tp 4 ep 1 -> 4;
    Megatron-Core's default etp = tp; 'one' is 1. Ints give ints, rows give int64 rows."""
    import numpy as np
    from simulator.stack_defaults import expert_tp_for
    tp, ep = np.array([2, 2, 4]), np.array([1, 8, 1])
    assert expert_tp_for("tp_without_ep", tp, ep).tolist() == [2, 1, 4]
    assert expert_tp_for("tp", tp, ep).tolist() == [2, 2, 4]
    assert expert_tp_for("one", tp, ep).tolist() == [1, 1, 1]
    assert expert_tp_for("tp_without_ep", 2, 8) == 1 and type(expert_tp_for("tp", 2, 8)) is int


def test_simulates_etp_note_reads_the_clusters_gpu_recipe(monkeypatch):
    """A stack whose recipe for one GPU runs torchtitan's rule (tp_without_ep) and another the
    default etp = tp: the note names the rule only for the GPU whose recipe has it (it read the
    recipe with no GPU, as stack_expert_tp, which prices the run, does not)."""
    from types import SimpleNamespace
    import paraplan.commands.simulate as sim
    mode = {"H100": "tp_without_ep"}
    stack = SimpleNamespace(name="s", training_for=lambda model, gpu, dtype: SimpleNamespace(
        expert_tp_default=mode.get(gpu, "tp")))
    monkeypatch.setattr(sim, "load_stack", lambda name: stack)
    model = SimpleNamespace(name="m", moe=object())
    config = SimpleNamespace(ep_carved_from_dp=False, dtype="bf16")
    assert "no etp setting" in sim.etp_source("s", model, config, "H100")
    assert "no etp setting" not in sim.etp_source("s", model, config, "A100")
