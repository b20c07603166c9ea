"""A cluster file's network kinds and host link are names the code branches on: ``scaleup.kind ==
"nvlink"`` places a job of several NVL72 racks in Slurm segments (``hardware_specs.placement``),
a ``host.link`` starting ``pcie`` loses PCIe's encoding and packet overhead
(``cost_models.offload.host_link_payload_bw``). A misspelled one (``nvlnk``) was accepted and
silently changed the result (GB200 NVL72, 128 GPUs at tp 4 pp 4: refused for tiling instead of
placed 64 a rack), so a file may name only ``NETWORK_KINDS`` / ``HOST_LINKS``."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli_results import one_line_error, run
from hardware_specs import catalog
from hardware_specs.catalog import cluster_from_dict, is_pooled, load_cluster, load_pooled_cluster, pooled_cluster_from_dict
from hardware_specs.cluster_spec import NETWORK_KINDS, is_host_link
from hardware_specs.errors import InputError

REPO = Path(__file__).resolve().parents[1]
BOX = "name: box\ngpu: h100-sxm-80gb\ngpus_per_node: 8\nscaleout: {kind: infiniband, bw_gbit_per_s: 400, latency_us: 5}\n"


@pytest.fixture(autouse=True)
def _no_user_hardware_path(monkeypatch):
    monkeypatch.delenv("PARAPLAN_HARDWARE_PATH", raising=False)


def _box(**sections) -> dict:
    data = yaml.safe_load(BOX)
    data.update(sections)
    return data


@pytest.mark.parametrize("tier", ["scaleup", "scaleout"])
@pytest.mark.parametrize("kind", ["nvlnk", "NVLink", "infiniband ", "ib", ""])
def test_an_unknown_network_kind_is_refused_naming_the_tier(tier, kind):
    data = _box(**{tier: {"kind": kind, "bw_gbit_per_s": 400, "latency_us": 5}})
    with pytest.raises(InputError) as err:
        cluster_from_dict(data)
    assert err.value.field == f"cluster box.{tier}.kind"
    assert err.value.message == f"unknown kind {kind!r}"
    assert err.value.fix.startswith("choose from nvlink, ")


def test_a_close_misspelling_is_pointed_at_the_kind_meant():
    with pytest.raises(InputError) as err:
        cluster_from_dict(_box(scaleup={"kind": "nvlnk", "bw_gb_per_s": 900}))
    assert "did you mean nvlink" in err.value.fix


@pytest.mark.parametrize("kind", NETWORK_KINDS)
def test_every_known_kind_loads_and_is_kept(kind):
    cluster = cluster_from_dict(_box(scaleout={"kind": kind, "bw_gbit_per_s": 400, "latency_us": 5}))
    assert cluster.scaleout.kind == kind


@pytest.mark.parametrize("link", ["pcei-gen5-x16", "pcie-gen5x16", "nvlink-c2", "c2c-nvlink", "pcie-gen9-x16", "ethernet"])
def test_an_unknown_host_link_is_refused(link):
    data = _box(host={"link": link, "link_bw_gb_per_s": 64})
    with pytest.raises(InputError) as err:
        cluster_from_dict(data)
    assert err.value.field == "cluster box.host.link" and err.value.message == f"unknown link {link!r}"
    assert "nvlink-c2c" in err.value.fix and "pcie-gen<N>-x<lanes>" in err.value.fix


@pytest.mark.parametrize("link", ["pcie", "pcie-gen5", "pcie-gen3-x16", "pcie-gen4-x8", "PCIe-Gen5-x16", "nvlink-c2c", "NVLink-C2C"])
def test_the_host_links_the_offload_model_reads_load_in_any_case(link):
    # cost_models.offload reads host.link in any case (is_pcie_link lower-cases it)
    assert is_host_link(link)
    assert cluster_from_dict(_box(host={"link": link, "link_bw_gb_per_s": 64})).host.link == link


def test_a_pool_link_kind_is_checked_like_a_tier():
    data = yaml.safe_load("name: mix\npools:\n  - {name: a, cluster: dgx-a100-80gb, gpus: 16}\n"
                          "  - {name: b, cluster: dgx-h100, gpus: 16}\n"
                          "links:\n  - {between: [a, b], kind: infiniband, bw_gbit_per_s: 200}\n")
    assert pooled_cluster_from_dict(data).links[0].kind == "infiniband"
    data["links"][0]["kind"] = "infiniband2"
    with pytest.raises(InputError) as err:
        pooled_cluster_from_dict(data)
    assert err.value.field == "links.a-b.kind" and "unknown kind 'infiniband2'" in str(err.value)
    # a pool's inline fabric is a cluster's: named under the pool
    data["links"][0]["kind"] = "infiniband"
    data["pools"][1]["scaleout"] = {"kind": "rcoe", "bw_gbit_per_s": 400}
    with pytest.raises(InputError) as err:
        pooled_cluster_from_dict(data)
    assert err.value.field == "pools.b.scaleout.kind" and "did you mean roce" in err.value.fix


def _shipped_cluster_files():
    files = sorted((catalog.BUILTIN_DIR / "clusters").glob("*.yaml")) + sorted((REPO / "examples").rglob("*.yaml"))
    # what paraplan calibrate writes (nccl / gloo-loopback links) and the tests read
    files += [REPO / "tests/data/measured_calibration.yaml", *sorted((REPO / "tests/data/gpu_h200_validate").rglob("*.yaml"))]
    return [p for p in files if isinstance(yaml.safe_load(p.read_text()), dict)
            and {"scaleup", "scaleout", "pools", "gpu", "host"} & set(yaml.safe_load(p.read_text()))]


@pytest.mark.parametrize("path", _shipped_cluster_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_cluster_file_still_loads(path):
    if is_pooled(str(path)):
        pooled = load_pooled_cluster(str(path))
        kinds = [link.kind for link in pooled.links] + [p.cluster.scaleout.kind for p in pooled.pools]
    else:
        cluster = load_cluster(str(path))
        kinds = [cluster.scaleup.kind, cluster.scaleout.kind]
        assert cluster.host is None or is_host_link(cluster.host.link)
    assert set(kinds) <= set(NETWORK_KINDS)


def test_shipped_files_cover_the_catalog_and_the_examples():
    names = {p.name for p in _shipped_cluster_files()}
    assert {"gb200-nvl72.yaml", "dgx-h100.yaml", "cpu-local.yaml", "a100-h100.yaml", "grand-teton-h100.yaml",
            "measured_calibration.yaml", "h200-calibrated.yaml"} <= names
    assert "h100-grand-teton-96gb.yaml" not in names          # a GPU file: no fabric


def test_the_misspelled_nvlink_of_the_review_is_one_line_error(tmp_path):
    text = (catalog.BUILTIN_DIR / "clusters/gb200-nvl72.yaml").read_text()
    assert "kind: nvlink" in text
    typo = tmp_path / "gbtypo.yaml"
    typo.write_text(text.replace("kind: nvlink", "kind: nvlnk"))
    args = ("simulate", "-m", "llama3-70b", "-n", "128", "--tp", "4", "--pp", "4", "--global-batch", "256", "--zero", "1")
    one_line_error(run(*args[:3], "-c", typo, *args[3:]), "scaleup.kind: unknown kind 'nvlnk'", "choose from nvlink")
    # the catalog file runs it: 128 GPUs sit 64 in each rack (placement), so dp 8 x tp 4 tiles 64
    assert run(*args[:3], "-c", "gb200-nvl72", *args[3:]).exit_code == 0
