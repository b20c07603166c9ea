"""planners/explain.py: the winner-against-runner-up reasons name real differences only."""
from click.testing import CliRunner

from paraplan.cli import main
from planners.explain import NOISE_SHARE_OF_STEP, why_parts


def test_why_parts_drops_rounding_noise_and_orders_by_size():
    # the parts of `paraplan plan -m llama3-70b -c dgx-h100 -n 512 --global-batch-tokens 4Mi`
    # (winner 6.9716 s, runner-up 7.0378 s): both pp = 1, whose bubble differs by 8.88e-16 s
    deltas = {"compute_s": 0.0851, "pipeline_bubble_s": 8.88e-16, "zero3_comm_exposed_s": 0.0,
              "offload_exposed_s": -0.0190, "optimizer_s": -2e-17, "step_time_s": 0.0662}
    gains, costs = why_parts(deltas, 7.0378)
    assert gains == [(0.0851, "compute_s")]
    assert costs == [(-0.0190, "offload_exposed_s")]


def test_why_parts_keeps_a_difference_just_above_the_noise_floor():
    step = 10.0
    above = 2 * NOISE_SHARE_OF_STEP * step          # 2e-8 s: still a difference, however small
    gains, costs = why_parts({"pp_comm_s": above, "dp_comm_exposed_s": -0.5, "tp_comm_exposed_s": 0.2}, step)
    assert gains == [(0.2, "tp_comm_exposed_s"), (above, "pp_comm_s")]
    assert costs == [(-0.5, "dp_comm_exposed_s")]


def test_plan_explain_why_line_names_no_rounding_noise():
    res = CliRunner().invoke(main, ["plan", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "512",
                                    "--global-batch-tokens", "4Mi", "--top", "2", "--explain"])
    assert res.exit_code == 0, res.output
    why = next(line for line in res.output.splitlines() if line.startswith("why: "))
    assert "e-1" not in why and "pipeline_bubble_s" not in why, why
    # counts in words: one stage, 22 layers (not "1 stage(s)", "22 layer(s)")
    assert "winner's layers per stage (1 stage; " in res.output and "(s)" not in res.output
    import re
    offload = re.search(r"offloads the activations of (\d+) (layers?) per chunk", res.output)   # 22 layers at review
    assert offload is None or (offload.group(1) == "1") == (offload.group(2) == "layer"), offload


def test_pooled_explain_counts_one_stage_in_the_singular():
    res = CliRunner().invoke(main, ["plan", "-m", "llama3-70b", "-c", "examples/clusters/a100-h100.yaml",
                                    "--global-batch-tokens", "4194304", "--explain"])
    assert res.exit_code == 0, res.output
    import re
    split = re.search(r"layers split by speed \((.*)\)", res.output).group(1)    # a100: 1 stage, 21 layers; ...
    counts = re.findall(r"(\d+) (stages?),", split)
    assert counts and all((n == "1") == (word == "stage") for n, word in counts), split


def test_stage_times_print_in_milliseconds_without_an_exponent():
    from planners.explain import ms_text
    # the slowest stages of the 405B / 8B / 70B plans of the review: 19.3 ms, 867 ms, 3.35 s per micro-batch
    assert [ms_text(s) for s in (0.019312, 0.8674, 3.3497, 12.3456, 0.0000456)] == [
        "19.3 ms", "867 ms", "3,350 ms", "12,300 ms", "0.0456 ms"]
