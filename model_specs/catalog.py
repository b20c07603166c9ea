"""Load model presets from YAML files (the model catalog is data).

Built-in presets live in ``model_specs/presets``, one file per model, named after the model.
A user adds a model by dropping a file there, in a folder named by the ``PARAPLAN_MODEL_PATH``
environment variable (``:``-separated; each folder may hold the files directly or in a
``models/`` subfolder), or by passing a file path wherever a model name is accepted. A path to
a Hugging Face ``config.json`` (or to the folder holding one) is read by
``model_specs.hf_config``. Built-in names win over user files with the same name; a user file
whose ``name:`` is a built-in preset's name or alias is refused (``models list`` skips it with a
warning naming the file), so that no report labels it as the preset.

Names are matched case-insensitively; ``-``, ``_`` and spaces are ignored, so ``LLAMA3.1_405B``
finds ``llama3.1-405b``. A file may list other names its model is published under in
``aliases:`` (e.g. Nemotron-4 340B is ``Nemotron-340B`` in NVIDIA's NeMo tables); a file name
wins over another file's alias.

File keys mirror the ``ModelSpec`` fields: name (defaults to the file name), num_layers,
hidden_size, num_heads, num_kv_heads (default num_heads), ffn_hidden_size, vocab_size, seq_len,
max_context_tokens (config.json max_position_embeddings; 0 = not stated),
head_dim (default hidden_size / num_heads; with mla: qk_nope_head_dim + qk_rope_head_dim),
gated_mlp, tied_embeddings, sliding_window,
sliding_window_layer_fraction (default 1 when a window is given), mtp_layers (default 0),
the architecture details position_embedding, normalization, linear_bias (default: the Llama
layout with a gated MLP, the GPT-2/3 one without), rotary_fraction (1), rope_theta (config.json
rope_theta; 0 = not stated), rope_scaling (config.json rope_scaling's rope_type; empty = none, as a
config.json without rope_scaling or with rope_type default rotates unscaled: Llama 3 8B / 70B),
rope_scaling_factor (that scaling's factor; 0 = not stated),
YaRN's rope_original_max_position_embeddings, rope_beta_fast, rope_beta_slow, rope_mscale,
rope_mscale_all_dim (config.json rope_scaling keys; 0 = not stated), qkv_bias (false),
activation (swiglu / gelu by gated_mlp), glu_clamp_limit (0: no clamp), parallel_attention_mlp and
parallel_shared_norm (false: the sequential block), source; optional ``linear_attention:`` mapping with the
``LinearAttentionSpec`` fields (layer_fraction, num_key_heads, key_head_dim, num_value_heads,
value_head_dim, conv_kernel, state_bytes); optional ``moe:`` mapping with the ``MoESpec`` fields
(num_experts, top_k, expert_ffn_hidden_size, num_shared_experts, ...) and optional ``mla:``
mapping with the ``MLASpec`` fields (q_lora_rank, kv_lora_rank, qk_nope_head_dim,
qk_rope_head_dim, v_head_dim); for a hybrid Mamba-Transformer ``hybrid_pattern`` (one of
``M * - E`` per layer) and a ``mamba:`` mapping with the ``MambaSpec`` fields (num_heads,
head_dim, state_size, num_groups, conv_kernel, chunk_size). ``description`` and ``notes`` are
free text and ignored.
"""
from __future__ import annotations

import os
from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from hardware_specs.yaml_files import exists, is_file, read_yaml
from hardware_specs.errors import InputError, check_name, file_float, not_a_file, safe_name, shown, suggest
from model_specs.hf_config import is_hf_config, model_from_hf_config, read_json, supported_model_types
from model_specs.model_spec import LinearAttentionSpec, MambaSpec, MLASpec, ModelSpec, MoESpec

BUILTIN_DIR = Path(__file__).resolve().parent / "presets"
ENV_VAR = "PARAPLAN_MODEL_PATH"
_SUFFIXES = (".yaml", ".yml")
_FREE_TEXT_KEYS = {"description", "notes"}
#: catalog keys that are not ``ModelSpec`` fields: other names of the model
_ALIAS_KEY = "aliases"

_REQUIRED = ("num_layers", "hidden_size", "num_heads", "ffn_hidden_size", "vocab_size")
_INT_FIELDS = {"num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size",
               "vocab_size", "seq_len", "head_dim", "sliding_window", "mtp_layers", "max_context_tokens",
               "rope_original_max_position_embeddings", "int4_group_size"}
_BOOL_FIELDS = {"gated_mlp", "tied_embeddings", "linear_bias", "qkv_bias", "attention_dropout", "hidden_dropout",
                "parallel_attention_mlp", "parallel_shared_norm"}
_FLOAT_FIELDS = {"sliding_window_layer_fraction", "rotary_fraction", "glu_clamp_limit", "rope_theta",
                 "rope_scaling_factor", "rope_beta_fast", "rope_beta_slow", "rope_mscale", "rope_mscale_all_dim"}
_STR_FIELDS = {"name", "source", "position_embedding", "normalization", "activation", "hybrid_pattern",
               "rope_scaling", "expert_checkpoint_format", "checkpoint_format"}

_MOE_REQUIRED = ("num_experts", "top_k", "expert_ffn_hidden_size")
_MLA_REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_MAMBA_REQUIRED = ("num_heads", "head_dim", "state_size", "num_groups")
_LINEAR_REQUIRED = ("layer_fraction", "num_key_heads", "key_head_dim", "num_value_heads", "value_head_dim")


def _search_dirs() -> list[Path]:
    dirs = [BUILTIN_DIR]
    for extra in os.environ.get(ENV_VAR, "").split(os.pathsep):
        if extra:
            dirs.append(Path(extra))
            dirs.append(Path(extra) / "models")
    return dirs


def _canonical(name: str) -> str:
    return "".join(ch for ch in name.strip().lower() if ch not in "-_ ")


def _over_folders(read) -> dict[str, Path]:
    """{key: file} over the search folders, the first folder naming a key winning; ``read(folder,
    stamp)`` lists a folder's (key, path) pairs, memoised per modification time."""
    found: dict[str, Path] = {}
    for d in _search_dirs():
        try:
            stamp = d.stat().st_mtime_ns
        except OSError:
            continue
        for key, p in read(str(d), stamp):
            found.setdefault(key, p)
    return found


def _entries() -> dict[str, Path]:
    return _over_folders(_listing)


@lru_cache(maxsize=None)
def _listing(folder: str, stamp: int) -> tuple:
    """(stem, path) of a folder's model files, memoised per folder and modification time."""
    d = Path(folder)
    if not d.is_dir():
        return ()
    return tuple((p.stem.lower(), p) for p in sorted(d.iterdir()) if p.suffix in _SUFFIXES and p.is_file())


def _names_a_path(name_or_path: str) -> bool:
    """Whether ``_resolve`` reads ``name_or_path`` as a file or folder path, not a catalog name."""
    candidate = Path(name_or_path)
    return candidate.suffix in _SUFFIXES + (".json",) or bool(str(name_or_path) and exists(candidate))


def _resolve(name_or_path: str) -> Path:
    if not isinstance(name_or_path, (str, os.PathLike)):    # None, 5, a dict from Python callers
        raise InputError("model", f"expected a preset name or a file path, got {type(name_or_path).__name__}",
                         "give the model as text, e.g. a name from `paraplan models list`")
    candidate = Path(name_or_path)
    # an empty name is Path("."), which exists: it is an unknown name, not a missing file
    if _names_a_path(name_or_path):
        if candidate.is_dir() and (candidate / "config.json").is_file():
            return candidate / "config.json"
        if candidate.is_dir():      # was "is a directory, not a file", for a checkpoint folder too
            inner = candidate / "config.json"
            said = (f"{name_or_path} is a folder without a config.json" if not inner.is_symlink()
                    and not exists(inner) else not_a_file(inner))
            raise InputError("model", said, "give a Hugging Face checkpoint folder (with its config.json), "
                             "a model file, or a preset from `paraplan models list`")
        if not is_file(candidate):
            raise InputError("model", not_a_file(name_or_path),
                             "check the path, or give a preset from `paraplan models list`")
        return candidate
    return _resolve_name(name_or_path)


def preset_path(name: str) -> Path | None:
    """The catalog file a preset name or alias names (``PARAPLAN_MODEL_PATH`` and the built-in
    folder), never a path: a file or folder of that name in the working directory is not read;
    None for an unknown name (a caller trying many spellings pays for no 'did you mean' hint)."""
    entries = _entries()
    key = str(name).strip().lower()
    if key in entries:
        return entries[key]
    by_canonical = _canonical_index(tuple(entries.items()))
    if _canonical(key) in by_canonical:
        return by_canonical[_canonical(key)]
    return _aliased().get(_canonical(key))


@lru_cache(maxsize=None)
def _canonical_index(entries: tuple) -> dict[str, Path]:
    """{canonical name: file} of ``_entries()``'s items (memoised: validation looks up thousands
    of spellings against the same catalog)."""
    return {_canonical(k): p for k, p in entries}


def _resolve_name(name: str) -> Path:
    """``preset_path``, an ``InputError`` with the closest names for an unknown name."""
    found = preset_path(name)
    if found is None:
        raise InputError("model", f"unknown model '{name}'", suggest(str(name).strip().lower(), _entries()))
    return found


def _aliased() -> dict[str, Path]:
    """{canonical alias: file} over the search folders (the first folder naming an alias wins)."""
    return _over_folders(_folder_aliases)


@lru_cache(maxsize=None)
def _folder_aliases(folder: str, stamp: int) -> tuple:
    """(canonical alias, path) of a folder's model files that list ``aliases:``; read only when a
    name matches no file name, memoised per folder and modification time. A damaged file is
    passed over here (loading it by its own name reports the damage)."""
    out = []
    for _, p in _listing(folder, stamp):
        try:
            if _ALIAS_KEY not in p.read_text(encoding="utf-8", errors="replace"):
                continue
            data = read_yaml(p, "model")
            aliases = _aliases(data.get(_ALIAS_KEY) if isinstance(data, dict) else None, f"model {p}")
        except (InputError, OSError):
            continue
        out.extend((_canonical(a), p) for a in aliases)
    return tuple(out)


def _aliases(value: Any, where: str) -> tuple[str, ...]:
    """A file's ``aliases:`` list (strings), validated."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(a, str) and a.strip() for a in value):
        raise InputError(f"{where}.{_ALIAS_KEY}", f"expected a list of names, got {shown(value)}",
                         'write aliases: ["other-name"]')
    return tuple(a.strip() for a in value)


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool):
        raise InputError(field, f"expected an integer, got {shown(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.replace("_", ""))
        except ValueError:
            pass
    raise InputError(field, f"expected an integer, got {shown(value)}")


def _float(value: Any, field: str) -> float:
    if isinstance(value, bool):
        raise InputError(field, f"expected a number, got {shown(value)}")
    if isinstance(value, int):      # 10**400: refused by file_float, not float()'s OverflowError
        return file_float(field, value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(field, f"expected a number, got {shown(value)}") from None


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(field, f"expected true or false, got {shown(value)}")
    return value


def _check_keys(data: dict, known: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in set(data) - known - _FREE_TEXT_KEYS)
    if unknown:
        raise InputError(f"{where}.{unknown[0]}", "unknown key", "known keys: " + ", ".join(sorted(known)))


def _require(data: dict, keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if data.get(key) is None:
            raise InputError(f"{where}.{key}", "missing", f"add '{key}:' to the file")


#: the MoESpec fields a model file writes as true / false
_MOE_FLAGS = ("expert_bias", "topk_renormalized", "probs_on_input", "shared_expert_gate")


def _moe_from_dict(data: Any, where: str) -> MoESpec:
    if not isinstance(data, dict):
        raise InputError(where, "must be a mapping with num_experts, top_k, expert_ffn_hidden_size")
    known = {f.name for f in fields(MoESpec)}
    _check_keys(data, known, where)
    _require(data, _MOE_REQUIRED, where)
    kwargs = {k: (_float(v, f"{where}.{k}") if k in ("capacity_factor", "topk_scaling_factor")
                  else _bool(v, f"{where}.{k}") if k in _MOE_FLAGS
                  else str(v).strip() if k == "router_score" else _int(v, f"{where}.{k}"))
              for k, v in data.items() if k in known and v is not None}
    return MoESpec(**kwargs)


def _mla_from_dict(data: Any, where: str) -> MLASpec:
    if not isinstance(data, dict):
        raise InputError(where, "must be a mapping with kv_lora_rank, qk_nope_head_dim, "
                         "qk_rope_head_dim, v_head_dim (and q_lora_rank)")
    known = {f.name for f in fields(MLASpec)}
    _check_keys(data, known, where)
    _require(data, _MLA_REQUIRED, where)
    kwargs = {"q_lora_rank": 0}
    for key, value in data.items():
        if key in known and value is not None:
            kwargs[key] = _int(value, f"{where}.{key}")
    for key, value in kwargs.items():
        if value < (0 if key == "q_lora_rank" else 1):
            raise InputError(f"{where}.{key}", f"must be >= {0 if key == 'q_lora_rank' else 1}, got {value}")
    return MLASpec(**kwargs)


def _sub_spec_items(data: Any, spec, required, where: str) -> dict:
    """The set fields of a nested spec mapping (``spec``'s field names), after checking it is a
    mapping with no unknown key and every ``required`` one."""
    if not isinstance(data, dict):
        raise InputError(where, "must be a mapping with " + ", ".join(required))
    known = {f.name for f in fields(spec)}
    _check_keys(data, known, where)
    _require(data, required, where)
    return {k: v for k, v in data.items() if k in known and v is not None}


def _linear_attention_from_dict(data: Any, where: str) -> LinearAttentionSpec:
    items = _sub_spec_items(data, LinearAttentionSpec, _LINEAR_REQUIRED, where)
    return LinearAttentionSpec(**{k: (_float(v, f"{where}.{k}") if k in ("layer_fraction", "state_bytes")
                                      else _int(v, f"{where}.{k}")) for k, v in items.items()})


def _mamba_from_dict(data: Any, where: str) -> MambaSpec:
    items = _sub_spec_items(data, MambaSpec, _MAMBA_REQUIRED, where)
    return MambaSpec(**{k: _int(v, f"{where}.{k}") for k, v in items.items()})


def model_from_dict(data: dict[str, Any], where: str = "model", default_name: str | None = None) -> ModelSpec:
    """Build a ``ModelSpec`` from a preset mapping (keys as in the module docstring).

    Missing, unknown or mistyped keys raise ``InputError`` naming the key.
    """
    if not isinstance(data, dict):
        raise InputError(where, f"expected a mapping of ModelSpec fields, got {type(data).__name__}")
    known = {f.name for f in fields(ModelSpec)}
    _check_keys(data, known | {_ALIAS_KEY}, where)
    _aliases(data.get(_ALIAS_KEY), where)
    name = data.get("name", default_name)
    if name is None:
        raise InputError(f"{where}.name", "missing", "add 'name:' to the file")
    if isinstance(name, bool) or not isinstance(name, (str, int)) or not str(name).strip():
        raise InputError(f"{where}.name", f"expected text, got {shown(name)}", "quote it")
    check_name(f"{where}.name", str(name))
    where = f"model {name}"
    _require(data, _REQUIRED, where)
    kwargs: dict[str, Any] = {"name": str(name)}
    for key, value in data.items():
        if value is None or key in ("name", _ALIAS_KEY):
            continue
        field = f"{where}.{key}"
        if key in _INT_FIELDS:
            kwargs[key] = _int(value, field)
        elif key in _BOOL_FIELDS:
            kwargs[key] = _bool(value, field)
        elif key in _FLOAT_FIELDS:
            kwargs[key] = _float(value, field)
        elif key in _STR_FIELDS:
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise InputError(field, f"expected text, got {shown(value)}", "quote it")
            kwargs[key] = str(value).strip()
        elif key == "moe":
            kwargs[key] = _moe_from_dict(value, field)
        elif key == "mla":
            kwargs[key] = _mla_from_dict(value, field)
        elif key == "linear_attention":
            kwargs[key] = _linear_attention_from_dict(value, field)
        elif key == "mamba":
            kwargs[key] = _mamba_from_dict(value, field)
    kwargs.setdefault("num_kv_heads", kwargs["num_heads"])
    # head_dim 0 is ModelSpec's "not stated" (then hidden_size / num_heads); a file that states 0
    # channels per head means something else, and was silently given the default
    if kwargs.get("head_dim", 1) < 1:
        raise InputError(f"{where}.head_dim", f"must be >= 1, got {kwargs['head_dim']}",
                         "give the channels per head, or leave head_dim out for hidden_size / num_heads")
    for key in ("sliding_window", "mtp_layers"):
        if kwargs.get(key, 0) < 0:
            raise InputError(f"{where}.{key}", f"must be >= 0, got {kwargs[key]}")
    if kwargs.get("sliding_window", 0) > 0:
        # A window given without a layer fraction applies to every layer (Mistral 7B style).
        kwargs.setdefault("sliding_window_layer_fraction", 1.0)
    return ModelSpec(**kwargs)


#: keys of a Hugging Face config that no paraplan preset has (``transformers``' PretrainedConfig
#: names: a preset says num_layers, ffn_hidden_size, num_heads, vocab_size, seq_len)
HF_ONLY_KEYS = frozenset({"num_hidden_layers", "intermediate_size", "num_attention_heads", "max_position_embeddings",
                          "num_key_value_heads", "moe_intermediate_size", "rms_norm_eps", "torch_dtype"})


def _load_file(path: Path) -> ModelSpec:
    if path.suffix == ".json":
        data = read_json(path, "model", non_finite=True)     # NaN / Infinity: see read_json
        if is_hf_config(data):
            return model_from_hf_config(path)
        hf_keys = sorted(HF_ONLY_KEYS.intersection(data)) if isinstance(data, dict) else []
        if hf_keys:
            # a Hugging Face config stripped of the keys that name its family: read as a preset it
            # was refused for its first HF key ("unknown key intermediate_size"), which hid the fix
            raise InputError(f"model {path}.model_type",
                             f"looks like a Hugging Face config ({', '.join(hf_keys[:3])}) but names no "
                             "model_type or architectures, which say how its layers are built",
                             f"add the checkpoint's \"model_type\" (one of {', '.join(supported_model_types()[:6])}, ...)")
        data = read_json(path, "model")                        # a preset file: refused there
    else:
        data = read_yaml(path, "model")
    return model_from_dict(data, f"model {path}", default_name=safe_name(path.stem))


def _refuse_builtin_name(name: str, path: Path) -> None:
    """A user model file (outside ``BUILTIN_DIR``) found by name in ``PARAPLAN_MODEL_PATH``
    whose ``name:`` is a built-in preset's name or alias (compared as names are matched: case,
    ``-``, ``_`` and spaces ignored) is an ``InputError``: the catalog would list the name twice
    and its reports would label it as the preset (a 2-layer file named llama3-8b printed as
    llama3-8b). A file given by its path is the user's explicit choice (an edited copy of a
    preset keeps the preset's name) and is read as it is (``load_model``)."""
    if path.resolve().parent == BUILTIN_DIR:
        return
    try:
        stamp = BUILTIN_DIR.stat().st_mtime_ns
    except OSError:
        return
    builtin = {_canonical(stem) for stem, _ in _listing(str(BUILTIN_DIR), stamp)}
    builtin |= {alias for alias, _ in _folder_aliases(str(BUILTIN_DIR), stamp)}
    if _canonical(str(name)) in builtin:
        raise InputError(f"model {path}.name", f"'{name}' is the name of a built-in preset",
                         f"give the file its own name, e.g. name: {str(name).strip()}-custom")


@lru_cache(maxsize=None)
def _load_cached(path: str, mtime: float) -> ModelSpec:
    return _load_file(Path(path))


def load_model(name_or_path: str | os.PathLike) -> ModelSpec:
    """The model named ``name_or_path``: a preset name, a YAML/JSON preset file, or a Hugging Face
    ``config.json`` (or its folder)."""
    given = name_or_path if not isinstance(name_or_path, os.PathLike) else os.fspath(name_or_path)
    p = _resolve(given)
    spec = _load_cached(str(p), p.stat().st_mtime)
    if not _names_a_path(given):
        _refuse_builtin_name(spec.name, p)          # found by name in the catalog folders
    return spec


def load_preset(name: str) -> ModelSpec:
    """The catalog model a preset name or alias names (as ``load_model`` matches names), never a
    file path: ``llama3-8b`` is the preset even where the working directory holds a folder
    ``llama3-8b/`` or a ``llama3-8b.yaml`` (``InputError`` for an unknown name)."""
    if not isinstance(name, str):
        raise InputError("model", f"expected a preset name, got {type(name).__name__}",
                         "give the model as text, e.g. a name from `paraplan models list`")
    p = _resolve_name(name)
    spec = _load_cached(str(p), p.stat().st_mtime)
    _refuse_builtin_name(spec.name, p)
    return spec


def list_models() -> list[str]:
    """Names of all presets found (built-in and ``PARAPLAN_MODEL_PATH``)."""
    return sorted(_entries())


def model_path(name: str) -> Path:
    """The file a model name resolves to."""
    return _resolve(name)
