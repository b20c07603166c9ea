"""Multi-rack GB200 / GB300 rows are priced with the placement their launcher asked Slurm for."""
from __future__ import annotations

from cost_models.topology import groups_tile_node
from hardware_specs.placement import segment_gpus


def test_segment_gpus_is_megatron_bridges_segment_rule():
    # trays of 4 GPUs, 18 per NVL72 rack: the largest divisor of the tray count that is <= 18
    assert segment_gpus(256, 4, 72) == 64      # 64 trays: segments of 16
    assert segment_gpus(128, 4, 72) == 64      # 32 trays: 16
    assert segment_gpus(144, 4, 72) == 72      # 36 trays: 18, whole racks
    assert segment_gpus(200, 4, 72) == 40      # 50 trays: 10
    assert segment_gpus(64, 4, 72) == 72       # one rack: the domain is unchanged
    assert segment_gpus(16, 8, 8) == 8         # a DGX node is one host
    assert segment_gpus(258, 4, 72) == 72      # not whole trays: unchanged


def test_published_multi_rack_rows_are_placed_in_segments_their_groups_tile():
    from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
    from paraplan.validation.predict import prepare
    from paraplan.validation.published import read_runs
    records = [r for r in read_runs(validation_file(PUBLISHED_RUNS)).to_dict("records")
               if str(r["gpu"]).startswith(("DGX-GB200", "DGX-GB300")) and r["n_gpus"] > 72]
    assert records
    skipped = {}
    p = prepare(records, on_skip=skipped.__setitem__)
    assert len(p.inputs) + len(skipped) == len(records) and len(p.inputs) >= 90
    assert not [w for w in skipped.values() if "domain" in w or "tile" in w]
    for inp in p.inputs:
        c = inp.config
        assert inp.cluster.gpus_per_node == 64, (inp.cluster.name, c.n_gpus)
        assert groups_tile_node(64, c.n_gpus, c.tp, c.cp, c.dp, c.ep, c.etp, c.zero_shard_group)
        # on whole racks of 72 their groups of 64 (or 128) would straddle
        assert not groups_tile_node(72, c.n_gpus, c.tp, c.cp, c.dp, c.ep, c.etp, c.zero_shard_group)
