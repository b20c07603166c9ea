"""`paraplan hardware show` prints every number paraplan reads from a GPU or cluster file (its
--help says so): the list of fields is taken from the dataclasses, so a field added to GPUSpec,
ClusterSpec, HostSpec or NetworkTier and not shown fails here."""
import dataclasses
import json
import typing

import pytest
from click.testing import CliRunner

from hardware_specs.catalog import load_cluster
from hardware_specs.cluster_spec import ClusterSpec, HostSpec, NetworkTier
from hardware_specs.gpu_spec import GPUSpec
from paraplan.cli import main

GIB = 2**30
# field -> (key in the output, SI units per shown unit); None: shown as it is (counts, fractions, flags)
SHOWN = {
    GPUSpec: {"peak_flops_per_s": ("peak_tflops", 1e12), "hbm_bytes": ("hbm_gib", GIB),
              "hbm_bw_bytes_per_s": ("hbm_bw_tb_per_s", 1e12), "scaleup_bw_bytes_per_s": ("scaleup_bw_gb_per_s", 1e9),
              "scaleup_domain_size": ("scaleup_domain_size", None), "sfu_exp_per_s": ("sfu_tera_exp_per_s", 1e12),
              "sm_count": ("sm_count", None), "sync_mma_peak_fraction": ("sync_mma_peak_fraction", None),
              "sustained_tensor_fraction": ("sustained_tensor_fraction", None)},
    ClusterSpec: {"gpus_per_node": ("gpus_per_node", None), "rail_optimized": ("rail_optimized", None),
                  "oversubscription": ("oversubscription", None), "max_gpus": ("max_gpus", None),
                  "gpus_per_host": ("gpus_per_host", None)},
    HostSpec: {"link_bw_bytes_per_s": ("link_bw_gb_per_s", 1e9), "memory_bytes": ("memory_gib", GIB),
               "memory_bw_bytes_per_s": ("memory_bw_gb_per_s", 1e9),
               "uplink_bw_bytes_per_s": ("uplink_bw_gb_per_s", 1e9), "gpus_per_uplink": ("gpus_per_uplink", None)},
    NetworkTier: {"bw_bytes_per_s": ("bw_gb_per_s", 1e9), "latency_s": ("latency_us", 1e-6),
                  "communicator_bus_bw_bytes_per_s": ("communicator_busbw_gb_per_s", 1e9),
                  "mesh_peer_bw_bytes_per_s": ("mesh_peer_bw_gb_per_s", 1e9),
                  "torus_dims": ("torus_dims", None), "links_per_chip": ("links_per_chip", None)},
}
# blocks shown on their own (ClusterSpec.efficiency: the efficiency section of `show`)
NESTED = {ClusterSpec: {"gpu": "gpu", "scaleup": "scaleup", "scaleout": "scaleout", "host": "host",
                        "efficiency": "efficiency"}}


def _numbers(cls) -> set[str]:
    """The fields of ``cls`` that are not text and not a nested block."""
    hints = typing.get_type_hints(cls)
    return {f.name for f in dataclasses.fields(cls) if hints[f.name] is not str and f.name not in NESTED.get(cls, {})}


@pytest.mark.parametrize("cls", list(SHOWN))
def test_every_number_field_has_a_shown_key(cls):
    assert _numbers(cls) == set(SHOWN[cls]), f"{cls.__name__}: fields without a key in `hardware show`"


def _check(obj, shown: dict) -> None:
    for field, (key, unit) in SHOWN[type(obj)].items():
        value = getattr(obj, field)
        if value is None:
            assert shown.get(key, None) is None, key
        elif isinstance(value, typing.Mapping):
            assert {k: v for k, v in shown[key].items()} == pytest.approx({k: v / unit for k, v in value.items()},
                                                                          rel=1e-3), key
        else:
            assert shown[key] == pytest.approx(value if unit is None else value / unit, rel=1e-3), key


def test_show_json_of_a_cluster_with_a_host_prints_every_number_in_file_units():
    c = load_cluster("gb200-nvl72")
    assert c.host is not None and c.gpus_per_host == 4 and c.gpu.sm_count is not None
    result = CliRunner().invoke(main, ["hardware", "show", "gb200-nvl72", "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    _check(c, d)
    _check(c.gpu, d["gpu"])
    _check(c.scaleup, d["scaleup"])
    _check(c.scaleout, d["scaleout"])
    _check(c.host, d["host"])
    # the file's own numbers: 225 GB/s per GPU over NVLink-C2C, 16093 GiB at 18.4 TB/s per rack
    assert (d["host"]["link"], d["host"]["link_bw_gb_per_s"], d["host"]["memory_gib"],
            d["host"]["memory_bw_gb_per_s"]) == ("nvlink-c2c", 225.0, 16093.0, 18400.0)
    assert d["gpu"]["sm_count"] == c.gpu.sm_count and d["gpus_per_host"] == 4


def test_show_text_names_every_number():
    result = CliRunner().invoke(main, ["hardware", "show", "gb200-nvl72"])
    assert result.exit_code == 0, result.output
    keys = {key for cls in (ClusterSpec, GPUSpec, HostSpec) for key, _ in SHOWN[cls].values()}
    first_words = {line.split()[0] for line in result.output.splitlines() if line.strip()}
    assert keys - first_words == set()
    line = next(l for l in result.output.splitlines() if l.strip().startswith("memory_bw_gb_per_s"))
    assert line.split()[-1] == "18400.0"


def test_a_cluster_without_a_host_shows_none():
    c = load_cluster("dgx-h100")
    d = json.loads(CliRunner().invoke(main, ["hardware", "show", "dgx-h100", "--json"]).output)
    assert ("host" in d) and ((d["host"] is None) == (c.host is None)) and "gpus_per_host" in d


def test_a_full_mesh_tier_shows_its_peer_links_in_json_and_text():
    c = load_cluster("mi300x-node")
    d = json.loads(CliRunner().invoke(main, ["hardware", "show", "mi300x-node", "--json"]).output)
    _check(c.scaleup, d["scaleup"])
    _check(c.scaleout, d["scaleout"])
    # the file's own number: one xGMI link of 64 GB/s to each of the seven peers; the switched
    # scale-out tier has none
    assert d["scaleup"]["mesh_peer_bw_gb_per_s"] == 64.0 and "mesh_peer_bw_gb_per_s" not in d["scaleout"]
    text = CliRunner().invoke(main, ["hardware", "show", "mi300x-node"]).output
    line = next(l for l in text.splitlines() if "mesh_peer_bw_gb_per_s" in l)
    assert "64 GB/s to each peer" in line


def test_a_torus_tier_shows_its_shape_and_links_in_json_and_text():
    c = load_cluster("tpu-v4-pod")
    d = json.loads(CliRunner().invoke(main, ["hardware", "show", "tpu-v4-pod", "--json"]).output)
    _check(c.scaleup, d["scaleup"])
    assert d["scaleup"]["torus_dims"] == [16, 16, 16] and d["scaleup"]["links_per_chip"] == 6
    assert "torus_dims" not in d["scaleout"]
    text = CliRunner().invoke(main, ["hardware", "show", "tpu-v4-pod"]).output
    assert "torus 16 x 16 x 16, 6 links a chip of 44.8 GB/s one way" in text
