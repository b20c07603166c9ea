"""Cluster profile: GPUs per scale-up domain and the network tiers that join them."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError, require_plausible, require_positive
from hardware_specs.gpu_spec import MAX_CLUSTER_GPUS, MAX_RATE_PER_S, MIN_RATE_PER_S, GPUSpec
from hardware_specs.torus import torus_ring_links, torus_slice_dims

#: plausibility bounds (``require_plausible``): a link slower than 1 kB/s or a message latency
#: over 10 s, host memory over 1 EiB, a taper over 1000 are typos or unit slips, not machines
MAX_LATENCY_S = 10.0
MAX_HOST_MEMORY_BYTES = 2.0**60
MAX_OVERSUBSCRIPTION = 1000.0


#: the fabrics a cluster file's network tier (``scaleup.kind``, ``scaleout.kind``) or a pooled
#: cluster's link (``links[].kind``) may name. The code branches on ``nvlink`` (a job on NVLink
#: domains of several hosts is placed in Slurm segments, ``hardware_specs.placement``); the others
#: only label the tier, but a misspelled ``nvlink`` silently lost that placement, so a file may
#: name only these (exact, lower case): the fabrics of the shipped clusters, and ``nccl`` /
#: ``gloo-loopback``, which ``paraplan calibrate`` writes for the links it measured.
NETWORK_KINDS = ("nvlink", "infinity-fabric", "ici", "pcie", "shared-memory", "infiniband", "roce", "ethernet",
                 "omni-path", "slingshot", "nccl", "gloo-loopback")
#: the GPU-host links a cluster file's ``host.link`` may name, any case: ``nvlink-c2c`` (Grace
#: Hopper / Blackwell) and PCIe as ``pcie``, ``pcie-gen<N>`` or ``pcie-gen<N>-x<lanes>``. The
#: offload model branches on the name (``cost_models.offload``: a PCIe link loses its 128b/130b
#: encoding and packet overhead, generations 3 to 5), so a misspelled PCIe link was taken at its
#: raw rate.
HOST_LINKS = ("nvlink-c2c", "pcie", "pcie-gen<N>", "pcie-gen<N>-x<lanes>")
_HOST_LINK = re.compile(r"nvlink-c2c|pcie(-gen[1-7](-x(1|2|4|8|16|32))?)?")


def is_host_link(name: str) -> bool:
    """Whether ``name`` is one of ``HOST_LINKS`` (any case): ``pcie-gen5-x16``, ``nvlink-c2c``."""
    return isinstance(name, str) and _HOST_LINK.fullmatch(name.strip().lower()) is not None


@dataclass(frozen=True)
class NetworkTier:
    """One level of the network as one GPU sees it.

    Attributes:
        kind: one of ``NETWORK_KINDS`` in a file (``nvlink``, ``infinity-fabric``, ``ici``,
            ``pcie``, ``infiniband``, ``roce``, ``ethernet``, ...).
        bw_bytes_per_s: bandwidth per GPU, one direction, bytes/s (e.g. one 400 Gb/s NIC per GPU
            is 50e9).
        latency_s: one-message start-up latency (alpha in the alpha-beta model), seconds.
        communicator_bus_bw_bytes_per_s: measured, where a fabric's collectives reach less than
            its links: the most bus bandwidth one NCCL communicator reached across this tier
            (a large all-reduce's ``2 (n-1)/n x bytes / time`` over ranks on several nodes),
            bytes/s, achieved (no efficiency fraction applies to it). One communicator's ring
            or trees cross it at no more than this whatever the NICs add up to, while separate
            communicators (the data-parallel groups of different tensor-parallel ranks) each
            reach it on their own connections. None = the links and the generation's fraction
            bound it (``cost_models.topology``).
        mesh_peer_bw_bytes_per_s: set only for a scale-up tier that is a full mesh with no
            switch (MI300X's xGMI, a GH200 node's NVLink): the bandwidth of one GPU's links to
            one peer, one direction, bytes/s. A group of k members of one domain then reaches its
            peers over k - 1 of those links only (``group_bw_bytes_per_s``). None = switched
            (NVSwitch): every group gets ``bw_bytes_per_s``.
        torus_dims: set only for a scale-up tier that is a torus of direct chip-to-chip links
            (TPU ICI): the shape of one domain, the first axis fastest, e.g. ``(16, 16, 16)`` for
            a TPU v4 pod; its product is the cluster's ``gpus_per_node``. A group then runs on the
            links its compact placement spans (``group_bw_bytes_per_s``,
            ``hardware_specs.torus.torus_ring_links``). None = switched or full mesh.
        links_per_chip: with ``torus_dims``: the chip's links, two per axis (6 on TPU v4's 3D
            torus, 4 on v5e's 2D one); ``bw_bytes_per_s`` is all of them together, so one link
            carries ``bw_bytes_per_s / links_per_chip`` one way.
    """

    kind: str
    bw_bytes_per_s: float
    latency_s: float
    communicator_bus_bw_bytes_per_s: float | None = None
    mesh_peer_bw_bytes_per_s: float | None = None
    torus_dims: tuple | None = None
    links_per_chip: int | None = None

    def __post_init__(self) -> None:
        self._check_torus()
        require_plausible(f"network.{self.kind}.bw_bytes_per_s", self.bw_bytes_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S)
        require_plausible(f"network.{self.kind}.latency_s", self.latency_s, high=MAX_LATENCY_S, allow_zero=True)
        if self.communicator_bus_bw_bytes_per_s is not None:
            require_plausible(f"network.{self.kind}.communicator_bus_bw_bytes_per_s",
                              self.communicator_bus_bw_bytes_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S)
        if self.mesh_peer_bw_bytes_per_s is not None:
            require_plausible(f"network.{self.kind}.mesh_peer_bw_bytes_per_s",
                              self.mesh_peer_bw_bytes_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S)
            if self.mesh_peer_bw_bytes_per_s > self.bw_bytes_per_s:
                raise InputError(f"network.{self.kind}.mesh_peer_bw_bytes_per_s",
                                 f"{self.mesh_peer_bw_bytes_per_s / 1e9:g} GB/s is above the tier's "
                                 f"{self.bw_bytes_per_s / 1e9:g} GB/s per GPU",
                                 "give one peer's share of the GPU's links")

    def _check_torus(self) -> None:
        where = f"network.{self.kind}"
        if (self.torus_dims is None) != (self.links_per_chip is None):
            missing = "links_per_chip" if self.links_per_chip is None else "torus_dims"
            raise InputError(f"{where}.{missing}", "missing", "a torus tier states both torus_dims and links_per_chip")
        if self.torus_dims is None:
            return
        dims = self.torus_dims
        if (not isinstance(dims, tuple) or not 1 <= len(dims) <= 3
                or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in dims)):
            raise InputError(f"{where}.torus_dims", f"{dims!r} is not a list of 1 to 3 positive integers",
                             "give the torus shape, e.g. [16, 16, 16]")
        if self.mesh_peer_bw_bytes_per_s is not None:
            raise InputError(f"{where}.torus_dims", "given with mesh_peer_bw_gb_per_s",
                             "a tier is a torus or a full mesh: keep one")
        if self.links_per_chip != 2 * len(dims):
            raise InputError(f"{where}.links_per_chip", f"{self.links_per_chip!r} is not 2 x the torus' "
                             f"{len(dims)} axes", f"a torus chip has one link to each neighbour: {2 * len(dims)}")

    def group_bw_bytes_per_s(self, members, stride=1.0):
        """Bandwidth one GPU reaches, one direction, bytes/s, in a group of ``members`` GPUs of
        one domain, ``stride`` ranks apart, that exchange among themselves (ring, all-to-all, a
        send to a neighbour is a group of 2), numpy-friendly: ``bw_bytes_per_s`` on a switch; on
        a full mesh only the links to the k - 1 peers carry the group's traffic,
        ``min(bw, (k - 1) x peer)`` (MI300X TP 2: one 64 GB/s xGMI link, not the 448 GB/s of all
        seven); on a torus one link's rate times the links the group's compact placement runs on
        (``hardware_specs.torus.torus_ring_links``: TPU v4, a tensor-parallel group of 4 along
        one axis, 2 of 6 links, 269 / 6 x 2 = 89.7 GB/s). ``stride`` matters only on a torus."""
        if self.torus_dims is not None:
            links = torus_ring_links(members, stride, self.torus_dims)
            # a group of one has no peer: nothing to carry (the full rate, as a switch gives it)
            return np.where(links > 0.0, links * (self.bw_bytes_per_s / self.links_per_chip), self.bw_bytes_per_s)
        if self.mesh_peer_bw_bytes_per_s is None:
            # the link's rate in the members' shape: a float64 scalar for a scalar, else a new array
            shape = np.shape(members)
            if not shape:
                return np.float64(self.bw_bytes_per_s)
            return np.full(shape, self.bw_bytes_per_s, dtype=float)
        peers = np.asarray(members, dtype=float) - 1.0
        # one member alone has no peer in the domain: nothing to cap
        return np.where(peers >= 1.0, np.minimum(self.bw_bytes_per_s, np.maximum(peers, 1.0) * self.mesh_peer_bw_bytes_per_s),
                        self.bw_bytes_per_s)


@dataclass(frozen=True)
class HostSpec:
    """The host side of a node, for offload: the link each GPU has to host memory and the
    node's host memory.

    Attributes:
        link: kind of the GPU-host link (``pcie-gen4-x16``, ``pcie-gen5-x16``, ``nvlink-c2c``;
            a file may name only ``HOST_LINKS``).
        link_bw_bytes_per_s: bandwidth of each GPU's own link to the host, one direction,
            bytes/s; where GPUs share the link (two GB200 GPUs per Grace) the file gives the share.
        uplink_bw_bytes_per_s: bandwidth, one direction, of the link from a PCIe switch to the
            CPU that ``gpus_per_uplink`` GPUs sit behind, bytes/s; None = as fast as the GPU's own.
        gpus_per_uplink: GPUs that share one such uplink when all of them offload at once (a DGX
            A100: 2 per PCIe Gen4 switch); 1 = each GPU has its own path to the CPU. Offload
            copies then run at ``cost_models.offload.shared_link_bw``:
            min(link_bw, uplink_bw / sharers), sharers being the job's own GPUs behind the
            uplink, at most ``gpus_per_uplink`` (``simulator.step_model.uplink_sharers``: a
            1-GPU job has it to itself). The CPUs' memory behind it is not modelled.
        memory_bytes: host memory per node, bytes; None = not stated (offload then unchecked).
        memory_bw_bytes_per_s: host memory bandwidth per node, bytes/s (an optimizer step on
            the host streams its states at this); None = not stated.
        source: citations.
    """

    link: str
    link_bw_bytes_per_s: float
    memory_bytes: float | None = None
    memory_bw_bytes_per_s: float | None = None
    source: str = ""
    uplink_bw_bytes_per_s: float | None = None
    gpus_per_uplink: int = 1

    def __post_init__(self) -> None:
        require_plausible("host.link_bw_bytes_per_s", self.link_bw_bytes_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S)
        if self.uplink_bw_bytes_per_s is not None:
            require_plausible("host.uplink_bw_bytes_per_s", self.uplink_bw_bytes_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S)
        require_positive("host.gpus_per_uplink", self.gpus_per_uplink)
        if int(self.gpus_per_uplink) != self.gpus_per_uplink:
            raise InputError("host.gpus_per_uplink", f"{self.gpus_per_uplink} must be an integer",
                             "give the number of GPUs behind one uplink to the CPU")
        if self.memory_bytes is not None:
            require_plausible("host.memory_bytes", self.memory_bytes, high=MAX_HOST_MEMORY_BYTES)
        if self.memory_bw_bytes_per_s is not None:
            require_plausible("host.memory_bw_bytes_per_s", self.memory_bw_bytes_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S)


@dataclass(frozen=True)
class ClusterSpec:
    """A system: GPU kind, scale-up domain, scale-out fabric.

    Attributes:
        name: catalog name, e.g. ``dgx-h100``.
        gpu: the accelerator.
        gpus_per_node: GPUs in one scale-up domain (8 for DGX, 72 for NVL72).
        scaleup: the fast tier inside a domain.
        scaleout: the tier between domains.
        rail_optimized: whether GPU i of every node shares a leaf switch (rail); then the
            scale-out bandwidth holds for any group that is one GPU per node.
        oversubscription: scale-out taper (1.0 = full bisection); scale-out bandwidth of a group
            spanning several leaf groups is divided by it.
        source: citation for the system's fabric.
        efficiency: a measured efficiency model for this very machine (written by
            ``paraplan calibrate``); None = use the GPU generation's fitted model.
        host: the GPUs' link to host memory and the node's host memory (``HostSpec``), for
            activation and optimizer offload; None = not in the catalog (offload refused).
        gpus_per_host: GPUs one host drives (one ``torchrun`` agent, ``--nproc-per-node``),
            where a scale-up domain spans several hosts (4 per GB200 NVL72 compute tray); None =
            the scale-up domain is one host (``gpus_per_node``). Only the launch exports read it.
    """

    name: str
    gpu: GPUSpec
    gpus_per_node: int
    scaleup: NetworkTier
    scaleout: NetworkTier
    rail_optimized: bool = True
    oversubscription: float = 1.0
    max_gpus: int | None = None
    source: str = ""
    description: str = ""
    efficiency: EfficiencyModel | None = None
    host: HostSpec | None = None
    gpus_per_host: int | None = None

    def __post_init__(self) -> None:
        where = f"cluster {self.name}"
        if self.gpus_per_host is not None:
            require_positive(f"{where}.gpus_per_host", self.gpus_per_host)
            if int(self.gpus_per_host) != self.gpus_per_host or self.gpus_per_node % self.gpus_per_host:
                raise InputError(f"{where}.gpus_per_host", f"{self.gpus_per_host} must be an integer dividing "
                                 f"gpus_per_node {self.gpus_per_node}")
        require_positive(f"{where}.gpus_per_node", self.gpus_per_node)
        if int(self.gpus_per_node) != self.gpus_per_node:
            raise InputError(f"{where}.gpus_per_node", "must be an integer")
        for name in ("gpus_per_node", "max_gpus"):
            value = getattr(self, name)
            if value is not None and value > MAX_CLUSTER_GPUS:
                raise InputError(f"{where}.{name}", f"{value:g} is above the largest supported value "
                                 f"{MAX_CLUSTER_GPUS:,}", "check the number")
        require_plausible(f"{where}.oversubscription", self.oversubscription, high=MAX_OVERSUBSCRIPTION)
        if self.oversubscription < 1.0:
            raise InputError(f"{where}.oversubscription", "must be >= 1 (1 = full bisection)")
        dims = self.scaleup.torus_dims
        if dims is not None and int(np.prod(dims)) != self.gpus_per_node:
            raise InputError(f"{where}.scaleup.torus_dims", f"{' x '.join(map(str, dims))} = {int(np.prod(dims))} "
                             f"chips, not gpus_per_node {self.gpus_per_node}",
                             "give the shape of one scale-up domain (its chips multiply to gpus_per_node)")
        if self.max_gpus is not None:
            require_positive(f"{where}.max_gpus", self.max_gpus)
            if int(self.max_gpus) != self.max_gpus:
                raise InputError(f"{where}.max_gpus", "must be an integer")

    @property
    def launch_gpus_per_host(self) -> int:
        """GPUs per host for a launch (``torchrun --nproc-per-node``)."""
        return int(self.gpus_per_host or self.gpus_per_node)

    def with_domain_size(self, gpus_per_node: int, **changes) -> "ClusterSpec":
        """The same cluster with scale-up domains of ``gpus_per_node`` GPUs (and ``changes``, as
        ``dataclasses.replace`` takes them); a torus tier keeps a torus of that many chips cut from
        its shape (``hardware_specs.torus.torus_slice_dims``: 16 x 16 x 16 -> 16 x 16 x 12)."""
        from dataclasses import replace
        scaleup = changes.pop("scaleup", self.scaleup)
        if scaleup.torus_dims is not None:
            scaleup = replace(scaleup, torus_dims=torus_slice_dims(scaleup.torus_dims, gpus_per_node))
        return replace(self, gpus_per_node=gpus_per_node, scaleup=scaleup, **changes)

    def with_gpu(self, gpu: GPUSpec) -> "ClusterSpec":
        """The same fabric with another accelerator (for what-if studies)."""
        from dataclasses import replace
        return replace(self, gpu=gpu)
