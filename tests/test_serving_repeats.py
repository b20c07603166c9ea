"""The repeat-noise floor of ``paraplan.validation.serving_repeats``: on rows whose floor is derived
by hand, on random groups against a brute-force minimum, and invariants on the real file."""
import numpy as np
import pandas as pd
import pytest

from paraplan.validation.serving_repeats import (best_constant, distinct_measurements, floor_share, floor_table,
                                                 repeat_errors, repeat_measurements, repeats_report)

LN2 = np.log(2.0)


def _rows():
    """Deployment A (tp 4, concurrency 8): TTFT 100 and 200 ms (TPOT 10 ms both), the 200 ms run
    exported twice (rounded: 200.004 / 10.003 ms), and under another release a 400 ms run;
    deployment B (tp 8): TPOT 10, 20, 40 ms (TTFT 50 ms); C (tp 2): measured once."""
    rows = [  # tp, release, ttft, tpot, predicted ttft, predicted tpot
        (4, "1.0", 100.0, 10.0, 150.0, 10.0),
        (4, "1.0", 200.0, 10.0, 150.0, 10.0),
        (4, "1.0", 200.004, 10.003, 150.0, 10.0),
        (4, "1.1", 400.0, 10.0, 150.0, 10.0),
        (8, "1.0", 50.0, 10.0, 50.0, 30.0),
        (8, "1.0", 50.0, 20.0, 50.0, 30.0),
        (8, "1.0", 50.0, 40.0, 50.0, 30.0),
        (2, "1.0", 70.0, 12.0, 70.0, 12.0),
    ]
    df = pd.DataFrame({"id": [f"r{i}" for i in range(len(rows))], "backend": "vllm",
                       "backend_version": [r[1] for r in rows], "model_path": "meta-llama/Llama-3.1-70B",
                       "system": "h100_sxm", "precision": "fp8", "mode": "agg",
                       "tp_size": [float(r[0]) for r in rows], "isl": 1024, "osl": 1024, "batch_size": 8.0,
                       "silicon_ttft_ms": [r[2] for r in rows], "silicon_tpot_ms": [r[3] for r in rows],
                       "pred_ttft_ms": [r[4] for r in rows], "pred_tpot_ms": [r[5] for r in rows]})
    for m in ("ttft", "tpot"):
        df[f"{m}_err"] = (df[f"pred_{m}_ms"] - df[f"silicon_{m}_ms"]) / df[f"silicon_{m}_ms"]
    return df


def test_copies_count_once_and_single_measurements_are_not_groups():
    reps = repeat_measurements(_rows(), same_release=True)
    assert sorted(reps.tp_size.unique()) == [4.0, 8.0]                 # C measured once
    a = reps[reps.tp_size == 4].sort_values("silicon_ttft_ms")
    assert a.silicon_ttft_ms.tolist() == [100.0, 200.0]              # 200.004 is the 200 ms run's copy
    assert a.copies.tolist() == [1, 2] and (a.measurements == 2).all()
    # any release: the 400 ms run of release 1.1 joins deployment A
    assert sorted(repeat_measurements(_rows(), same_release=False).query("tp_size == 4").silicon_ttft_ms) == \
        [100.0, 200.0, 400.0]
    # 8 rows, 7 measurements; A's three rows and B's three share a deployment (A's four across releases)
    dist = distinct_measurements(_rows())
    assert len(dist) == 7 and dist.copies.sum() == 8 and dist[dist.rows >= 2].copies.sum() == 6
    text = repeats_report(_rows())
    assert "(same release): 8 rows, 6 sharing their deployment with another row, 1 of them copies" in text
    assert "(any release): 8 rows, 7 sharing" in text and "7 distinct measurements" in text


def test_two_runs_of_100_and_200_ms():
    errs = repeat_errors(repeat_measurements(_rows()))
    a = errs[errs.tp_size == 4].sort_values("silicon_ttft_ms")
    # geometric mean sqrt(100 x 200) = 141.42 ms: each run ln(2)/2 = 34.66% from it in log
    assert a.ttft_spread.to_numpy() == pytest.approx([LN2 / 2, LN2 / 2])
    # two measurements sit sqrt(2) closer to their own centre than to the true one
    assert a.ttft_noise.to_numpy() == pytest.approx([LN2 / np.sqrt(2)] * 2)
    # predicting 141.42 ms: 41.42% over the 100 ms run, 29.29% under the 200 ms run
    assert a.ttft_gm_err.to_numpy() == pytest.approx([np.sqrt(2) - 1, 1 - np.sqrt(2) / 2])
    # the error (c - 100)/100 + (200 - c)/200 grows with c: c = 100 ms is best, 0 and 50%
    assert a.ttft_floor_err.to_numpy() == pytest.approx([0.0, 0.5])
    assert a.ttft_maxmin.to_numpy() == pytest.approx([2.0, 2.0])
    # over the file's three rows (200 ms twice) every c in [100, 200] costs 1: 1/3 per row
    assert (a.ttft_floor_rows_err * a.copies).sum() / a.copies.sum() == pytest.approx(1 / 3)


def test_three_runs_of_10_20_40_ms_tpot_and_the_slice_table():
    errs = repeat_errors(repeat_measurements(_rows()))
    table = floor_table(errs, ("tp_size",))
    b = table.loc[8.0]
    assert (b.groups, b.measurements, b.rows) == (1, 3, 3)
    # geometric mean 20 ms: spreads ln 2, 0, ln 2
    assert b.tpot_spread_median_pct == pytest.approx(round(100 * LN2, 2))
    assert b.tpot_spread_mean_pct == pytest.approx(round(100 * 2 * LN2 / 3, 2))
    assert b.tpot_noise_pct == pytest.approx(round(100 * 2 * LN2 / 3 * np.sqrt(1.5), 2))
    assert b.tpot_floor_gm_pct == pytest.approx(50.0)                  # (100% + 0 + 50%) / 3
    assert b.tpot_floor_pct == pytest.approx(round(100 * 1.25 / 3, 2))  # c = 10 ms: 0, 50%, 75%
    assert b.tpot_model_pct == pytest.approx(round(100 * (2 + 0.5 + 0.25) / 3, 2))  # predicted 30 ms
    assert b.tpot_maxmin_max == pytest.approx(4.0) and b.ttft_floor_pct == 0
    a = table.loc[4.0]
    assert (a.groups, a.measurements, a.rows) == (1, 2, 3)
    assert a.ttft_floor_pct == pytest.approx(25.0) and a.ttft_floor_gm_pct == pytest.approx(
        round(100 * (np.sqrt(2) - 1 + 1 - np.sqrt(2) / 2) / 2, 2))
    assert a.ttft_model_pct == pytest.approx(37.5)                     # 150 ms: 50% and 25%


def test_floor_share_spreads_the_forced_error_over_all_rows_of_the_slice():
    df = _rows()
    share = floor_share(repeat_errors(repeat_measurements(df)), df, ("backend",)).loc["vllm"]
    assert share.rows == 8 and share.rows_in_repeats == 6
    # TTFT: deployment A forces 1 (summed over its 3 rows), B nothing: 1 / 8 rows
    assert share.ttft_floor_pct == pytest.approx(100 / 8)
    # TPOT: B forces 0 + 0.5 + 0.75, A nothing (10 and 10.003 ms are one measurement)
    assert share.tpot_floor_pct == pytest.approx(round(100 * 1.25 / 8, 2))


def test_best_constant_is_the_least_error_of_every_candidate_value():
    # the mean |c - x| / x of a group is piecewise linear in c with breaks at its values, so the
    # least of it over the group's own values is the minimum
    rng = np.random.default_rng(7)
    group = pd.Series(rng.integers(0, 40, 400))
    values = pd.Series(np.exp(rng.normal(3.0, 0.6, 400)))
    weights = pd.Series(rng.integers(1, 4, 400).astype(float))
    for w in (None, weights):
        c = best_constant(values, group, w)
        ww = pd.Series(1.0, index=values.index) if w is None else w
        cost = (ww * np.abs(c - values) / values).groupby(group).sum()
        frame = pd.DataFrame({"g": group, "x": values, "w": ww})
        pairs = frame.merge(frame, on="g", suffixes=("_c", ""))
        brute = (pairs.w * np.abs(pairs.x_c - pairs.x) / pairs.x).groupby([pairs.g, pairs.x_c]).sum()
        assert cost.to_numpy() == pytest.approx(brute.groupby(level=0).min().to_numpy(), rel=1e-12)
        assert c.groupby(group).nunique().max() == 1


@pytest.fixture(scope="module")
def real_residuals():
    from paraplan.validation.datasets import SERVING_RUNS, validation_file
    from paraplan.validation.serving import predict, read_rows
    from paraplan.validation.serving_residuals import residuals
    df = read_rows(validation_file(SERVING_RUNS))
    return residuals(df, predict(df))


@pytest.mark.parametrize("same_release", [True, False])
def test_real_file_repeat_groups_hold_their_invariants(real_residuals, same_release):
    res = real_residuals
    errs = repeat_errors(repeat_measurements(res, same_release))
    assert len(errs) > 0
    size = errs.groupby("group").size()
    assert (size >= 2).all() and (errs.measurements == errs.group.map(size)).all()
    # every row is one distinct measurement or a copy of one; the repeat groups are some of them
    dist = distinct_measurements(res, same_release)
    assert dist.copies.sum() == len(res) and dist.id.is_unique and errs.id.isin(dist.id).all()
    assert (dist.rows >= dist.measurements).all() and (errs.rows == errs.group.map(errs.groupby("group").copies.sum())).all()
    # two distinct measurements of a group differ by more than COPY_TOLERANCE_MS in TTFT or TPOT,
    # so every group spans more than one value in at least one metric
    assert ((errs.ttft_maxmin > 1) | (errs.tpot_maxmin > 1)).all()
    for m in ("ttft", "tpot"):
        # the geometric mean lies between the group's least and largest value, so the farthest
        # measurement sits at least half the group's log range ln(max / min) from it and at most
        # all of it (the spread is |ln(x / gm)|; ">= 0" and "max / min >= 1" could not fail)
        farthest = errs.groupby("group")[f"{m}_spread"].transform("max")
        log_range = np.log(errs[f"{m}_maxmin"])
        assert ((farthest >= log_range / 2 - 1e-12) & (farthest <= log_range + 1e-12)).all()
        # and exactly half of it on a pair: sqrt(a b) is the midpoint of ln a and ln b
        pair = errs.measurements == 2
        assert pair.sum() >= 10
        assert np.allclose(errs.loc[pair, f"{m}_spread"], log_range[pair] / 2, rtol=1e-9, atol=1e-12)
        per_group = errs.groupby("group")
        # no single value does better than the best constant, the geometric mean included
        assert (per_group[f"{m}_floor_err"].mean() <= per_group[f"{m}_gm_err"].mean() + 1e-12).all()
        # the model gives one deployment one value, so on each group it is at or above the floor
        assert (per_group[f"pred_{m}_ms"].nunique() == 1).all()
        assert (per_group[f"{m}_err"].apply(lambda e: e.abs().mean())
                >= per_group[f"{m}_floor_err"].mean() - 1e-12).all()
    table = floor_table(errs)
    assert table.groups.sum() == errs.group.nunique() and table.measurements.sum() == len(errs)
    share = floor_share(errs, res)
    assert share.rows.sum() == len(res) and share.rows_in_repeats.sum() == errs.copies.sum()
    assert (share.ttft_floor_pct <= share.ttft_model_pct).all()


def test_same_release_groups_sit_inside_any_release_groups(real_residuals):
    same = repeat_measurements(real_residuals, True)
    anyr = repeat_measurements(real_residuals, False).set_index("id").group
    # every same-release measurement is in an any-release group, one per same-release group
    assert same.id.isin(anyr.index).all()
    assert (same.assign(any_group=same.id.map(anyr)).groupby("group").any_group.nunique() == 1).all()
    assert "repeat groups (same release)" in repeats_report(real_residuals)
