"""Pooled clusters: files with pools load, one-kind files and presets are unchanged, bad pools are named."""
from __future__ import annotations

import pytest

from hardware_specs.catalog import is_pooled, list_clusters, load_cluster, load_pooled_cluster
from hardware_specs.errors import InputError
from hardware_specs.pools import Pool, PooledCluster, PoolLink

GIB = 2**30


def _write(tmp_path, text: str, name: str = "mixed.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


MIXED = """
name: mixed
pools:
  - {name: a100, cluster: dgx-a100-80gb, gpus: 64}
  - name: h100
    gpu: h100-sxm-80gb
    gpus: 32
    gpus_per_node: 8
    scaleout: {kind: infiniband, bw_gbit_per_s: 400, latency_us: 5}
links:
  - {between: [a100, h100], bw_gbit_per_s: 100, latency_us: 20}
"""


def test_a_pooled_file_loads_its_pools_links_and_counts(tmp_path):
    c = load_pooled_cluster(_write(tmp_path, MIXED))
    assert c.pool_names == ("a100", "h100")
    assert c.total_gpus == 96
    assert c.pool("a100").cluster.gpu.name == "a100-sxm-80gb"
    assert c.pool("a100").cluster == load_cluster("dgx-a100-80gb")       # taken from the preset unchanged
    assert c.pool("h100").cluster.scaleup.bw_bytes_per_s == pytest.approx(450e9)   # the GPU's link by default
    link = c.link("a100", "h100")
    assert link.bw_bytes_per_s == pytest.approx(100e9 / 8) and link.latency_s == pytest.approx(20e-6)
    # the path is the slowest of the two NICs (25 and 50 GB/s) and the link (12.5 GB/s)
    assert c.path("a100", "h100") == pytest.approx((12.5e9, 20e-6))
    assert c.fastest_pool().name == "h100" and c.largest_pool().name == "a100"


def test_pools_without_a_link_use_the_slower_scale_out_tier():
    a, h = load_cluster("dgx-a100-80gb"), load_cluster("dgx-h100")
    c = PooledCluster("x", (Pool("a", a, 8), Pool("h", h, 8)))
    tier = c.link("a", "h")
    assert tier.bw_bytes_per_s == a.scaleout.bw_bytes_per_s == pytest.approx(25e9)
    assert tier.latency_s == max(a.scaleout.latency_s, h.scaleout.latency_s)
    assert c.path("a", "a") == (a.scaleout.bw_bytes_per_s, a.scaleout.latency_s)


def test_one_kind_presets_still_load_as_cluster_specs_and_as_one_pool():
    for name in list_clusters():
        if is_pooled(name):
            continue
        spec = load_cluster(name)
        pooled = load_pooled_cluster(name, gpus=16)
        assert pooled.pools == (Pool(name, spec, 16),)
        assert pooled.links == ()


def test_load_cluster_refuses_a_pooled_file_with_the_fix(tmp_path):
    with pytest.raises(InputError, match="lists 2 pools.*load_pooled_cluster"):
        load_cluster(_write(tmp_path, MIXED))
    # a notebook user of paraplan.api is told the Python entry points, not only the CLI's
    from paraplan import api
    with pytest.raises(InputError) as err:
        api.plan("gpt3-1.3b", str(_write(tmp_path, MIXED)), gpus=24, global_batch=64)
    assert "planners.heterogeneous.plan_heterogeneous(model, hardware_specs.catalog.load_pooled_cluster(path)" \
        in err.value.fix and "simulate_heterogeneous" in err.value.fix


def test_a_pooled_file_does_not_take_a_gpu_count_and_a_one_kind_cluster_needs_one(tmp_path):
    with pytest.raises(InputError, match="gpus: cluster mixed lists its pools"):
        load_pooled_cluster(_write(tmp_path, MIXED), gpus=8)
    with pytest.raises(InputError, match="gpus: cluster dgx-h100 is one GPU kind without a GPU count"):
        load_pooled_cluster("dgx-h100")


@pytest.mark.parametrize("text, message", [
    (MIXED.replace("gpu: h100-sxm-80gb", "gpu: h1000"), r"pools\.h100\.gpu: unknown gpu 'h1000'"),
    (MIXED.replace("gpus: 32", "gpus: 0"), r"pools\.h100\.gpus: must be >= 1"),
    (MIXED.replace("gpus: 32", "gpus: 2.5"), r"pools\.h100\.gpus: must be a positive integer"),
    (MIXED.replace("gpus: 32", "gpus: .nan"), r"pools\.h100\.gpus: must be a positive integer"),
    (MIXED.replace("gpus_per_node: 8", "gpus_per_node: -8"), r"pools\.h100\.gpus_per_node: must be > 0"),
    (MIXED.replace("cluster: dgx-a100-80gb", "cluster: dgx-z"), r"pools\.a100\.cluster: unknown cluster 'dgx-z'"),
    (MIXED.replace("between: [a100, h100]", "between: [a100, b200]"), r"links\.a100-b200\.between: unknown pool 'b200'"),
    (MIXED.replace("between: [a100, h100]", "between: [a100, a100]"), r"links\.a100-a100\.between: pool a100 is linked to itself"),
    (MIXED.replace("bw_gbit_per_s: 100", "bw_gbit_per_s: .inf"), r"links\.a100-h100\.bw_gbit_per_s: must be finite, got inf \(the link's bandwidth per GPU, one direction, in Gb/s\)"),
    (MIXED.replace("name: h100\n", "name: a100\n"), r"pools\.a100: appears twice"),
    (MIXED.replace("  - {name: a100, cluster: dgx-a100-80gb, gpus: 64}\n", "  - {cluster: dgx-a100-80gb, gpus: 64}\n"),
     r"pools\[0\]\.name: missing"),
])
def test_bad_pools_raise_one_error_naming_the_pool(tmp_path, text, message):
    with pytest.raises(InputError, match=message):
        load_pooled_cluster(_write(tmp_path, text))


def test_pool_and_link_value_objects_validate_on_construction():
    h = load_cluster("dgx-h100")
    with pytest.raises(InputError, match="not a pool name"):
        Pool("a b", h, 8)
    with pytest.raises(InputError, match="pools.p.gpus: must be >= 1"):
        Pool("p", h, 0)
    with pytest.raises(InputError, match="must be > 0"):
        PoolLink(("a", "b"), 0.0, 1e-6)
    with pytest.raises(InputError, match="lists no pool"):
        PooledCluster("empty", ())
    c = PooledCluster("x", (Pool("p", h, 8),))
    with pytest.raises(InputError, match="unknown pool 'q'"):
        c.pool("q")
