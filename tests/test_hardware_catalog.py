"""The hardware catalog: every data file loads, holds datasheet values, and bad input is named.

Values asserted here are the dense (no sparsity) datasheet figures cited in each file's
``source:`` line; a change to one of them should be a deliberate change to this test too.
"""
from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path

import pytest

from hardware_specs import catalog
from hardware_specs.catalog import list_clusters, list_gpus, load_cluster, load_gpu
from cli_results import completed
from hardware_specs.errors import InputError
from paraplan.validation.datasets import BUNDLED_DIR, PUBLISHED_RUNS, validation_file

GIB = 2**30
VALIDATION_DIR = validation_file(PUBLISHED_RUNS).parent

#: canonical accelerator names of ../shared/validation/README.md
CANONICAL_GPUS = (
    "v100-sxm-32gb", "a100-sxm-40gb", "a100-sxm-80gb", "h100-sxm-80gb", "h100-sxm-96gb",
    "h200-sxm-141gb", "h800-sxm-80gb", "b200", "b300", "gb200", "gb300", "tpu-v3", "tpu-v4",
)
EXTRA_GPUS = ("mi250x", "mi300x", "mi325x", "mi350x", "mi355x", "h20", "cpu-generic")
CLUSTERS = (
    "dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "hgx-h200", "h800-node", "dgx-b200", "dgx-b300",
    "gb200-nvl72", "gb300-nvl72", "dgx2-v100", "frontier-mi250x", "mi300x-node", "mi325x-node",
    "mi350x-node", "mi355x-node", "hgx-h20", "tpu-v4-pod", "tpu-v3-pod", "cpu-local",
)
GPU_FILES = sorted((catalog.BUILTIN_DIR / "gpus").glob("*.yaml"))
CLUSTER_FILES = sorted((catalog.BUILTIN_DIR / "clusters").glob("*.yaml"))


def _all_gpus():
    return [load_gpu(p.stem) for p in GPU_FILES]


@pytest.fixture(autouse=True)
def _no_user_hardware_path(monkeypatch):
    """Tests see the built-in catalog only, whatever the developer's environment says."""
    monkeypatch.delenv("PARAPLAN_HARDWARE_PATH", raising=False)


# --- every file loads -----------------------------------------------------------------------

@pytest.mark.parametrize("path", GPU_FILES, ids=lambda p: p.stem)
def test_every_gpu_file_loads_by_name_and_by_path_with_a_source(path):
    by_name = load_gpu(path.stem)
    assert by_name == load_gpu(str(path))
    assert by_name.name == path.stem
    assert by_name.source.strip()
    assert by_name.vendor.strip()


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.stem)
def test_every_cluster_file_loads_by_name_and_by_path_with_a_source(path):
    cluster = load_cluster(path.stem)
    assert cluster == load_cluster(str(path))
    assert cluster.name == path.stem
    assert cluster.source.strip() and cluster.description.strip()
    assert cluster.gpus_per_node <= cluster.gpu.scaleup_domain_size


def test_listings_hold_every_builtin_entry():
    assert set(CANONICAL_GPUS + EXTRA_GPUS) <= set(list_gpus())
    assert set(CLUSTERS) <= set(list_clusters())
    assert list_gpus() == sorted(p.stem for p in GPU_FILES)
    assert list_clusters() == sorted(p.stem for p in CLUSTER_FILES)


# --- the validation yardstick's names exist -------------------------------------------------

def test_canonical_names_of_validation_readme_all_exist():
    readme = VALIDATION_DIR / "README.md"
    if readme.is_file():
        section = readme.read_text().split("## Canonical accelerator names", 1)[1]
        name_list = section.split("`.", 1)[0] + "`"   # the list ends at the first "`name`."
        named = set(re.findall(r"`([a-z0-9.-]+)`", name_list))
        assert named == set(CANONICAL_GPUS)
    for name in CANONICAL_GPUS:
        assert load_gpu(name).name == name


def _gpu_profiles(path: Path) -> set[str]:
    with path.open(newline="") as f:
        return {row["gpu_profile"] for row in csv.DictReader(f) if row["gpu_profile"]}


def test_every_gpu_profile_of_published_runs_exists():
    """Every GPU the bundled rows name (the rows the accuracy bounds were set on; the shared copies
    of them are kept unchanged by test_bundled_data) has a profile. A GPU the shared file names
    since is not a failure: its rows are skipped by ``validate published`` with "no GPU profile",
    and this test skips, naming it, until its datasheet is added as hardware_specs/gpus/<name>.yaml."""
    known = set(list_gpus())
    claimed = _gpu_profiles(BUNDLED_DIR / PUBLISHED_RUNS)
    assert claimed and claimed <= known
    runs = VALIDATION_DIR / "published_runs.csv"
    if not runs.is_file():
        pytest.skip("../shared/validation/published_runs.csv not present")
    new = _gpu_profiles(runs) - known
    if new:
        pytest.skip(f"published_runs.csv names GPU profile(s) with no hardware profile yet: {', '.join(sorted(new))} "
                    "(their rows are skipped with the reason; add hardware_specs/gpus/<name>.yaml from the datasheet)")


# --- datasheet values -----------------------------------------------------------------------

@pytest.mark.parametrize("name, dtype, tflops", [
    ("h100-sxm-80gb", "bf16", 989.4),
    ("h100-sxm-80gb", "fp8", 1978.9),
    ("h100-sxm-80gb", "tf32", 494.7),
    ("h800-sxm-80gb", "bf16", 989.4),
    ("h200-sxm-141gb", "fp8", 1978.9),
    ("a100-sxm-40gb", "bf16", 312),
    ("a100-sxm-80gb", "tf32", 156),
    ("v100-sxm-32gb", "fp16", 125),
    ("b200", "bf16", 2250),
    ("b200", "fp8", 4500),
    ("b200", "mxfp8", 4500),
    ("b200", "nvfp4", 9000),
    ("b300", "nvfp4", 13500),
    ("gb200", "bf16", 2500),
    ("gb200", "nvfp4", 10000),
    ("gb300", "nvfp4", 15000),
    ("tpu-v3", "bf16", 123),
    ("tpu-v4", "bf16", 275),
    ("mi250x", "bf16", 383),
    ("mi300x", "bf16", 1307.4),
    ("mi300x", "fp8", 2614.9),
])
def test_dense_peak_matches_datasheet(name, dtype, tflops):
    assert load_gpu(name).peak_flops(dtype) == pytest.approx(tflops * 1e12, rel=1e-12)


def test_memory_and_links_are_converted_to_si_units():
    h100 = load_gpu("h100-sxm-80gb")
    assert h100.hbm_bytes == 80 * GIB
    assert h100.hbm_bw_bytes_per_s == pytest.approx(3.35e12)
    assert h100.scaleup_bw_bytes_per_s == pytest.approx(450e9)
    assert load_gpu("h200-sxm-141gb").hbm_bytes == 141 * GIB
    assert load_gpu("h800-sxm-80gb").scaleup_bw_bytes_per_s == pytest.approx(200e9)
    assert load_gpu("b200").scaleup_bw_bytes_per_s == pytest.approx(900e9)
    assert load_gpu("tpu-v4").hbm_bw_bytes_per_s == pytest.approx(1.2e12)
    assert load_gpu("mi300x").hbm_bytes == 192 * GIB


def test_cluster_fabrics_match_their_reference_architectures():
    dgx_h100 = load_cluster("dgx-h100")
    assert dgx_h100.scaleout.bw_bytes_per_s == pytest.approx(50e9)   # 400 Gb/s NDR per GPU
    assert dgx_h100.scaleout.latency_s == pytest.approx(5e-6)
    assert load_cluster("dgx-a100-40gb").scaleout.bw_bytes_per_s == pytest.approx(25e9)
    assert load_cluster("dgx-b300").scaleout.bw_bytes_per_s == pytest.approx(100e9)
    assert load_cluster("dgx2-v100").scaleout.bw_bytes_per_s == pytest.approx(6.25e9)
    assert load_cluster("h800-node").scaleup.bw_bytes_per_s == pytest.approx(200e9)
    nvl72 = load_cluster("gb200-nvl72")
    assert nvl72.gpus_per_node == 72 and nvl72.gpu.name == "gb200"
    assert load_cluster("gb300-nvl72").scaleout.bw_bytes_per_s == pytest.approx(100e9)
    assert load_cluster("tpu-v4-pod").gpus_per_node == 4096
    assert load_cluster("frontier-mi250x").gpus_per_node == 4
    local = load_cluster("cpu-local")
    assert local.gpu.generation == "cpu" and local.gpus_per_node == 2


# --- invariants that must hold across the catalog -------------------------------------------

def test_fp8_is_twice_bf16_on_hopper_and_blackwell():
    for gpu in _all_gpus():
        if gpu.generation in ("hopper", "blackwell"):
            assert gpu.peak_flops("fp8") == pytest.approx(2 * gpu.peak_flops("bf16"), rel=1e-3), gpu.name


def test_bf16_equals_fp16_where_both_exist():
    for gpu in _all_gpus():
        peaks = gpu.peak_flops_per_s
        if "bf16" in peaks and "fp16" in peaks:
            assert peaks["bf16"] == peaks["fp16"], gpu.name


def test_block_scaled_formats_are_at_least_as_fast_as_fp8():
    for gpu in _all_gpus():
        peaks = gpu.peak_flops_per_s
        if "mxfp8" in peaks:
            assert peaks["mxfp8"] == peaks["fp8"], gpu.name
        if "nvfp4" in peaks:
            assert peaks["nvfp4"] >= peaks["fp8"], gpu.name


def test_tensor_dtypes_are_never_slower_than_fp32():
    for gpu in _all_gpus():
        peaks = gpu.peak_flops_per_s
        for dtype, value in peaks.items():
            if "fp32" in peaks:
                assert value >= peaks["fp32"], (gpu.name, dtype)


def test_h200_has_more_and_faster_memory_than_h100():
    h100, h200 = load_gpu("h100-sxm-80gb"), load_gpu("h200-sxm-141gb")
    assert h200.hbm_bytes > h100.hbm_bytes
    assert h200.hbm_bw_bytes_per_s > h100.hbm_bw_bytes_per_s
    assert h200.peak_flops_per_s == h100.peak_flops_per_s


def test_same_chip_variants_share_compute():
    assert load_gpu("a100-sxm-40gb").peak_flops_per_s == load_gpu("a100-sxm-80gb").peak_flops_per_s
    assert load_gpu("h800-sxm-80gb").peak_flops_per_s == load_gpu("h100-sxm-80gb").peak_flops_per_s
    assert load_gpu("a100-sxm-40gb").generation == load_gpu("a100-sxm-80gb").generation == "ampere"
    for name in ("h100-sxm-80gb", "h100-sxm-96gb", "h200-sxm-141gb", "h800-sxm-80gb"):
        assert load_gpu(name).generation == "hopper"


def test_all_bandwidths_and_sizes_are_positive_and_scaleup_beats_scaleout():
    for gpu in _all_gpus():
        assert gpu.hbm_bytes > 0 and gpu.hbm_bw_bytes_per_s > 0
        assert gpu.scaleup_bw_bytes_per_s > 0 and gpu.scaleup_domain_size >= 1
    for path in CLUSTER_FILES:
        cluster = load_cluster(path.stem)
        assert cluster.scaleout.bw_bytes_per_s > 0 and cluster.scaleup.bw_bytes_per_s > 0
        assert cluster.scaleup.bw_bytes_per_s > cluster.scaleout.bw_bytes_per_s, cluster.name
        assert cluster.scaleup.latency_s <= cluster.scaleout.latency_s, cluster.name


# --- bad input is named ---------------------------------------------------------------------

def test_an_edited_gpu_file_reloads_the_cluster_file_that_names_it(tmp_path):
    """Clusters were cached on their own file's modification time: hbm_gib 80 -> 160 in the GPU
    file a cluster file names left the 80 GiB GPU in the loaded cluster for the life of the
    process (a notebook, a sweep's chunk hashes)."""
    import os
    gpu = tmp_path / "mygpu.yaml"
    gpu.write_text((Path(catalog.BUILTIN_DIR) / "gpus" / "h100-sxm-80gb.yaml").read_text())
    cluster = tmp_path / "mycluster.yaml"
    cluster.write_text((Path(catalog.BUILTIN_DIR) / "clusters" / "dgx-h100.yaml").read_text()
                       .replace("name: dgx-h100", "name: mycluster").replace("gpu: h100-sxm-80gb", "gpu: mygpu.yaml"))
    assert load_cluster(str(cluster)).gpu.hbm_bytes == 80 * 2**30
    gpu.write_text(gpu.read_text().replace("hbm_gib: 80", "hbm_gib: 160"))
    stamp = gpu.stat().st_mtime + 1                 # a later modification time, however coarse the clock
    os.utime(gpu, (stamp, stamp))
    assert load_cluster(str(cluster)).gpu.hbm_bytes == 160 * 2**30
    assert catalog.load_pooled_cluster(str(cluster), 16).pools[0].cluster.gpu.hbm_bytes == 160 * 2**30


def test_malformed_yaml_raises_input_error_naming_the_file(tmp_path):
    bad = tmp_path / "broken-gpu.yaml"
    bad.write_text("name: broken-gpu\npeak_tflops: {bf16: 100\nhbm_gib: 80\n")
    with pytest.raises(InputError) as info:
        load_gpu(str(bad))
    assert str(bad) in str(info.value)
    assert "malformed YAML" in str(info.value)


def test_missing_field_raises_input_error_naming_the_field(tmp_path):
    partial = tmp_path / "partial.yaml"
    partial.write_text("name: partial\ngeneration: hopper\npeak_tflops: {bf16: 100}\nhbm_gib: 80\n")
    with pytest.raises(InputError) as info:
        load_gpu(str(partial))
    assert info.value.field == "gpu partial.hbm_bw_tb_per_s"


@pytest.mark.parametrize("typo", ["h100-80gb", "h100_sxm_80gb", "h100-sxm"])
def test_unknown_gpu_name_suggests_close_names(typo):
    with pytest.raises(InputError) as info:
        load_gpu(typo)
    assert f"unknown gpu '{typo}'" in str(info.value)
    assert "did you mean" in str(info.value) and "h100-sxm-80gb" in str(info.value)


@pytest.mark.parametrize("prefix, expected", [("h100", "h100-sxm-80gb"), ("h200", "h200-sxm-141gb")])
def test_unknown_gpu_prefix_suggests_the_names_it_starts(prefix, expected):
    with pytest.raises(InputError) as info:
        load_gpu(prefix)
    assert expected in str(info.value)


def test_unknown_cluster_name_suggests_close_names():
    with pytest.raises(InputError) as info:
        load_cluster("dgx-h10")
    assert "dgx-h100" in str(info.value)


def test_missing_dtype_peak_names_the_dtypes_the_chip_has():
    with pytest.raises(InputError) as info:
        load_gpu("v100-sxm-32gb").peak_flops("bf16")
    assert "fp16" in str(info.value)


# --- users add hardware without touching code -----------------------------------------------

def test_user_directory_in_env_var_adds_a_gpu_and_a_cluster_using_it(tmp_path, monkeypatch):
    (tmp_path / "gpus").mkdir()
    (tmp_path / "clusters").mkdir()
    (tmp_path / "gpus" / "my-accel.yaml").write_text(
        "name: my-accel\nvendor: acme\ngeneration: hopper\n"
        "peak_tflops: {bf16: 500, fp16: 500}\nhbm_gb: 100\nhbm_bw_tb_per_s: 2\n"
        "scaleup_bw_gb_per_s: 100\nscaleup_domain_size: 4\nsource: test\n")
    (tmp_path / "clusters" / "my-box.yaml").write_text(
        "name: my-box\ngpu: my-accel\ngpus_per_node: 4\n"
        "scaleout: {kind: roce, bw_gbit_per_s: 100, latency_us: 7}\n")
    assert "my-accel" not in list_gpus()
    monkeypatch.setenv("PARAPLAN_HARDWARE_PATH", str(tmp_path))

    assert "my-accel" in list_gpus() and "h100-sxm-80gb" in list_gpus()
    assert "my-box" in list_clusters()
    gpu = load_gpu("my-accel")
    assert gpu.peak_flops("bf16") == 500e12
    assert gpu.hbm_bytes == 100e9                # hbm_gb is decimal
    box = load_cluster("my-box")
    assert box.gpu == gpu
    assert box.scaleup.bw_bytes_per_s == 100e9   # defaults to the GPU's own link
    assert box.scaleout.bw_bytes_per_s == 12.5e9 and box.scaleout.latency_s == pytest.approx(7e-6)


@pytest.mark.parametrize("key, value", [("vendor", ".inf"), ("vendor", "[a, b]"), ("source", ".nan")])
def test_a_gpu_label_that_is_not_text_is_an_input_error_naming_it(key, value):
    import yaml
    from hardware_specs.catalog import gpu_from_dict
    data = dict(yaml.safe_load("name: x\nvendor: acme\ngeneration: hopper\npeak_tflops: {bf16: 500}\n"
                               "hbm_gb: 100\nhbm_bw_tb_per_s: 2\nscaleup_bw_gb_per_s: 100\n"
                               "scaleup_domain_size: 4\n"))
    data[key] = yaml.safe_load(f"v: {value}\n")["v"]
    with pytest.raises(InputError) as err:
        gpu_from_dict(data)
    assert err.value.field == f"gpu x.{key}" and "expected text" in str(err.value)


@pytest.mark.parametrize("path, value", [("scaleout.kind", "-.inf"), ("description", ".nan"), ("source", "[1, 2]")])
def test_a_cluster_label_that_is_not_text_is_an_input_error_naming_it(path, value):
    import yaml
    from hardware_specs.catalog import cluster_from_dict
    data = yaml.safe_load("name: box\ngpu: h100-sxm-80gb\ngpus_per_node: 8\n"
                          "scaleout: {kind: roce, bw_gbit_per_s: 400, latency_us: 5}\n")
    *parents, key = path.split(".")
    target = data
    for parent in parents:
        target = target[parent]
    target[key] = yaml.safe_load(f"v: {value}\n")["v"]
    with pytest.raises(InputError) as err:
        cluster_from_dict(data)
    assert err.value.field.endswith(f".{key}") and "expected text" in str(err.value)


@pytest.mark.parametrize("value, says", [(".nan", "must be finite, got nan"),
                                         ("-5", "must be > 0, got -5"),
                                         ("1e-300", "below the plausible minimum 1e-06"),
                                         ("fast", "expected a number, got 'fast'")])
def test_a_measured_communicator_bandwidth_that_is_not_a_rate_is_an_input_error(value, says):
    """communicator_busbw_gb_per_s is a measured rate (GB/s): NaN, a negative, a unit slip of
    1e-300 GB/s or text is refused on one line naming the key as the file spells it, in the
    file's unit, never carried into a step time."""
    import yaml
    from hardware_specs.catalog import cluster_from_dict
    data = yaml.safe_load("name: box\ngpu: a100-sxm-80gb\ngpus_per_node: 8\n"
                          f"scaleout: {{kind: omni-path, bw_gbit_per_s: 50, communicator_busbw_gb_per_s: {value}}}\n")
    with pytest.raises(InputError) as err:
        cluster_from_dict(data)
    assert err.value.field == "cluster box.scaleout.communicator_busbw_gb_per_s" and says in str(err.value)


@pytest.mark.parametrize("tier, says", [("bw_gbit_per_s: -50", "scaleout.bw_gbit_per_s: must be > 0, got -50"),
                                        ("bw_gb_per_s: .inf", "scaleout.bw_gb_per_s: must be finite"),
                                        ("bw_gbit_per_s: 50, latency_us: -3", "scaleout.latency_us: must be >= 0"),
                                        ("bw_gbit_per_s: 50, latency_us: 1e12", "scaleout.latency_us: 1000000000000.0 is above")])
def test_a_network_number_out_of_range_is_named_in_the_files_own_key_and_unit(tier, says):
    """-50 Gb/s is reported as -50 under bw_gbit_per_s with the unit to use, not as
    -6.25e9 bytes/s under an internal name."""
    import yaml
    from hardware_specs.catalog import cluster_from_dict
    data = yaml.safe_load(f"name: box\ngpu: a100-sxm-80gb\ngpus_per_node: 8\nscaleout: {{kind: roce, {tier}}}\n")
    with pytest.raises(InputError) as err:
        cluster_from_dict(data)
    assert says in str(err.value) and "(" in str(err.value)


def test_a_measured_communicator_bandwidth_reads_in_gb_per_s():
    import yaml
    from hardware_specs.catalog import cluster_from_dict
    data = yaml.safe_load("name: box\ngpu: a100-sxm-80gb\ngpus_per_node: 8\n"
                          "scaleout: {kind: omni-path, bw_gbit_per_s: 50, communicator_busbw_gb_per_s: 5.07}\n")
    assert cluster_from_dict(data).scaleout.communicator_bus_bw_bytes_per_s == 5.07e9
    del data["scaleout"]["communicator_busbw_gb_per_s"]
    assert cluster_from_dict(data).scaleout.communicator_bus_bw_bytes_per_s is None


# ---- hostile files ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, says", [
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(6))
     + "name: *g\n", "anchors and aliases counted as expanded"),
    ("name: &n [*n]\n", "refers to itself"),
    ("name: !!python/object/apply:os.getcwd []\n", "malformed YAML"),
    ("name: [" * 900 + "]" * 900 + "\n", "nests"),
])
def test_alias_bombs_recursive_anchors_python_tags_and_deep_nesting_are_one_input_error(tmp_path, text, says):
    from hardware_specs.yaml_files import read_yaml
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        read_yaml(path, "cluster")
    assert err.value.field in ("cluster", "yaml") and says in str(err.value)


def test_non_utf8_catalog_file_is_an_input_error(tmp_path):
    from hardware_specs.yaml_files import read_yaml
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(InputError, match="not UTF-8"):
        read_yaml(path, "gpu")


@pytest.mark.parametrize("key, value", [("oversubscription", float("nan")), ("oversubscription", float("inf")),
                                        ("gpus_per_node", 2**30), ("max_gpus", 1.5)])
def test_cluster_spec_refuses_non_finite_and_out_of_range_fabric_values(key, value):
    cluster = load_cluster("dgx-h100")
    with pytest.raises(InputError) as err:
        replace(cluster, **{key: value})
    assert err.value.field.endswith(key)


def test_a_key_written_twice_in_a_yaml_file_is_refused_naming_its_line():
    """yaml.safe_load keeps the last of two equal keys silently (a cluster's second scaleout:
    block would replace the first unseen); nested mappings are checked too, merge keys are not
    repeats."""
    from hardware_specs.yaml_files import parse_yaml
    text = "name: c\nscaleout:\n  bw_gbit_per_s: 400\n  latency_us: 5\n  bw_gbit_per_s: 200\n"
    with pytest.raises(InputError) as err:
        parse_yaml(text, "cluster", "c.yaml")
    assert str(err.value) == ("cluster: c.yaml line 5: key 'bw_gbit_per_s' appears twice in one mapping "
                              "(keep one of them)")
    merged = "base: &b {x: 1}\nuse:\n  <<: *b\n  <<: *b\n  y: 2\n"
    assert parse_yaml(merged, "x", "m.yaml")["use"] == {"x": 1, "y": 2}
    assert parse_yaml("a: {k: 1}\nb: {k: 2}\n", "x", "ok.yaml") == {"a": {"k": 1}, "b": {"k": 2}}


@pytest.mark.parametrize("key, value, says", [
    ("peak_tflops", "{bf16: -5}", "gpu x.peak_tflops.bf16: must be > 0, got -5.0 (the dense peak in TFLOP/s"),
    ("hbm_bw_tb_per_s", ".nan", "gpu x.hbm_bw_tb_per_s: must be finite, got nan (the memory bandwidth in TB/s)"),
    ("scaleup_bw_gb_per_s", "0", "gpu x.scaleup_bw_gb_per_s: must be > 0, got 0"),
    ("hbm_gb", "1e-12", "gpu x.hbm_gb: 1e-12 is below the plausible minimum 0.00104858 (the GPU memory in GB)"),
])
def test_a_gpu_rate_out_of_range_is_named_in_the_files_own_key_and_unit(key, value, says):
    """-5 TFLOP/s is reported as -5 under peak_tflops.bf16, not as -5e12 under
    peak_flops_per_s, so the fix reads in the unit the file is written in."""
    import yaml
    from hardware_specs.catalog import gpu_from_dict
    data = yaml.safe_load("name: x\nvendor: acme\ngeneration: hopper\npeak_tflops: {bf16: 500}\n"
                          "hbm_gb: 100\nhbm_bw_tb_per_s: 2\nscaleup_bw_gb_per_s: 100\nscaleup_domain_size: 4\n")
    data[key] = yaml.safe_load(f"v: {value}\n")["v"]
    with pytest.raises(InputError) as err:
        gpu_from_dict(data)
    assert says in str(err.value)


def test_relative_gpu_and_cluster_paths_resolve_beside_the_file_that_names_them(tmp_path, monkeypatch):
    """A cluster file naming ``gpu: my-gpu.yaml`` reads the GPU file next to it whatever the
    working directory, and a pooled file's ``cluster: my-cluster.yaml`` likewise; the GPU's own
    numbers (96 GiB, 2.4 TB/s here) come through unchanged."""
    src = Path(catalog.__file__).parent / "gpus" / "h100-sxm-80gb.yaml"
    text = src.read_text().replace("name: h100-sxm-80gb", "name: h100-96gb-test")
    text = text.replace("hbm_gib: 80", "hbm_gib: 96").replace("hbm_bw_tb_per_s: 3.35", "hbm_bw_tb_per_s: 2.4")
    (tmp_path / "my-gpu.yaml").write_text(text)
    cluster_text = (Path(catalog.__file__).parent / "clusters" / "dgx-h100.yaml").read_text()
    cluster_text = cluster_text.replace("name: dgx-h100", "name: my-cluster").replace("gpu: h100-sxm-80gb", "gpu: my-gpu.yaml")
    (tmp_path / "my-cluster.yaml").write_text(cluster_text)
    (tmp_path / "mixed.yaml").write_text(
        "name: mixed\npools:\n  - {name: new, gpus: 16, cluster: my-cluster.yaml}\n  - {name: old, gpus: 16, cluster: dgx-a100-80gb}\n")
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cluster = load_cluster(str(tmp_path / "my-cluster.yaml"))
    assert cluster.gpu.name == "h100-96gb-test"
    assert cluster.gpu.hbm_bw_bytes_per_s == pytest.approx(2.4e12)
    assert cluster.gpu.hbm_bytes == pytest.approx(96 * 2**30)
    pooled = catalog.load_pooled_cluster(str(tmp_path / "mixed.yaml"))
    assert [p.cluster.gpu.name for p in pooled.pools] == ["h100-96gb-test", "a100-sxm-80gb"]
    # a relative path that is not beside the file is still read from the working directory
    (elsewhere / "cwd-gpu.yaml").write_text(text.replace("h100-96gb-test", "cwd-gpu"))
    (tmp_path / "cwd-cluster.yaml").write_text(cluster_text.replace("my-gpu.yaml", "cwd-gpu.yaml").replace("my-cluster", "cwd-cluster"))
    assert load_cluster(str(tmp_path / "cwd-cluster.yaml")).gpu.name == "cwd-gpu"


@pytest.mark.parametrize("key, value, says", [
    ("memory_bw_gb_per_s", "1e30", "1e+30 is above the plausible maximum 1e+12"),      # 1e21 B/s in GB/s
    ("link_bw_gb_per_s", "1e30", "1e+30 is above the plausible maximum 1e+12"),
    ("memory_gib", "1e30", "1e+30 is above the plausible maximum 1.07374e+09"),         # 2**60 B in GiB
    ("memory_gib", "-4", "must be > 0, got -4")])
def test_a_host_number_out_of_range_is_named_in_the_files_own_key_and_unit(tmp_path, key, value, says):
    """A host block's number is checked as the file writes it (GB/s, GiB), not as the bytes it
    becomes: the error names host.<key>, never host.memory_bw_bytes_per_s (a key no file has).
    The command runs in-process (cli_results.completed); the real ``hardware show`` process is
    test_full_mesh_scaleup's."""
    host = {"link": "pcie-gen5-x16", "link_bw_gb_per_s": "64", "memory_gib": "2048", "memory_bw_gb_per_s": "600"}
    host[key] = value
    body = ", ".join(f"{k}: {v}" for k, v in host.items())
    path = tmp_path / "box.yaml"
    path.write_text(f"name: box\ngpu: h100-sxm-80gb\ngpus_per_node: 8\nscaleout: {{kind: roce, bw_gbit_per_s: 400}}\n"
                    f"host: {{{body}}}\n")
    with pytest.raises(InputError) as err:
        load_cluster(str(path))
    assert err.value.field == f"cluster box.host.{key}" and says in str(err.value)
    run = completed("hardware", "show", path)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith(f"error: cluster box.host.{key}: ") and run.stderr.count("\n") == 1


@pytest.mark.parametrize("value, says", [("1e30", "1e+30 is above the largest supported value 16,777,216"),
                                         (str(2**24 + 1), "16,777,217 is above the largest supported value 16,777,216")])
def test_a_scaleup_domain_past_the_largest_cluster_is_refused_in_one_line(tmp_path, value, says):
    """scaleup_domain_size becomes a generic node's gpus_per_node (catalog.generic_cluster), so it
    has the same cap, MAX_CLUSTER_GPUS = 2**24 (1e30 was accepted and printed as 31 digits)."""
    text = (catalog.BUILTIN_DIR / "gpus" / "h100-sxm-80gb.yaml").read_text()
    assert "scaleup_domain_size: 8\n" in text
    path = tmp_path / "g.yaml"
    path.write_text(text.replace("scaleup_domain_size: 8\n", f"scaleup_domain_size: {value}\n"))
    with pytest.raises(InputError) as err:
        load_gpu(str(path))
    assert err.value.field == "gpu h100-sxm-80gb.scaleup_domain_size" and says in str(err.value)
    run = completed("hardware", "show", path, "--json")
    assert run.returncode == 2 and run.stdout == "" and run.stderr.count("\n") == 1
    assert run.stderr.startswith("error: gpu h100-sxm-80gb.scaleup_domain_size: ")
    path.write_text(text.replace("scaleup_domain_size: 8\n", f"scaleup_domain_size: {2**24}\n"))
    assert load_gpu(str(path)).scaleup_domain_size == 2**24      # the cap itself is allowed


def test_a_scaleup_domain_built_in_code_must_be_a_whole_number():
    gpu = load_gpu("h100-sxm-80gb")
    with pytest.raises(InputError, match=r"scaleup_domain_size: must be a whole number, got 8\.5"):
        replace(gpu, scaleup_domain_size=8.5)
    assert replace(gpu, scaleup_domain_size=16.0).scaleup_domain_size == 16
    assert type(replace(gpu, scaleup_domain_size=16.0).scaleup_domain_size) is int
