"""How many GPUs of each pool the best pooled plan uses, and why the rest sit idle.

A pooled plan places whole replicas (a pipeline of stages, each ``tp`` GPUs of one pool), so a
pool is used in steps of a replica's GPUs on it (and one more replica needs its GPUs on every
pool its stages span), each replica needs at least one micro-batch of
the global batch, and the search keeps a pool (or part of it) out where using it scored slower.
``pool_use`` names, per pool, the first of these that holds (``REASONS``) with a fix, and the
fastest plan the search scored that puts more of the pool to work (simulated exactly).
"""
from __future__ import annotations

import numpy as np

#: why a pool's idle GPUs are idle, in the order they are tested
REASONS = {
    "global_batch": "every replica of the plan runs one micro-batch of the global batch; another replica would run none",
    "tile": "fewer idle GPUs than one more replica of the plan needs on this pool, or on another pool it spans",
    "slower": "every plan the search scored that uses more of this pool is slower",
    "nothing_fits": "no plan the search scored that uses more of this pool fits in memory",
}
#: candidates per family simulated exactly when looking for the best plan that uses more of a pool
_EXACT_TRIES = 3


def _gpus(n: int) -> str:
    return "1 GPU" if n == 1 else f"{n} GPUs"


def _slower(pct: float) -> str:
    return f"{pct:.1f}% slower" if pct >= 0 else f"{-pct:.1f}% faster (outside the ranked search's pick)"


def replica_gpus_on(plan, pool: str) -> int | None:
    """GPUs one replica needs on ``pool``: the fewest over the plan's groups that use it (None: none does)."""
    sizes = [sum(st.tp for st in g.stages if st.pool == pool) for g in plan.groups]
    sizes = [n for n in sizes if n > 0]
    return min(sizes) if sizes else None


def _replica_needs(plan, pool: str) -> dict[str, int] | None:
    """GPUs per pool one more replica of the plan's group with the fewest GPUs on ``pool`` needs
    (its stages may sit on other pools too); None when no group uses ``pool``."""
    needs = []
    for g in plan.groups:
        need: dict[str, int] = {}
        for st in g.stages:
            need[st.pool] = need.get(st.pool, 0) + st.tp
        if need.get(pool):
            needs.append(need)
    return min(needs, key=lambda n: n[pool]) if needs else None


def _more_of(pool: str, used: int, scored, gbs: int, simulate, plan_from_layout):
    """The fastest plan (by exact simulation of each family's best few by score) the search
    scored that places more than ``used`` GPUs on ``pool``: (plan, report) or None. Families on
    merged pools are left out (their GPUs per file pool are not known before the export)."""
    tries = []
    for s in scored:
        if s.members or pool not in s.cluster.pool_names:
            continue
        on = np.asarray(s.out["pool_gpus"])[:, s.cluster.pool_names.index(pool)]
        ok = np.flatnonzero(s.fits & (on > used))
        if len(ok):
            best = ok[np.argsort(-np.asarray(s.out["tokens_per_s"])[ok], kind="stable")[:_EXACT_TRIES]]
            tries += [(s, int(i)) for i in best]
    found = None
    for s, i in tries:
        plan = plan_from_layout(s, i, gbs)
        rep = simulate(s, plan)
        if found is None or rep.tokens_per_s > found[1].tokens_per_s:
            found = (plan, rep)
    return found


def pool_use(cluster, best, best_report, scored, gbs: int, simulate, plan_from_layout, layout_text) -> tuple[dict, ...]:
    """Per pool of ``cluster`` (the file's): its GPUs, those ``best`` uses and the idle rest, and
    for idle ones the reason (a ``REASONS`` key and its sentence with this plan's numbers), a fix,
    and ``more``: the fastest scored plan using more of the pool (layout, GPUs on the pool,
    tokens/s, how much slower than ``best`` in percent) or None.

    ``simulate(scored_family, plan)`` prices a plan exactly (``simulate_heterogeneous``)."""
    replicas = sum(g.replicas for g in best.groups)
    batch_bound = replicas * best.micro_batch >= gbs
    idle_of = {p.name: p.gpus - best.gpus_on(p.name) for p in cluster.pools}
    out = []
    for p in cluster.pools:
        used = best.gpus_on(p.name)
        idle = p.gpus - used
        row = {"pool": p.name, "gpu": p.cluster.gpu.name, "gpus": p.gpus, "gpus_used": used, "gpus_idle": idle,
               "idle_reason": None, "idle_reason_text": None, "fix": None, "more": None}
        if idle:
            them = "the idle GPU" if idle == 1 else f"the {idle} idle GPUs"
            more = _more_of(p.name, used, scored, gbs, simulate, plan_from_layout)
            if more is not None:
                plan, rep = more
                row["more"] = {"layout": layout_text(plan), "gpus_on_pool": plan.gpus_on(p.name), "n_gpus": rep.n_gpus,
                               "tokens_per_s": rep.tokens_per_s,
                               "slower_pct": 100.0 * (1.0 - rep.tokens_per_s / best_report.tokens_per_s)}
            need = _replica_needs(best, p.name)
            # pools where one more replica finds fewer idle GPUs than it needs (this one first)
            short = ([] if need is None else
                     sorted((q for q, n in need.items() if idle_of[q] < n), key=lambda q: q != p.name))
            if batch_bound:
                row["idle_reason"] = "global_batch"
                row["idle_reason_text"] = (f"the global batch of {gbs} sequences at micro-batch {best.micro_batch} gives "
                                           f"each of the plan's {replicas} replicas one micro-batch; another replica "
                                           "would run none")
                row["fix"] = (f"a larger global batch (--global-batch {2 * gbs}) lets more replicas run, "
                              f"or give {them} other work")
            elif short:
                unit = need[p.name]
                if short[0] == p.name:
                    text = (f"{idle} idle GPU{'s' if idle > 1 else ''}, fewer than the {unit} one more replica of "
                            f"the plan needs on {p.name}")
                else:
                    text = f"one more replica of the plan needs {unit} GPUs on {p.name}"
                others = [q for q in short if q != p.name]
                if others:
                    text += " and " + ", ".join(f"{need[q]} on {q} ({idle_of[q]} idle there)" for q in others)
                row["idle_reason"] = "tile"
                row["idle_reason_text"] = text
                sizes = " and ".join(f"{cluster.pool(q).gpus - idle_of[q] + need[q]} GPUs "
                                     f"on {q}" for q in short)
                row["fix"] = f"{sizes} would hold one more replica of this plan; or give {them} other work"
            elif row["more"] is not None:
                row["idle_reason"] = "slower"
                row["idle_reason_text"] = (f"using more of {p.name} is slower: the best plan the search scored with "
                                           f"more of it is {_slower(row['more']['slower_pct'])}")
                row["fix"] = (f"give {them} other work, or " + (f"drop pool {p.name} from the cluster file" if not used
                                                                 else f"set {p.name}'s gpus to {used} in the cluster file"))
            else:
                row["idle_reason"] = "nothing_fits"
                row["idle_reason_text"] = (f"no plan the search scored that uses more of {p.name} fits in memory "
                                           f"({p.cluster.gpu.name})")
                row["fix"] = (f"give {them} other work, or allow recomputation or ZeRO "
                              "(--recompute, --zero) so more plans fit")
        out.append(row)
    return tuple(out)


def idle_lines(rows) -> list[str]:
    """``idle:`` lines of the explanation, one per pool with idle GPUs."""
    lines = []
    for r in rows:
        if not r["gpus_idle"]:
            continue
        text = (f"{r['pool']}: {r['gpus_idle']} of {r['gpus']} GPUs idle ({r['gpus_used']} used): "
                f"{r['idle_reason_text']}")
        m = r["more"]
        if m is not None and r["idle_reason"] != "slower":
            text += (f"; the best plan with more of {r['pool']} ({m['layout']}, {_gpus(m['gpus_on_pool'])} there) runs "
                     f"{m['tokens_per_s']:,.0f} tokens/s, {_slower(m['slower_pct'])}")
        elif m is not None:
            text += f" ({m['layout']}, {_gpus(m['gpus_on_pool'])} there, {m['tokens_per_s']:,.0f} tokens/s)"
        lines.append(text + f". Fix: {r['fix']}")
    return lines


__all__ = ["REASONS", "idle_lines", "pool_use", "replica_gpus_on"]
