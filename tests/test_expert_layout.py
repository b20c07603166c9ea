"""Expert tensor parallelism and EP group placement as software-stack data.

Megatron-Core <= 0.9 (NeMo 24.07 / 24.09) splits the experts over the whole TP group
(NVIDIA/Megatron-LM@core_r0.9.0 megatron/core/transformer/moe/experts.py:67-71) and carves the EP
groups out of data parallelism in the rank order tp-cp-ep-dp-pp (parallel_state.py:362), so an EP
group's members are tp * cp ranks apart; >= 0.10 places them etp apart (a separate expert
RankGenerator). DGXC2411 Grok-1 fp8 on 64 H100 (tp 4, cp 2, ep 8, seq 8192, micro-batch 1) is the
hand case: a rank routes 8192 / cp / tp = 1024 tokens, top-2, hidden 6144, 2-byte rows:
1024 x 2 x 6144 x 2 = 25,165,824 B per all-to-all, of which 7/8 leave the node when the members
are 8 ranks apart on 8-GPU nodes.
"""
from pathlib import Path

import numpy as np
import pytest

from cost_models import moe as moe_costs
from cost_models.topology import group_span, tier_bandwidths

from paraplan.validation.published import read_runs, row_inputs, run_conventions
from simulator.simulate import simulate
from simulator.stack_defaults import stack_config_fields, stack_expert_tp

ROOT = Path(__file__).resolve().parents[1]
GROK = "DGXC2411-grok1-fp8-64g:iter_time_s"
A2A_BYTES = 1024 * 2 * 6144 * 2          # 25,165,824 B


def _stack(name):
    from hardware_specs.catalog import load_stack
    return load_stack(name)


@pytest.fixture(scope="module")
def grok():
    recs = read_runs(ROOT / "paraplan/data/validation/published_runs.csv").to_dict("records")
    row = next(r for r in recs if r["id"] == GROK)
    conv = run_conventions(recs)
    return row_inputs(row, conv.get(row["run_id"], frozenset()))


def test_stack_data_gives_expert_tp_and_layout():
    nemo = _stack("nemo-24.09")
    assert stack_expert_tp(nemo, 4, is_moe=True) == 4
    assert stack_expert_tp(nemo, 4, is_moe=False) == 1
    assert stack_config_fields(nemo)["ep_carved_from_dp"] is True
    bridge = _stack("megatron-bridge-25.09")      # its recipes state etp (1): today's price kept
    assert stack_expert_tp(bridge, 4, is_moe=True) == 1
    assert stack_config_fields(bridge)["ep_carved_from_dp"] is False


def test_grok_row_runs_etp_tp_with_ep_strided_over_tp_cp(grok):
    c = grok.config
    assert (c.tp, c.cp, c.ep, c.etp, c.ep_carved_from_dp) == (4, 2, 8, 4, True)
    assert any("etp=4" in a for a in grok.assumptions)


def test_grok_all_to_all_crosses_nodes_under_nemo_24_09(grok):
    cluster = grok.cluster
    assert cluster.gpus_per_node == 8
    c = grok.config
    # members tp * cp = 8 ranks apart: one per node; etp = 1 (folding, stride 1): one node
    assert tuple(np.ravel(group_span(8, c.tp * c.cp, 8))) == (1, 8)
    assert tuple(np.ravel(group_span(8, 1, 8))) == (8, 1)
    from hardware_specs.catalog import efficiency_for_cluster
    eff = efficiency_for_cluster(cluster)
    _, _, bw_o, _ = tier_bandwidths(cluster, eff, 1)
    bw_o = bw_o * eff.collective_fraction("all_to_all")

    def dispatch(b, stride):
        return float(np.ravel(moe_costs.moe_all_to_all_time_s(b, 8, c.etp, cluster, eff, stride=stride)["dispatch_s"])[0])
    # the bandwidth term (latency cancels in the difference): 7/8 of 25.17 MB at the NIC rate
    inter = dispatch(2 * A2A_BYTES, 8) - dispatch(A2A_BYTES, 8)
    assert inter == pytest.approx(A2A_BYTES * 7 / 8 / bw_o, rel=1e-9)
    # inside the node (stride 1) none of it goes over the NICs: far less time
    assert dispatch(2 * A2A_BYTES, 1) - dispatch(A2A_BYTES, 1) < 0.25 * inter


def test_grok_simulated_ep_time_inter_vs_intra_node(grok):
    import dataclasses
    carved = simulate(grok.model, grok.cluster, grok.config).time_breakdown_s["ep_comm_exposed_s"]
    folded = simulate(grok.model, grok.cluster, dataclasses.replace(grok.config, etp=1, ep_carved_from_dp=False)
                      ).time_breakdown_s["ep_comm_exposed_s"]
    assert carved > 2 * folded


# --------------------------------------------------------------------------------------------
# simulate, plan, the API and sweeps take the stack's expert TP when none is given
# --------------------------------------------------------------------------------------------

MIXTRAL = ["--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "64", "--global-batch", "256"]
_FIXED = ["--fix", "tp=4", "--fix", "ep=8", "--fix", "pp=1", "--fix", "cp=1", "--fix", "micro_batch=1",
          "--fix", "zero_stage=1", "--fix", "recompute=none", "--fix", "sequence_parallel=1", "--fix", "schedule=1f1b"]


def _cli(*args):
    import json
    from click.testing import CliRunner
    from paraplan.cli import main
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.output


def _sim_json(*args):
    import json
    return json.loads(_cli("simulate", *MIXTRAL, "--tp", 4, "--ep", 8, "--json", *args))


def test_simulate_takes_expert_tp_from_the_stack():
    # NeMo 24.09 (Megatron-Core 0.9) splits the experts over the tp 4 group; a Bridge recipe runs etp 1
    assert "ep=8 etp=4 " in _cli("simulate", *MIXTRAL, "--tp", 4, "--ep", 8, "--stack", "nemo-24.09")
    assert _sim_json("--stack", "nemo-24.09")["config"]["etp"] == 4
    assert _sim_json("--stack", "megatron-bridge-25.09")["config"]["etp"] == 1
    # a stated --etp wins over the stack's (megatron-core: default etp = tp = 4) where the release
    # lets the user set it; NeMo 24.09 (Megatron-Core 0.9) has no expert-TP setting and refuses it
    assert _sim_json("--stack", "megatron-core", "--etp", 2)["config"]["etp"] == 2
    from click.testing import CliRunner
    from paraplan.cli import main
    res = CliRunner().invoke(main, [str(a) for a in ("simulate", *MIXTRAL, "--tp", 4, "--ep", 8, "--stack",
                                                     "nemo-24.09", "--etp", 2)])
    assert res.exit_code != 0 and "error: etp: etp=2" in res.output


def test_api_and_sweep_fields_take_expert_tp_from_the_stack():
    from paraplan.api import with_stack_fields
    from paraplan.sweeps.evaluate import stack_fields
    from model_specs.catalog import load_model
    from hardware_specs.catalog import load_cluster
    model, cluster = load_model("mixtral-8x7b"), load_cluster("dgx-h100")
    assert with_stack_fields(model, cluster, "nemo-24.09", {"tp": 4})["etp"] == 4
    assert with_stack_fields(model, cluster, "nemo-24.09", {"tp": 4, "etp": 1})["etp"] == 1
    assert with_stack_fields(model, cluster, "megatron-bridge-25.09", {"tp": 4})["etp"] == 1
    assert stack_fields("nemo-24.09", "bf16", model, "h100-sxm-80gb", 4)["etp"] == 4


def test_plan_searches_the_stacks_expert_tp_and_agrees_with_simulate(tmp_path):
    import io
    import pandas as pd
    plan = pd.read_csv(io.StringIO(_cli("plan", *MIXTRAL, "--stack", "nemo-24.09", *_FIXED, "--csv")))
    assert len(plan) == 1
    row = plan.iloc[0]
    layers = int(row["offload_activation_layers"])
    sim = _sim_json("--stack", "nemo-24.09", "--offload-activation-layers", layers or 1)
    assert sim["config"]["etp"] == 4
    # the planner's vectorized row and simulate's one configuration: the same step
    if layers:
        assert row["step_time_s"] == pytest.approx(sim["step_time_s"], rel=1e-9)
    assert row["ep_comm_exposed_s"] == pytest.approx(sim["time_breakdown_s"]["ep_comm_exposed_s"], rel=1e-9)
    # an etp 1 layout (the experts whole on each rank) is one NeMo 24.09 cannot run: refused, not priced
    from click.testing import CliRunner
    from paraplan.cli import main
    res = CliRunner().invoke(main, [str(a) for a in ("simulate", *MIXTRAL, "--tp", 4, "--ep", 8, "--stack",
                                                     "nemo-24.09", "--etp", 1)])
    assert res.exit_code != 0 and "error: etp: etp=1" in res.output


def test_megatron_core_from_0_10_defaults_expert_tp_to_tp():
    # core_v0.10.0 megatron/training/arguments.py:259-260: --expert-tensor-parallel-size None -> tp;
    # the expert groups folded (their own RankGenerator tp=etp, ep, dp, parallel_state.py:655-658)
    for name in ("megatron-core", "megatron-core-0.12"):
        stack = _stack(name)
        assert stack_expert_tp(stack, 4, is_moe=True) == 4
        assert stack_expert_tp(stack, 4, is_moe=False) == 1
        assert stack_config_fields(stack)["ep_carved_from_dp"] is False
    # Megatron-Bridge's recipes set etp 1 explicitly; the other non-Megatron stacks have no expert TP
    for name in ("megatron-bridge", "megatron-bridge-26.06", "pytorch-fsdp", "megatron-deepspeed"):
        assert stack_expert_tp(_stack(name), 4, is_moe=True) == 1
    # torchtitan shards the experts over TP without EP, keeps them whole with it (exports.torchtitan.expert_tp)
    assert stack_expert_tp(_stack("torchtitan"), 4, is_moe=True, ep=1) == 4
    assert stack_expert_tp(_stack("torchtitan"), 4, is_moe=True, ep=8) == 1


# --------------------------------------------------------------------------------------------
# the planner searches etp 1 besides the stack's default where the release folds EP
# --------------------------------------------------------------------------------------------

def test_searched_expert_tp_is_the_default_plus_one_where_the_release_folds_ep():
    from hardware_specs.catalog import load_stack
    from simulator.stack_defaults import searched_expert_tp
    # Megatron-Core >= 0.10: --expert-tensor-parallel-size defaults to tp, the user may set 1 (folding)
    assert searched_expert_tp(load_stack("megatron-core"), True, "mixtral-8x7b") == ("tp", "one")
    # NeMo 24.09 (Megatron-Core 0.9): EP carved from DP, etp = tp only
    assert searched_expert_tp(load_stack("nemo-24.09"), True, "mixtral-8x7b") == ("tp",)
    # Megatron-Bridge recipes: etp 1
    assert searched_expert_tp(load_stack("megatron-bridge-25.09"), True, "mixtral-8x7b") == ("one",)
    assert searched_expert_tp(load_stack("megatron-core"), False, "llama3-8b") == ("one",)


def test_megatron_core_plan_rows_at_etp_one_and_tp_each_equal_simulate_with_that_etp():
    """Under the default stack (Megatron-Core >= 0.10, folded) the search has both the etp 1
    layouts (MoE parallel folding) and the default etp = tp; each row is what `simulate --etp`
    gives it. Before, only etp = tp rows were searched (and tp 2 pp 2 ep 8 on 16 GPUs, ep*etp =
    16 not dividing dp*cp*tp = 4*1*2 = 8, was not a plan at all)."""
    import io
    import json
    import pandas as pd
    args = ["--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch", "64"]
    plan = pd.read_csv(io.StringIO(_cli("plan", *args, "--stack", "megatron-core", "--fix", "ep=8",
                                        "--top", "5000", "--csv")))
    # tp 2 pp 2 ep 8 on 16 GPUs (dp 4) is a layout at etp 1 only: 8*1 divides 4*2, 8*2 does not
    assert set(plan[(plan.tp == 2) & (plan.pp == 2)].etp) == {1}
    # tp 2 pp 1 (dp 8): 8*2 divides 8*2, both are searched; tp 1 rows are etp 1 once (not twice)
    assert set(plan[(plan.tp == 2) & (plan.pp == 1)].etp) == {1, 2}
    assert set(plan[plan.tp == 1].etp) == {1}
    default = plan[(plan.etp == plan.tp) & (plan.tp > 1)]
    for pick in (plan[plan.etp == 1].iloc[0], default.iloc[0]):
        sim = ["simulate", *args, "--stack", "megatron-core", "--uneven-layers", "--json",
               "--zero", pick["zero_stage"], "--recompute", pick["recompute"], "--dtype", pick["dtype"],
               "--schedule", pick["schedule"],
               "--sequence-parallel" if pick["sequence_parallel"] else "--no-sequence-parallel"]
        for name in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "zero_shard_group",
                     "recompute_num_layers", "offload_activation_layers"):
            if pick[name]:
                sim += [f"--{name.replace('_', '-')}", pick[name]]
        report = json.loads(_cli(*sim))
        assert report["config"]["etp"] == pick["etp"]
        assert report["step_time_s"] == pytest.approx(pick["step_time_s"], rel=1e-9)


def test_simulate_says_an_unfitting_expert_tp_is_the_stacks_default_and_how_to_fix_it():
    """mixtral tp 2 ep 8 on 8 GPUs (dp 4): megatron-core's default etp = tp = 2 gives ep*etp = 16,
    which does not divide dp*cp*tp = 4*1*2 = 8; at etp 1, 8 divides 8. The error names the
    stack's default and suggests --etp 1 (a release that folds EP takes it)."""
    from click.testing import CliRunner
    from paraplan.cli import main
    args = ["simulate", "-m", "mixtral-8x7b", "-c", "dgx-h100", "--gpus", "8", "--tp", "2", "--ep", "8",
            "--global-batch", "64"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code != 0
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("error: etp: 2 is megatron-core's default") and "ep*etp = 8*2" in line
    assert "dp*cp*tp = 8" in line and line.endswith(")") and "(--etp 1" in line
    # NeMo 24.09 carves EP from DP and runs etp = tp only: it suggests an ep dividing dp = 4
    # (Megatron-Core 0.9 carves the EP groups out of the data-parallel ranks, rank order tp-cp-ep-dp-pp)
    res = CliRunner().invoke(main, args + ["--stack", "nemo-24.09"])
    assert "nemo-24.09's default" in res.output and "--etp 1" not in res.output and "dividing dp = 4" in res.output
    # stated, etp 1 runs
    assert CliRunner().invoke(main, args + ["--etp", "1", "--gpus", "16"]).exit_code == 0


def test_a_search_can_fix_the_expert_tp():
    """--fix etp=1 keeps the folding layouts only: DeepSeek-V3 on 256 H100 at ep 1 fits only with
    the experts split over tp (etp = tp; test_notebooks: with whole experts its smallest plan needs
    more than 76 GiB), so fixing etp 1 leaves no plan, as before the default became tp."""
    from hardware_specs.errors import InputError
    from paraplan import api
    free = api.plan("mixtral-8x7b", "dgx-h100", 16, 64 * 4096, ep=[8], max_plans=None)
    one = api.plan("mixtral-8x7b", "dgx-h100", 16, 64 * 4096, ep=[8], etp=[1], max_plans=None)
    assert set(free.etp) == {1, 2} and set(one.etp) == {1}
    assert len(one) == (free.etp == 1).sum()
    with pytest.raises(InputError):
        api.plan("deepseek-v3", "dgx-h100", 256, 4 * 2**20, ep=[1], etp=[1], max_plans=1)
