"""What a published-runs row's cells say about its model: cell readers, and the model preset the
``model`` column names with what it may lend the row (the whole architecture, its vocabulary when
the row has the preset's shape, or, for another shape of that model, its tokenizer when the row's
stated size confirms it). Used by ``published.row_inputs``.
"""
from __future__ import annotations

import math
import re
from functools import lru_cache

import numpy as np

from cost_models.params import total_params
from hardware_specs.errors import InputError, as_float, digits_text
from model_specs.catalog import load_model, load_preset
from model_specs.model_spec import ModelSpec
from paraplan.validation.model_names import preset_named


class Skip(Exception):
    """A row that cannot be predicted, with the reason."""


#: largest count a row may give in an integer column (sizes, degrees, batches): above the
#: largest values ``ModelSpec`` and ``ParallelConfig`` accept, so such a row is skipped here
MAX_COUNT = 2**40


#: columns that hold only a number in the published-runs file (others, such as ``ffn_hidden``,
#: ``params_b``, ``moe_experts`` and ``zero_stage``, may carry text around it): text in one of
#: these is damage, and the row is skipped with that reason instead of read as empty (text in
#: ``zero_norm``, e.g. 'ZeRO-3', was read as "not stated": a ZeRO-3 row ran at the stack's default)
NUMERIC_COLUMNS = frozenset({"layers", "hidden", "heads", "kv_heads", "vocab", "seq_len", "n_gpus", "tp", "pp", "dp",
                             "cp", "ep", "vpp", "micro_batch", "global_batch", "gpus_per_node",
                             "scaleout_gbps_per_gpu", "measured_value", "moe_topk", "zero_norm"})


def _num(row, col):
    """The finite number in ``col``, or None when the cell is empty (or, in a column that may
    hold text, not a number); ``Skip`` for inf (a row's cell is a measurement or a size, never
    infinite) and for text in a ``NUMERIC_COLUMNS`` column."""
    v = row.get(col)
    if v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip()):
        return None
    if isinstance(v, (bool, np.bool_)):
        # pandas reads a column of true / false as booleans, and float(True) is 1: a
        # gpus_per_node of 'true' was modelled as one GPU per node
        if col in NUMERIC_COLUMNS:
            raise Skip(f"{col} '{str(v).lower()}' is not a number")
        return None
    try:
        x = as_float(v)         # a cell of 400 digits (read as an int) is inf, not OverflowError
    except (TypeError, ValueError):
        if col in NUMERIC_COLUMNS:
            raise Skip(f"{col} '{v}' is not a number") from None
        return None
    if not math.isfinite(x):
        huge = digits_text(v)          # a 400-digit cell by its size, not quoted in full
        raise Skip(f"{col} {f'({huge})' if huge else repr(str(v))} is not a finite number")
    return x


def _int(row, col, minimum: int = 1):
    """The integer in ``col`` (None when empty); ``Skip`` if it is fractional, below
    ``minimum`` or above ``MAX_COUNT``."""
    x = _num(row, col)
    if x is None:
        return None
    if x != round(x) or not minimum <= x <= MAX_COUNT:
        raise Skip(f"{col} '{row.get(col)}' is not a whole number from {minimum} to {MAX_COUNT:,}")
    return int(round(x))


def _measured(row):
    """The measured value, or None when the cell is empty, not a positive finite number."""
    try:
        x = _num(row, "measured_value")
    except Skip:
        return None
    return x if x is not None and x > 0 else None


def _lead_int(row, col):
    """The leading integer of a cell like '256 routed + 1 shared' (None if there is none)."""
    text = _str(row, col)
    digits = ""
    for ch in text:
        if ch.isdigit():
            digits += ch
        elif digits:
            break
    return int(digits) if digits else None


def _experts(row):
    """The experts a row states in ``moe_experts`` (its leading integer: '256 routed + 1 shared'
    gives 256), None when the cell is empty; ``Skip`` for a cell with no number at all ('eight'
    was read as "not stated": the preset's experts were predicted)."""
    text = _str(row, "moe_experts")
    if not text:
        return None
    count = _lead_int(row, "moe_experts")
    if count is None:
        raise Skip(f"moe_experts '{text}' is not a number")
    return count


def _str(row, col):
    v = row.get(col)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v).strip()


def _stated_params(row) -> tuple[float, float] | None:
    """(parameters in billions, half a unit of its last stated digit) from ``params_b``: '181'
    gives (181, 0.5), '6.659' (6.659, 0.0005); None if the cell is not a plain number (MoE
    rows write '671 (37 active)')."""
    text = _str(row, "params_b")
    if not re.fullmatch(r"\d+(\.\d+)?", text):
        return None
    decimals = len(text.split(".")[1]) if "." in text else 0
    return float(text), 0.5 * 10.0 ** -decimals


def _named_preset_or_none(row) -> ModelSpec | None:
    try:
        return _preset_for(row)
    except Skip:
        return None


def _check_family_vocab(row, model: ModelSpec, family: ModelSpec) -> str:
    """The assumption line for a vocabulary taken from the model family the row names (a
    differently shaped candidate of that model, e.g. one of BLOOM-176B's candidate shapes, shares
    its tokenizer), or ``Skip`` unless the row's own stated size confirms it: the architecture with
    the family's vocabulary (and its tied or untied output layer) must have the row's
    ``params_b`` to the precision stated. A tokenizer is a fact of the family; the stated size
    is what says this row used it."""
    stated, half_unit = _stated_params(row)
    ours = total_params(model) / 1e9
    if abs(ours - stated) > half_unit * (1 + 1e-9):
        raise Skip(f"needed field(s) empty: vocab (preset {family.name}'s vocabulary {family.vocab_size} "
                   f"gives {ours:.3g}B parameters, the row states {stated:g}B)")
    return (f"vocab={family.vocab_size}, tied_embeddings={family.tied_embeddings} from preset {family.name} "
            f"(the family's tokenizer; with it the row's shape has {ours:.1f}B parameters, the row states {stated:g}B)")


def _says_without_mtp(row) -> bool:
    """Whether the row's model or run name labels the run as trained without its
    multi-token-prediction modules (Megatron-Bridge writes 'w/oMTP')."""
    text = (_str(row, "model") + " " + _str(row, "run_id")).lower().replace(" ", "")
    return "w/omtp" in text or "withoutmtp" in text or "nomtp" in text


def _preset_for(row) -> ModelSpec:
    """The model preset the ``model`` column names: the name before any parenthesis, then its
    first word; else as a checkpoint's or Hugging Face id's name (``model_names.preset_named``:
    ``meta-llama/Llama-3.1-405B``, ``Qwen3-30B-A3B-Base``, ``Meta-Llama-3.1-70B-Instruct``).
    ``Skip`` when none matches."""
    preset = _directly_named_preset(row)
    if preset is not None:
        return preset
    name = _str(row, "model").split("(")[0].strip()
    for candidate in (name, name.split(" ")[0] if name else ""):
        found = preset_named(candidate) if candidate else None
        if found is not None:
            return _catalog_preset(found)
    raise Skip(f"architecture not in the row and no model preset named '{name}'")


def _directly_named_preset(row) -> ModelSpec | None:
    """The preset the ``model`` column names as written (the name before any parenthesis, or its
    first word), not as a checkpoint's or Hugging Face id's name; None if none."""
    name = _str(row, "model").split("(")[0].strip()
    for candidate in (name, name.split(" ")[0] if name else ""):
        if candidate:
            preset = _named_preset(candidate)
            if preset is not None:
                return preset
    return None


@lru_cache(maxsize=None)
def _catalog_preset(name: str) -> ModelSpec:
    """The catalog's preset ``name`` (by name only: a file or folder of that name in the working
    directory is never it; memoised)."""
    return load_preset(name)


@lru_cache(maxsize=None)
def _named_preset(name: str) -> ModelSpec | None:
    """The model preset ``name`` names, or None (memoised: many rows name the same model)."""
    try:
        return load_model(name)
    except InputError:
        return None


def _same_architecture_preset(row, needed) -> ModelSpec | None:
    """The preset the ``model`` column names, if its layers, hidden size and heads equal the
    row's own (a tokenizer's vocabulary belongs to the model; a differently shaped model of
    the same name, e.g. a candidate architecture, gets its vocabulary only when its stated size
    confirms it, ``_check_family_vocab``)."""
    try:
        preset = _preset_for(row)
    except Skip:
        return None
    same = (preset.num_layers, preset.hidden_size, preset.num_heads) == \
        (needed["layers"], needed["hidden"], needed["heads"])
    return preset if same else None
