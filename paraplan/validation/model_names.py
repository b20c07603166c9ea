"""The model preset a checkpoint or model name names, as validation files spell them.

Sources name a model by its Hugging Face id (``meta-llama/Llama-3.1-405B``), a checkpoint of it
(``Qwen3-30B-A3B-Base``, ``DeepSeek-R1-0528``, ``Llama-3.3-70B-Instruct-FP8``), or its plain name
(``Meta-Llama-3.1-405B``, ``Llama 3.1 405B Instruct``). Instruction or chat tuning, a quantised
export, a dated release and the like change the weights, not the architecture, so each such
name is the architecture of the model it is a checkpoint of: ``preset_named`` looks up the
repository name (the part after ``org/``), then that name with its checkpoint suffixes removed
one at a time, each also without a leading ``Meta-``, in the model catalog by name or alias
(``model_specs.catalog.load_preset``: by name only, so a file or folder of that name in the
working directory is never the preset)."""
from __future__ import annotations

import re

from hardware_specs.errors import InputError
from model_specs.catalog import load_preset, preset_path

#: a checkpoint's name beyond its model's: instruction or chat tuning, a quantised export, the 16-bit
#: release named as such (NVIDIA's ``-BF16``), a dated release (``-0528``, ``-2507``) and the like change
#: the weights, not the architecture
CHECKPOINT_SUFFIX = re.compile(r"[-_. ](instruct|chat|base|hf|it|bf16|fp8|fp4|nvfp4|mxfp4|int4|w4a16|w8a8|awq|gptq|"
                               r"thinking|dynamic|block|\d{4}|v\d+(?:\.\d+)*)$", re.IGNORECASE)


def preset_named(text) -> str | None:
    """The name of the model preset ``text`` names (see the module docstring), or None when
    nothing matches."""
    name = str(text or "").strip().lower().rsplit("/", 1)[-1].strip()
    while name:
        # the whole name first, then one suffix shorter at a time (DeepSeek-V3.1 is a name of its
        # own before "-v3.1" would read as a version suffix)
        for candidate in (name, re.sub(r"^meta[-_ ]", "", name)):
            if preset_path(candidate) is None:      # unknown: skip load_preset's 'did you mean' search
                continue
            try:
                return load_preset(candidate).name
            except InputError:
                continue
        shorter = CHECKPOINT_SUFFIX.sub("", name).strip()
        if shorter == name:
            break
        name = shorter
    return None
