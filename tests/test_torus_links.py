"""A group on a TPU torus runs on the links of the axes its compact placement spans, not on all
of a chip's links (hardware_specs/torus.py): TPU v4's 269 GB/s is 6 links of 269 / 6 = 44.8 GB/s
one way, and a ring along one axis uses 2 of them (Austin et al., "How to Scale Your Model",
parts 2-3: bidirectional bandwidth per axis, times the axes a collective spans)."""
from dataclasses import replace

import pytest
from click.testing import CliRunner

from cost_models.topology import group_collective_time_s
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from hardware_specs.cluster_spec import NetworkTier
from hardware_specs.errors import InputError
from hardware_specs.placement import placed_cluster
from hardware_specs.torus import torus_ring_links, torus_slice_dims
from paraplan.cli import main

V4 = (16, 16, 16)
LINK_V4 = 269e9 / 6


@pytest.mark.parametrize("members, stride, dims, links", [
    (4, 1, V4, 2.0),            # tp 4 along the first axis: both ways round its ring
    (16, 1, V4, 2.0),           # tp 16 fills the first axis
    (2, 1, V4, 1.0),            # one neighbour: one link carries both ways of a ring of two
    (1, 1, V4, 0.0),            # no peer
    (256, 16, V4, 4.0),         # dp over tp 16: the second and third axes
    (4096, 1, V4, 6.0),         # the whole pod: all three axes
    (1024, 4, V4, 4.5),         # dp over tp 4: 4 groups interleave on the first axis (2 / 4) + 2 + 2
    (256, 1, (16, 16), 4.0),    # a whole v5e pod: both axes of the 2D torus
    (16, 16, (16, 16), 2.0),    # the second axis of a v5e pod
    (16, 1, (4, 4, 4), 4.0),    # 16 chips over two axes of a 4 x 4 x 4 slice
    (64, 1, (4, 4, 4), 6.0),
])
def test_a_group_runs_on_the_links_of_the_axes_it_spans(members, stride, dims, links):
    assert float(torus_ring_links(members, stride, dims)) == pytest.approx(links)


def test_the_count_is_elementwise():
    got = torus_ring_links([4, 256, 1024], [1, 16, 4], V4)
    assert list(got) == pytest.approx([2.0, 4.0, 4.5])


def _switched(cluster, links):
    """The same cluster with a switch giving every group ``links`` of its torus links: the
    collective formulas, protocols and latencies are those of any scale-up tier."""
    tier = NetworkTier("ici", links * LINK_V4, cluster.scaleup.latency_s)
    return replace(cluster, scaleup=tier)


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_tp4_on_a_v4_pod_is_priced_at_two_of_six_links(kind):
    pod = load_cluster("tpu-v4-pod")
    eff = efficiency_for_cluster(pod)
    size = 2.0**30
    t = group_collective_time_s(kind, size, 4, 1, pod, eff)
    assert t == pytest.approx(group_collective_time_s(kind, size, 4, 1, _switched(pod, 2), eff), rel=1e-12)
    # 3x the time the whole chip's 269 GB/s gave before, less the (unchanged) latency terms
    before = group_collective_time_s(kind, size, 4, 1, _switched(pod, 6), eff)
    assert 2.9 < t / before < 3.0


def test_tp4_all_reduce_of_1_gib_by_hand():
    """2 (g - 1) / g x S / (2 x 44.8 GB/s x the prior's scale-up fraction 0.8) = 22.45 ms, plus the
    ring's 2 (g - 1) steps of the tier's 2 us (a TPU runs no NCCL protocol: no base latency)."""
    pod = load_cluster("tpu-v4-pod")
    eff = efficiency_for_cluster(pod)
    assert eff.scaleup_fraction == 0.8 and eff.collective_fraction("all_reduce") == 1.0
    assert pod.scaleup.latency_s == 2e-6
    size, g = 2.0**30, 4
    bandwidth_s = 2 * (g - 1) / g * size / (2 * LINK_V4 * 0.8)
    assert bandwidth_s == pytest.approx(22.45e-3, rel=1e-3)
    t = float(group_collective_time_s("all_reduce", size, g, 1, pod, eff))
    assert t == pytest.approx(bandwidth_s + 2 * (g - 1) * 2e-6, rel=1e-12)


def test_16_chips_over_two_axes_get_four_links_and_dp_over_tp16_too():
    pod = load_cluster("tpu-v4-pod")
    eff = efficiency_for_cluster(pod)
    cube = replace(pod, gpus_per_node=64, scaleup=replace(pod.scaleup, torus_dims=(4, 4, 4)))
    size = 2.0**28
    t = group_collective_time_s("all_reduce", size, 16, 1, cube, eff)
    assert t == pytest.approx(group_collective_time_s("all_reduce", size, 16, 1, _switched(cube, 4), eff), rel=1e-12)
    dp = group_collective_time_s("reduce_scatter", size, 256, 16, pod, eff)
    assert dp == pytest.approx(group_collective_time_s("reduce_scatter", size, 256, 16, _switched(pod, 4), eff),
                               rel=1e-12)


def test_a_switched_or_full_mesh_tier_ignores_the_stride():
    for name in ("dgx-h100", "mi300x-node"):
        tier = load_cluster(name).scaleup
        assert tier.torus_dims is None
        for members in (2, 4, 8):
            assert tier.group_bw_bytes_per_s(members, 2) == tier.group_bw_bytes_per_s(members)


def test_a_slice_of_a_pod_is_a_torus_cut_from_its_shape():
    assert torus_slice_dims(V4, 4096) == V4
    assert torus_slice_dims(V4, 3072) == (16, 16, 12)
    placed = placed_cluster(load_cluster("tpu-v4-pod"), 6144)
    assert placed.gpus_per_node == 3072 and placed.scaleup.torus_dims == (16, 16, 12)
    assert load_cluster("tpu-v4-pod").with_domain_size(3072).scaleup.torus_dims == (16, 16, 12)


def test_the_presets_state_their_torus():
    shapes = {"tpu-v3-pod": (32, 32), "tpu-v4-pod": V4, "tpu-v4-palm": (12, 16, 16), "tpu-v5e-pod": (16, 16),
              "tpu-v6e-pod": (16, 16), "tpu-v5p-pod": (16, 16, 24)}
    for name, dims in shapes.items():
        tier = load_cluster(name).scaleup
        assert tier.torus_dims == dims and tier.links_per_chip == 2 * len(dims)
    # one link's one-way rate: the book's table (part 2), 4.5e10 (v4), 5e10 (v5e), 1e11 (v5p, v6e)
    for name, link in {"tpu-v4-pod": 44.8e9, "tpu-v5e-pod": 50e9, "tpu-v5p-pod": 100e9, "tpu-v6e-pod": 100e9}.items():
        tier = load_cluster(name).scaleup
        assert tier.bw_bytes_per_s / tier.links_per_chip == pytest.approx(link, rel=0.01)


def _cluster_file(tmp_path, scaleup):
    path = tmp_path / "torus.yaml"
    path.write_text("name: torus-test\ngpu: tpu-v4\ngpus_per_node: 64\n"
                    f"scaleup: {scaleup}\n"
                    "scaleout: {kind: ethernet, bw_gbit_per_s: 25, latency_us: 10}\n")
    return str(path)


@pytest.mark.parametrize("scaleup, field", [
    ("{kind: ici, bw_gb_per_s: 269, torus_dims: [16, 16, 16], links_per_chip: 6}", "scaleup.torus_dims"),
    ("{kind: ici, bw_gb_per_s: 269, torus_dims: [4, 4, 4], links_per_chip: 4}", "scaleup.links_per_chip"),
    ("{kind: ici, bw_gb_per_s: 269, torus_dims: [4, 4, 4]}", "scaleup.links_per_chip"),
    ("{kind: ici, bw_gb_per_s: 269, torus_dims: 64, links_per_chip: 2}", "scaleup.torus_dims"),
])
def test_a_torus_that_does_not_fit_is_a_one_line_error(tmp_path, scaleup, field):
    path = _cluster_file(tmp_path, scaleup)
    with pytest.raises(InputError) as err:
        load_cluster(path)
    assert err.value.field.endswith(field)
    r = CliRunner().invoke(main, ["simulate", "-m", "gpt3-1.3b", "-c", path, "-n", "64", "--global-batch", "64"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and len(r.output.strip().splitlines()) == 1
