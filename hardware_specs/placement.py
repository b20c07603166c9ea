"""Where a job's GPUs sit in scale-up domains that hold several hosts (GB200 / GB300 NVL72 racks).

NVIDIA's Megatron-Bridge performance launcher asks Slurm for its GB200 / GB300 jobs in
``--segment``s: blocks of trays (hosts of 4 GPUs) that Slurm's topology/block plugin keeps inside
one NVLink domain. A job of at most 18 trays is one segment; a larger one is split into the
largest segment of at most 18 trays that divides its tray count
(NVIDIA-NeMo/Megatron-Bridge@023219ed scripts/performance/utils/executors.py ``slurm_executor``:
``if num_gpus_per_node == 4: segment = nodes if nodes <= 18 else`` the largest divisor of
``nodes`` in 18..1). 256 GPUs are 64 trays: segments of 16 trays, 64 GPUs in each of four racks,
not 72 + 72 + 72 + 40; ranks follow the trays in order, so every 64 consecutive ranks share a rack.

A TPU job larger than one pod runs as equal ICI slices joined over the data-centre network
(``tpu_slice_chips``: PaLM's 6144 TPU v4 chips as two pods of 3072).
"""
from __future__ import annotations


def segment_gpus(n_gpus: int, gpus_per_host: int, gpus_per_node: int) -> int:
    """GPUs a job of ``n_gpus`` uses in each scale-up domain of ``gpus_per_node`` GPUs on hosts of
    ``gpus_per_host``, placed in Slurm segments as Megatron-Bridge's launcher asks (module
    docstring). A job inside one domain, on whole-domain hosts, or of a GPU count that is not a
    whole number of hosts keeps ``gpus_per_node``."""
    g, h, n = int(gpus_per_node), int(gpus_per_host), int(n_gpus)
    if n <= g or h >= g or n % h or g % h:
        return g
    hosts, per_domain = n // h, g // h
    return h * max(d for d in range(per_domain, 0, -1) if hosts % d == 0)


def placed_cluster(cluster, n_gpus: int):
    """``cluster`` as a job of ``n_gpus`` GPUs uses it: on NVLink domains of several hosts (GB200 /
    GB300 NVL72 racks) a job larger than one rack holds ``segment_gpus`` GPUs in each rack it uses
    (Megatron-Bridge's Slurm segments, module docstring), so its scale-up domain is that many GPUs
    (256 GPUs on NVL72: 64 a rack); any other cluster, or a job that keeps the rack's size, is
    returned as it is. ``simulate``, ``plan`` and the published validation place jobs this one way,
    so a layout NVIDIA runs in segments (DeepSeek-V3 on 256 GB200 with ep 64) is priced as run, not
    refused for straddling racks of 72. The host memory and memory bandwidth the file states for
    the whole domain shrink with it (``segment_host``). The cluster keeps its name."""
    from dataclasses import replace
    if cluster.scaleup.kind == "ici":
        slice_chips = tpu_slice_chips(n_gpus, cluster.gpus_per_node)
        # a slice is a torus of its own, cut from the pod's shape (16 x 16 x 16 -> 16 x 16 x 12)
        return cluster if slice_chips == cluster.gpus_per_node else cluster.with_domain_size(slice_chips)
    if cluster.scaleup.kind != "nvlink":
        return cluster
    per_domain = segment_gpus(n_gpus, cluster.launch_gpus_per_host, cluster.gpus_per_node)
    if per_domain == cluster.gpus_per_node:
        return cluster
    return replace(cluster, gpus_per_node=per_domain, host=segment_host(cluster.host, per_domain, cluster.gpus_per_node))


#: chips of the cube multi-host TPU v4 slices are built of (4 x 4 x 4; Jouppi et al. 2023, "TPU v4",
#: arXiv 2304.01433 section 2: 64-chip blocks joined by optical circuit switches)
TPU_CUBE_CHIPS = 64


def tpu_slice_chips(n_chips: int, pod_chips: int) -> int:
    """Chips of each ICI slice a TPU job of ``n_chips`` runs in: a job larger than one pod runs as
    ``k = ceil(n / pod)`` equal slices joined over the data-centre network (PaLM 540B: 6144 TPU v4
    chips as two pods of 3072, Chowdhery et al. 2022, arXiv 2204.02311 section 4), so its ICI
    domain is ``n / k`` chips; a job that fits one pod, or does not split into equal slices of whole
    ``TPU_CUBE_CHIPS`` cubes, keeps the pod."""
    n, pod = int(n_chips), int(pod_chips)
    if n <= pod:
        return pod
    k = -(-n // pod)
    # multi-host slices are whole 4 x 4 x 4 cubes of 64 chips (TPU v4's building block)
    return n // k if n % k == 0 and (n // k) % TPU_CUBE_CHIPS == 0 else pod


def segment_host(host, kept_gpus: int, domain_gpus: int):
    """The host side of ``kept_gpus`` of a ``domain_gpus``-GPU domain whose file states the
    memory and memory bandwidth of all its hosts together (GB200 NVL72: 36 Grace CPUs' 17 TB and
    18.4 TB/s for 72 GPUs): the trays kept hold kept / domain of both (16 of 18 trays: 64/72),
    as ``simulator.config_batch.node_host_share`` gives a job inside one rack its trays' share.
    A 256-GPU job in segments of 64 was checked against the whole rack's 16,093 GiB where its 16
    trays hold 14,305. The per-GPU link to the host is each GPU's own and stays."""
    if host is None:
        return None
    from dataclasses import replace
    share = kept_gpus / domain_gpus
    return replace(host,
                   memory_bytes=None if host.memory_bytes is None else host.memory_bytes * share,
                   memory_bw_bytes_per_s=None if host.memory_bw_bytes_per_s is None
                   else host.memory_bw_bytes_per_s * share)


def placement_note(cluster, n_gpus: int) -> str:
    """A line for reports on a job of several NVLink domains of several hosts each (GB200 / GB300
    NVL72 racks): how many GPUs of each domain it holds, in how many domains, and why; '' for a
    job inside one domain and on clusters whose domain is one host (an 8-GPU node). 256 GPUs sit
    64 in each of four racks (``placed_cluster``); 576 in 8 whole racks of 72."""
    g, h, n = int(cluster.gpus_per_node), int(cluster.launch_gpus_per_host), int(n_gpus)
    if cluster.scaleup.kind == "ici" and n > g:
        placed = placed_cluster(cluster, n).gpus_per_node
        if placed != g:
            return (f"{n} chips run as {n // placed} ICI slices of {placed} over the data-centre network: "
                    f"equal slices of at most one {g}-chip pod, as PaLM ran 6144 TPU v4 chips in 2 pods "
                    "of 3072 (hardware_specs/placement.py)")
        return ""
    if cluster.scaleup.kind != "nvlink" or n <= g or h >= g:
        return ""
    placed = placed_cluster(cluster, n).gpus_per_node
    if placed != g:
        return (f"{n} GPUs sit {placed} in each {g}-GPU NVLink domain of "
                f"{cluster.name} (Slurm segments of {placed // h} hosts, as "
                "Megatron-Bridge's launcher asks: hardware_specs/placement.py)")
    if n % g == 0 and n % h == 0:
        return (f"{n} GPUs sit in {n // g} whole {g}-GPU NVLink domains of {cluster.name} (Slurm segments of "
                f"{g // h} hosts, a domain each, as Megatron-Bridge's launcher asks: hardware_specs/placement.py)")
    return (f"{n} GPUs fill {n // g} {g}-GPU NVLink domain{'s' if n // g > 1 else ''} of {cluster.name} and hold "
            f"{n % g} GPUs of one more (no Slurm segment of whole hosts tiles them: hardware_specs/placement.py)")
