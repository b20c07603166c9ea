"""``paraplan models list|show``: the model catalog (presets, YAML files, HF config.json)."""
from __future__ import annotations

import textwrap
from dataclasses import asdict

import click

from cost_models.params import total_params
from hardware_specs.errors import InputError
from model_specs.catalog import list_models, load_model, model_path
from model_specs.model_spec import ModelSpec
from paraplan.cli import dump_json, format_table


#: what ``active_params_b`` counts, for the table's footnote and the --help
ACTIVE_PARAMS_MEANING = ("active_params_b: parameters one token uses, input embedding and LM head included "
                         "(top-k routed + shared experts for MoE; DeepSeek-V3's \"37B activated\" = 37.55, "
                         "Mixtral 8x7B's \"12.9B active\" = 12.88); params_b: every parameter, "
                         "multi-token-prediction modules excluded")


def model_row(m: ModelSpec) -> dict:
    """The ``models list`` columns of one model; parameter counts in billions."""
    return {
        "name": m.name,
        "layers": m.num_layers,
        "hidden": m.hidden_size,
        "heads": m.num_heads,
        "kv_heads": m.num_kv_heads,
        "ffn": m.ffn_hidden_size,
        "vocab": m.vocab_size,
        "seq_len": m.seq_len,
        "params_b": round(total_params(m) / 1e9, 2),
        "active_params_b": round(total_params(m, active=True) / 1e9, 2),
        "experts": m.moe.num_experts if m.moe else None,
        "top_k": m.moe.top_k if m.moe else None,
    }


def model_detail(m: ModelSpec) -> dict:
    """Every ``ModelSpec`` field plus the parameter counts (exact and in billions)."""
    d = asdict(m)
    d["params"] = total_params(m)
    d["active_params"] = total_params(m, active=True)
    d["params_b"] = round(d["params"] / 1e9, 3)
    d["active_params_b"] = round(d["active_params"] / 1e9, 3)
    return d


@click.group("models", short_help="Model presets: list them, show one.")
def command() -> None:
    """Which transformer architectures paraplan knows, with their sizes and parameter counts.

    Presets are YAML files in model_specs/presets (or a folder named by PARAPLAN_MODEL_PATH);
    wherever a model is asked for, a YAML file or a Hugging Face config.json path works too.

    \b
    Example:
      paraplan models list
      paraplan models show llama3.1-405b
    """


@command.command("list", short_help="Table of every model preset.")
@click.option("--json", "as_json", is_flag=True, help="Print a list of objects as JSON.")
def list_cmd(as_json: bool) -> None:
    """Which model presets exist: layers, widths, heads, vocabulary, default sequence length,
    total and active parameters (billions) and MoE experts / top-k.

    active_params_b counts the parameters one token uses, the input embedding and the LM head
    included (the convention of DeepSeek-V3's "37B activated", 37.55 here, and Mixtral's
    "12.9B active", 12.88 here): every dense weight, plus the top-k routed and the shared
    experts of each MoE layer. params_b counts every parameter, multi-token-prediction modules
    excluded (DeepSeek-V3's 671B).

    \b
    Example:
      paraplan models list --json
    """
    rows = []
    for name in list_models():
        try:
            rows.append(model_row(load_model(name)))
        except InputError as exc:   # one broken user preset must not hide the rest
            click.echo(f"warning: skipped model {name}: {exc}", err=True)
    if as_json:
        click.echo(dump_json(rows), nl=False)
        return
    if not rows:
        click.echo("no models found")
        return
    billions = ("params_b", "active_params_b")      # two decimals in every row: 46.70, not 46.7
    click.echo(format_table([[f"{v:.2f}" if k in billions else v for k, v in r.items()] for r in rows], list(rows[0])),
               nl=False)
    click.echo("\n" + textwrap.fill(ACTIVE_PARAMS_MEANING, width=100, subsequent_indent="  "))


@command.command("show", short_help="Every field of one model, with parameter counts.")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print every field as JSON.")
def show_cmd(name: str, as_json: bool) -> None:
    """The full architecture paraplan will simulate for NAME, and its parameter count.

    NAME is a preset (see `paraplan models list`), a YAML preset file, or a Hugging Face
    config.json (or the folder holding it).

    \b
    Examples:
      paraplan models show llama3-8b
      paraplan models show ./Meta-Llama-3-8B/config.json   # a checkpoint folder you downloaded
    """
    m = load_model(name)
    d = model_detail(m)
    d["file"] = str(model_path(name))
    if as_json:
        click.echo(dump_json(d), nl=False)
        return
    moe, mla = d.pop("moe"), d.pop("mla")
    width = max(len(k) for k in d)
    lines = [f"model {m.name}"]
    for k, v in d.items():
        if k == "name":
            continue
        if isinstance(v, int) and not isinstance(v, bool) and k in ("params", "active_params"):
            v = f"{v:,}"
        lines.append(f"  {k.ljust(width)}  {'-' if v in (None, '') else v}")
    for label, sub in (("moe", moe), ("mla", mla)):
        if sub:
            lines.append(f"  {label}:")
            w = max(len(k) for k in sub)
            lines += [f"    {k.ljust(w)}  {v}" for k, v in sub.items()]
    click.echo("\n".join(lines))
