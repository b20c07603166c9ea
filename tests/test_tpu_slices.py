"""TPU jobs larger than one pod run as equal ICI slices over the data-centre network.

PaLM 540B trained on 6144 TPU v4 chips as two pods of 3072 (Chowdhery et al. 2022, arXiv
2204.02311 section 4) with 12-way model parallelism: 3072 / 12 = 256 groups a pod. On the
4096-chip ``tpu-v4-pod`` preset that layout was refused (a tp group of 12 cannot tile 4096),
while ``validate published`` priced it without the check; now both run it in 2 slices of 3072.
"""
import pytest

from hardware_specs.catalog import load_cluster
from hardware_specs.placement import placed_cluster, placement_note, tpu_slice_chips
from paraplan.validation.published import Skip, read_runs, row_inputs
from simulator.simulate import simulate


@pytest.mark.parametrize("chips,slice_chips", [(6144, 3072), (4096, 4096), (2048, 4096), (8192, 4096),
                                               (12288, 4096), (10240, 4096), (9216, 3072)])
def test_slice_sizes(chips, slice_chips):
    # 8192 and 12288: whole pods; 10240 in 3 slices is 3413.3 chips, no equal split: the pod
    # stays; 9216 = 3 x 3072
    assert tpu_slice_chips(chips, 4096) == slice_chips


def _palm_row():
    from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
    df = read_runs(validation_file(PUBLISHED_RUNS))
    return df[df["id"] == "PALM540:tokens_per_s"].iloc[0]


def test_palm_layout_runs_in_two_pods_of_3072():
    inputs = row_inputs(_palm_row())
    pod = load_cluster("tpu-v4-pod")
    assert placed_cluster(pod, 6144).gpus_per_node == 3072
    assert "2 ICI slices of 3072" in placement_note(pod, 6144)
    report = simulate(inputs.model, pod, inputs.config)      # refused before: tp 12 on a 4096 domain
    assert report.step_time_s > 0 and inputs.config.tp == 12
    assert any("3072 chips per ICI slice (2 slices" in a for a in inputs.assumptions)


def test_validation_skips_a_layout_simulate_refuses():
    """A row whose tensor-parallel group cannot tile its stated node (tp 8 on 3-GPU nodes) was
    predicted and counted ok; simulate refuses the same layout."""
    from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
    df = read_runs(validation_file(PUBLISHED_RUNS))
    row = df[df["id"] == "KOR22-T5-22B-full:iter_time_s"].iloc[0].copy()
    row["gpus_per_node"] = "3"
    with pytest.raises(Skip, match="layout does not fit the cluster: tp: tp 8 does not tile"):
        row_inputs(row)


def test_a_slice_is_whole_64_chip_cubes_or_the_pod_stays():
    """Multi-host TPU v4 slices are built of 4 x 4 x 4 cubes: 4,160 chips split in two would be
    slices of 2,080 (32.5 cubes), which TPU v4 cannot allocate, so the pod stays (and the layout
    is judged on it); 6,144 in two slices of 3,072 (48 cubes) is PaLM's."""
    assert tpu_slice_chips(4160, 4096) == 4096
    assert tpu_slice_chips(6144, 4096) == 3072 and 3072 % 64 == 0
