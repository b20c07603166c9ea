"""The precision a published row ran in when its ``dtype_norm`` column is empty.

- GPUs whose only training tensor-core rate is 16-bit (V100, A100): bf16 (fp16 on V100, which has
  no bf16); the two run at one rate, so the choice does not move the prediction.
- FP8-capable GPUs (Hopper, Blackwell), where bf16 and fp8 GEMMs differ 2x in rate: the precision
  of the row's software-stack release's own performance preset with the row's exact layout, when
  the release runs that layout for that model and GPU kind in one precision only
  (``hardware_specs.stack_presets.precision_of_layout``). Otherwise not guessed: the row is
  skipped with what the presets say.
"""
from __future__ import annotations

from hardware_specs.stack_presets import Layout, precision_of_layout, presets_for
from hardware_specs.stack_spec import StackSpec


def unstated_dtype(stack: StackSpec, gpu: str, fp8_capable: bool, model_name: str, layout: Layout,
                   fsdp_stated: bool) -> tuple[str | None, str]:
    """(dtype, assumption) for a row without a precision, or (None, the reason it is skipped).

    ``fsdp_stated``: whether the row's ``zero_norm`` says if it ran Megatron-FSDP (ZeRO-3); if not,
    layouts with and without FSDP both count, so either can make the precision ambiguous.
    """
    if not fp8_capable:
        dtype = "fp16" if gpu.startswith("v100") else "bf16"
        return dtype, f"dtype={dtype}"
    layouts = [layout] if fsdp_stated else [layout, Layout(**{**layout.__dict__, "fsdp": not layout.fsdp})]
    dtypes, presets = set(), ()
    for candidate in layouts:
        found, matched = precision_of_layout(stack, model_name, gpu, candidate)
        dtypes |= found
        presets += matched
    base = "dtype_norm empty on an FP8-capable GPU (bf16 and fp8 GEMMs differ 2x in rate)"
    if len(dtypes) == 1:
        dtype = dtypes.pop()
        names = "/".join(dict.fromkeys(p.compute_dtype for p in presets))
        return dtype, (f"dtype={dtype}: {stack.name}'s only precision for this model, GPU and layout "
                       f"(preset {names}: {presets[0].source})")
    if dtypes:
        return None, (f"{base}: {stack.name}'s presets run this layout in {', '.join(sorted(dtypes))}; "
                      "the precision is not guessed")
    if presets_for(stack, model_name, gpu):
        return None, f"{base}: no preset of {stack.name} has this layout; the precision is not guessed"
    return None, f"{base}: {stack.name} lists no preset for this model and GPU; the precision is not guessed"
