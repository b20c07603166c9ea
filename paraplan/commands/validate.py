"""``paraplan validate``: how far the simulator's predictions are from measured runs.

``validate published [PATH]`` predicts every row of a published-runs CSV it can model (see
``paraplan.validation.published`` for how a row becomes a model, cluster and configuration)
and reports the error per source; rows it cannot model are listed with the reason. Without
PATH it reads the public file the accuracy table is made from (``../shared/validation`` beside
the checkout, else the copy bundled in the package: ``paraplan.validation.datasets``).
``validate measured`` (runs measured on this machine) is added by the measure package.
"""
from __future__ import annotations

import csv
import io
import math
import sys
import textwrap
from pathlib import Path
from collections import Counter

import click

from paraplan.cli import (atomic_output_path, check_distinct_paths, check_image_path, check_writable, dump_json, format_table,
                          four_significant, step_bar, write_atomic)
from hardware_specs.errors import InputError

#: the per-row output columns of --json / --csv, in order.
ROW_KEYS = ("id", "status", "metric", "predicted", "measured", "rel_error", "speed_error", "reason", "source",
            "efficiency_fitted", "assumptions", "fits")


@click.group("validate", short_help="Compare predictions with measured runs.")
def command() -> None:
    """How close are paraplan's predictions to what real training and serving runs measured?

    \b
    Example:
      paraplan validate published                 # the bundled (or shared) published runs
      paraplan validate published --source KOR22  # one source's rows (your own CSV: give its PATH)
      paraplan validate serving --backend vllm    # measured TTFT and TPOT of serving deployments
    """


def _clean(value):
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, str) and not value.strip():
        return None
    return value


def row_records(results) -> list[dict]:
    """One dict per validated row with ``ROW_KEYS`` (None where a value is missing or NaN)."""
    out = []
    for rec in results.to_dict("records"):
        out.append({k: _clean(rec.get(k)) for k in ROW_KEYS})
    return out


def _csv_text(records: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(ROW_KEYS), lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({k: ("" if r[k] is None else r[k]) for k in ROW_KEYS})
    return buf.getvalue()


def _fmt_pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def _finite_limit(ctx, param, value):
    """--fail-above's value, finite: FloatRange(min=0) lets NaN through (NaN < 0 is false), and a
    NaN limit is never exceeded, so the CI gate would pass whatever the error."""
    if value is not None and not math.isfinite(value):
        raise InputError("--fail-above", f"must be a finite percentage, got {value}", "e.g. --fail-above 15")
    return value


def _fail_above_option(what: str):
    return click.option("--fail-above", "fail_above_pct", type=click.FloatRange(min=0), metavar="PCT",
                        callback=_finite_limit,
                        help=f"For CI: after printing, exit 1 (one 'regression:' line on stderr) when the mean "
                             f"|error| in percent {what} is above PCT, or when no row was predicted.")


def _plot_option(what: str):
    return click.option("--plot", "plot_path", type=click.Path(dir_okay=False), metavar="FILE",
                        help=f"Also draw {what} to FILE (.png, .svg or .pdf).")


def _write_plot(plot_path: str, draw) -> None:
    """Draw a figure to ``plot_path`` atomically (``draw(tmp_path)``) and say so on stderr."""
    atomic_output_path(plot_path, draw, "--plot")
    click.echo(f"wrote {plot_path}", err=True)


def _ok_errors(results, metric: str | None = None) -> list:
    """``rel_error`` of the predicted rows (of ``metric``); none for a file without rows."""
    if "status" not in results or "rel_error" not in results:
        return []
    ok = results[results["status"] == "ok"]
    if metric is not None:
        ok = ok[ok["metric"] == metric]
    return ok["rel_error"].tolist()


def _gate(limit_pct: float | None, errors: dict) -> None:
    """Exit 1 when a metric's mean |rel_error| (percent) is above ``limit_pct``. ``errors``: metric
    name -> the |rel_error| fractions of its predicted rows. Exit 2 stays for bad input."""
    if limit_pct is None:
        return
    failed = []
    for name, errs in errors.items():
        errs = [abs(float(e)) for e in errs if e is not None and e == e]
        if not errs:
            failed.append(f"{name}: no row predicted")
            continue
        mean = 100.0 * sum(errs) / len(errs)
        if mean > limit_pct:
            failed.append(f"{name}: mean |error| {mean:.2f}% over {len(errs)} rows is above --fail-above {limit_pct:g}%")
    if failed:
        click.echo("regression: " + "; ".join(failed), err=True)
        sys.exit(1)


def _advance(bar, done: int, total: int) -> None:
    """Move a click progress bar to ``done`` of ``total`` (a total that grows or shrinks as the
    work learns its size, ``validate_rows``'s rows read then rows predicted)."""
    bar.length = max(int(total), 1)
    bar.update(int(done) - bar.pos)


def _row_label(record: dict, index) -> str:
    """A skipped row's id as the file gives it; a row with no id is named by its position
    (an empty cell is read as missing, and would print as nan)."""
    rid = record.get("id")
    if rid is None or (isinstance(rid, float) and rid != rid) or not str(rid).strip():
        return f"(no id: data row {int(index) + 1})"
    return str(rid)


def _prior_sources(results) -> dict[str, str]:
    """{source as the table shows it: its predicted rows resting on an unfitted efficiency model,
    as "4 rows on volta"} (``efficiency_fitted`` False), the ``TOTAL_ROW`` when any source has one."""
    from paraplan.validation.published import TOTAL_ROW, shown_source
    if "efficiency_fitted" not in results:
        return {}
    ok = results[(results.status == "ok") & results.efficiency_fitted.astype(object).eq(False)]
    out = {}
    for src, g in ok.groupby("source", sort=True):
        counts = g.groupby("generation").size()
        out[shown_source(src)] = ", ".join(f"{n} row{'s' * (n != 1)} on {gen}" for gen, n in counts.items())
    if out:
        out[TOTAL_ROW] = ""
    return out


def _marked(source: str, priors: dict[str, str]) -> str:
    """The table's source cell, with ``priors.MARK`` when some of its numbers rest on a prior."""
    from paraplan.priors import mark_text
    return source + mark_text() if source in priors else source


def _prior_footnote(priors: dict[str, str], cross_validated: bool) -> list[str]:
    """The line explaining the table's marks (none when nothing is marked)."""
    from paraplan.priors import MARK
    from paraplan.validation.published import TOTAL_ROW
    where = "; ".join(f"{src}: {what}" for src, what in priors.items() if src != TOTAL_ROW)
    if not where:
        return []
    which = "cross-validated errors" if cross_validated else "errors"
    return [f"{MARK} the {which} include rows predicted with an unfitted efficiency prior (no measured run has "
            f"checked it; read them as a sketch): {where} (efficiency_fitted false in --json/--csv)"]


def _unfit_note(results) -> list[str]:
    """The line naming the predicted rows the memory model says do not fit in the GPU's memory
    (the runs did run, so the memory model misses there; their step is priced as laid out)."""
    if "fits" not in results:
        return []
    ok = results[results.status == "ok"]
    unfit = ok[ok["fits"].astype(object) == False]   # noqa: E712 (a column of bools and None)
    if not len(unfit):
        return []
    where = ", ".join(f"{src} {n}" for src, n in unfit.groupby("source").size().items())
    rows, they = ("row", "it does") if len(unfit) == 1 else ("rows", "they do")
    return [f"note: {len(unfit)} predicted {rows} ran, yet the memory model says {they} not fit in the GPU's memory "
            f"(fits false in --json/--csv; the step is priced as laid out): {where}"]


def summary_text(results, summary, list_skipped: bool) -> str:
    """Per-source error table, then skipped rows grouped by reason (or listed one by one)."""
    priors = _prior_sources(results)
    if "in_sample_mean_abs_err_pct" in summary:
        rows = [[_marked(r["source"], priors), int(r["rows_ok"]), int(r["rows_skipped"]), _fmt_pct(r["in_sample_mean_abs_err_pct"]),
                 _fmt_pct(r["mean_abs_err_pct"]), _fmt_pct(r["worst_abs_err_pct"])] for r in summary.to_dict("records")]
        lines = ["prediction error per source (|predicted - measured| / measured): in-sample (the committed "
                 "efficiency models) and leave-one-source-out (models fitted without the source)",
                 format_table(rows, ["source", "rows_ok", "rows_skipped", "in_sample_mean_abs_err_pct",
                                     "cv_mean_abs_err_pct", "cv_worst_abs_err_pct"], align="lrrrrr").rstrip()]
        lines += _prior_footnote(priors, cross_validated=True)
        ok = results[results.status == "ok"]
        for basis, what in (("neighbour", "the neighbouring GPU generation's fit without the source (too few "
                                          "rows of their own generation from other sources)"),
                            ("none", "no fit at all: no other source of their GPU generation or its neighbour, "
                                     "so the middle of each factor's range (an unfitted prior)")):
            by_source = ok[ok["cv_basis"] == basis].groupby("source").size()
            if len(by_source):
                where = ", ".join(f"{src} {n}" for src, n in by_source.items())
                lines.append(f"note: cross-validated rows resting on {what}: {where}")
    else:
        rows = [[_marked(r["source"], priors), int(r["rows_ok"]), int(r["rows_skipped"]), _fmt_pct(r["mean_abs_err_pct"]),
                 _fmt_pct(r["worst_abs_err_pct"])] for r in summary.to_dict("records")]
        lines = ["prediction error per source (|predicted - measured| / measured)",
                 format_table(rows, ["source", "rows_ok", "rows_skipped", "mean_abs_err_pct", "worst_abs_err_pct"],
                              align="lrrrr").rstrip()] + _prior_footnote(priors, cross_validated=False)
    lines += _unfit_note(results)
    skipped = results[results.status != "ok"]
    if len(skipped):
        lines += ["", f"skipped rows: {len(skipped)}"]
        if list_skipped:
            table = [[_row_label(r, i), r["reason"]] for i, r in zip(skipped.index, skipped.to_dict("records"))]
            lines.append(format_table(table, ["id", "reason"], align="ll", indent="  ").rstrip())
        else:
            counts = Counter(skipped.reason.fillna("").astype(str))
            lines += ["   rows  reason"] + _counted_reasons(counts)
            lines.append("  (--list-skipped lists every skipped row id)")
    return "\n".join(lines) + "\n"


@command.command("published", short_help="Predict the rows of a published-runs CSV and report the error.")
@click.argument("path", type=click.Path(dir_okay=False), required=False)
@click.option("--source", "source_prefix", metavar="PREFIX",
              help="Only rows whose run_id starts with PREFIX, matched as a plain case-sensitive text prefix "
                   "(KOR22 takes every KOR22-* row, KOR22-T5 only those; KOR would take KOR22 and KOR23 "
                   "alike): finer or coarser than the source column, which is the run_id before its first "
                   "'-'. With --cross-validate it picks the rows reported; each held-out fit still uses every "
                   "other source of PATH.")
@click.option("--json", "as_json", is_flag=True,
              help="One object per row: id, status (ok|skipped), metric, predicted, measured, rel_error, speed_error "
                   "(predicted speed / measured speed - 1: + = predicted faster, for time and rate metrics "
                   "alike), reason, source (the run_id's text before its first '-', e.g. KOR22 for "
                   "KOR22-T5-22B; the grouping of the table and of --cross-validate's held-out fits; "
                   "'(no run_id)' for an empty one), efficiency_fitted (false: predicted with an unfitted efficiency "
                   "prior, marked * in the table), assumptions, fits (false: the memory model finds no room for the "
                   "run as laid out, though it ran).")
@click.option("--csv", "as_csv", is_flag=True, help="The same rows as a CSV table.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="Write the output to this file (atomically) instead of stdout.")
@click.option("--list-skipped", is_flag=True, help="List every skipped row id with its reason.")
@click.option("--cross-validate", "cross_validate", is_flag=True,
              help="Also predict each source's rows with efficiency models refitted without that source "
                   "(leave-one-source-out; minutes). --json/--csv rows then carry the cross-validated "
                   "prediction, and the table shows it beside the in-sample error.")
@_plot_option("each predicted row's speed error, one column per source (cross-validated with --cross-validate)")
@_fail_above_option("over all predicted rows (the table's ALL row; cross-validated with --cross-validate)")
@click.option("--explain", "explain_id", metavar="ID",
              help="Show one row (its id column) as the simulator reads it: model, cluster, stack, "
                   "configuration, the assumptions made for it, and the step behind its prediction, with the "
                   "breakdown `paraplan simulate` prints (--json: the row's fields and that step's JSON).")
def published_cmd(path: str | None, source_prefix: str | None, as_json: bool, as_csv: bool, out_path: str | None,
                  list_skipped: bool, cross_validate: bool, plot_path: str | None, fail_above_pct: float | None,
                  explain_id: str | None = None) -> None:
    """How well does the simulator predict the measured rows of PATH (a CSV with the columns of
    shared/validation/published_runs.csv)? Without PATH: the public published-runs file
    (../shared/validation/published_runs.csv beside the checkout, else the copy bundled with
    paraplan), so the README's accuracy table can be reproduced from the repository alone.

    Each row's prediction is converted to its measured metric with its flops_convention;
    rel_error = (predicted - measured) / measured. Prints, per source, rows used, rows skipped,
    mean and worst absolute error in percent, then the skipped rows grouped by reason.

    \b
    Example:
      paraplan validate published
      paraplan validate published --source KOR22
      paraplan validate published --csv --out errors.csv
      paraplan validate published --source KOR22 --fail-above 10     # a CI gate: exit 1 above 10%
      paraplan validate published --plot published_errors.png        # the errors by source, as a figure
      paraplan validate published --explain KOR22-T5-1T-selsp:iter_time_s   # where one row's time goes
    """
    from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
    from paraplan.validation.published import read_runs, summarize, validate_rows

    if as_json and as_csv:
        raise InputError("--json", "give --json or --csv, not both", "drop one of the two")
    if explain_id is not None:
        _refuse_beside_explain(source_prefix=source_prefix, as_csv=as_csv, list_skipped=list_skipped,
                               cross_validate=cross_validate, plot_path=plot_path, fail_above_pct=fail_above_pct)
        if not explain_id.strip():
            raise InputError("--explain", "is empty", "give a row's id, e.g. KOR22-T5-1T-selsp:iter_time_s")
    check_distinct_paths({"--out": out_path, "--plot": plot_path}, {"PATH": path})
    if out_path is not None:
        check_writable(out_path)   # fail now, not after predicting every row
    if plot_path is not None:
        check_image_path(plot_path, "--plot")
    default_path = path is None
    if default_path:
        path = str(validation_file(PUBLISHED_RUNS))
    df = read_runs(path)
    if df.empty:        # the per-source table had nothing to group (an internal KeyError)
        raise InputError("PATH", f"{path} has a header but no rows", "add the runs to validate below the header")
    if explain_id is not None:
        _explain(df, explain_id, as_json, out_path)
        return
    if source_prefix is not None and not source_prefix.strip():     # '' matched every row
        raise InputError("--source", "is empty", "give a run_id prefix such as KOR22, or leave the option out")
    report = None               # every row
    if source_prefix:
        report = df["run_id"].astype(str).str.startswith(source_prefix).to_numpy()
        if not report.any():
            raise InputError("--source", f"no row's run_id starts with '{source_prefix}'",
                             "see the run_id column for the source prefixes")
        if not cross_validate:  # a cross-validated fit without a source reads every other source's rows
            df, report = df[report], None
    # which file the default was: said on a terminal before the work, elsewhere once the output is
    # written (a run that fails later, its output unwritable, prints its one error line only), and
    # off a terminal never beside --fail-above's one 'regression:' line
    read_note = f"reading {path}" if default_path else ""
    if read_note and sys.stderr.isatty():
        click.echo(read_note, err=True)
        read_note = ""
    elif fail_above_pct is not None:
        read_note = ""
    if cross_validate:
        # minutes: off a terminal (a log, CI) the bar is hidden, so step_bar's lines say how far
        # it is (a hidden click bar printed nothing until the end). The count is the sources
        # refitted, those with a predicted row (the bar was sized by every source, 21 for 13)
        with step_bar("refitting without each source", unit="sources", quiet=True) as bar:
            results = validate_rows(df, cross_validate=True, report=report,
                                    cv_progress=lambda done, total, src: bar(done, total, src and f"without {src}"))
    else:
        with click.progressbar(length=2 * len(df), label="predicting rows", file=sys.stderr,
                               hidden=not sys.stderr.isatty()) as bar:
            results = validate_rows(df, progress=lambda done, total: _advance(bar, done, total))
    if as_json or as_csv:
        records = row_records(results)
        text = dump_json(records) if as_json else _csv_text(records)
    else:
        text = summary_text(results, summarize(results), list_skipped)
    if out_path is not None:
        write_atomic(out_path, text)
        click.echo(f"wrote {out_path} ({len(results)} rows, {int((results.status == 'ok').sum())} predicted)", err=True)
    else:
        click.echo(text, nl=False)
    if plot_path is not None and not (results.status == "ok").any():
        click.echo(f"note: --plot: no row was predicted, so {plot_path} was not drawn (the table says why)", err=True)
    elif plot_path is not None:
        from paraplan.validation_plots import published_error_strip
        _write_plot(plot_path, lambda tmp: published_error_strip(
            results, tmp, title=("cross-validated (each source predicted by a fit without it)" if cross_validate
                                 else None)))
    if read_note:
        click.echo(read_note.replace("reading", "read", 1), err=True)
    if fail_above_pct is not None:
        _gate(fail_above_pct, {"all rows": _ok_errors(results)})


def _refuse_beside_explain(**given) -> None:
    """--explain shows one row: the options that shape the whole file's report do not apply."""
    for name, value in given.items():
        if value not in (None, False):
            option = {"source_prefix": "--source", "plot_path": "--plot", "fail_above_pct": "--fail-above",
                      "as_csv": "--csv", "backend": "--backend", "mode": "--mode"}.get(name, "--" + name.replace("_", "-"))
            raise InputError(option, "reports the whole file; --explain shows one row", f"drop {option} or --explain")


def _plain(value: float) -> str:
    """A measured or predicted value for people: 15,938 tokens/s, 71.49 s, 56.3 %."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _explain(df, explain_id: str, as_json: bool, out_path: str | None) -> None:
    """``--explain ID``: the row as the simulator reads it and the step behind its prediction."""
    from paraplan.api import config_label
    from paraplan.commands.simulate import json_dict, render
    from paraplan.validation.explain_row import explain_row
    from simulator import headroom

    row = explain_row(df, explain_id)
    if row.report is None:
        fields = {"id": row.row_id, "status": "skipped", "metric": row.metric, "measured": row.measured,
                  "reason": row.reason}
        text = dump_json(fields) if as_json else f"row {row.row_id}: skipped: {row.reason}\n"
    else:
        inp, report = row.inputs, row.report
        keep_gib = headroom.headroom_gib(inp.cluster.gpu.hbm_bytes)
        fields = {"id": row.row_id, "status": "ok", "metric": row.metric, "predicted": row.predicted,
                  "measured": row.measured, "rel_error": row.rel_error, "speed_error": row.speed_error,
                  "stack": inp.stack, "cluster": inp.cluster.name, "config": config_label(report.config),
                  "assumptions": list(inp.assumptions)}
        if as_json:
            text = dump_json({**fields, "step": json_dict(report, inp.cluster, keep_gib, inp.model)})
        else:
            lines = [f"row      {row.row_id}",
                     f"measured {row.metric} {_plain(row.measured)}; predicted {_plain(row.predicted)} "
                     f"({100 * row.rel_error:+.2f}%; predicted speed {100 * row.speed_error:+.2f}%)",
                     f"read as  {config_label(report.config)} on {inp.cluster.name} "
                     f"({inp.config.n_gpus} x {inp.cluster.gpu.name}), stack {inp.stack}"]
            lines += textwrap.wrap("; ".join(inp.assumptions), width=118, initial_indent="assumed  ",
                                   subsequent_indent=" " * 9) if inp.assumptions else []
            text = "\n".join(lines) + "\n\n" + render(report, inp.model, inp.cluster, keep_gib, inp.config)
    if out_path is not None:
        write_atomic(out_path, text)
        click.echo(f"wrote {out_path}", err=True)
    else:
        click.echo(text, nl=False)


#: the evaluation outputs ``--explain`` shows for a serving row, in order, by mode (seconds, shown
#: in ms; the rest as numbers): the decode step by part, then the prefill and queueing behind TTFT
_SERVING_PARTS = {
    "agg": ("ttft_s", "ttft_p90_s", "tpot_s", "decode_step_s", "decode_mlp_s", "decode_attention_s",
            "decode_elementwise_s", "decode_lm_head_s", "decode_comm_s", "decode_host_s", "decode_kernel_fixed_s",
            "decode_draft_s", "prefill_own_s", "prefill_work_s", "prefill_service_s", "join_s", "wait_behind_s",
            "queue_wait_s", "prefill_share_fraction", "running_per_rank", "decoding_per_rank", "max_admitted_per_rank",
            "tokens_per_s_per_gpu", "tokens_per_s_per_user"),
    "disagg": ("ttft_s", "ttft_p90_s", "tpot_s", "decode_step_s", "decode_mlp_s", "decode_attention_s",
               "decode_elementwise_s", "decode_lm_head_s", "decode_comm_s", "decode_host_s", "decode_kernel_fixed_s",
               "decode_draft_s", "prefill_step_s", "prefill_own_s", "kv_transfer_s", "queue_wait_s", "request_host_s",
               "prefill_utilization_fraction", "decoding_per_rank", "max_batch_per_rank", "tokens_per_s_per_gpu",
               "tokens_per_s_per_user"),
}


def _explain_serving(df, explain_id: str, as_json: bool, out_path: str | None) -> None:
    """``validate serving --explain ID``: the row's reading and the parts of its prediction."""
    from paraplan.validation.serving_explain import explain_serving_row

    row = explain_serving_row(df, explain_id)
    metrics = {r["metric"]: r for r in row.records}
    if as_json:
        text = dump_json({"id": row.row_id, "metrics": [_serving_record(r) for r in row.records],
                          "reading": row.reading or None, "layout": row.layout or None, "parts": row.parts})
    elif row.parts is None:
        reasons = sorted({r["reason"] for r in row.records if r["reason"]})
        text = f"row {row.row_id}: skipped: {'; '.join(reasons) or 'skipped'}\n"
    else:
        def said(metric: str) -> str:
            r = metrics[metric]
            name = metric.replace("_ms", "").ljust(9)
            if r["status"] != "ok":
                return f"{name}skipped ({r['reason']})"
            return (f"{name}measured {r['measured']:.4g} ms, predicted {r['predicted']:.4g} ms "
                    f"({100 * r['rel_error']:+.1f}%)")
        rd = row.reading
        formats = f"weights {rd['dense_format']}" + (f", experts {rd['expert_format']}" if rd["expert_format"] else "")
        lay = ", ".join(f"{k} {v:g}" for k, v in row.layout.items() if k not in ("isl", "osl"))
        lines = [f"row      {row.row_id}", said("ttft_ms"), said("tpot_ms"),
                 f"read as  {rd['mode']}: {rd['model']} on {rd['system']} ({rd['gpu']}), stack {rd['stack']}, {formats}",
                 *textwrap.wrap(f"{lay}; isl {row.layout['isl']:g}, osl {row.layout['osl']:g}", width=118,
                                initial_indent="layout   ", subsequent_indent=" " * 9)]
        assumed = next((r.get("assumption") for r in row.records if r.get("assumption")), "")
        if assumed:
            lines += textwrap.wrap(assumed, width=118, initial_indent="assumed  ", subsequent_indent=" " * 9)
        keys = [k for k in _SERVING_PARTS.get(rd["mode"], ()) if k in row.parts] or sorted(row.parts)
        shown = [k for k in keys if not k.endswith("_s") or row.parts[k] != 0.0 or k in ("ttft_s", "tpot_s")]
        table = [[k[:-2] + "_ms" if k.endswith("_s") else k,
                  f"{1e3 * row.parts[k]:,.3f}" if k.endswith("_s") else f"{row.parts[k]:,.4g}"] for k in shown]
        text = "\n".join(lines) + "\n\n" + format_table(table, ["part", "value"], indent="  ")
    if out_path is not None:
        write_atomic(out_path, text)
        click.echo(f"wrote {out_path}", err=True)
    else:
        click.echo(text, nl=False)


@command.command("measured", short_help="Measure small torch runs here and compare with the prediction.")
@click.argument("cluster_path", type=click.Path(dir_okay=False), required=False)
@click.option("--steps", type=click.IntRange(2, 1000), default=14, show_default=True, help="Steps per run.")
@click.option("--warmup", type=click.IntRange(0), default=4, show_default=True,
              help="Leading steps excluded from the median.")
@click.option("--rounds", type=click.IntRange(1, 100), default=2, show_default=True,
              help="Measure the whole list this many times, interleaved; each configuration keeps its "
                   "median (a shared or virtual host drifts by 10-20% over minutes).")
@click.option("--calibrate-each-round", is_flag=True,
              help="Instead of CLUSTER_PATH: calibrate this machine afresh before each round and predict "
                   "that round from it; each configuration keeps its median error over the rounds (the "
                   "mean of the middle two for an even count; the robust choice on a drifting host, "
                   "~1.5 minutes a round on 2 CPU cores).")
@click.option("--layout", "layouts", multiple=True, metavar="NAME",
              help="Measure only this layout (repeatable; default all of them: single, single-mb1x4, "
                   "single-recompute, dp2, dp2-mb1x2, dp2-zero1, tp2, tp2-recompute, pp2-mb1x4, pp2-mb2x4).")
@click.option("--csv", "as_csv", is_flag=True,
              help="One row per configuration as CSV: the table's columns, the measured phases, the predicted "
                   "breakdown, and what the prediction assumed (hardware_profile, dtype, device, num_layers, "
                   "hidden_size, seq_len_tokens, vocab_size).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="Write the output to this file (atomically) instead of stdout.")
@_fail_above_option("of the step time over the measured layouts")
def measured_cmd(cluster_path: str | None, steps: int, warmup: int, rounds: int, calibrate_each_round: bool,
                 layouts: tuple[str, ...], as_csv: bool, out_path: str | None, fail_above_pct: float | None) -> None:
    """How well does the simulator predict runs measured on this machine?

    CLUSTER_PATH is a profile written by `paraplan calibrate`, or on a GPU machine the catalog
    system of its GPUs (e.g. hgx-h200). A small GPT is trained for a few steps under DP, TP, PP,
    mixed layouts and recomputation on local processes (gloo on CPU, nccl on GPUs), and each
    measured median step time is compared with simulate()'s prediction. On GPUs the GPT is
    GPU-sized (8 layers, hidden 2048, 2048 tokens) and only the layouts that fit the visible GPUs
    run (the others are named on stderr). Needs PyTorch (pip install 'paraplan[measure]').

    \b
    Example:
      paraplan calibrate --out my-machine.yaml
      paraplan validate measured my-machine.yaml --csv --out measured.csv
      paraplan validate measured --calibrate-each-round --rounds 3
      paraplan validate measured hgx-h200 --rounds 1      # on an H200 machine
      paraplan validate measured my-machine.yaml --layout dp2 --layout tp2 --fail-above 25   # CI
    """
    from paraplan.measure import compare_measured
    from paraplan.measure.compare import compare_recalibrating
    configs = _chosen_layouts(layouts)

    if cluster_path is None and not calibrate_each_round:
        raise InputError("cluster_path", "missing", "pass a profile from `paraplan calibrate`, or --calibrate-each-round")
    if cluster_path is not None and calibrate_each_round:
        raise InputError("cluster_path", "given with --calibrate-each-round", "use one or the other")
    if warmup >= steps:         # before 'measuring' is printed (it was checked once the runs had begun)
        raise InputError("--warmup", f"must be below --steps ({steps}), got {warmup}",
                         "time at least one step after the warm-up ones")
    from paraplan.commands.measure import UNAVAILABLE
    from paraplan.measure.calibrate import LOADED_MACHINE, sidecar_path
    # the profile's calibration timings are read too (their thread count): --out over them left
    # every later run failing on malformed JSON
    check_distinct_paths({"--out": out_path}, {} if cluster_path is None else {
        "CLUSTER_PATH": cluster_path, "CLUSTER_PATH's calibration timings": str(sidecar_path(cluster_path))})
    if out_path is not None:
        check_writable(out_path)
    # each report is one measured configuration (and, with --calibrate-each-round, one
    # calibration a round), not a training step: "2 of 10 steps" read as --steps
    try:
        with step_bar("measuring", unit="calibrations and configurations" if calibrate_each_round
                      else "configurations") as bar:
            if calibrate_each_round:
                df = compare_recalibrating(configs=configs, rounds=rounds, steps=steps, warmup=warmup, progress=bar)
            else:
                df = compare_measured(cluster_path, configs=configs, steps=steps, warmup=warmup, rounds=rounds, progress=bar)
    except InputError as exc:       # compare.check_steps_fit names its parameter: say the option
        if exc.field != "steps":
            raise
        raise InputError("--steps", exc.message, exc.fix) from None
    for name, reason in df.attrs.get("skipped", []):
        click.echo(f"skipped {name}: {reason}", err=True)
    loaded = _loaded_rows(df)
    if loaded:
        import warnings
        warnings.warn(f"{len(loaded)} of {len(df)} configurations ran on a loaded machine ({', '.join(loaded)}; "
                      f"above {LOADED_MACHINE:.0%}): their errors say little about the simulator, rerun on a "
                      "quiet machine", stacklevel=2)
    cols = [c for c in ("name", "dp", "tp", "pp", "micro_batch", "global_batch", "zero_stage", "recompute",
                        "measured_step_s", "predicted_step_s", "rel_error", "rel_error_spread", "cpu_wait_fraction") if c in df]
    if as_csv:      # machines get every column: measured phases and the predicted breakdown too
        text = df.drop(columns=["measured_step_times_s"], errors="ignore").to_csv(index=False)
    else:
        err = df["rel_error"].abs() * 100
        # fractions shown in percent under a _pct name; times with 4 significant digits
        pct = ("rel_error", "rel_error_spread", "cpu_wait_fraction")
        heads = [c.removesuffix("_fraction") + "_pct" if c in pct else c for c in cols]
        # a share this machine could not read (no schedstat: cpu_wait_fraction None) is said so
        rows = [[UNAVAILABLE if c in pct and (r[c] is None or r[c] != r[c])
                 else (f"{100 * r[c]:+.1f}" if c == "rel_error" else f"{100 * r[c]:.1f}") if c in pct
                 else four_significant(r[c]) if isinstance(r[c], float) else r[c] for c in cols] for _, r in df.iterrows()]
        text = _assumed_header(df) + format_table(rows, heads) + (
            f"\nmean |error| {err.mean():.1f}%, worst {err.max():.1f}% over {len(df)} configurations\n")
    if out_path is not None:
        write_atomic(out_path, text)
        click.echo(f"wrote {out_path} ({len(df)} configurations)", err=True)
    else:
        click.echo(text, nl=False)
    if fail_above_pct is not None:
        _gate(fail_above_pct, {"step time": df["rel_error"].tolist() if "rel_error" in df else []})


def _chosen_layouts(names: tuple[str, ...]) -> list[dict] | None:
    """The ``DEFAULT_CONFIGS`` that ``--layout`` names, in the order given (None: all of them);
    an unknown name is an ``InputError`` listing the names."""
    if not names:
        return None
    from paraplan.measure.compare import DEFAULT_CONFIGS
    by_name = {c["name"]: c for c in DEFAULT_CONFIGS}
    unknown = [n for n in names if n.strip() not in by_name]
    if unknown:
        raise InputError("--layout", f"unknown layout {unknown[0]!r}", "known: " + ", ".join(by_name))
    return [dict(by_name[n]) for n in dict.fromkeys(n.strip() for n in names)]


def _assumed_header(df) -> str:
    """The lines above the ``validate measured`` table saying what its predictions assumed: the
    hardware profile, the runs' dtype and device, the GPT's size (one line per distinct
    combination; none for a frame without those columns)."""
    from paraplan.measure.compare import ASSUMED_COLUMNS
    if not all(c in df for c in ASSUMED_COLUMNS):
        return ""
    lines = []
    for key in df[ASSUMED_COLUMNS].drop_duplicates().itertuples(index=False):
        a = dict(zip(ASSUMED_COLUMNS, key))
        lines.append(f"predicted on hardware profile {a['hardware_profile']}, {a['dtype']} on {a['device']}; "
                     f"GPT of {int(a['num_layers'])} layers, hidden {int(a['hidden_size'])}, seq_len "
                     f"{int(a['seq_len_tokens'])} tokens, vocab {int(a['vocab_size'])}")
    return "\n".join(lines) + "\n"


def _loaded_rows(df) -> list[str]:
    """'name (what loaded it)' for each measured row whose ranks waited for CPUs other processes
    held, or during which other processes or the hypervisor kept the cores busy, above
    ``LOADED_MACHINE`` (calibrate's threshold)."""
    from paraplan.measure.calibrate import LOADED_MACHINE
    out = []
    for _, r in df.iterrows():
        why = [f"{100 * r[c]:.0f}% {label}" for c, label in (("cpu_wait_fraction", "CPU wait"),
                                                               ("foreign_load", "foreign load"))
               if c in df and r[c] is not None and r[c] == r[c] and r[c] > LOADED_MACHINE]
        if why:
            out.append(f"{r['name']} {' and '.join(why)}")
    return out


@command.command("gpu-record", short_help="Compare a recorded GPU measurement (kernels, steps) with the cost models.")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--cluster", "cluster_name", default=None, metavar="NAME",
              help="Catalog system (or cluster YAML) of the GPU measured, e.g. hgx-h200.")
@click.option("--json", "as_json", is_flag=True,
              help="Every compared row as JSON: gemms, decode_gemms, steps, categories.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="Write the output to this file (atomically) instead of stdout.")
def gpu_record_cmd(folder: str, cluster_name: str | None, as_json: bool, out_path: str | None) -> None:
    """How do the cost models compare with kernels and training steps timed on a real GPU?

    FOLDER is written on a machine with a CUDA GPU by the repository's scripts
    (`python tools/gpu_kernel_checks.py FOLDER`, optionally `tools/gpu_step_profile.py FOLDER`
    and `tools/gpu_decode_checks.py FOLDER`). Needs no GPU and no torch: it reads the files and
    prints, per part, measured / predicted: the GEMM grid against the wave model at the
    generation's fitted plateau, the decode GEMMs against the serving model, each measured
    single-GPU step against simulate, and each profiled step's device time per kernel category.

    \b
    Example:
      # from a paraplan checkout (tests/data/gpu_h200 is the repository's H200 record):
      paraplan validate gpu-record tests/data/gpu_h200 --cluster hgx-h200
    """
    from hardware_specs.catalog import load_cluster
    from paraplan.measure.gpu_record import (RECORD_FILES, category_table, check_record_gpu, decode_table, gemm_table,
                                             load_record, step_table)

    if cluster_name is None:
        raise InputError("cluster", "missing", "name the catalog system of the GPU measured, e.g. --cluster hgx-h200")
    if out_path is not None:
        # an --out among the record's files replaced the measurement it was compared from
        check_distinct_paths({"--out": out_path}, {f"FOLDER ({name})": str(Path(folder) / name) for name in RECORD_FILES
                                                   if (Path(folder) / name).exists()})
        check_writable(out_path)
    record = load_record(folder)
    cluster = load_cluster(cluster_name)
    check_record_gpu(record, cluster)

    def part(table, present, source):
        """``table(record, cluster)`` if the record has it; an input error names ``source``."""
        if not present:
            return None
        try:
            return table(record, cluster)
        except InputError as exc:
            raise InputError(f"{source}: {exc.field}", exc.message, exc.fix) from None
    parts = {"gemms": part(gemm_table, not record.kernels.empty, "kernels.csv"),
             "decode_gemms": part(decode_table, not record.decode_gemms.empty, "decode_gemms.csv"),
             "steps": part(step_table, bool(record.runs), "measured_runs.json"),
             "categories": part(category_table, not record.step_kernels.empty, "step_kernels.csv")}
    if as_json:
        text = dump_json({k: ([] if v is None else [{c: _clean(x) for c, x in r.items()}
                                                      for r in v.to_dict("records")])
                          for k, v in parts.items()} | {"gpu": record.env.get("name"), "cluster": cluster.name})
    else:
        text = _gpu_record_text(record, cluster, parts)
    if out_path is not None:
        write_atomic(out_path, text)
        click.echo(f"wrote {out_path}", err=True)
    else:
        click.echo(text, nl=False)


def _ratio_rows(frame, keys) -> list[list]:
    """One row per group: count, median, p10, p90 of ``ratio`` and the share within 10%."""
    rows = []
    for key, x in frame.groupby(keys, sort=True):
        r = x["ratio"]
        rows.append([*(key if isinstance(key, tuple) else (key,)), len(r), f"{r.median():.3f}",
                     f"{r.quantile(0.1):.3f}", f"{r.quantile(0.9):.3f}", f"{100 * (r.sub(1).abs() <= 0.1).mean():.0f}"])
    return rows


def _gpu_record_text(record, cluster, parts) -> str:
    out = [f"{record.env.get('name', 'GPU')} against {cluster.name} "
           f"({cluster.gpu.name}, {cluster.gpu.generation} efficiency)"]
    heads = ["count", "median_ratio", "p10", "p90", "within_10_pct"]
    gemms = parts["gemms"]
    if gemms is not None:
        g = gemms.assign(size=["large" if f >= 2e11 else "small" for f in gemms["flops"]])
        out.append("GEMM grid, measured / predicted (large: >= 0.2 TFLOP; small ones are host-bound when "
                   "called back to back):\n" + format_table(_ratio_rows(g, ["dtype", "size"]), ["dtype", "size", *heads]))
    decode = parts["decode_gemms"]
    if decode is not None:
        out.append("decode GEMMs (CUDA graph, cold weights) against the serving model, measured / predicted:\n"
                   + format_table(_ratio_rows(decode, ["dtype"]), ["dtype", *heads]))
    steps = parts["steps"]
    if steps is not None:
        rows = [[r["name"], four_significant(r["measured_step_s"]), four_significant(r["predicted_step_s"]),
                 f"{100 * r['rel_error']:+.1f}"] for _, r in steps.iterrows()]
        out.append("single-GPU training steps against simulate:\n"
                   + format_table(rows, ["run", "measured_step_s", "predicted_step_s", "error_pct"])
                   + f"\nmean |error| {100 * steps['rel_error'].abs().mean():.1f}% over {len(steps)} runs")
    cats = parts["categories"]
    if cats is not None and not cats.empty:
        rows = [[r["run"], r["category"], four_significant(r["measured_s"]), r["measured_launches"],
                 None if r["predicted_s"] != r["predicted_s"] else four_significant(r["predicted_s"]),
                 None if r["predicted_kernels"] != r["predicted_kernels"] else int(r["predicted_kernels"])]
                for _, r in cats.iterrows()]
        out.append("profiled steps, device time per kernel category (the optimizer is priced as a whole):\n"
                   + format_table(rows, ["run", "category", "measured_s", "launches", "predicted_s",
                                         "kernels_priced"]))
    if len(out) == 1:
        out.append("(the folder holds no timed kernels, runs or profiles)")
    return "\n\n".join(out) + "\n"


@command.command("heterogeneous", short_help="Predict the Sailor runs (mixed consumer GPUs, GH200) and report the error.")
@click.argument("path", type=click.Path(dir_okay=False), required=False)
@click.option("--inter-node-gbps", type=float, default=None, metavar="GBPS",
              help="Network of the mixed (university) cluster, Gb/s per node, shared by its GPUs; the source does "
                   "not state it [default: 1, what the runs' measured gradient all-reduces imply].")
@click.option("--inter-node-latency-us", type=float, default=None, metavar="US",
              help="One-message latency of that network, microseconds [default: 50, NCCL over TCP].")
@click.option("--intra-node-gb-per-s", type=float, default=None, metavar="GBS",
              help="Link between the consumer GPUs of one node, GB/s one direction [default: each card's PCIe link].")
@click.option("--json", "as_json", is_flag=True,
              help="One object per run and metric: id, metric (iter_time_s|peak_memory_bytes), status, predicted, "
                   "measured, rel_error, reason, efficiency_fitted, assumptions.")
@click.option("--csv", "as_csv", is_flag=True, help="The same rows as CSV.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="Write the output to this file (atomically) instead of stdout.")
@_fail_above_option("of the iteration time or of the peak memory over the predicted runs")
def heterogeneous_cmd(path: str | None, inter_node_gbps: float | None, inter_node_latency_us: float | None,
                      intra_node_gb_per_s: float | None, as_json: bool, as_csv: bool, out_path: str | None,
                      fail_above_pct: float | None) -> None:
    """How well are mixed-GPU and GH200 training plans predicted? PATH is a Sailor-format JSON
    file (default: the shared or bundled heterogeneous/sailor_runs.json).

    Each run's plan (pipeline stages, replicas on GPU kinds, tensor parallelism, micro-batch) is
    simulated on pools built from its own fields; rel_error = (predicted - measured) / measured
    for the iteration time and the peak memory. Numbers resting on an unfitted efficiency prior
    (Turing: Titan RTX, RTX 2080 Ti) are marked "prior" in the table and carry
    efficiency_fitted: false in --json and --csv, as every other output marks them. The
    university cluster's network is not stated: it is the input --inter-node-gbps (see the
    README).

    \b
    Examples:
      paraplan validate heterogeneous
      paraplan validate heterogeneous --inter-node-gbps 10 --json --out sailor.json
    """
    from paraplan.validation.datasets import HETEROGENEOUS_RUNS, validation_file
    from paraplan.validation import heterogeneous as het

    if as_json and as_csv:
        raise InputError("--json", "give --json or --csv, not both", "drop one of the two")
    check_distinct_paths({"--out": out_path}, {"PATH": path})
    if out_path is not None:
        check_writable(out_path)
    runs = het.read_runs(path if path is not None else validation_file(HETEROGENEOUS_RUNS))
    gbps = het.DEFAULT_INTER_NODE_GBPS if inter_node_gbps is None else inter_node_gbps
    lat = het.DEFAULT_INTER_NODE_LATENCY_US if inter_node_latency_us is None else inter_node_latency_us
    with click.progressbar(length=len(runs), label="predicting runs", file=sys.stderr,
                           hidden=not sys.stderr.isatty()) as bar:
        records = het.validate_runs(runs, gbps, lat, intra_node_gb_per_s, progress=lambda: bar.update(1))
    if as_json:
        text = dump_json(records)
    elif as_csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(het.ROW_KEYS), lineterminator="\n")
        writer.writeheader()
        for r in records:
            writer.writerow({k: ("" if r[k] is None else ("; ".join(r[k]) if isinstance(r[k], list) else r[k]))
                             for k in het.ROW_KEYS})
        text = buf.getvalue()
    else:
        text = _hetero_text(records, het.summary(records), gbps, lat, intra_node_gb_per_s)
    if out_path is not None:
        write_atomic(out_path, text)
        click.echo(f"wrote {out_path} ({len(records)} rows)", err=True)
    else:
        click.echo(text, nl=False)
    _gate(fail_above_pct, {m: [r["rel_error"] for r in records if r["metric"] == m and r["status"] == "ok"]
                           for m in het.METRICS})


def _hetero_text(records, summary, gbps, lat, intra) -> str:
    """Per-run table (both metrics on one line), then mean / worst error per system and metric."""
    # each run gives one record per metric, in order: a run is its own line even where two runs
    # share an id (a copied run, or runs with no ``_file``)
    from paraplan.validation.heterogeneous import METRICS
    k = len(METRICS)
    runs = [(records[i]["id"], {r["metric"]: r for r in records[i:i + k]}) for i in range(0, len(records), k)]
    rows = []
    for rid, metrics in runs:
        short = rid.split("validation/", 1)[-1]
        t, m = metrics.get("iter_time_s"), metrics.get("peak_memory_bytes")
        if t is None or t["status"] != "ok":
            reason = (t or m or {}).get("reason") or ""
            rows.append([short, "skipped", "-", "-", "-", "-", "-", "-", reason])
            continue
        note = "" if t["efficiency_fitted"] else "prior"
        twin = [a for a in t["assumptions"] if "identical" in a]
        if twin:
            note = (note + "; " if note else "") + "duplicate numbers at the source"
        # a run can time but not measure memory (no ``max_mem``): its memory cells are '-'
        mem = (["-", "-", "-"] if m is None or m["status"] != "ok" else
               [f"{m['predicted'] / 2**30:.2f}", f"{m['measured'] / 2**30:.2f}", f"{100 * m['rel_error']:+.1f}"])
        rows.append([short, "ok", four_significant(t['predicted']), four_significant(t['measured']),
                     f"{100 * t['rel_error']:+.1f}", *mem, note])
    head = ["run", "status", "pred_iter_s", "meas_iter_s", "iter_err_pct", "pred_mem_gib", "meas_mem_gib",
            "mem_err_pct", "note"]
    lines = [format_table(rows, head, align="llrrrrrrl").rstrip(), "",
             "error per system (|predicted - measured| / measured; prior = rests on an unfitted efficiency prior)"]
    srows = [[s["runs"], s["metric"], s["n"], f"{s['mean_abs_err_pct']:.1f}", f"{s['worst_abs_err_pct']:.1f}",
              "no" if s["efficiency_fitted"] else "yes"] for s in summary]
    lines.append(format_table(srows, ["runs", "metric", "n", "mean_abs_err_pct", "worst_abs_err_pct", "prior"],
                              align="llrrrl").rstrip())
    intra_text = "each card's PCIe link" if intra is None else f"{intra:g} GB/s"
    lines.append(f"\nnetwork of the mixed cluster (not stated by the source): {gbps:g} Gb/s per node, {lat:g} us; "
                 f"inside a node {intra_text}")
    return "\n".join(lines) + "\n"


#: the per-row output columns of ``validate serving --json`` / ``--csv``, in order.
SERVING_ROW_KEYS = ("id", "metric", "status", "predicted", "measured", "rel_error", "reason", "assumptions")


def _serving_record(r: dict) -> dict:
    """One ``validate serving --json`` / ``--csv`` record: ``SERVING_ROW_KEYS``, None where a value
    is missing; ``assumptions`` (named as ``validate published`` names it) is what a predicted
    row's prediction assumed where the row is silent or names no profile (the stack priced for an
    empty, unprofiled or unreadable backend_version), None where it assumed nothing or was skipped."""
    out = {k: _clean(r.get(k)) for k in SERVING_ROW_KEYS if k != "assumptions"}
    said = r.get("assumption")
    out["assumptions"] = said if r.get("status") == "ok" and isinstance(said, str) and said else None
    return out


def serving_summary_text(results, summary, list_skipped: bool) -> str:
    """Per (backend, system, mode, model): rows used / skipped, mean and worst |error| of TTFT and
    TPOT; then per backend and mode; then the skipped rows grouped by reason."""
    def pct(x):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}"
    headers = ["backend", "system", "mode", "model", "rows_used", "rows_skipped", "ttft_mean_abs_err_pct",
               "ttft_worst_abs_err_pct", "tpot_mean_abs_err_pct", "tpot_worst_abs_err_pct"]
    rows = [[r["backend"], r["system"], r["mode"], r["model"], int(r["rows_used"]), int(r["rows_skipped"]),
             pct(r["ttft_mean_abs_err_pct"]), pct(r["ttft_worst_abs_err_pct"]), pct(r["tpot_mean_abs_err_pct"]),
             pct(r["tpot_worst_abs_err_pct"])] for r in summary.to_dict("records")]
    lines = ["serving prediction error per backend, system, mode and model (|predicted - measured| / measured)",
             format_table(rows, headers, align="llllrrrrrr").rstrip(), ""]
    from paraplan.validation.serving import summarize
    overall = summarize(results, by=("backend", "mode"))
    rows = [[r["backend"], r["mode"], int(r["rows_used"]), int(r["rows_skipped"]), pct(r["ttft_mean_abs_err_pct"]),
             pct(r["tpot_mean_abs_err_pct"])] for r in overall.to_dict("records")]
    lines += ["per backend and mode",
              format_table(rows, ["backend", "mode", "rows_used", "rows_skipped", "ttft_mean_abs_err_pct",
                                  "tpot_mean_abs_err_pct"], align="llrrrr").rstrip()]
    # rows by position (data_row): an id may be empty or repeated
    used = set(results[results.status == "ok"].data_row)
    skipped = results[~results.data_row.isin(used)].drop_duplicates("data_row")
    partly = results[results.data_row.isin(used) & (results.status != "ok")]
    assumed = results[(results.status == "ok") & (results.assumption.fillna("") != "")].drop_duplicates("data_row")
    if len(assumed):
        lines += ["", f"rows predicted under an assumption: {len(assumed)}"]
        lines += _counted_reasons(Counter(assumed.assumption))
    if len(skipped):
        lines += ["", f"skipped rows: {len(skipped)}"]
        if list_skipped:
            table = [[_row_label(r, r["data_row"] - 1), r["reason"]] for r in skipped.to_dict("records")]
            lines.append(format_table(table, ["id", "reason"], align="ll", indent="  ").rstrip())
        else:
            lines += _counted_reasons(Counter(skipped.reason.fillna("").astype(str)))
            lines.append("  (--list-skipped lists every skipped row id)")
    if len(partly):
        lines += ["", f"metrics skipped in rows otherwise predicted: {len(partly)}"]
        lines += _counted_reasons(Counter(partly.metric.astype(str) + ": " + partly.reason.fillna("").astype(str)))
    return "\n".join(lines) + "\n"


def _counted_reasons(counts: Counter, width: int = 120) -> list[str]:
    """``  count  reason`` lines, most common first, each reason wrapped to ``width`` columns."""
    lines = []
    for reason, n in counts.most_common():
        lines += textwrap.wrap(reason or "(no reason)", width=width, initial_indent=f"  {n:5d}  ",
                               subsequent_indent=" " * 9, break_long_words=False, break_on_hyphens=False)
    return lines


def _serving_csv(records: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(SERVING_ROW_KEYS), lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({k: ("" if r[k] is None else r[k]) for k in SERVING_ROW_KEYS})
    return buf.getvalue()


@command.command("serving", short_help="Predict measured serving runs (TTFT, TPOT) and report the error.")
@click.argument("path", type=click.Path(dir_okay=False), required=False)
@click.option("--backend", "backend_filter", metavar="NAME", help="Only rows of this backend (vllm, sglang, trtllm).")
@click.option("--mode", "mode_filter", type=click.Choice(["agg", "disagg"]), help="Only aggregated or disaggregated rows.")
@click.option("--json", "as_json", is_flag=True,
              help="One object per row and metric: id, metric (ttft_ms|tpot_ms), status, predicted, measured, rel_error, "
                   "reason, assumptions (what a predicted row's prediction assumed where the row is silent: the "
                   "serving stack priced for an empty or unprofiled backend_version; null if none or skipped).")
@click.option("--csv", "as_csv", is_flag=True, help="The same records as a CSV table.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="Write the output to this file (atomically) instead of stdout.")
@click.option("--list-skipped", is_flag=True, help="List every skipped row id with its reason.")
@_plot_option("predicted against measured TTFT and TPOT, one colour per backend")
@_fail_above_option("of TTFT or of TPOT over the predicted rows")
@click.option("--explain", "explain_id", metavar="ID",
              help="Show one row (its id column) as the serving simulator reads it: model, system, stack, weight "
                   "formats, layout, and the parts of its predicted TTFT and TPOT (decode step by part, prefill, "
                   "queueing), beside the measured values (--json: the same as one object).")
def serving_cmd(path: str | None, backend_filter: str | None, mode_filter: str | None, as_json: bool, as_csv: bool,
                out_path: str | None, list_skipped: bool, plot_path: str | None, fail_above_pct: float | None,
                explain_id: str | None = None) -> None:
    """How well does the serving simulator predict measured deployments? PATH is a CSV with the
    columns of shared/validation/serving_runs.csv (default: that file, or the copy bundled with
    paraplan).

    Each row becomes a model preset, a cluster, the serving stack of its backend release and its
    layout (see paraplan/validation/serving.py for how); TTFT and TPOT are predicted and
    rel_error = (predicted - measured) / measured. Prints, per backend, system, mode and model,
    the rows used and skipped and the mean and worst absolute error, then per backend and mode,
    then the skipped rows grouped by reason.

    \b
    Example:
      paraplan validate serving
      paraplan validate serving --backend vllm --mode agg
      paraplan validate serving --json --out serving_errors.json
      paraplan validate serving --plot serving_errors.png
      # one row's reading and the parts of its TTFT and TPOT (ids: the file's id column):
      paraplan validate serving --explain minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c64_cfg733
    """
    from paraplan.validation.datasets import SERVING_RUNS, validation_file
    from paraplan.validation.serving import read_rows, summarize, validate_rows

    if as_json and as_csv:
        raise InputError("--json", "give --json or --csv, not both", "drop one of the two")
    if explain_id is not None:
        _refuse_beside_explain(backend=backend_filter, mode=mode_filter, as_csv=as_csv, list_skipped=list_skipped,
                               plot_path=plot_path, fail_above_pct=fail_above_pct)
        if not explain_id.strip():
            raise InputError("--explain", "is empty", "give a row's id (the file's id column)")
    check_distinct_paths({"--out": out_path, "--plot": plot_path}, {"PATH": path})
    if out_path is not None:
        check_writable(out_path)
    if plot_path is not None:
        check_image_path(plot_path, "--plot")
    df = read_rows(path if path is not None else validation_file(SERVING_RUNS))
    if df.empty:
        raise InputError("PATH", f"{path or validation_file(SERVING_RUNS)} has a header but no rows",
                         "add the deployments to validate below the header")
    if explain_id is not None:
        _explain_serving(df, explain_id, as_json, out_path)
        return
    if backend_filter is not None and not backend_filter.strip():   # '' matched every row
        raise InputError("--backend", "is empty", "give vllm, sglang or trtllm, or leave the option out")
    if backend_filter:
        df = df[df["backend"].astype(str).str.lower() == backend_filter.strip().lower()]
        if df.empty:
            raise InputError("--backend", f"no row has backend '{backend_filter}'", "use vllm, sglang or trtllm")
    if mode_filter:
        df = df[df["mode"].astype(str).str.lower() == mode_filter]
        if df.empty:
            raise InputError("--mode", f"no row has mode '{mode_filter}'")
    df = df.reset_index(drop=True)
    results = validate_rows(df)
    if as_json or as_csv:
        records = [_serving_record(r) for r in results.to_dict("records")]
        text = dump_json(records) if as_json else _serving_csv(records)
    else:
        text = serving_summary_text(results, summarize(results), list_skipped)
    if out_path is not None:
        write_atomic(out_path, text)
        n_ok = results[results.status == "ok"].id.nunique()
        click.echo(f"wrote {out_path} ({len(df)} rows, {n_ok} predicted)", err=True)
    else:
        click.echo(text, nl=False)
    if plot_path is not None and not (results.status == "ok").any():
        click.echo(f"note: --plot: no row was predicted, so {plot_path} was not drawn (the table says why)", err=True)
    elif plot_path is not None:
        from paraplan.validation_plots import serving_scatter
        _write_plot(plot_path, lambda tmp: serving_scatter(results, tmp))
    if fail_above_pct is not None:
        _gate(fail_above_pct, {m: _ok_errors(results, m) for m in ("ttft_ms", "tpot_ms")})
