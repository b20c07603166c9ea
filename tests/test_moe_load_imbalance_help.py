"""--moe-load-imbalance is the busiest EP rank's routed rows over the mean (``moe._rank_imbalance``),
not the busiest expert's tokens: at ep = 1 every expert is local and the factor changes nothing."""
from click.testing import CliRunner

from hardware_specs.catalog import load_cluster
from model_specs.catalog import load_model
from paraplan.cli import main
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate


def test_help_says_rank_rows_and_ep_one():
    text = " ".join(CliRunner().invoke(main, ["simulate", "--help"]).output.split())
    assert "Busiest expert's tokens" not in text
    assert "Busiest expert-parallel rank's routed rows / the mean over the EP group" in text
    assert "no effect at --ep 1" in text


def test_imbalance_does_nothing_at_ep_one():
    model = load_model("mixtral-8x7b").with_seq_len(4096)
    cluster = load_cluster("dgx-h100")

    def run(imb):
        return simulate(model, cluster, ParallelConfig(dp=8, ep=1, micro_batch=1, global_batch=64, zero_stage=3,
                                                       recompute="full", moe_load_imbalance=imb))
    assert run(2.0).step_time_s == run(1.0).step_time_s
