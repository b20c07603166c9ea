"""Run inside a Megatron-LM source tree (``tools/megatron_flags.py`` starts it there).

``python megatron_probe.py flags``: print every option of ``pretrain_gpt.py``'s parser as JSON.
``python megatron_probe.py verify < cases.json``: run each case's command line through the real
``parse_args``, ``validate_args``, ``core_transformer_config_from_args``, the constant
micro-batch calculator and the rank generators of ``initialize_model_parallel``, and print what
each answered as JSON.

CPU-only shims, stated in the output: ``triton`` is absent, so the few modules that import it
unguarded are replaced by empty stand-ins (none of them parses or validates arguments);
``typing.override`` comes from ``typing_extensions`` on Python 3.11; the GPU is taken to be a
Hopper (compute capability 9.0, the generation whose ``CUDA_DEVICE_MAX_CONNECTIONS`` rule
applies) and Transformer Engine to be installed (version 2.12, as in NGC containers), so the
checks that ask for them pass as they would on a training node.
"""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import io
import json
import os
import re
import sys
import typing
import warnings
from contextlib import redirect_stdout
from unittest import mock

SHIMS = ["modules importing triton unguarded replaced by stand-ins", "typing.override from typing_extensions",
         "GPU taken as compute capability 9.0 (Hopper)", "Transformer Engine taken as 2.12 (fused RoPE present)"]
_UNGUARDED = re.compile(r"^(import triton|from triton)", re.M)


class _TritonFree(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.startswith("megatron."):
            candidate = name.replace(".", "/") + ".py"
            if os.path.exists(candidate) and _UNGUARDED.search(open(candidate).read()):
                return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        module = mock.MagicMock(name=spec.name)
        module.__spec__, module.__name__ = spec, spec.name
        return module

    def exec_module(self, module):
        pass


def _import():
    import typing_extensions
    if not hasattr(typing, "override"):
        typing.override = typing_extensions.override
    sys.meta_path.insert(0, _TritonFree())
    sys.path.insert(0, os.getcwd())
    warnings.filterwarnings("ignore")
    import torch
    from packaging.version import Version

    import megatron.core.models.common.embeddings.rope_utils as rope_utils
    import megatron.core.transformer.transformer_config as transformer_config
    import megatron.core.utils as core_utils
    import megatron.training.arguments as arguments

    class _Hopper:
        major, minor = 9, 0

    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **k: _Hopper()
    for module in (core_utils, arguments, transformer_config):
        if hasattr(module, "is_te_min_version"):
            module.is_te_min_version = lambda *a, **k: True
        if hasattr(module, "get_te_version"):
            module.get_te_version = lambda: Version("2.12.0")
    rope_utils.fused_apply_rotary_pos_emb = lambda *a, **k: None
    return arguments


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "name") and hasattr(value, "value"):      # enum members
        return value.name
    return repr(value)


def flags() -> dict:
    arguments = _import()
    parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    out = {}
    for action in parser._actions:
        if not action.option_strings:
            continue
        kind = type(action).__name__.strip("_").replace("Action", "")
        kind = re.sub(r"(?<!^)([A-Z])", r"_\1", kind).lower()          # StoreTrue -> store_true
        entry = {"dest": action.dest, "action": kind, "type": getattr(action.type, "__name__", None),
                 "choices": _jsonable(list(action.choices)) if action.choices is not None else None,
                 "nargs": action.nargs, "default": _jsonable(action.default)}
        if kind == "store_const":
            entry["const"] = _jsonable(action.const)
        for option in action.option_strings:
            out[option] = entry
    return out


#: the built config's RoPE fields the verify result records (MLATransformerConfig's YaRN ones,
#: and the yarn_* attributes argument_utils._apply_yarn_config_from_args sets for other attention)
ROPE_FIELDS = ("position_embedding_type", "rotary_base", "rope_type", "rotary_scaling_factor",
               "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
               "yarn_rotary_scaling_factor", "yarn_original_max_position_embeddings", "yarn_beta_fast",
               "yarn_beta_slow", "yarn_mscale", "yarn_mscale_all_dim")
#: the built config's MoE router fields the verify result records (MoE exports only)
ROUTER_FIELDS = ("moe_router_topk", "moe_router_score_function", "moe_router_enable_expert_bias",
                 "moe_router_bias_update_rate", "moe_router_topk_scaling_factor", "moe_router_num_groups",
                 "moe_router_group_topk", "moe_router_pre_softmax")


def verify(cases: list[dict]) -> list[dict]:
    arguments = _import()
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
    from megatron.core.parallel_state import RankGenerator

    results = []
    for case in cases:
        saved = dict(os.environ)
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        os.environ.update(case.get("env", {}))
        os.environ["WORLD_SIZE"], os.environ["RANK"] = str(case["world_size"]), "0"
        sys.argv = ["pretrain_gpt.py"] + case["argv"]
        result = {"id": case["id"], "world_size": case["world_size"]}
        log = io.StringIO()
        try:
            with redirect_stdout(log):
                args = arguments.parse_args()
                arguments.validate_args(args)
                config = arguments.core_transformer_config_from_args(args)
                calculator = ConstantNumMicroBatchesCalculator(args.global_batch_size, args.micro_batch_size,
                                                               args.data_parallel_size, rank=0,
                                                               decrease_batch_size_if_needed=False)
                decoder = RankGenerator(tp=args.tensor_model_parallel_size, ep=1, dp=args.data_parallel_size,
                                        pp=args.pipeline_model_parallel_size, cp=args.context_parallel_size,
                                        order="tp-cp-ep-dp-pp")
                expert_width = (args.expert_tensor_parallel_size * args.expert_model_parallel_size
                                * args.pipeline_model_parallel_size)
                if args.world_size % expert_width:
                    raise RuntimeError(f"world_size ({args.world_size}) is not divisible by "
                                       f"expert_tensor_model_pipeline_parallel size ({expert_width})")
                expert = RankGenerator(tp=args.expert_tensor_parallel_size, ep=args.expert_model_parallel_size,
                                       dp=args.world_size // expert_width, pp=args.pipeline_model_parallel_size,
                                       cp=1, order="tp-cp-ep-dp-pp")
                assert decoder.get_ranks("pp") == expert.get_ranks("pp"), "pipeline groups differ for experts"
            result.update(accepted=True, config_class=type(config).__name__,
                          data_parallel_size=args.data_parallel_size, num_microbatches=calculator.get(),
                          virtual_pipeline_model_parallel_size=args.virtual_pipeline_model_parallel_size,
                          num_layers=config.num_layers, mtp_num_layers=config.mtp_num_layers,
                          rope={k: _jsonable(getattr(config, k)) for k in ROPE_FIELDS if hasattr(config, k)})
            if config.num_moe_experts:
                result["router"] = {k: _jsonable(getattr(config, k)) for k in ROUTER_FIELDS if hasattr(config, k)}
        except SystemExit as exc:          # argparse rejects a flag or a value
            result.update(accepted=False, error=f"argparse exit {exc.code}")
        except Exception as exc:            # noqa: BLE001 - every rejection is reported, by its type
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            result.update(accepted=False, error=f"{type(exc).__name__}: {first}")
        finally:
            os.environ.clear()
            os.environ.update(saved)
        results.append(result)
    return results


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "flags":
        payload = flags()
    else:
        payload = verify(json.load(sys.stdin))
    sys.stdout = sys.__stdout__
    print("\n@@JSON@@" + json.dumps({"shims": SHIMS, "result": payload}))
