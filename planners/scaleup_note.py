"""A note for a plan that the scale-up tiling rule starves: a job of several scale-up domains whose
domain size is no power of two (GB200 / GB300 NVL72 racks placed 72 a rack) loses every layout
whose power-of-two groups would straddle a rack (``topology.groups_tile_node``: straddling groups
are refused, not priced), so its best plan can be far slower per GPU than a smaller job placed a
power of two a rack. 576 GPUs on NVL72 are 144 trays, in Slurm segments of 18 trays, 72 GPUs a
rack (``placement.segment_gpus``); with 512 sequences dp, cp and tp are powers of two (dp divides
the batch, tp the 64 heads, 2 cp the 8,192 tokens), so tp x cp x dp <= 8 and pp takes the rest
(72). 512 GPUs are 128 trays, segments of 16 trays: 64 a rack, which every power-of-two block up
to 64 divides.
"""
from __future__ import annotations

from hardware_specs.placement import placed_cluster

#: the best plan is "much worse per GPU" below this fraction of the smaller count's
MUCH_WORSE_PER_GPU = 0.75


def _largest_power_of_two_at_most(n: int) -> int:
    return 1 << (int(n).bit_length() - 1)


def tiling_count(cluster, n_gpus: int) -> int | None:
    """The largest GPU count below ``n_gpus`` whose job power-of-two groups tile on ``cluster``:
    one placed the largest power of two at most the domain's size in each domain (64 of an
    NVL72 rack's 72), or one that fits inside a single domain; None where ``n_gpus``'s own
    placement already holds a power of two per domain, or the job fits one domain (nothing to
    compare). Steps over whole hosts (``launch_gpus_per_host``)."""
    g = cluster.gpus_per_node
    placed = placed_cluster(cluster, n_gpus).gpus_per_node
    if n_gpus <= g or placed & (placed - 1) == 0:
        return None
    target = _largest_power_of_two_at_most(g)
    step = max(int(cluster.launch_gpus_per_host), 1)
    m = (n_gpus - 1) // step * step
    while m > 0:
        if m <= g or placed_cluster(cluster, m).gpus_per_node == target:
            return m
        m -= step
    return None


def scaleup_note(cluster, n_gpus: int, scaleup_pruned: int, per_gpu: float, smaller: int | None,
                 smaller_per_gpu: float | None) -> str:
    """One line for ``plan``'s report where the scale-up tiling rule removed layouts of this job
    (``scaleup_pruned`` > 0) and its best plan's tokens/s per GPU (``per_gpu``) is below
    ``MUCH_WORSE_PER_GPU`` of the best on ``smaller`` GPUs (``tiling_count``); '' otherwise."""
    if not scaleup_pruned or smaller is None or not smaller_per_gpu or per_gpu >= MUCH_WORSE_PER_GPU * smaller_per_gpu:
        return ""
    g = placed_cluster(cluster, n_gpus).gpus_per_node
    there = placed_cluster(cluster, smaller).gpus_per_node
    where = "in one domain" if smaller <= cluster.gpus_per_node else f"{there} a domain"
    return (f"note: {n_gpus} GPUs sit {g} in each {cluster.gpus_per_node}-GPU scale-up domain and the scale-up "
            f"rule removed {scaleup_pruned:,} layouts whose tp, ep, tp x cp or tp x cp x dp block neither divides nor "
            f"is a multiple of {g} (groups straddling domains are refused, not priced: --explain); -n {smaller} "
            f"({where}) plans {smaller_per_gpu:,.1f} tokens/s per GPU against {per_gpu:,.1f} here; on {n_gpus} "
            f"only layouts whose tp x cp x dp divides {g} or is a multiple of it are searched\n")
