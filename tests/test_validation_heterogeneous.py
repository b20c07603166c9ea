"""``paraplan validate heterogeneous``: the 36 Sailor runs become plans from their own fields and are
predicted within the bounds measured (GH200 iteration time: mean 16.7%, the issue asks 15%).

The runs come from the shared file, which gains runs between sessions: counts are of the 36
bundled runs (selected by ``_file``) or lower bounds, so added runs are bounded too."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from hardware_specs.errors import InputError
from paraplan.cli import main
from paraplan.validation import heterogeneous as het
from paraplan.validation.datasets import BUNDLED_DIR, HETEROGENEOUS_RUNS, validation_file

RUNS = het.read_runs(validation_file(HETEROGENEOUS_RUNS))
#: the runs of the bundled copy (``test_bundled_data`` keeps the shared copies of these unchanged)
BUNDLED_FILES = {r["_file"] for r in het.read_runs(BUNDLED_DIR / HETEROGENEOUS_RUNS)}


@pytest.fixture(scope="module")
def records():
    return het.validate_runs(RUNS)


def _errors(records, system, metric):
    return np.array([abs(r["rel_error"]) for r in records
                     if r["status"] == "ok" and r["metric"] == metric and f"/{system}/" in r["id"]])


def test_every_run_is_predicted_but_the_one_whose_layers_contradict_its_folder(records):
    assert len(BUNDLED_FILES) == 36 and BUNDLED_FILES <= {r["_file"] for r in RUNS}
    assert len(records) == 2 * len(RUNS)
    bundled = [r for r in records if r["id"] in BUNDLED_FILES]
    assert len(bundled) == 72
    skipped = {r["id"] for r in bundled if r["status"] == "skipped"}
    assert skipped == {"sailor/Planner/simulations/validation/clariden/GPT-NEO/N4/plan_config_N4_D4.json"}
    reason = next(r["reason"] for r in bundled if r["status"] == "skipped")
    assert "inconsistent at the source" in reason
    # a run added since is predicted or says why not (a GPU kind or a model with no profile here)
    assert all(len(r["reason"] or "") > 10 for r in records if r["status"] == "skipped")


def test_gh200_runs_are_predicted_within_the_measured_bounds(records):
    time_err = _errors(records, "clariden", "iter_time_s")
    mem_err = _errors(records, "clariden", "peak_memory_bytes")
    assert len(time_err) >= 26            # the bundled GH200 runs timed, and any added since
    # the target is a 15% mean. These fp32/TF32 eager Megatron-DeepSpeed runs of small
    # models (not in the fit) are bound by the host and the per-kernel time: 12.3% mean with
    # Hopper's per-kernel time on its 40 us bound, 16.7% (every run fast, worst 39%) once the
    # Hopper refit took it to 25 us, 14.0% (worst 40.9%, GPT-Neo-2.7B on 2 nodes) since the
    # host's issue time is one factor of every generation (56 us, pinned by Ampere's and
    # Blackwell's rows; Hopper's own rows never bound it, so it had none). The fourteenth round:
    # the added memory-bound traffic alone took it to 11.5% (Hopper's factors as before), but
    # the refit that followed (HBM 0.40 -> 0.572, 16-bit plateau 0.67 -> 0.70, kernel 20 -> 25
    # us) makes every run faster: 20.8% mean, all fast, worst 42.9% (GPT-Neo-2.7B on 2 nodes).
    # A held-out regression against the 15% target, recorded here, not hidden: these eager fp32
    # runs want less memory bandwidth than the fitted Megatron/llm-foundry rows. The eighteenth
    # round's refits (Hopper HBM 0.572 -> 0.606, 16-bit plateau 0.70 -> 0.684): 22.0% mean, worst
    # 43.7%: again a little faster where these runs were already fast. The nineteenth round (the
    # loss's bytes per stack; refit: Hopper HBM 0.606 -> 0.641): 22.6% mean, a regression of 0.6
    # points recorded here (bound 22.5% -> 23%), for the same reason.
    # 2026-12-03 (sailor2): the fp32 scores' passes priced as these runs execute them (4 bytes an
    # element; no scale op in Sailor's layers, so the mask's backward pays autograd's CopySlices
    # copies): 16 + 44 bytes a score in place of 12 + 10, 9.2% mean, worst 35.9% (GPT-Neo-2.7B on
    # 2 nodes), under the 15% target; the bound follows. (sailor3) DeepSpeed's blocking stage
    # exchange (pipe_exchange_blocking): 9.19% -> 9.19%, worst 35.7% (OPT-350M's pipelines closer,
    # GPT-Neo-2.7B's higher). Session 51's refit (Hopper HBM 0.589 -> 0.675) with the model's
    # ends paying their TP collectives: 9.54%, worst 36.7%.
    assert time_err.mean() <= 0.10
    assert time_err.max() <= 0.37
    assert mem_err.mean() <= 0.13


def test_mixed_runs_rest_on_the_prior_and_state_the_network(records):
    # the bundled mixed runs are all predicted; one added since may name a GPU kind with no
    # profile here (skipped with the reason, test_every_run_is_predicted_...); every predicted
    # one says what it rests on
    bundled_mit = [r for r in records if "/mit/" in r["id"] and r["id"] in BUNDLED_FILES]
    assert len(bundled_mit) == 18 and all(r["status"] == "ok" for r in bundled_mit)
    mit = [r for r in records if "/mit/" in r["id"] and r["status"] == "ok"]
    assert not any(r["efficiency_fitted"] for r in mit)
    assert all(any("network not stated: 1 Gb/s" in a for a in r["assumptions"]) for r in mit)
    assert all(any("unfitted efficiency prior" in a for a in r["assumptions"]) for r in mit)
    assert all(r["efficiency_fitted"] for r in records if "/clariden/" in r["id"] and r["status"] == "ok")
    # named as every other output names it (efficiency_fitted, not an inverted efficiency_prior);
    # a skipped run has no numbers, so nothing to mark
    assert all("efficiency_prior" not in r for r in records)
    assert {r["efficiency_fitted"] for r in records if r["status"] == "skipped"} <= {None}
    dup = [r for r in mit if any("identical to" in a for a in r["assumptions"])]
    assert {r["id"].rsplit("/", 1)[1] for r in dup} == {"plan_config_N6_D2.json"}


def _kinds(rid):
    """The GPU kinds a run's stages name (``tmp_per_stage``: [[[kind, gpus, zone]], tp] per replica)."""
    run = next(r for r in RUNS if r.get("_file") == rid)
    return {rep[0][0][0] for p in run["pipeline_list"] for stage in p["tmp_per_stage"] for rep in stage}


def test_the_network_input_moves_only_the_mixed_runs(records):
    faster = het.validate_runs(RUNS, inter_node_gbps=100.0)
    for a, b in zip(records, faster):
        if a["status"] != "ok" or a["metric"] != "iter_time_s":
            continue
        if _kinds(a["id"]) == {"GH-96"}:        # the GH200 runs (Slingshot), selected by their stages
            assert a["predicted"] == b["predicted"]
        elif "N4_D4" in a["id"]:            # four replicas all-reduce OPT-350M over the network
            assert b["predicted"] < 0.8 * a["predicted"]


def test_a_run_becomes_the_plan_its_fields_state():
    run = next(r for r in RUNS if r["_file"].endswith("mit/N4/plan_config_N4_D2.json"))
    model, cluster, plan, _ = het.run_inputs(run)
    assert model.num_layers == 24 and model.vocab_size == 51200           # 50257 padded to 128 x tp 8
    # stage 0: RTX 3090 / RTX 2080 (Ti) replicas; stage 1: Titan RTX / RTX 2080 (Ti); 12 + 14 Sailor layers
    chains = [tuple((s.pool, s.tp, s.layers) for s in g.stages) for g in plan.groups]
    assert chains == [(("rtx-3090-x8", 8, 11), ("titan-rtx-x8", 8, 13)),
                      (("rtx-2080-ti-x8", 8, 11), ("rtx-2080-ti-x8", 8, 13))]
    assert all(g.micro_batches == 256 // (2 * 2) for g in plan.groups)
    assert plan.settings.dtype == "tf32" and plan.settings.grad_reduce_bytes == 4.0
    assert not plan.settings.overlap_grad_reduce and not plan.settings.flash_attention
    assert cluster.pool("rtx-2080-ti-x8").gpus == 16


def test_json_rows_have_the_documented_keys():
    r = CliRunner().invoke(main, ["validate", "heterogeneous", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert len(rows) == 2 * len(RUNS) and len([row for row in rows if row["id"] in BUNDLED_FILES]) == 72
    assert all(set(het.ROW_KEYS) == set(row) for row in rows)
    assert {row["metric"] for row in rows} == {"iter_time_s", "peak_memory_bytes"}
    ok = [row for row in rows if row["status"] == "ok"]
    assert all(row["rel_error"] == pytest.approx(row["predicted"] / row["measured"] - 1) for row in ok)
    table = CliRunner().invoke(main, ["validate", "heterogeneous"])
    assert "gh200 (clariden)" in table.stdout and "prior" in table.stdout and "1 Gb/s per node" in table.stdout


@pytest.mark.parametrize("args, needle", [
    (["--inter-node-gbps", "nan"], "--inter-node-gbps"),
    (["--inter-node-gbps", "0"], "--inter-node-gbps"),
    (["--intra-node-gb-per-s", "-1"], "--intra-node-gb-per-s"),
    (["/no/such/file.json"], "no such file"),
])
def test_bad_inputs_are_one_line(args, needle):
    r = CliRunner().invoke(main, ["validate", "heterogeneous", *args])
    assert r.exit_code == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_damaged_files_and_runs_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="malformed JSON"):
        het.read_runs(bad)
    broken = dict(RUNS[0], mbs="four")
    rec = het.validate_runs([broken])
    assert rec[0]["status"] == "skipped" and "mbs" in rec[0]["reason"]
    # a fractional batch truncated to 0 was a modulo by zero (an internal error; fuzz seed 202)
    for key, value in (("mbs", 0.5), ("gbs", 2.5), ("mbs", 1e300)):
        rec = het.validate_runs([dict(RUNS[0], **{key: value})])
        assert rec[0]["status"] == "skipped" and "whole number" in rec[0]["reason"], (key, value, rec[0])
    unknown = json.loads(json.dumps(RUNS[-1]))
    unknown["pipeline_list"][0]["tmp_per_stage"][0][0][0][0][0] = "B9000"
    assert "unknown GPU kind" in het.validate_runs([unknown])[0]["reason"]


def test_sailor_layers_mask_the_fp32_scores_in_place_without_a_scale(monkeypatch):
    """Sailor's OPT / GPT-Neo layers build ``FusedScaleMaskSoftmax`` with ``coeff = None``: the
    plan says so (``softmax_scale_pass`` off), and against a stack with a scale op it costs,
    per score, 8 bytes less forward (16 vs 24) and 16 more backward (44 vs 28) and one kernel
    more (2 + 5 vs 3 + 3). N16_D16 (OPT-350M, one stage, tp 4, 8 micro-batches of 8 sequences):
    8 x 4 x 2048^2 = 134,217,728 scores a layer, 24 layers x 8 micro-batches."""
    from cost_models.compute import compute_rates
    from simulator.heterogeneous import simulate_heterogeneous
    from simulator.heterogeneous.unit_costs import pool_efficiencies
    run = next(r for r in RUNS if r["_file"].endswith("OPT-350/N16/plan_config_N16_D16.json"))
    model, cluster, plan, _ = het.run_inputs(run)
    assert plan.settings.softmax_scale_pass is False and plan.settings.softmax_fusion is False
    without = simulate_heterogeneous(model, cluster, plan).step_time_s
    monkeypatch.setattr(het, "SOFTMAX_SCALE_PASS", True)
    model, cluster, scaled_plan, _ = het.run_inputs(run)
    assert scaled_plan.settings.softmax_scale_pass is True
    scaled = simulate_heterogeneous(model, cluster, scaled_plan).step_time_s
    pool = cluster.pools[0].cluster
    rates = compute_rates(pool.gpu, pool_efficiencies(cluster)[0], "tf32")
    scores = 8 * 4 * 2048 ** 2
    per_layer = scores * (16 + 44 - 24 - 28) / rates.hbm_bytes_per_s + rates.kernel_overhead_s
    assert without - scaled == pytest.approx(24 * 8 * per_layer, rel=1e-6)


def test_sailor_stages_pay_the_blocking_send_and_receive_of_each_boundary(monkeypatch):
    """The fork's DeepSpeed pipeline engine sends and receives with blocking ``dist.send`` /
    ``dist.recv``, the two directions of a boundary one after the other (TrainSchedule: SendGrad
    then RecvActivation in one step, RecvGrad then SendActivation in the other). OPT-350M N16_D4
    (4 stages, one per node, tp 4, micro-batch 8): each GPU's slice is 8 x 2048 x 1024 x 4 bytes
    / 4 = 16,777,216 bytes over its own 25 GB/s Slingshot NIC at the fitted scale-out fraction
    (0.85: 0.79 ms with the 5 us latency). The end stages cross one boundary, the middle ones
    two: 2 and 4 transfers a micro-batch, against 1 and 2 without the switch. The engine sends
    those slices as a PartitionedTensor (``pipeline_scatter_gather``): each received tensor,
    one per boundary, is all-gathered over the stage's 4 NVLink ranks on the GH200 node: 3/4 x
    67,108,864 bytes / (450 GB/s x 0.8) + 3 hops x 3 us + 8.4 us (NCCL Simple's base)."""
    from simulator.heterogeneous import simulate_heterogeneous
    from simulator.heterogeneous.unit_costs import pool_efficiencies
    run = next(r for r in RUNS if r["_file"].endswith("OPT-350/N16/plan_config_N16_D4.json"))
    model, cluster, plan, assumptions = het.run_inputs(run)
    assert plan.settings.pipe_exchange_blocking is True
    assert any("blocking one after the other" in a for a in assumptions)
    eff = pool_efficiencies(cluster)[0]
    slingshot = cluster.pools[0].cluster.scaleout
    assert (slingshot.bw_bytes_per_s, slingshot.latency_s) == (25e9, pytest.approx(5e-6))
    transfer = 16_777_216 / (25e9 * eff.scaleout_fraction * eff.collective_fraction("p2p")) + 5e-6
    gather = 3.0 / 4.0 * 67_108_864 / (450e9 * 0.8) + 3 * 3e-6 + 8.4e-6
    assert plan.settings.pipeline_scatter_gather is True
    stages = simulate_heterogeneous(model, cluster, plan).stages
    assert [s.pp_comm_s for s in stages] == pytest.approx(
        [k * transfer + g * gather for k, g in ((2, 1), (4, 2), (4, 2), (2, 1))], rel=1e-6)
    monkeypatch.setattr(het, "PIPE_EXCHANGE_BLOCKING", False)
    model, cluster, batched, _ = het.run_inputs(run)
    stages = simulate_heterogeneous(model, cluster, batched).stages
    assert [s.pp_comm_s for s in stages] == pytest.approx(
        [k * transfer + g * gather for k, g in ((1, 1), (2, 2), (2, 2), (1, 1))], rel=1e-6)


@pytest.mark.parametrize("edit, says", [
    (lambda r: r["pipeline_list"][0].__setitem__("num_stages", 3), "num_stages 3 but 4 stages listed"),
    (lambda r: r["pipeline_list"][0]["layers_per_stage"][1].__setitem__(0, -5), "not a layer index"),
    (lambda r: r["pipeline_list"][0]["layers_per_stage"][1].__setitem__(0, 10**9), "not a layer index"),
    (lambda r: r["pipeline_list"][0]["tmp_per_stage"][0][0].__setitem__(1, 1000000), "does not divide its 4 GPUs"),
    # a fractional, quoted or boolean degree or GPU count was cut to a whole number and scored
    (lambda r: r["pipeline_list"][0]["tmp_per_stage"][0][0].__setitem__(1, 4.9), "tp 4.9 is not a whole number"),
    (lambda r: r["pipeline_list"][0]["tmp_per_stage"][0][0].__setitem__(1, True), "tp True is not a whole number"),
    (lambda r: r["pipeline_list"][0]["tmp_per_stage"][0][0][0][0].__setitem__(1, "4"),
     "GPU count '4' is not a whole number"),
    (lambda r: r["pipeline_list"][0]["tmp_per_stage"][0][0][0][0].__setitem__(1, 4.5),
     "GPU count 4.5 is not a whole number"),
])
def test_a_run_whose_fields_contradict_each_other_is_skipped_with_the_reason(edit, says):
    import copy
    run = copy.deepcopy(RUNS[0])
    assert len(run["pipeline_list"][0]["layers_per_stage"]) == 4
    edit(run)
    rec = het.validate_runs([run])
    assert {r["status"] for r in rec} == {"skipped"} and says in rec[0]["reason"]


def test_a_run_listed_twice_is_scored_once():
    rec = het.validate_runs([RUNS[0], RUNS[0]])
    assert [r["status"] for r in rec] == ["ok", "ok", "skipped", "skipped"]
    assert "listed twice" in rec[2]["reason"]


def test_the_table_gives_each_run_its_own_line_even_where_ids_repeat(tmp_path):
    # a copied run: the first scored, the copy skipped; two runs with no _file: both scored
    nameless = {k: v for k, v in RUNS[0].items() if k != "_file"}
    for runs, statuses in (([RUNS[0], RUNS[0]], ["ok", "skipped"]), ([nameless, nameless], ["ok", "ok"])):
        path = tmp_path / "runs.json"
        path.write_text(json.dumps({"runs": runs}))
        out = CliRunner().invoke(main, ["validate", "heterogeneous", str(path)]).output
        table = out.split("\n\n")[0].splitlines()[2:]
        assert [line.split()[1] for line in table] == statuses


def test_a_run_without_max_mem_shows_its_time_and_dashes_for_memory(tmp_path):
    """A run that states no ``max_mem`` is timed but its memory is skipped: the table shows the
    time's numbers and '-' for the three memory cells (it was a TypeError, exit 1)."""
    run = {k: v for k, v in RUNS[0].items() if k != "max_mem"}
    rec = het.validate_runs([run])
    assert [(r["metric"], r["status"]) for r in rec] == [("iter_time_s", "ok"), ("peak_memory_bytes", "skipped")]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [run]}))
    r = CliRunner().invoke(main, ["validate", "heterogeneous", str(path)])
    assert r.exit_code == 0, r.output
    cells = r.stdout.split("\n\n")[0].splitlines()[2].split()
    t = rec[0]
    assert cells[1] == "ok" and cells[4] == f"{100 * t['rel_error']:+.1f}"
    assert [float(c) for c in cells[2:4]] == pytest.approx([t["predicted"], t["measured"]], rel=1e-3)
    assert cells[5:8] == ["-", "-", "-"]


def test_gh200_slices_of_two_sizes_are_two_pools():
    """Every GH200 pool was named ``alps-gh200`` whatever its slice, so a run with GH200 stages
    on slices of 2 and 4 GPUs was skipped as 'pools.alps-gh200: appears twice'. N2_D1 (OPT-350M,
    two stages, one replica) with stage 0 on a 2-GPU slice and stage 1 on a 4-GPU slice, tp 2:
    two pools of 2 and 4 GPUs, the boundary between them over the node's Slingshot NIC."""
    import copy
    measured = next(r for r in RUNS if r["_file"].endswith("clariden/OPT-350/N2/plan_config_N2_D1.json"))
    run = copy.deepcopy(measured)
    for s, stage in enumerate(run["pipeline_list"][0]["tmp_per_stage"]):
        for rep in stage:
            rep[0][0][1], rep[1] = (2 if s == 0 else 4), 2
    _, cluster, plan, assumptions = het.run_inputs(run)
    assert [(p.name, p.gpus) for p in cluster.pools] == [("alps-gh200-x2", 2), ("alps-gh200-x4", 4)]
    assert [(s.pool, s.tp, s.layers) for s in plan.groups[0].stages] == [("alps-gh200-x2", 2, 11),
                                                                        ("alps-gh200-x4", 2, 13)]
    assert any("slices of 2 and 4 GPUs are separate pools" in a for a in assumptions)
    rec = het.validate_runs([run])
    assert [r["status"] for r in rec] == ["ok", "ok"], rec[0]["reason"]
    # one slice size: one pool holding every stage's GPUs (N2_D1 as measured: 2 x 4)
    _, cluster, _, assumptions = het.run_inputs(measured)
    assert [(p.name, p.gpus) for p in cluster.pools] == [("alps-gh200-x4", 8)]
    assert not any("separate pools" in a for a in assumptions)
