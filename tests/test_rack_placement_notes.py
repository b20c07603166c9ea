"""Reports say how a job or a serving worker of several GB200 NVL72 racks sits in them (README:
multi-rack jobs "sit in Slurm segments ... and their reports say so in a line"). Counts by hand:
72 GPUs a rack, trays of 4."""
from click.testing import CliRunner

from hardware_specs.catalog import load_cluster
from hardware_specs.placement import placement_note
from paraplan.cli import main


def test_training_note_names_whole_racks_too():
    nvl72 = load_cluster("gb200-nvl72")
    # 576 GPUs = 144 trays: segments of 18 trays, 8 whole racks
    assert placement_note(nvl72, 576).startswith("576 GPUs sit in 8 whole 72-GPU NVLink domains of gb200-nvl72")
    assert placement_note(nvl72, 72) == ""                         # one rack
    assert placement_note(load_cluster("dgx-h100"), 1024) == ""     # a domain is one host


R1 = ["-m", "deepseek-r1", "-s", "gb200-nvl72", "-b", "trtllm", "--precision", "nvfp4", "--isl", "1024", "--osl", "1024"]


def test_serving_worker_over_two_racks_says_so():
    res = CliRunner().invoke(main, ["serve", "simulate", *R1, "--adp", "128", "--moe-ep", "128", "--batch", "64"])
    assert res.exit_code == 0, res.output
    assert "spans 2 72-GPU NVLink domains of gb200-nvl72 (72 + 56 GPUs)" in res.output


def test_serving_whole_workers_over_racks_say_how_they_sit():
    res = CliRunner().invoke(main, ["serve", "simulate", *R1, "--adp", "16", "--moe-ep", "16", "--batch", "16",
                                    "--workers", "8", "--gpus", "144"])
    assert res.exit_code == 0, res.output
    assert "8 workers of 16 GPUs sit whole, 4 to a 72-GPU NVLink domain of gb200-nvl72: 2 domains" in res.output
    assert "on 128 GPUs (of 144 given, 16 idle)" in res.output


def test_a_pipelined_worker_over_two_racks_runs_by_default_and_says_where_its_stages_sit():
    """tp 16 x pp 5 is 80 GPUs of five 16-GPU stages: 4 stages (64 GPUs) to a 72-GPU rack, the
    fifth on the next rack's first 16, so it is held on 72 + 16 = 88 GPUs. The default budget had
    been its own 80 ("1 workers ... at most 0 do"), and the note said 72 + 8."""
    res = CliRunner().invoke(main, ["serve", "simulate", "-m", "deepseek-v3", "-s", "gb200-nvl72", "--tp", "16",
                                    "--pp", "5"])
    assert res.exit_code == 0, res.output
    assert "spans 2 72-GPU NVLink domains of gb200-nvl72 (64 + 16 GPUs)" in res.output
    assert "(88 GPUs: 2 domains" in res.output
