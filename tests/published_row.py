"""One published-runs row for tests of ``paraplan validate published``'s row reading: Llama 3.1 8B
on 8 H100 (data parallel, bf16, ZeRO-1), every needed column stated (the columns of
``paraplan/data/validation/published_runs.csv``); a test overrides what it is about."""


def llama31_8b_row(**overrides) -> dict:
    """The row with ``overrides`` applied (e.g. ``vocab=float("nan")``, ``pp=3, n_gpus=24``)."""
    row = {"id": "X-1:tokens_per_s_per_gpu", "run_id": "X-1", "gpu_profile": "h100-sxm-80gb",
           "dtype_norm": "bf16", "zero_norm": "1", "flops_convention": "none", "model": "Llama 3.1 8B",
           "layers": 32, "hidden": 4096, "ffn_hidden": 14336, "heads": 32, "kv_heads": 8,
           "vocab": 128256, "seq_len": 8192, "moe_experts": "", "moe_topk": "", "n_gpus": 8,
           "tp": 1, "pp": 1, "dp": 8, "cp": "", "ep": "", "vpp": "", "micro_batch": 1,
           "global_batch": 64, "recompute": "none", "seq_parallel": "n",
           "measured_metric": "tokens_per_s_per_gpu", "measured_value": 10000.0}
    row.update(overrides)
    return row
