"""EAGLE-3 draft heads: the small model a serving engine drafts tokens with for a target model
that has no multi-token-prediction module of its own.

An EAGLE-3 head (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language
Models via Training-Time Test", arXiv 2503.01840, section 3; the engines' ``llama_eagle3.py``
models in vLLM and SGLang) is one decoder layer at the target's hidden size: a first projection
``fc`` fuses three of the target's hidden states (low, middle, high layers: 3 x hidden ->
hidden) into the draft's input; the layer's attention reads [embedding; hidden], 2 x hidden wide,
into its query / key / value projections; its MLP and its output head follow, the head scoring a
draft vocabulary (32,000 tokens in the public heads) mapped onto the target's. It keeps its own
KV cache (one layer). Later draft passes of a step feed the draft's own output back instead of
the target's three states (no ``fc``).

The head is read from its Hugging Face ``config.json``: the Llama fields of the layer and
``draft_vocab_size`` (default: ``vocab_size``); the speculators format (``speculators_model_type:
eagle3`` with a ``transformer_layer_config``) too. Its weights are 16-bit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hardware_specs.errors import InputError, not_a_file, safe_name, whole_number
from model_specs.model_spec import ModelSpec

#: target hidden states the first projection fuses (EAGLE-3: a low, a middle and a high layer)
EAGLE3_FUSED_STATES = 3
#: largest number of decoder layers a draft head may have (the public heads have 1)
MAX_DRAFT_LAYERS = 8
#: a Hugging Face repository id (organisation/name), as a config's ``_name_or_path`` may give it
HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


@dataclass(frozen=True)
class DraftHead:
    """An EAGLE-3 draft head.

    Attributes:
        name: a name for reports (the config's folder name).
        layer: the head as a ``ModelSpec``: ``num_layers`` decoder layers (1) of its attention
            and dense MLP at the target's hidden size, ``vocab_size`` the draft vocabulary its
            output head scores.
        fused_states: target hidden states the first projection fuses (3).
        path: the folder of its ``config.json``.
        checkpoint: the Hugging Face repository of its weights where the config names one
            (``_name_or_path``, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B), else "" (an engine
            must then be pointed at a folder holding the weights, not only the config).
        source: where it was read from.
    """

    name: str
    layer: ModelSpec
    fused_states: int = EAGLE3_FUSED_STATES
    path: str = ""
    checkpoint: str = ""
    target_vocab: int = 0
    source: str = ""

    def check_target(self, target: ModelSpec) -> None:
        """Refuse a head that cannot draft for ``target``: its hidden size must be the target's
        (it reads the target's hidden states and embedding), its vocabulary no larger, and the
        target vocabulary its config states (``vocab_size``, which the draft vocabulary maps
        onto) the target's own: a Llama head is no head for Mixtral of the same width."""
        if self.layer.hidden_size != target.hidden_size:
            raise InputError("--draft-model", f"the draft head {self.name} is {self.layer.hidden_size} wide, "
                             f"{target.name} {target.hidden_size}: an EAGLE-3 head reads its target's hidden states",
                             "give the head trained for this model")
        if self.target_vocab and self.target_vocab != target.vocab_size:
            raise InputError("--draft-model", f"the draft head {self.name} maps its tokens onto a {self.target_vocab:,}-"
                             f"token vocabulary, {target.name} has {target.vocab_size:,}",
                             "give the head trained for this model")
        if self.layer.vocab_size > target.vocab_size:
            raise InputError("--draft-model", f"the draft head {self.name} scores {self.layer.vocab_size:,} tokens, "
                             f"more than the {target.vocab_size:,} of {target.name}",
                             "give the head trained for this model")


def _layer_config(data: dict[str, Any], where: str) -> tuple[dict[str, Any], int]:
    """(the Llama-style config of the head's layer, its draft vocabulary) of an EAGLE-3 config."""
    if str(data.get("speculators_model_type", "")).lower() == "eagle3":
        layer = data.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise InputError("--draft-model", f"{where}: transformer_layer_config: "
                             f"{'missing' if layer is None else 'must be a mapping'}",
                             "a speculators EAGLE-3 config holds its layer's config there")
        vocab = data.get("draft_vocab_size", layer.get("vocab_size"))
        return {**layer, "model_type": layer.get("model_type", "llama")}, vocab
    archs = data.get("architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    if not any("eagle3" in a.lower() for a in names) and "draft_vocab_size" not in data:
        raise InputError("--draft-model", f"{where} is not an EAGLE-3 draft head (architectures "
                         f"{names or 'missing'}, no draft_vocab_size)",
                         "give the config.json of an EAGLE-3 head (e.g. examples/drafts/eagle3-llama3.1-8b)")
    return {**data, "model_type": data.get("model_type", "llama")}, data.get("draft_vocab_size", data.get("vocab_size"))


def load_draft_head(path: str | Path) -> DraftHead:
    """The EAGLE-3 head whose ``config.json`` is at ``path`` (the file or its folder)."""
    from model_specs.hf_config import model_from_hf_config, read_json
    p = Path(path)
    try:
        folder_given = p.is_dir()
    except (OSError, ValueError):
        folder_given = False
    config = p / "config.json" if folder_given else p
    try:
        ok = config.is_file()
    except (OSError, ValueError):
        ok = False
    if not ok:
        raise InputError("--draft-model", not_a_file(config), "give an EAGLE-3 head's config.json or its folder")
    data = read_json(config, "--draft-model")
    where = f"draft head {config}"
    layer_cfg, vocab = _layer_config(data, where)
    try:
        vocab = whole_number("draft_vocab_size", vocab)
        name = safe_name(config.parent.resolve().name, "draft")
        layer = model_from_hf_config(layer_cfg, name=name)
    except InputError as exc:    # a field of the head's config, not of the target model's
        field = (exc.field or "config").removeprefix("hf_config.")
        raise InputError("--draft-model", f"{config}: {field}: {exc.message}",
                         exc.fix or "write the field as the head's config.json has it") from None
    try:
        layer = replace(layer, vocab_size=vocab, mtp_layers=0)
    except InputError as exc:
        raise InputError("--draft-model", f"{config}: draft_vocab_size: {exc.message}",
                         exc.fix or "write the draft vocabulary the head scores") from None
    target_vocab = layer_cfg.get("vocab_size")
    target_vocab = target_vocab if isinstance(target_vocab, int) and not isinstance(target_vocab, bool) else 0
    if layer.moe is not None or layer.mla is not None or layer.hybrid_pattern:
        raise InputError("--draft-model", f"{where} is not a dense decoder layer",
                         "an EAGLE-3 head is one Llama-style layer")
    if not 1 <= layer.num_layers <= MAX_DRAFT_LAYERS:
        raise InputError("--draft-model", f"{config}: num_hidden_layers: must be 1 to {MAX_DRAFT_LAYERS}, got "
                         f"{layer.num_layers}", "an EAGLE-3 head has one decoder layer")
    repo = data.get("_name_or_path")
    checkpoint = repo if isinstance(repo, str) and HF_REPO.fullmatch(repo) else ""
    return DraftHead(name=name, layer=layer, path=str(config.parent), checkpoint=checkpoint,
                     target_vocab=target_vocab, source=f"EAGLE-3 head config {config}")
