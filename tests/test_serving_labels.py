"""Serving layout labels: one format everywhere, the expert split always shown for MoE models."""
from __future__ import annotations

import json
import re

from click.testing import CliRunner

from paraplan.cli import main
from planners.serving.labels import worker_label

MOE_LABEL = re.compile(r"^tp(\d+)(?:-pp(\d+))?(?:-adp(\d+))?-etp(\d+)xep(\d+)$")


def test_moe_label_names_the_expert_split_even_when_experts_are_only_tensor_parallel():
    # 16 attention-DP ranks, every expert sliced over all 16 GPUs: formerly printed "tp1-adp16"
    assert worker_label(1, 1, 16, 16, 1, moe=True) == "tp1-adp16-etp16xep1"
    assert worker_label(1, 1, 16, 1, 16, moe=True) == "tp1-adp16-etp1xep16"
    assert worker_label(8, 2, 1, 1, 8, moe=True) == "tp8-pp2-etp1xep8"
    assert worker_label(1, 1, 1, 1, 1, moe=True) == "tp1-etp1xep1"


def test_dense_label_has_no_expert_part():
    assert worker_label(4, 1, 1, 4, 1, moe=False) == "tp4"
    assert worker_label(2, 4, 1, 2, 1, moe=False) == "tp2-pp4"


def test_serve_plan_front_labels_all_show_the_expert_split_and_match_the_degrees():
    r = CliRunner().invoke(main, ["serve", "plan", "-m", "deepseek-r1", "-s", "dgx-b200", "-n", "16", "--isl", "1024",
                                  "--osl", "1024", "--ttft-ms", "2000", "--tpot-ms", "30", "--json", "--top", "0"])
    assert r.exit_code == 0, r.output
    front = json.loads(r.stdout)["front"]
    assert front
    for row in front:
        sides = [("", row["layout"])] if row["mode"] == "agg" else [("prefill_", row["prefill_layout"]),
                                                                   ("decode_", row["decode_layout"])]
        for side, label in sides:
            tp, pp, adp, etp, ep = (int(g) if g else 1 for g in MOE_LABEL.match(label).groups())
            assert etp * ep == tp * adp, label
            # the JSON carries the degrees themselves, equal to what the label says
            assert (row[f"{side}tp"], row[f"{side}adp"], row[f"{side}moe_tp"], row[f"{side}moe_ep"]) == \
                (tp, adp, etp, ep), (label, row)
            if side == "":
                assert row["pp"] == pp


def test_serve_simulate_prints_the_same_label_as_the_plan():
    """The plan's best aggregated layout, run again through ``serve simulate`` with its own
    degrees, is printed under the same label."""
    import json
    args = ["-m", "deepseek-r1", "-s", "dgx-b200"]
    planned = CliRunner().invoke(main, ["serve", "plan", *args, "--gpus", "8", "--isl", "1024", "--osl", "1024",
                                        "--tpot-ms", "50", "--json"])
    assert planned.exit_code == 0, planned.output
    best = json.loads(planned.stdout)["best"]
    assert best["mode"] == "agg"
    r = CliRunner().invoke(main, ["serve", "simulate", *args, "--tp", str(best["tp"]), "--pp", str(best["pp"]),
                                  "--adp", str(best["adp"]), "--moe-tp", str(best["moe_tp"]),
                                  "--moe-ep", str(best["moe_ep"]), "--batch", str(best["batch"])])
    assert r.exit_code == 0, r.output
    gpus = best["tp"] * best["pp"] * best["adp"]
    assert f"1 x worker {best['layout']} ({gpus} GPUs)" in r.stdout
    assert best["layout"] == worker_label(best["tp"], best["pp"], best["adp"], best["moe_tp"], best["moe_ep"], moe=True)


def test_a_prefill_batch_of_one_is_one_prompt():
    from planners.serving.labels import prompts_per_step
    assert [prompts_per_step(n) for n in (1, 1.0, 8)] == ["1 prompt per step", "1 prompt per step", "8 prompts per step"]
