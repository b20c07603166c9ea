"""Pooled clusters: several pools of GPUs, each one GPU kind on one fabric, joined by links.

A pool is what ``ClusterSpec`` already describes (a GPU kind, GPUs per node, a scale-up and a
scale-out tier) plus how many GPUs it has. A ``PooledCluster`` is a list of pools and the links
between them. A link states the network between two pools as one GPU of either sees it
(bandwidth per GPU, one direction, and latency); pools without an explicit link reach each
other over the slower of their two scale-out tiers. A transfer between two pools crosses the
sender's NIC, the link and the receiver's NIC, so it runs at the slowest of the three
(``path``). A ``ClusterSpec`` is the one-pool case: ``PooledCluster.single`` wraps it.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hardware_specs.cluster_spec import MAX_CLUSTER_GPUS, MAX_LATENCY_S, ClusterSpec, NetworkTier
from hardware_specs.gpu_spec import MAX_RATE_PER_S, MIN_RATE_PER_S
from hardware_specs.errors import InputError, as_float, require_plausible, shown, suggest

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class Pool:
    """``gpus`` GPUs of one kind on one fabric.

    Attributes:
        name: unique within the cluster (letters, digits, ``-``, ``_``, ``.``).
        cluster: the pool's GPU kind, GPUs per node, scale-up and scale-out tiers (and its own
            measured efficiency model, if any).
        gpus: GPUs in the pool.
    """

    name: str
    cluster: ClusterSpec
    gpus: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InputError("pools.name", f"{self.name!r} is not a pool name",
                             "use letters, digits, '-', '_', '.' or '+'")
        if not isinstance(self.cluster, ClusterSpec):
            # a name such as "dgx-a100-80gb" failed below as AttributeError ('str' has no max_gpus);
            # the catalog imports this module, so the pool does not load names itself
            raise InputError(f"pools.{self.name}.cluster", f"must be a loaded ClusterSpec, got {shown(self.cluster)}",
                             "pass hardware_specs.catalog.load_cluster(name)")
        where = f"pools.{self.name}.gpus"
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int):
            try:
                as_int = int(self.gpus)
            except (TypeError, ValueError, OverflowError):
                raise InputError(where, f"must be a positive integer, got {shown(self.gpus)}") from None
            if as_int != self.gpus:
                raise InputError(where, f"must be a positive integer, got {shown(self.gpus)}")
            object.__setattr__(self, "gpus", as_int)
        if self.gpus < 1:
            raise InputError(where, f"must be >= 1, got {shown(self.gpus)}", "give the pool's GPU count")
        if self.gpus > MAX_CLUSTER_GPUS:
            raise InputError(where, f"{self.gpus:,} is above the largest supported value {MAX_CLUSTER_GPUS:,}",
                             "check the number")
        if self.cluster.max_gpus is not None and self.gpus > self.cluster.max_gpus:
            raise InputError(where, f"{self.gpus} exceeds the {self.cluster.max_gpus} GPUs of {self.cluster.name}",
                             f"use at most {self.cluster.max_gpus}")

    @property
    def gpus_per_node(self) -> int:
        return int(self.cluster.gpus_per_node)

    @property
    def nodes(self) -> int:
        """Nodes the pool spans (the last one may be partly filled)."""
        return -(-self.gpus // self.gpus_per_node)


@dataclass(frozen=True)
class PoolLink:
    """The network between two pools, per GPU: bandwidth one direction (bytes/s), latency (s)."""

    pools: tuple[str, str]
    bw_bytes_per_s: float
    latency_s: float
    kind: str = "ethernet"

    def __post_init__(self) -> None:
        if len(self.pools) != 2:
            raise InputError("links.between", f"a link joins two pools, got {list(self.pools)}")
        a, b = self.pools
        where = f"links.{a}-{b}"
        if a == b:
            raise InputError(f"{where}.between", f"pool {a} is linked to itself", "name two different pools")
        require_plausible(f"{where}.bw_bytes_per_s", self.bw_bytes_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S)
        require_plausible(f"{where}.latency_s", self.latency_s, high=MAX_LATENCY_S, allow_zero=True)
        object.__setattr__(self, "pools", (str(a), str(b)))
        # a numeric string ('1e9') passes the checks above (as_float reads it) and was kept as a
        # string, failing later as min(float, str) in ``path``
        object.__setattr__(self, "bw_bytes_per_s", as_float(self.bw_bytes_per_s))
        object.__setattr__(self, "latency_s", as_float(self.latency_s))


@dataclass(frozen=True)
class PooledCluster:
    """Several pools and the links between them.

    Attributes:
        name: catalog or file name.
        pools: the pools, in the file's order.
        links: explicit links between pairs of pools (others use the slower scale-out tier).
    """

    name: str
    pools: tuple[Pool, ...]
    links: tuple[PoolLink, ...] = ()
    description: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        for field, values, kind in (("pools", self.pools, Pool), ("links", self.links, PoolLink)):
            if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
                raise InputError(f"cluster {self.name}.{field}", f"must be a list of {kind.__name__}, got "
                                 f"{type(values).__name__}", f"build each with hardware_specs.pools.{kind.__name__}")
            values = tuple(values)
            for i, v in enumerate(values):
                if not isinstance(v, kind):    # a dict failed as AttributeError ('dict' has no 'name')
                    raise InputError(f"cluster {self.name}.{field}[{i}]", f"must be a {kind.__name__}, got "
                                     f"{type(v).__name__}", "hardware_specs.catalog.pooled_cluster_from_dict "
                                     "reads a pooled file's mapping")
            object.__setattr__(self, field, values)
        if not self.pools:
            raise InputError(f"cluster {self.name}.pools", "lists no pool", "add at least one pool")
        names = [p.name for p in self.pools]
        for name in names:
            if names.count(name) > 1:
                raise InputError(f"pools.{name}", "appears twice", "give every pool its own name")
        seen = set()
        for link in self.links:
            for end in link.pools:
                if end not in names:
                    raise InputError(f"links.{link.pools[0]}-{link.pools[1]}.between",
                                     f"unknown pool '{end}'", suggest(end, names))
            key = frozenset(link.pools)
            if key in seen:
                raise InputError(f"links.{link.pools[0]}-{link.pools[1]}", "given twice", "keep one link per pair")
            seen.add(key)

    @classmethod
    def single(cls, cluster: ClusterSpec, gpus: int, name: str | None = None) -> "PooledCluster":
        """``gpus`` GPUs of ``cluster`` as a one-pool cluster (the pool is named after the cluster)."""
        return cls(name=cluster.name, pools=(Pool(name or cluster.name, cluster, gpus),),
                   description=cluster.description, source=cluster.source)

    # -- lookups ---------------------------------------------------------------------------
    @property
    def pool_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.pools)

    @property
    def total_gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    def pool(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise InputError("pool", f"unknown pool '{name}' in cluster {self.name}", suggest(str(name), self.pool_names))

    def index(self, name: str) -> int:
        return self.pool_names.index(self.pool(name).name)

    def link(self, a: str, b: str) -> NetworkTier:
        """The tier between pools ``a`` and ``b``: the explicit link, else the slower of the two
        pools' scale-out tiers (bandwidth and latency each the worse)."""
        pa, pb = self.pool(a), self.pool(b)
        for link in self.links:
            if set(link.pools) == {pa.name, pb.name}:
                return NetworkTier(link.kind, link.bw_bytes_per_s, link.latency_s)
        oa, ob = pa.cluster.scaleout, pb.cluster.scaleout
        slower = oa if oa.bw_bytes_per_s <= ob.bw_bytes_per_s else ob
        return NetworkTier(slower.kind, min(oa.bw_bytes_per_s, ob.bw_bytes_per_s),
                           max(oa.latency_s, ob.latency_s))

    def path(self, a: str, b: str) -> tuple[float, float]:
        """(bandwidth bytes/s per GPU one direction, latency s) of a transfer from pool ``a`` to
        pool ``b``: the slowest of the sender's NIC, the link and the receiver's NIC (NICs
        divided by their fabric's oversubscription); latency of the link."""
        if a == b:
            c = self.pool(a).cluster
            return c.scaleout.bw_bytes_per_s / c.oversubscription, c.scaleout.latency_s
        pa, pb = self.pool(a).cluster, self.pool(b).cluster
        tier = self.link(a, b)
        bw = min(pa.scaleout.bw_bytes_per_s / pa.oversubscription, tier.bw_bytes_per_s,
                 pb.scaleout.bw_bytes_per_s / pb.oversubscription)
        return bw, tier.latency_s

    def fastest_pool(self, dtype: str | None = None, speed_per_gpu: Mapping[str, float] | None = None) -> Pool:
        """The pool whose GPU has the highest dense peak (in ``dtype``, default each GPU's
        16-bit type). GPUs of one peak (H100 and H200: 989 TFLOP/s bf16) are told apart by
        ``speed_per_gpu`` (pool name -> what one of its GPUs does on the workload at hand, e.g.
        tokens/s per GPU of the pool's own best plan; a planner knows it, the spec does not), then
        the larger pool, then the name: never by the order the pools are listed in."""
        def peak(p: Pool) -> float:
            peaks = p.cluster.gpu.peak_flops_per_s
            if dtype is not None and dtype in peaks:
                return float(peaks[dtype])
            for d in ("bf16", "fp16", "fp32"):
                if d in peaks:
                    return float(peaks[d])
            return max(float(v) for v in peaks.values())
        speed = dict(speed_per_gpu or {})
        by_name = sorted(self.pools, key=lambda p: p.name)       # max keeps the first of equals
        return max(by_name, key=lambda p: (peak(p), speed.get(p.name, 0.0), p.gpus))

    def largest_pool(self, tie_avoids: str | None = None) -> Pool:
        """The pool with the most GPUs; a tie goes to a pool other than ``tie_avoids`` (a planner
        comparing "the fastest pool alone" with "the largest alone" shows two pools, not one
        twice), then to the first listed."""
        return max(self.pools, key=lambda p: (p.gpus, p.name != tie_avoids))

    def subset(self, names) -> "PooledCluster":
        """The cluster restricted to the pools ``names`` (links among them kept)."""
        keep = [self.pool(n).name for n in names]
        pools = tuple(p for p in self.pools if p.name in keep)
        links = tuple(l for l in self.links if set(l.pools) <= set(keep))
        return PooledCluster(self.name, pools, links, self.description, self.source)
