"""Text for a heterogeneous search: a plan's layout on one line, and where the time goes per pool."""
from __future__ import annotations

from planners.hetero_idle import idle_lines
from simulator.heterogeneous.plan import HeteroPlan
from simulator.heterogeneous.report import POOL_TIME_PARTS, HeteroReport

GIB = 2**30


def format_rows(rows: list[list[str]], headers: list[str]) -> str:
    """A plain aligned table: first column left, the rest right."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(values):
        return "  " + "  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths)))

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]) + "\n"


def _layers(counts: list[int]) -> str:
    if len(set(counts)) == 1:
        return f"{len(counts)}x{counts[0]}" if len(counts) > 1 else str(counts[0])
    return ",".join(str(c) for c in counts)


def group_text(group) -> str:
    """``8x h100 tp8 pp4 [4x20]``: replicas, then each run of stages on one pool and degree."""
    runs = []
    for st in group.stages:
        if runs and runs[-1][0] == st.pool and runs[-1][1] == st.tp:
            runs[-1][2].append(st.layers)
        else:
            runs.append([st.pool, st.tp, [st.layers]])
    body = " > ".join(f"{pool} tp{tp} pp{len(ls)} [{_layers(ls)}]" for pool, tp, ls in runs)
    return f"{group.replicas}x {body}"


def layout_text(plan: HeteroPlan) -> str:
    """Every replica group of ``plan`` on one line, groups joined by `` + ``."""
    return " + ".join(group_text(g) for g in plan.groups)


def pool_rows(report: HeteroReport) -> list[list[str]]:
    """One row per pool: GPUs, stages, layers, the step's parts (s), peak memory / HBM (GiB)."""
    rows = []
    for p in report.pools:
        prior = "" if p.efficiency_fitted else " (prior)"
        rows.append([p.pool, p.gpu + prior, f"{p.gpus_used}/{p.gpus}", str(p.stages), str(p.layers)]
                    + [f"{p.time_s[k]:.3f}" for k in POOL_TIME_PARTS]
                    + [f"{p.peak_memory_bytes / GIB:.1f}/{p.hbm_bytes / GIB:.0f}"])
    return rows


POOL_HEADERS = ["pool", "gpu", "gpus_used", "stages", "layers"] + list(POOL_TIME_PARTS) + ["memory_gib/hbm_gib"]


def pool_table(report: HeteroReport) -> str:
    return format_rows(pool_rows(report), POOL_HEADERS)


def _why(result) -> list[str]:
    rep = result.best_report
    lines = []
    groups = rep.groups
    total = sum(g["micro_batches_total"] for g in groups)
    pools_of = [sorted({s.pool for s in g.stages}) for g in rep.plan.groups]
    if len(groups) > 1:
        shares = ", ".join(f"{'+'.join(pools_of[i])} {100.0 * g['micro_batches_total'] / total:.0f}% "
                           f"({g['micro_batches_total']} of {total}, slowest stage {g['slowest_stage_s'] * 1e3:.1f} ms)"
                           for i, g in enumerate(groups))
        lines.append(f"each pool runs its own replicas; batch shares follow their speed: {shares}")
    mixed = [g for g in rep.plan.groups if len({s.pool for s in g.stages}) > 1]
    for g in mixed:
        per_pool = {}
        for s in g.stages:
            per_pool.setdefault(s.pool, []).append(s.layers)
        split = "; ".join(f"{p}: {len(v)} stage{'' if len(v) == 1 else 's'}, {sum(v)} layers" for p, v in per_pool.items())
        lines.append(f"a pipeline crosses pools, layers split by speed ({split})")
    parts = rep.time_breakdown_s
    dp = parts.get("dp_comm_exposed_s", 0.0)
    lines.append(f"exposed data-parallel traffic {dp:.3f} s of the {rep.step_time_s:.3f} s step; "
                 f"pipeline fill and drain {parts.get('pipeline_bubble_s', 0.0):.3f} s")
    return lines


def explain_text(result) -> str:
    """Best plan vs each pool alone, where the time goes per pool, and why the winner wins."""
    rep = result.best_report
    out = [f"best plan ({rep.n_gpus} GPUs): {layout_text(result.best)}",
           f"  step {rep.step_time_s:.4g} s, {rep.tokens_per_s:,.0f} tokens/s, MFU {100 * rep.mfu_reference:.1f}% "
           f"of the {rep.mfu_reference_dtype} peak"]      # of the reference peaks, as every table
    for label, pair in result.pool_only_rows():
        if pair is None:
            out.append(f"  vs {label}: nothing fits")
            continue
        r = pair[1]
        gain = 100.0 * (rep.tokens_per_s / r.tokens_per_s - 1.0)
        out.append(f"  vs {label}: {r.tokens_per_s:,.0f} tokens/s on {r.n_gpus} GPUs ({layout_text(pair[0])}): "
                   f"best is {gain:+.1f}%")
    out.append("")
    out.append("where the time goes per pool (busiest stage, seconds per step; idle = waiting on other stages or pools)")
    out.append(pool_table(rep).rstrip())
    out.append("")
    out += ["why: " + line for line in _why(result)]
    out += ["idle: " + line for line in idle_lines(result.pool_use)]
    if result.prior_pools:
        out.append(f"note: numbers on {', '.join(result.prior_pools)} rest on an unfitted efficiency prior")
    return "\n".join(out) + "\n"
