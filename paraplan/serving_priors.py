"""What a serving number rests on, said once for every output (``serve`` on the command line,
``paraplan.serving_api``, the serving plots): whether the serving efficiency is an unfitted prior
(``ServingEfficiency.prior``: a generation's written prior ``hardware_specs/serving_efficiency/
<generation>.yaml``, its donor's fitted factors, or ``default.yaml``) and whether a
speculative TPOT rests on the unfitted draft acceptance (``ServingContext.acceptance_is_prior``).
The project's rule: numbers that rest on an unfitted prior say so next to the number."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from hardware_specs.catalog import BUILTIN_DIR
from hardware_specs.efficiency_model import PRIOR_MARK, prior_mark


def _shown(origin: str, fallback: str) -> str:
    """The file a profile was read from as a report names it: relative to the repository for a
    shipped file (``hardware_specs/serving_efficiency/ampere.yaml``), as given for a user's
    (``PARAPLAN_HARDWARE_PATH``); ``fallback`` for a profile built in memory."""
    if not origin:
        return fallback
    path = Path(origin).resolve()
    try:
        return path.relative_to(BUILTIN_DIR.parent).as_posix()
    except ValueError:
        return str(path)


def prior_text(ctx) -> str:
    """The sentence saying the serving efficiency is an unfitted prior, or "" where it is fitted;
    it names the file the profile was read from (``ServingEfficiency.origin``)."""
    eff = ctx.efficiency
    if not eff.prior:
        return ""
    gen, donor = ctx.cluster.gpu.generation, eff.donor
    if donor:
        return (f"rests on an unfitted prior: no serving measurement of {gen} GPUs was fitted; its factors are "
                f"{donor}'s fitted ones ({_shown(eff.origin, f'hardware_specs/serving_efficiency/{gen}.yaml')})")
    return (f"rests on an unfitted prior: no serving measurement of {gen} GPUs was fitted; "
            f"see {_shown(eff.origin, 'hardware_specs/serving_efficiency/default.yaml')}")


def acceptance_text(ctx, fix: str = "give --draft-acceptance") -> str:
    """The sentence saying a speculative TPOT rests on the unfitted draft acceptance, or ""."""
    if not (ctx.speculative_tokens and ctx.acceptance_is_prior):
        return ""
    return f"an unfitted prior: DeepSeek-V3 report section 5.4.3, 85-90% for the second token; {fix}"


def mark(ctx) -> str:
    """``PRIOR_MARK`` with a leading space (" *") where the serving efficiency is an unfitted
    prior, else "": put beside each number that rests on it, as training's tables do
    (``paraplan.priors.mark``)."""
    return prior_mark(bool(ctx.efficiency.prior))


def legend(ctx) -> str | None:
    """The line explaining ``mark`` under a table whose cells carry it ("* rests on an unfitted
    prior: ..."), or None where the serving efficiency is fitted."""
    text = prior_text(ctx)
    return f"{PRIOR_MARK} {text}; read the numbers marked {PRIOR_MARK} as a sketch" if text else None


def bracketed(text: str) -> str:
    """``text`` as a note appended to a line (" [text]"), or "" for no text."""
    return f" [{text}]" if text else ""


def label_columns(ctx, drafting: bool | None = None) -> dict[str, Any]:
    """The columns that say what a row's numbers rest on: ``efficiency_fitted`` and, where
    ``drafting`` (default: the context drafts), ``speculative_tokens``, ``draft_acceptance``,
    ``draft_acceptance_is_prior`` and ``draft_model`` (None for the acceptance where it does not
    draft, as ``serve simulate --json``)."""
    cols: dict[str, Any] = {"efficiency_fitted": not ctx.efficiency.prior}
    if drafting if drafting is not None else bool(ctx.speculative_tokens):
        cols.update(ctx.draft_fields())          # as the serving report's JSON states them
    return cols


def notes(ctx, fix: str = "give --draft-acceptance") -> list[str]:
    """One sentence per prior a plan's numbers rest on (the serving efficiency, the draft
    acceptance), none where they rest on fitted or given values; ``fix`` says how to give the
    acceptance."""
    out = [f"the plan {t}" for t in (prior_text(ctx),) if t]
    return out + [f"the draft acceptance is {t}" for t in (acceptance_text(ctx, fix),) if t]


def labelled_plan(plan, ctx, fix: str = "give draft_acceptance"):
    """``plan`` (a ``ServingPlan``) with ``label_columns`` on its candidates, front, best and
    ``engine_refused_best`` row and the ``notes`` at the end of ``why``."""
    cols = label_columns(ctx)

    def labelled(row):
        if row is None:
            return None
        row = row.copy()
        for k, v in cols.items():
            row[k] = v
        return row
    refused = plan.engine_refused_best      # the winner the engine cannot launch, where one is kept
    if refused is not None:
        refused = replace(refused, row=labelled(refused.row))
    return replace(plan, candidates=plan.candidates.assign(**cols), front=plan.front.assign(**cols),
                   best=labelled(plan.best), why=list(plan.why) + [f"note: {n}" for n in notes(ctx, fix)],
                   engine_refused_best=refused)


__all__ = ["acceptance_text", "bracketed", "label_columns", "labelled_plan", "legend", "mark", "notes", "prior_text"]
