"""Figures (paraplan.plots), the notebook API that feeds them (paraplan.api), and ``paraplan plot``."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.figure import Figure

from hardware_specs.catalog import load_cluster
from hardware_specs.errors import InputError
from paraplan import api, plots
from paraplan.cli import main
from simulator.report import TIME_PARTS

MODEL, CLUSTER = "llama3-70b", "dgx-h100"
BASE = dict(model=MODEL, cluster=CLUSTER, gpus=256, tp=8, pp=4, global_batch=512, zero_stage=1,
            sequence_parallel=True, recompute="selective")


@pytest.fixture(scope="module")
def pp_sweep():
    return api.sweep(BASE, "pp", [1, 2, 4, 8])


# ---- api: simulate / sweep / plan ------------------------------------------------------------

def test_simulate_row_has_units_in_names_and_parts_that_sum(pp_sweep):
    row = api.simulate(**BASE).iloc[0]
    assert list(api.ROW_COLUMNS) == list(api.simulate(**BASE).columns)
    assert row.step_time_s == pytest.approx(sum(row[p] for p in TIME_PARTS), rel=1e-9)
    assert row.memory_gib == pytest.approx(sum(row[c] for c in api.MEMORY_COLUMNS), rel=1e-9)
    assert row.dp == 8 and row.n_gpus == 256 and row.hbm_gib == pytest.approx(80.0)
    assert row.scaleout_gbit_per_s == pytest.approx(400.0) and row.config == "dp8 tp8 pp4 mb1 z1 sel sp"


def test_sweep_over_gpu_count_derives_dp_and_keeps_other_fields():
    df = api.sweep({k: v for k, v in BASE.items() if k != "gpus"}, "gpus", [64, 128, 256])
    assert list(df.dp) == [2, 4, 8] and list(df.n_gpus) == [64, 128, 256]
    assert (df.tp == 8).all() and (df.sweep_field == "gpus").all()
    assert df.tokens_per_s.is_monotonic_increasing


def test_sweep_swaps_the_gpu_and_keeps_the_fabric():
    df = api.sweep(BASE, "gpu", ["h100-sxm-80gb", "b200"])
    assert list(df.gpu) == ["h100-sxm-80gb", "b200"] and list(df.cluster) == [CLUSTER] * 2
    assert df.hbm_gib.iloc[1] > df.hbm_gib.iloc[0]
    assert df.scaleup_gbit_per_s.nunique() == 1
    assert df.step_time_s.iloc[1] < df.step_time_s.iloc[0]


def test_bandwidth_what_if_only_touches_the_chosen_tier():
    c = api.what_if_cluster(CLUSTER, scaleout_gbit_per_s=800)
    base = load_cluster(CLUSTER)
    assert c.scaleout.bw_bytes_per_s == pytest.approx(100e9) and c.scaleup == base.scaleup
    df = api.sweep(BASE, "scaleout_gbit_per_s", ["100", "800"])   # strings are coerced
    assert list(df.scaleout_gbit_per_s) == [100.0, 800.0]
    assert df.dp_comm_exposed_s.iloc[0] >= df.dp_comm_exposed_s.iloc[1]
    assert df.tp_comm_exposed_s.iloc[0] == pytest.approx(df.tp_comm_exposed_s.iloc[1])   # TP stays on NVLink


def test_sweep_over_model_sequence_and_batch_fields():
    assert list(api.sweep({**BASE, "global_batch": 256}, "model", ["llama3-8b", "llama3-70b"]).model) == \
        ["llama3-8b", "llama3-70b"]
    seq = api.sweep(BASE, "seq_len", [4096, 8192])
    assert list(seq.seq_len) == [4096, 8192] and list(seq.global_batch_tokens) == [512 * 4096, 512 * 8192]
    tok = api.sweep(BASE, "global_batch_tokens", [2**21, 2**22])
    assert list(tok.global_batch) == [256, 512]


def test_bad_sweep_field_names_the_closest_fields():
    with pytest.raises(InputError) as err:
        api.sweep(BASE, "tpp", [1, 2])
    assert err.value.field == "field" and "tp" in err.value.fix


def test_empty_sweep_is_an_input_error():
    for values in ([], "", " , "):
        with pytest.raises(InputError) as err:
            api.sweep(BASE, "pp", values)
        assert err.value.field == "values"


def test_invalid_value_raises_or_is_recorded():
    with pytest.raises(InputError):
        api.sweep(BASE, "tp", [3])
    df = api.sweep(BASE, "tp", [3, 8], on_error="skip")
    assert "tp" in df.error.iloc[0] and df.error.iloc[1] == "" and np.isfinite(df.step_time_s.iloc[1])


def test_coerce_value_converts_command_line_strings():
    assert api.coerce_value("tp", "8") == 8
    assert api.coerce_value("scaleout_gbit_per_s", "400") == 400.0
    assert api.coerce_value("sequence_parallel", "off") is False
    assert api.coerce_value("gpu", "b200") == "b200"
    with pytest.raises(InputError):
        api.coerce_value("tp", "2.5")
    # token counts as --global-batch-tokens and sweep files take them
    assert api.coerce_value("global_batch_tokens", "4Mi") == 4 * 2**20
    assert api.coerce_value("global_batch_tokens", "4M") == 4_000_000
    assert api.coerce_value("global_batch_tokens", "512k") == 512_000
    with pytest.raises(InputError):
        api.coerce_value("global_batch_tokens", "4Mx")


def test_global_batch_is_required_and_tokens_must_divide():
    with pytest.raises(InputError) as err:
        api.simulate(MODEL, CLUSTER, gpus=64, tp=8)
    assert err.value.field == "global_batch"
    with pytest.raises(InputError) as err:
        api.simulate(MODEL, CLUSTER, gpus=64, tp=8, global_batch_tokens=1000)
    assert err.value.field == "global_batch_tokens"


def test_plan_pins_config_fields_and_best_plan_is_resimulated():
    plans = api.plan(MODEL, CLUSTER, 256, 4 * 2**20, tp=8, pp=[2, 4])
    assert len(plans) and (plans.tp == 8).all() and set(plans.pp) <= {2, 4}
    assert plans.tokens_per_s.is_monotonic_decreasing and "config" in plans and plans.attrs["explain"]
    best = api.best_plan(MODEL, CLUSTER, 256, 4 * 2**20, tp=8, pp=[2, 4])
    assert best.config.iloc[0] == plans.config.iloc[0]
    assert best.tokens_per_s.iloc[0] == pytest.approx(plans.tokens_per_s.iloc[0], rel=1e-9)
    assert set(api.MEMORY_COLUMNS) <= set(best.columns)


def test_layer_ops_time_matches_flops_over_rate_and_sits_under_the_roofline():
    ops = api.layer_ops(MODEL, CLUSTER, tp=8)
    assert {"attention qkv projection", "mlp down projection", "attention core (flash)"} <= set(ops.op)
    roof = np.minimum(ops.peak_tflop_per_s, ops.intensity_flop_per_byte * ops.hbm_tb_per_s)
    assert (ops.achieved_tflop_per_s <= roof * (1 + 1e-9)).all()
    qkv = ops[ops.op == "attention qkv projection"].iloc[0]
    assert qkv.flops == pytest.approx(2 * 8192 * (64 * 128 + 2 * 8 * 128) / 8 * 8192)
    elementwise = ops[ops.op.str.startswith("norms")].iloc[0]
    assert elementwise.intensity_flop_per_byte < 295        # memory-bound, left of the H100 ridge


def test_moe_is_modelled_reports_whether_ep_changes_the_step():
    # experts are priced: spreading Mixtral's 8 experts over 8 GPUs (ep 8) adds the dispatch and
    # combine all-to-alls and changes each GPU's expert GEMMs, so the step differs from ep 1
    assert api.moe_is_modelled("mixtral-8x7b", CLUSTER) is True
    with pytest.raises(InputError):
        api.moe_is_modelled(MODEL, CLUSTER)


# ---- plots -----------------------------------------------------------------------------------

def _texts(fig: Figure) -> tuple[str, list[str], list[str]]:
    ax = fig.axes[0]
    return ax.get_title() or (fig._suptitle.get_text() if fig._suptitle else ""), \
        [a.get_xlabel() for a in fig.axes], [a.get_ylabel() for a in fig.axes]


def test_every_figure_has_a_title_axis_labels_and_writes_a_png(tmp_path, pp_sweep):
    plans = api.plan(MODEL, CLUSTER, 256, 4 * 2**20, tp=[4, 8])
    scaling = api.sweep({k: v for k, v in BASE.items() if k != "gpus"}, "gpus", [64, 128, 256])
    bandwidth = api.sweep(BASE, "scaleout_gbit_per_s", [100, 400, 800])
    figures = {
        "breakdown": plots.breakdown(pp_sweep, tmp_path / "breakdown.png"),
        "memory": plots.memory(pp_sweep, tmp_path / "memory.png"),
        "roofline": plots.roofline(api.layer_ops(MODEL, CLUSTER, tp=8), tmp_path / "roofline.png"),
        "pareto": plots.pareto(plans, tmp_path / "pareto.png"),
        "scaling": plots.scaling(scaling, tmp_path / "scaling.png"),
        "bandwidth": plots.bandwidth(bandwidth, tmp_path / "bandwidth.png"),
    }
    for name, fig in figures.items():
        assert isinstance(fig, Figure)
        title, xlabels, ylabels = _texts(fig)
        assert title, name
        assert xlabels[0] and ylabels[0], name
        png = tmp_path / f"{name}.png"
        assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "(s)" in figures["breakdown"].axes[0].get_xlabel()
    assert "GiB" in figures["memory"].axes[0].get_ylabel()
    assert "FLOP" in figures["roofline"].axes[0].get_xlabel()
    assert "Gb/s" in figures["bandwidth"].axes[0].get_xlabel()
    assert "MFU" in figures["scaling"].axes[1].get_ylabel()


def test_breakdown_bars_stack_to_the_step_time(pp_sweep):
    fig = plots.breakdown(pp_sweep)
    ax = fig.axes[0]
    ends = {}
    for patch in ax.patches:
        y = round(patch.get_y() + patch.get_height() / 2, 6)
        ends[y] = max(ends.get(y, 0.0), patch.get_x() + patch.get_width())
    assert sorted(ends.values()) == pytest.approx(sorted(pp_sweep.step_time_s), rel=1e-9)


def test_plots_accept_step_reports():
    report, _, _ = api.simulate_report(MODEL, CLUSTER, gpus=64, tp=8, pp=4, global_batch=128, zero_stage=1)
    # a StepReport is drawn as its row (isinstance(..., Figure) alone could not fail on a wrong
    # row): the one breakdown bar ends at the report's step time, and each of the two memory bars
    # stacks to the report's peak per GPU, memory_bytes / 2**30 GiB
    ax = plots.breakdown(report).axes[0]
    assert max(p.get_x() + p.get_width() for p in ax.patches) == pytest.approx(report.step_time_s, rel=1e-9)
    ax = plots.memory([report, report]).axes[0]
    tops = {}
    for patch in ax.patches:
        x = round(patch.get_x() + patch.get_width() / 2, 6)
        tops[x] = max(tops.get(x, 0.0), patch.get_y() + patch.get_height())
    assert list(tops.values()) == pytest.approx([report.memory_bytes / 2**30] * 2, rel=1e-9)


def test_pareto_mask_keeps_only_undominated_plans():
    df = pd.DataFrame({"memory_gib": [10, 20, 20, 30, 40], "tokens_per_s": [1.0, 3.0, 2.0, 2.5, 4.0]})
    assert list(plots.pareto_mask(df)) == [True, True, False, False, True]


# ---- paraplan plot ---------------------------------------------------------------------------

PLOT = ["plot", "breakdown", "-m", MODEL, "-c", CLUSTER, "-n", "256", "--tp", "8", "--pp", "4", "--zero", "1",
        "--global-batch", "512"]


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_line_error(result, *needles):
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_plot_command_writes_a_sweep_figure(tmp_path):
    out = tmp_path / "pp.png"
    result = _run(*PLOT, "--field", "pp", "--values", "2,4", "-o", out)
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000 and "breakdown, 2 rows" in result.stdout


def test_plot_sweeping_the_batch_needs_no_base_batch_and_takes_token_suffixes(tmp_path):
    base = [a for a in PLOT if a not in ("--global-batch", "512")]
    out = tmp_path / "gbt.png"
    result = _run(*base, "--field", "global_batch_tokens", "--values", "1Mi,2Mi", "-o", out)
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000 and "breakdown, 2 rows" in result.stdout
    df = api.sweep({"model": MODEL, "cluster": CLUSTER, "gpus": 64, "tp": 8}, "global_batch_tokens",
                   [api.coerce_value("global_batch_tokens", v) for v in ("1Mi", "2Mi")])
    assert df.global_batch_tokens.tolist() == [2**20, 2**21]
    # without the swept field the batch stays required
    _one_line_error(_run(*base, "--field", "pp", "--values", "1,2", "-o", tmp_path / "x.png"), "--global-batch")


def test_plot_bad_field_name_is_one_line_exit_2(tmp_path):
    out = tmp_path / "x.png"
    _one_line_error(_run(*PLOT, "--field", "tpp", "--values", "1,2", "-o", out), "--field", "tpp", "did you mean")
    assert not out.exists()


def test_plot_empty_sweep_is_one_line_exit_2(tmp_path):
    for values in ("", ",", " , "):
        _one_line_error(_run(*PLOT, "--field", "pp", "--values", values, "-o", tmp_path / "x.png"),
                        "--values", "empty sweep")
    _one_line_error(_run(*PLOT, "--field", "pp", "-o", tmp_path / "x.png"), "--values", "missing")


def test_plot_kinds_without_sweeps_and_with_defaults(tmp_path):
    ok = _run("plot", "roofline", "-m", MODEL, "-c", CLUSTER, "--tp", "8", "-o", tmp_path / "r.png")
    # one layer's operations: four GEMMs and the LM head, flash attention's core and the
    # elementwise ops forward and backward (api.layer_ops): 5 + 2 + 2 rows
    assert ok.exit_code == 0 and "(roofline, 9 rows)" in ok.stdout, ok.output
    _one_line_error(_run("plot", "roofline", "-m", MODEL, "-c", CLUSTER, "--field", "tp", "--values", "1",
                         "-o", tmp_path / "r.png"), "--field")
    bw = _run("plot", "bandwidth", "-m", MODEL, "-c", CLUSTER, "-n", "256", "--tp", "8", "--pp", "4", "--zero", "1",
              "--global-batch", "512", "-o", tmp_path / "bw.png")
    assert bw.exit_code == 0 and "4 rows" in bw.stdout, bw.output
    _one_line_error(_run("plot", "scaling", "-m", MODEL, "-c", CLUSTER, "--tp", "8", "--global-batch", "512",
                         "-o", tmp_path / "s.png"), "--values")


def test_plot_best_lets_the_planner_choose_unless_degrees_are_given(tmp_path, monkeypatch):
    # the rows each figure is drawn from (exit code 0 alone passed whatever row was drawn)
    drawn = {}

    def recording(kind, draw):
        def record(df, path=None, **kw):
            drawn[kind] = df
            return draw(df, path, **kw)
        return record

    for kind in ("breakdown", "memory"):
        monkeypatch.setitem(plots.KINDS, kind, recording(kind, plots.KINDS[kind]))
    out = tmp_path / "best.png"
    result = _run("plot", "breakdown", "-m", MODEL, "-c", CLUSTER, "-n", "256", "--global-batch", "512", "--best",
                  "--field", "gpu", "--values", "h200-sxm-141gb", "-o", out)
    assert result.exit_code == 0, result.output
    pinned = _run("plot", "memory", "-m", MODEL, "-c", CLUSTER, "-n", "256", "--global-batch", "512", "--best",
                  "--tp", "8", "-o", tmp_path / "pinned.png")
    assert pinned.exit_code == 0, pinned.output
    # --best draws the planner's fastest plan at the swept GPU, and with --tp 8 the fastest plan
    # at tp 8 (not the H200 winner's layout: dp 128 x cp 2 at tp 1 fits in 141 GB)
    best = api.best_plan(MODEL, CLUSTER, 256, global_batch=512, gpu="h200-sxm-141gb").iloc[0]
    at_tp8 = api.best_plan(MODEL, CLUSTER, 256, global_batch=512, tp=8).iloc[0]
    (row,), (pinned_row,) = drawn["breakdown"].to_dict("records"), drawn["memory"].to_dict("records")
    assert row["gpu"] == "h200-sxm-141gb" and row["config"] == best["config"]
    assert row["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-12)
    assert pinned_row["tp"] == 8 and pinned_row["config"] == at_tp8["config"] != best["config"]
    assert pinned_row["memory_gib"] == pytest.approx(at_tp8["memory_gib"], rel=1e-12)


def test_every_step_time_part_has_a_human_label():
    """Notebooks and legends name every part of ``TIME_PARTS`` (a part with no label was a
    KeyError in the 70B notebook once its plans offloaded activations)."""
    from paraplan.plots import TIME_LABELS
    from simulator.report import TIME_PARTS
    assert set(TIME_PARTS) <= set(TIME_LABELS)
    assert TIME_LABELS["offload_exposed_s"] == "activation offload (exposed)"


def test_figures_of_numbers_on_an_unfitted_prior_say_so():
    """A figure of MI300X (cdna3) or TPU v4 predictions carries the line the tables' * footnote
    gives: their efficiency model is an unfitted prior. H100's (fitted) carries none."""
    from paraplan import plots
    mi = api.simulate("llama3-8b", "mi300x-node", gpus=8, global_batch=16, zero_stage=1)
    h100 = api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=16, zero_stage=1)
    texts = lambda fig: [t.get_text() for t in fig.texts]
    assert any("mi300x: an unfitted prior" in t for t in texts(plots.breakdown(mi)))
    assert not any("prior" in t for t in texts(plots.breakdown(h100)))
    ops = api.layer_ops("llama3-8b", "tpu-v4-pod")
    assert bool(ops.efficiency_fitted.iloc[0]) is False
    assert any("tpu-v4: an unfitted prior" in t for t in texts(plots.roofline(ops)))


def test_a_repeated_sweep_value_is_refused_and_a_one_gpu_bandwidth_plot_warns_nothing(tmp_path):
    from click.testing import CliRunner
    from paraplan.cli import main
    r = CliRunner().invoke(main, ["plot", "breakdown", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8",
                                  "--global-batch", "8", "--field", "pp", "--values", "1,2,1", "-o",
                                  str(tmp_path / "a.png")])
    assert r.exit_code == 2 and r.stderr.startswith("error: --values: '1' repeats a value of '1,2,1'")
    r = CliRunner().invoke(main, ["plot", "bandwidth", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "1",
                                  "--global-batch", "8", "-o", str(tmp_path / "b.png")])
    assert r.exit_code == 0 and r.stderr == "", r.stderr      # matplotlib's empty-legend warning leaked
