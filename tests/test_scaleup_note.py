"""``plan`` says when the scale-up tiling rule starves a job placed a non-power-of-two a domain.

Llama-3-70B on 576 GB200 (NVL72) with 512 sequences: 576 GPUs are 144 trays of 4, in Slurm
segments of 18 trays, 72 GPUs a rack; dp divides 512, tp the 64 heads and 2 cp the 8,192 tokens,
so all three are powers of two and tp x cp x dp must be at most 8 to divide 72 (no power of two
is a multiple of 72): pp takes the other 72-fold. 512 GPUs are 128 trays in segments of 16, 64 a
rack, and every power-of-two block up to 64 divides it."""
from __future__ import annotations

import re

from click.testing import CliRunner

from hardware_specs.catalog import load_cluster
from paraplan.cli import main
from planners.scaleup_note import MUCH_WORSE_PER_GPU, scaleup_note, tiling_count


def test_tiling_count_is_the_largest_smaller_job_placed_a_power_of_two_a_rack():
    nvl72 = load_cluster("gb200-nvl72")
    assert tiling_count(nvl72, 576) == 512    # 144 trays: 72 a rack; 128 trays: segments of 16, 64 a rack
    assert tiling_count(nvl72, 144) == 128    # 36 trays: 72 a rack; 32 trays: 64 a rack
    # 25 trays sit 5 a segment (20 GPUs); 96..76 GPUs sit 48, 4, 44, 28, 40, 4 a rack; 72 is one rack
    assert tiling_count(nvl72, 100) == 72
    assert tiling_count(nvl72, 512) is None   # already 64 a rack
    assert tiling_count(nvl72, 72) is None    # one rack: every group tiles
    assert tiling_count(load_cluster("dgx-b200"), 576) is None    # 8-GPU nodes: a power of two


def test_the_note_needs_pruned_layouts_and_a_much_worse_best_per_gpu():
    nvl72 = load_cluster("gb200-nvl72")
    line = scaleup_note(nvl72, 576, 10, 1000.0, 512, 2000.0)
    assert line.startswith("note: 576 GPUs sit 72 in each 72-GPU") and "-n 512 (64 a domain)" in line
    assert line.count("\n") == 1 and line.endswith("\n")                       # one line
    assert scaleup_note(nvl72, 576, 0, 1000.0, 512, 2000.0) == ""              # nothing pruned
    assert scaleup_note(nvl72, 576, 10, 1000.0, None, None) == ""              # nothing to compare
    # 3/4 of the smaller count's per-GPU rate is the edge
    assert scaleup_note(nvl72, 576, 10, MUCH_WORSE_PER_GPU * 2000.0, 512, 2000.0) == ""
    assert scaleup_note(nvl72, 576, 10, MUCH_WORSE_PER_GPU * 2000.0 - 1.0, 512, 2000.0)


def test_plan_on_576_gb200_names_512_and_the_tiling_rule():
    args = ["plan", "-m", "llama3-70b", "-c", "gb200-nvl72", "--global-batch-tokens", "4Mi", "--top", "1"]
    out = CliRunner().invoke(main, args + ["-n", "576"])
    assert out.exit_code == 0, out.output
    notes = [line for line in out.output.splitlines() if "scale-up rule removed" in line]
    assert len(notes) == 1 and "-n 512 (64 a domain)" in notes[0], out.output
    assert "tp x cp x dp divides 72" in notes[0]
    # the rates it quotes are the two plans' own best rows
    here, there = (float(x.replace(",", "")) for x in
                   re.search(r"plans ([\d,.]+) tokens/s per GPU against ([\d,.]+) here", notes[0]).groups()[::-1])
    assert here < MUCH_WORSE_PER_GPU * there
    small = CliRunner().invoke(main, args + ["-n", "512"])
    assert small.exit_code == 0 and "scale-up rule removed" not in small.output
