"""A serving deployment as frozen value objects, validated on construction (errors name the field).

A *worker* is one engine instance: ``tp x pp x adp`` GPUs. Attention runs tensor-parallel over
``tp`` GPUs and data-parallel over ``adp`` ranks (each rank its own requests and KV cache);
the MLP / experts of a stage run over the same ``tp x adp`` GPUs re-split as
``moe_tp x moe_ep`` (expert tensor and expert parallel). ``batch`` is the requests one
attention-DP rank keeps in flight.

``Deployment.mode``: ``agg`` = one pool of ``workers`` identical workers doing prefill and
decode; ``disagg`` = ``prefill_workers`` and ``decode_workers`` of their own layouts, the KV
cache moved from one to the other.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from hardware_specs.errors import InputError, as_given, whole_number
from simulator.parallel_config import MAX_GPUS

MODES = ("agg", "disagg")
#: the most tokens one request may hold, prompt or output (10 million: past every model's context)
MAX_REQUEST_TOKENS = 10_000_000
#: the most requests one rank keeps in flight (or prompts it prefills per step): serve plan's
#: ``--max-batch`` bound; larger is a typo, whose KV cache overflowed a float (``inf GiB``)
MAX_BATCH = 2**24


@dataclass(frozen=True)
class WorkerLayout:
    """One worker's parallel layout and per-rank concurrency.

    Attributes:
        tp: attention tensor-parallel degree.
        pp: pipeline stages.
        adp: attention data-parallel ranks (DP attention); 1 = off.
        moe_tp: expert tensor-parallel degree (1 for a dense model).
        moe_ep: expert-parallel degree; moe_tp * moe_ep must equal tp * adp for an MoE model.
        batch: requests one attention-DP rank keeps in flight (agg and decode workers) or
            prompts it prefills per step (prefill workers).
    """

    tp: int = 1
    pp: int = 1
    adp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    batch: int = 1
    where: str = field(default="layout", compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "adp", "moe_tp", "moe_ep", "batch"):
            object.__setattr__(self, name, whole_number(f"{self.where}.{name}", getattr(self, name)))

    @property
    def gpus(self) -> int:
        """GPUs of one worker."""
        return self.tp * self.pp * self.adp


def check_osl(osl) -> None:
    """Output tokens per request are 2 or more: TPOT is the gap between output tokens, so one
    token has none (it printed 0 ms). ``InputError`` on ``--osl`` otherwise."""
    if osl == 1:
        raise InputError("--osl", "1 output token has no time per output token (TPOT)",
                         "use --osl 2 or more; the prompt alone is TTFT")
    if osl < 2:
        raise InputError("--osl", f"must be a whole number >= 2, got {osl}", "use --osl 2 or more")


def worker_layout(tp: int, pp: int, adp: int, moe_tp: int | None, moe_ep: int | None, batch: int,
                  where: str = "layout", fields: tuple[str, str] = ("moe_tp", "moe_ep")) -> WorkerLayout:
    """A worker whose expert split may be left out: neither given, the experts split as the
    attention (moe_tp = tp x adp, moe_ep 1); one given, the other is tp x adp over it (a divisor,
    else ``InputError`` on that one's ``fields`` name)."""
    for name, value in (("tp", tp), ("adp", adp)) + tuple((f, v) for f, v in zip(fields, (moe_tp, moe_ep))
                                                      if v is not None):
        # checked before they divide anything (moe_ep 0 divided by zero; -1 blamed moe_tp)
        whole_number(name, value)
    if moe_tp is None and moe_ep is None:
        moe_tp, moe_ep = tp * adp, 1
    elif moe_tp is None:
        if (tp * adp) % moe_ep:
            raise InputError(fields[1], f"{moe_ep} does not divide tp x adp = {tp * adp}",
                             f"give a divisor, or {fields[0]} too")
        moe_tp = tp * adp // moe_ep
    elif moe_ep is None:
        if (tp * adp) % moe_tp:
            raise InputError(fields[0], f"{moe_tp} does not divide tp x adp = {tp * adp}",
                             f"give a divisor, or {fields[1]} too")
        moe_ep = tp * adp // moe_tp
    return WorkerLayout(tp=tp, pp=pp, adp=adp, moe_tp=moe_tp, moe_ep=moe_ep, batch=batch, where=where)


def refuse_too_many_gpus(dep: "Deployment", limit: int = MAX_GPUS, ceiling: str = "") -> None:
    """The ``InputError`` of a deployment above ``limit`` GPUs (default ``MAX_GPUS``; a cluster's
    ``max_gpus``, named by ``ceiling``, e.g. "the 4 GPUs of dgx-h100"), on what makes it so large,
    spelt as ``serve simulate`` spells its options: a worker's largest degree (``--tp``,
    ``--decode-pp``) when one worker of either side alone exceeds it (``--tp 1e20`` had been blamed
    on the workers), else the worker count (``--workers``, ``--prefill-workers``) of the side with
    the most GPUs that has several, else the larger side's degree (a cluster's ceiling had blamed
    ``--workers`` for one aggregated worker, and under ``--mode disagg``, which refuses it)."""
    ceiling = ceiling or f"the largest supported {limit:,}"
    sides = [(dep.layout, dep.workers, "--")] if dep.mode == "agg" else sorted(
        [(dep.prefill, dep.prefill_workers, "--prefill-"), (dep.decode, dep.decode_workers, "--decode-")],
        key=lambda side: -side[0].gpus * side[1])

    def degree_error(lay: "WorkerLayout", option: str, what: str) -> InputError:
        degree = max(("tp", "pp", "adp"), key=lambda k: getattr(lay, k))
        return InputError(f"{option}{degree}", what, f"use a smaller {option}{degree}")

    for lay, _, option in sides:
        if lay.gpus > limit:
            raise degree_error(lay, option, f"a worker of tp {as_given(lay.tp)} x pp {as_given(lay.pp)} x adp {as_given(lay.adp)} spans "
                               f"{as_given(lay.gpus)} GPUs, above {ceiling}")
    for lay, count, option in sides:
        if count > 1:
            role = "" if dep.mode == "agg" else option[2:-1] + " "
            raise InputError(f"{option}workers", f"the deployment spans {as_given(dep.gpus)} GPUs ({as_given(count)} {role}workers "
                             f"of {as_given(lay.gpus)}), above {ceiling}", "use fewer workers or smaller workers")
    raise degree_error(sides[0][0], sides[0][2], f"the deployment spans {as_given(dep.gpus)} GPUs (" + " and ".join(
        f"one {o[2:]}worker of {as_given(la.gpus)}" for la, _, o in sides) + f"), above {ceiling}")


@dataclass(frozen=True)
class Deployment:
    """One serving deployment at one request shape and load.

    Attributes:
        model, system, backend: catalog names (model preset, cluster, serving stack name or
            framework).
        mode: ``agg`` or ``disagg``.
        isl, osl: input and output tokens per request.
        dense_format, expert_format: weight formats of attention / dense GEMMs and of routed
            experts (``cost_models.weight_formats``).
        kv_cache_dtype: ``auto`` (the stack's default), ``bf16``, ``fp16`` or ``fp8``.
        speculative_tokens: tokens drafted per decode step, by the model's MTP modules or the
            ``draft_model`` head (None = the stack's default, 0 in every engine's profile;
            ``cost_models.speculative``).
        draft_acceptance: probability a drafted token is accepted (None = the unfitted prior
            ``speculative.MTP_ACCEPTANCE_PRIOR``).
        draft_model: the folder (or config.json) of the EAGLE-3 head that drafts, or None (the
            model's MTP modules; ``model_specs.draft_head``).
        layout, workers: agg worker layout and worker count.
        prefill, prefill_workers, decode, decode_workers: disagg layouts and counts.
        gpus_given: the GPUs the deployment is given (``serve simulate --gpus``, ``serve plan
            --gpus``), at least its workers' own (None: those); its workers must sit whole in
            their NVLink domains (``placement_error``), the rest stay idle.
    """

    model: str
    system: str
    backend: str
    mode: str = "agg"
    isl: int = 1024
    osl: int = 1024
    dense_format: str = "bf16"
    expert_format: str = "bf16"
    kv_cache_dtype: str = "auto"
    speculative_tokens: int | None = None
    draft_acceptance: float | None = None
    draft_model: str | None = None
    layout: WorkerLayout | None = None
    workers: int = 1
    prefill: WorkerLayout | None = None
    prefill_workers: int = 1
    decode: WorkerLayout | None = None
    decode_workers: int = 1
    gpus_given: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InputError("mode", f"unknown mode {self.mode!r}", "use agg or disagg")
        if self.osl == 1:
            check_osl(self.osl)
        for name, least in (("isl", 1), ("osl", 2)):
            object.__setattr__(self, name, whole_number(name, getattr(self, name), least))
        if self.isl > MAX_REQUEST_TOKENS or self.osl > MAX_REQUEST_TOKENS:
            raise InputError("isl" if self.isl > MAX_REQUEST_TOKENS else "osl", "longer than 10 million tokens",
                             "give a request length a model can serve")
        for name in ("workers", "prefill_workers", "decode_workers"):
            object.__setattr__(self, name, whole_number(name, getattr(self, name)))
        if self.mode == "agg":
            if self.layout is None:
                raise InputError("layout", "missing for an aggregated deployment", "give tp/pp/adp/moe_tp/moe_ep and batch")
        else:
            if self.prefill is None or self.decode is None:
                raise InputError("prefill" if self.prefill is None else "decode",
                                 "missing for a disaggregated deployment", "give both worker layouts")
        sides = ((self.layout, "--batch"),) if self.mode == "agg" else (
            (self.prefill, "--prefill-batch"), (self.decode, "--decode-batch"))
        for lay, option in sides:
            if lay.batch > MAX_BATCH:
                raise InputError(option, f"{as_given(lay.batch)} is above the largest supported value {MAX_BATCH:,}",
                                 "check the number")
        if self.gpus > MAX_GPUS:        # as a training job: larger is a typo, and TTFTs would reach 1e39 s
            refuse_too_many_gpus(self)
        if self.gpus_given is not None:
            object.__setattr__(self, "gpus_given", whole_number("--gpus", self.gpus_given))
            if self.gpus_given > MAX_GPUS:   # the ceiling of the workers' own GPUs: 1e30 ran, its domains a float
                raise InputError("--gpus", f"{as_given(self.gpus_given)} is above the largest supported "
                                 f"{MAX_GPUS:,} GPUs", "check the number, or leave it out")
            if self.gpus_given < self.gpus:
                raise InputError("--gpus", f"{as_given(self.gpus_given)} is fewer than the {self.gpus} GPUs the "
                                 "workers use", f"give --gpus {self.gpus} or more, or leave it out")

    @property
    def gpus(self) -> int:
        """GPUs of the whole deployment."""
        if self.mode == "agg":
            return self.layout.gpus * self.workers
        return self.prefill.gpus * self.prefill_workers + self.decode.gpus * self.decode_workers

    @property
    def concurrency(self) -> int:
        """Requests in flight in the whole deployment."""
        if self.mode == "agg":
            return self.layout.batch * self.layout.adp * self.workers
        return self.decode.batch * self.decode.adp * self.decode_workers

    def with_(self, **changes) -> "Deployment":
        return replace(self, **changes)


def default_gpus(dep: Deployment, domain_gpus: int) -> int:
    """The GPUs a deployment is given when ``serve simulate --gpus`` is not: its workers' own, or,
    where a worker is larger than a ``domain_gpus`` NVLink domain, the fewest on which its workers
    sit whole (``cost_models.worker_placement.least_gpus``: such a worker's stages leave part of
    the domains it spans idle; tp 16 x pp 5 on GB200 NVL72 is 80 GPUs held on 64 + 16 of 88).
    Workers of at most a domain keep their own count (9 of 16 GB200 on 144 GPUs are refused)."""
    from cost_models.worker_placement import least_gpus, pair_fits
    g = int(domain_gpus)
    sides = [(dep.layout, dep.workers)] if dep.mode == "agg" else [(dep.prefill, dep.prefill_workers),
                                                                   (dep.decode, dep.decode_workers)]
    if all(lay.gpus <= g for lay, _ in sides):
        return dep.gpus
    least = [int(least_gpus(n, lay.gpus, lay.tp * lay.adp, g)) for lay, n in sides]
    if dep.mode == "agg":
        return least[0]
    (p, n_p), (d, n_d) = sides
    whole = lambda x: -(-x // g) * g    # noqa: E731  the domains a side's GPUs start
    for gpus in sorted({sum(least), whole(least[0]) + least[1], whole(least[1]) + least[0]}):
        if gpus >= dep.gpus and bool(pair_fits(gpus, p.gpus, p.tp * p.adp, n_p, d.gpus, d.tp * d.adp, n_d, g)):
            return gpus
    return dep.gpus


def placement_error(dep: Deployment, domain_gpus: int, cluster_name: str) -> InputError | None:
    """The ``InputError`` of a deployment whose workers do not all sit whole in the NVLink domains
    of ``domain_gpus`` GPUs of the GPUs it is given (``gpus_given``, else its workers' own:
    ``cost_models.worker_placement``, the rule ``serve plan`` counts workers by), naming the
    largest count that does; None where they sit whole. 9 workers of 16 GB200 on 144 GPUs (two
    NVL72 racks, 4 whole workers to a rack): at most 8."""
    from cost_models.worker_placement import least_gpus, most_beside, pair_fits, whole_workers
    g = int(domain_gpus)
    given = dep.gpus_given if dep.gpus_given is not None else default_gpus(dep, g)
    rule = (f"a worker of at most {g} GPUs sits inside one {g}-GPU NVLink domain of {cluster_name}, a larger one "
            "on whole domains from a domain's first GPU (cost_models/worker_placement.py)")
    more = f"or give them more GPUs (--gpus, the rest idle)"
    if dep.mode == "agg":
        lay = dep.layout
        most = int(whole_workers(given, lay.gpus, lay.tp * lay.adp, g))
        if dep.workers <= most:
            return None
        them = "them" if dep.workers > 1 else "it"
        more = f"or give {them} more GPUs (--gpus {int(least_gpus(dep.workers, lay.gpus, lay.tp * lay.adp, g))}, the rest idle)"
        workers = f"{dep.workers} workers" if dep.workers > 1 else "1 worker"
        do = "do" if dep.workers > 1 else "does"
        return InputError("--workers", f"{workers} of {lay.gpus} GPUs {do} not sit whole in {given} GPUs: "
                          f"{rule}; at most {most} do", f"use --workers {most}, " + more if most else more[3:])
    p, d = dep.prefill, dep.decode
    if bool(pair_fits(given, p.gpus, p.tp * p.adp, dep.prefill_workers, d.gpus, d.tp * d.adp, dep.decode_workers, g)):
        return None
    # the most decode workers that sit beside the prefill workers in either order (pair_fits):
    # prefill first alone (most_beside) had said 3 where decode first holds 4
    most = int(max(most_beside(given, p.gpus, p.tp * p.adp, dep.prefill_workers, d.gpus, d.tp * d.adp, g), 0))
    counts = np.arange(most + 1, min(dep.decode_workers, int(whole_workers(given, d.gpus, d.tp * d.adp, g)) + 1))
    fits = pair_fits(given, p.gpus, p.tp * p.adp, dep.prefill_workers, d.gpus, d.tp * d.adp, counts, g)
    most = int(counts[fits].max()) if fits.any() else most
    where = f"beside {dep.prefill_workers} prefill workers of {p.gpus} GPUs"
    return InputError("--decode-workers", f"{dep.decode_workers} decode workers of {d.gpus} GPUs do not sit whole "
                      f"{where} in {given} GPUs: {rule}; at most {most} do",
                      f"use --decode-workers {most}, " + more if most else "use fewer prefill workers, " + more)


def placement_note(dep: Deployment, cluster) -> str:
    """A line for ``serve simulate``'s report on a deployment of more than one NVLink domain of
    several hosts (GB200 / GB300 NVL72 racks, as ``hardware_specs.placement.placement_note`` says
    of training jobs): how its workers sit in the domains (``cost_models.worker_placement``) and,
    for a worker larger than a domain, that it spans several, its collectives crossing the NICs
    between them; '' inside one domain and where a domain is one host (8-GPU nodes). 8 workers of 16
    GB200: 4 to a rack, 2 racks; one of 128: 72 + 56 GPUs of 2 racks."""
    import math

    from cost_models.worker_placement import _shape
    g, cluster_name = int(cluster.gpus_per_node), cluster.name
    given = dep.gpus_given if dep.gpus_given is not None else default_gpus(dep, g)
    if given <= g or cluster.scaleup.kind != "nvlink" or cluster.launch_gpus_per_host >= g:
        return ""
    sides = [("", dep.layout, dep.workers)] if dep.mode == "agg" else [
        ("prefill ", dep.prefill, dep.prefill_workers), ("decode ", dep.decode, dep.decode_workers)]
    parts = []
    for role, lay, count in sides:
        w = lay.gpus
        if w > g:
            # its stages as placed: tp x adp GPUs each, floor(g / stage) to a domain (a stage larger
            # than a domain back to back), as cost_models.worker_placement places them
            stage = lay.tp * lay.adp
            k, _, last = (int(x) for x in _shape(w, stage, g))
            held = (g // stage) * stage if stage <= g else g
            split = " + ".join([str(held)] * (k - 1) + [str(last)])
            parts.append(f"each {role}worker of {w} GPUs spans {k} {g}-GPU NVLink domains of {cluster_name} "
                         f"({split} GPUs), its collectives crossing the NICs between them")
        elif dep.mode == "agg":
            per = g // w
            parts.append(f"{count} workers of {w} GPUs sit whole, {min(per, count)} to a {g}-GPU NVLink domain of "
                         f"{cluster_name}: {math.ceil(count / per)} domains")
        else:
            parts.append(f"{role}workers of {w} GPUs sit whole in one {g}-GPU NVLink domain each")
    if dep.mode == "disagg":
        parts[-1] += f" of {cluster_name}"
    return "; ".join(parts) + f" ({given} GPUs: {math.ceil(given / g)} domains; cost_models/worker_placement.py)"
