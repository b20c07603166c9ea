"""A release's own performance presets, and the precision a layout implies (hardware_specs/stack_presets.py)."""
from hardware_specs.catalog import load_stack, stack_for
from hardware_specs.stack_presets import Layout, all_presets, precision_of_layout, presets_for


def _layout(**kw):
    base = dict(n_gpus=128, tp=2, pp=1, cp=1, ep=1, vpp=1, micro_batch=1, global_batch=64, fsdp=True)
    return Layout(**{**base, **kw})


def test_a_layout_run_in_one_precision_names_it_and_a_shared_one_does_not():
    """Megatron-Bridge 25.09 (v0.1.0rc3 llama31_405b_llm_pretrain.yaml) runs Llama 3.1 405B on 128
    GB200 with TP 2 and Megatron-FSDP only in FP8 (current and delayed scaling), and TP 4 x PP 8 x
    CP 2 x VP 8 both in BF16 and in MXFP8."""
    stack = stack_for("megatron-bridge", "25.09")
    dtypes, presets = precision_of_layout(stack, "LLAMA3.1_405B (Megatron-Bridge 25.09)", "gb200", _layout())
    assert dtypes == {"fp8"}
    assert [p.compute_dtype for p in presets] == ["fp8_cs", "fp8_ds"]          # primary (FP8-CS) first
    assert "perf_matrix.gb200.num_gpus_128.fp8_cs" in presets[0].source
    pp8 = _layout(tp=4, pp=8, cp=2, vpp=8, fsdp=False)
    assert precision_of_layout(stack, "llama3.1-405b", "gb200", pp8)[0] == {"bf16", "mxfp8"}
    assert precision_of_layout(stack, "llama3.1-405b", "gb200", _layout(tp=8))[0] == set()


def test_presets_belong_to_their_release_and_framework():
    late = stack_for("megatron-bridge", "26.04.01")
    assert {p.container for p in presets_for(late, "kimi_k2", "gb300")} == {"26.04.01"}
    assert presets_for(load_stack("megatron-core"), "llama3.1-405b", "gb200") == ()
    assert len({p.container for p in all_presets()}) == 9            # 25.09 ... 26.08
