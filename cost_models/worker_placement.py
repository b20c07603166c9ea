"""How many serving workers sit whole in the scale-up (NVLink) domains of a GPU count.

The inference collectives (``cost_models.inference_comm``) price a worker's groups as sitting
from the start of a domain: a group of at most a domain inside one domain, a larger one on
whole domains from the first (``group_span``), a worker's pipeline stages packed
floor(domain / stage) to a domain (``inference_step.pipeline_domain_crossings``). A worker is
only priced as it runs where it is placed so. The rule (all numpy-friendly):

* the GPUs given fill ``floor(gpus / domain)`` whole domains, the rest one partial domain;
* a worker of at most a domain sits whole in one: ``floor(domain / worker)`` to a domain and
  ``floor(rest / worker)`` in the partial one; the GPUs a domain holds beside them stay idle;
* a larger worker starts at a domain's first GPU and holds the domains its stages fill
  (stages of at most a domain packed floor(domain / stage) to a domain, a larger stage's GPUs
  back to back), the last of them only in part; the next worker starts at the next domain.

144 GB200 are two NVL72 racks: 16-GPU workers sit 4 to a rack (64 of its 72 GPUs, 8 idle), 8
workers, not floor(144 / 16) = 9 (the ninth would hold 8 + 8 GPUs of two racks and cross the
NICs in its all-to-all). On 8-GPU nodes every worker of 1, 2, 4 or 8 GPUs or a multiple of 8
sits as floor(gpus / worker) did; a worker of 3 or 6 GPUs takes 2 or 1 of a node (24 GPUs: 6 or
3 workers, not 8 or 4), one of 12 (tp 4 x pp 3) two nodes' first 12 GPUs (12 GPUs: one worker;
24: one, not two).
"""
from __future__ import annotations

import numpy as np


def _f(x):
    return np.asarray(x, dtype=float)


def _shape(worker_gpus, stage_gpus, domain_gpus):
    """(domains one worker holds, workers per domain where that is 1, GPUs of its last domain it uses)."""
    w, s, g = _f(worker_gpus), np.maximum(_f(stage_gpus), 1.0), float(domain_gpus)
    per_stage = np.floor(g / s)                       # stages to a domain, where a stage fits one
    small = s <= g
    k = np.where(w <= g, 1.0, np.where(small, np.ceil((w / s) / np.maximum(per_stage, 1.0)), np.ceil(w / g)))
    last = np.where(w <= g, w, np.where(small, (w / s - (k - 1.0) * per_stage) * s, w - (k - 1.0) * g))
    return k, np.where(w <= g, np.floor(g / np.maximum(w, 1.0)), 1.0), last


def whole_workers(gpus, worker_gpus, stage_gpus, domain_gpus):
    """The most workers of ``worker_gpus`` GPUs (pipeline stages of ``stage_gpus``: tp x adp) that
    sit whole on ``gpus`` GPUs in domains of ``domain_gpus`` (module docstring), per row."""
    n, g = _f(gpus), float(domain_gpus)
    k, per, last = _shape(worker_gpus, stage_gpus, domain_gpus)
    full = np.floor(n / g)
    rest = n - full * g
    one = full * per + np.floor(rest / np.maximum(_f(worker_gpus), 1.0))
    many = np.floor(full / k) + ((np.mod(full, k) == k - 1.0) & (last <= rest))
    return np.where(k == 1.0, one, many)


def most_beside(gpus, first_gpus, first_stage, n_first, second_gpus, second_stage, domain_gpus):
    """The most workers of the second kind that sit whole beside ``n_first`` of the first kind on
    ``gpus`` GPUs, the first kind placed first from the first domain as ``whole_workers`` places
    them, the second in the free part of every domain the first use (the idle rest of a domain
    packed with them, of the domain they end in, of a spanning worker's last domain) and in the
    domains after them (-1 where the first kind alone does not fit), per row. A disaggregated deployment's
    prefill and decode workers each sit whole so (``pair_fits``)."""
    n, g = _f(gpus), float(domain_gpus)
    n1, w1, w2 = _f(n_first), _f(first_gpus), _f(second_gpus)
    k1, per1, last1 = _shape(first_gpus, first_stage, domain_gpus)
    full = np.floor(n / g)
    rest = n - full * g
    fits2 = lambda free: np.where(w2 <= g, np.floor(np.maximum(free, 0.0) / np.maximum(w2, 1.0)), 0.0)  # noqa: E731
    # a first-kind worker of at most a domain: whole1 domains packed per1 to a domain (the idle
    # rest of each takes second-kind workers), left1 more in one domain after them
    whole1 = np.floor(n1 / per1)
    left1 = n1 - whole1 * per1
    packed = (np.minimum(whole1, full) * fits2(g - per1 * w1)
              + (whole1 > full) * fits2(rest - per1 * w1)
              + (left1 > 0) * fits2(np.where(whole1 < full, g, rest) - left1 * w1))
    # a larger one: the free part of each worker's last domain
    ends_full = np.minimum(n1, np.floor(full / k1))
    spanning = ends_full * fits2(g - last1) + (n1 - ends_full) * fits2(rest - last1)
    small = k1 == 1.0
    touched = np.where(small, whole1 + (left1 > 0), n1 * k1)
    after = np.maximum(full - touched, 0.0) * g + np.where(touched <= full, rest, 0.0)
    second = np.where(small, packed, spanning) + whole_workers(after, second_gpus, second_stage, domain_gpus)
    return np.where(whole_workers(n, first_gpus, first_stage, domain_gpus) >= n1, second, -1.0)


def pair_fits(gpus, prefill_gpus, prefill_stage, n_prefill, decode_gpus, decode_stage, n_decode, domain_gpus):
    """Whether ``n_prefill`` prefill and ``n_decode`` decode workers sit whole on ``gpus`` GPUs:
    the decode workers placed first and the prefill workers beside them, or the other way round
    (``most_beside``), per row."""
    return ((most_beside(gpus, decode_gpus, decode_stage, n_decode, prefill_gpus, prefill_stage, domain_gpus)
             >= _f(n_prefill))
            | (most_beside(gpus, prefill_gpus, prefill_stage, n_prefill, decode_gpus, decode_stage, domain_gpus)
               >= _f(n_decode)))


def least_gpus(workers, worker_gpus, stage_gpus, domain_gpus):
    """The fewest GPUs on which ``workers`` workers of ``worker_gpus`` GPUs (pipeline stages of
    ``stage_gpus``) sit whole in domains of ``domain_gpus`` (module docstring), per row: workers of
    at most a domain fill ``ceil(workers / per)`` domains, the last with what is left of them; a
    larger worker starts at a domain's first GPU, so all but the last hold their ``k`` domains
    whole and the last ``k - 1`` domains and its last part. One GB200 NVL72 worker of tp 16 x pp 5
    (80 GPUs, 16-GPU stages 4 to a 72-GPU rack): 72 + 16 = 88; 9 workers of 16: 72 + 72 + 16 = 160."""
    n, w, g = _f(workers), _f(worker_gpus), float(domain_gpus)
    k, per, last = _shape(worker_gpus, stage_gpus, domain_gpus)
    per = np.maximum(per, 1.0)
    domains = np.ceil(n / per)
    small = (domains - 1.0) * g + (n - (domains - 1.0) * per) * w
    large = (n * k - 1.0) * g + last
    return np.where(k == 1.0, small, large)
