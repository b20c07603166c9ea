"""Measured validation: the simulator against real training steps on this machine (needs torch).

Skipped when torch is absent, and at once (in about a second) when other processes hold the
CPUs as the test starts. About one minute on 2 quiet CPU cores, never more than ``BUDGET_S``
of calibration and measurement:

* the hand-written tensor-, pipeline- and data-parallel code computes the unsharded model's
  loss and gradients (2 gloo ranks, float64, tiny GPT);
* ``MEASURED_SET`` (DP with ZeRO-1, TP with and without full recompute, 1F1B PP with
  micro-batching) is trained for a few steps on one calibration of this machine per test session
  and simulated; each row's relative error must be within ``ERROR_BOUND``, their mean within
  ``MEAN_ERROR_BOUND``, the predicted tp2-recompute/tp2 ratio must match the measured one within
  the baseline's scatter (``measured_bounds.RATIO_PAIRS``; all shared with
  ``test_measured_baseline.py``), and no row may drift on its own (``measured_bounds.row_drift``:
  less the rows' median move, the calibration's) by more than ``DRIFT_MARGIN`` from the committed
  ``tests/data/measured_baseline.csv`` (checked only when the baseline was recorded on a
  machine with the same fingerprint).

``tests/test_measured_baseline.py`` (no torch needed) re-predicts that baseline from the
calibration committed beside it, so any change to a cost model that moves these predictions
shows up there, on every machine.

Rows during which a rank's compute thread waited more than ``LOADED`` of the time for a CPU
another process held say nothing about the simulator (shared machines): they are not judged.
Rows during which other processes or the hypervisor (steal) kept more than ``LOADED`` of the
cores busy are not judged either. Rows that one round puts outside a bound, then both rows of a
pair whose predicted ratio misses (one round of each in turn, a round of them kept in reserve of
the budget), then loaded rows, are measured again, one round at a time, up to ``MAX_ROUNDS`` while
the budget lasts, and judged on their fastest quiet round. A contended calibration, or two loaded rows in a row before any quiet
one, skip the measured tests there and then, not minutes later.

Refresh the baseline after a deliberate change to the simulator, the cost models or the
calibration (3 rounds of calibrate-then-measure, the median round kept, ~5 minutes; it refuses
to write if other processes held the CPUs), then review the diff of both files before
committing::

    python tests/test_measure.py --refresh-baseline
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from paraplan.measure.calibrate import run_calibration, sidecar_path  # noqa: E402
from paraplan.measure.compare import DEFAULT_CONFIGS, compare_measured  # noqa: E402
from paraplan.measure.runtime import machine_fingerprint  # noqa: E402
from paraplan.measure.selfcheck import check_parallel_equivalence  # noqa: E402
from measured_bounds import (BASELINE_NAMES, DRIFT_MARGIN, ERROR_BOUND, MEAN_ERROR_BOUND, MEASURED_NAMES,  # noqa: E402
                             ratio_failures, row_drift)

BASELINE = Path(__file__).parent / "data" / "measured_baseline.csv"
#: the calibration the baseline's predictions were made with (committed beside it, so that
#: ``test_measured_baseline.py`` re-predicts the baseline without torch or a quiet machine)
BASELINE_CALIBRATION = Path(__file__).parent / "data" / "measured_calibration.yaml"
#: The bounds (``ERROR_BOUND`` per row, ``MEAN_ERROR_BOUND`` on average, ``DRIFT_MARGIN`` from the
#: baseline, the ratio pairs of ``measured_bounds.RATIO_PAIRS``) and the rows measured
#: (``MEASURED_NAMES``) are one definition shared with ``test_measured_baseline.py``. On the
#: baseline's rows, a link bandwidth read in bits as bytes (/8) puts dp2-zero1 at +156%, a latency
#: 10x off puts tp2-recompute at +149%, a halved GEMM peak pp2-mb1x4 at +64%, a constant step time
#: or a simulator blind to recomputation misses the measured tp2-recompute/tp2 ratio (1.364) by
#: -26.7% against a tolerance of 18.1%
#: (``test_measured_baseline.test_the_measured_checks_catch_a_wrong_cost_model``,
#: ``test_a_constant_predictor_fails``, ``test_a_simulator_blind_to_recomputation_fails``). Not
#: caught: a doubled GEMM peak, bandwidth x 8, zero latency
#: (``test_measured_baseline.test_the_measured_checks_do_not_catch_these_mistakes``).
#: CPU-wait share above which a measurement is not evidence (``runtime.cpu_wait_fraction``).
LOADED = 0.15
#: the layouts of ``validate measured`` (``compare.DEFAULT_CONFIGS``) the CI test measures
#: (four of the baseline's eight, ``measured_bounds.MEASURED_NAMES``: each parallel dimension and
#: recompute once, recompute as the tp2-recompute/tp2 ratio; the single-rank layouts, ~7 s each,
#: are left to ``test_measured_baseline.py``, which re-predicts all eight on every machine without
#: torch, and the live measurement stays within the suite's 4 minutes)
MEASURED_SET = [c for c in DEFAULT_CONFIGS if c["name"] in MEASURED_NAMES]
#: every layout of the committed baseline (``measured_bounds.BASELINE_NAMES``), which
#: ``refresh_baseline`` measures again (only ``MEASURED_SET`` would drop the ratio checks' references)
BASELINE_SET = [c for c in DEFAULT_CONFIGS if c["name"] in BASELINE_NAMES]
STEPS, WARMUP = 10, 3


#: wall seconds the measured tests may spend calibrating and measuring, re-measurements
#: included (a quiet 2-core VM needs ~33 s to calibrate and ~24 s to measure three of the set, 6-8 s a
#: configuration; measured 2026-12-02: its fourth, tp2, adds one such); a re-measurement (one more round of one configuration,
#: ~6 s, ~10 s on a CI host that ran tp2-recompute at half speed) that would not end within it
#: is not started, so the suite stays within its 4 minutes
BUDGET_S = 110.0
#: rounds a suspect configuration is measured at most (its first included). The fastest quiet
#: round is judged: the calibration keeps each benchmark's best too, and other tenants of a
#: shared host only ever slow a round down (CI, 2026-12-02: tp2-recompute ran one round at 0.53 s
#: where this VM measures 0.24-0.26 s, with its ranks' CPU wait at 5.6%)
MAX_ROUNDS = 3
#: passes of the session's calibration (``run_calibration``'s default, each benchmark keeping its
#: best): ~33 s on the quiet 2-core VM against ~20 s for one pass, but one pass let a slow
#: stretch of the VM into the catalog with its ranks' CPU wait under ``LOADED``: on 2026-12-02
#: one single-pass calibration here predicted all three rows 15-25% slower than the next one
#: (tp2-recompute 0.276 s against 0.207 s), and put tp2-recompute past the drift margin
CALIBRATION_SWEEPS = 2
#: share of the cores other processes may keep busy when the test starts (sampled for
#: ``PROBE_S``); above it the measurements would not be evidence, so nothing is started
BUSY_AT_START = 0.25
PROBE_S = 1.0


class MachineBusy(Exception):
    """Other processes held the CPUs: measurements now would not be evidence."""


def _probe_foreign_load(seconds: float = PROBE_S) -> float | None:
    """Share of the cores other processes kept busy over ``seconds`` (this process sleeps)."""
    import time

    from paraplan.measure.runtime import foreign_load, system_busy_cpu_s
    busy0, own0, t0 = system_busy_cpu_s(), time.process_time(), time.perf_counter()
    time.sleep(seconds)
    busy1 = system_busy_cpu_s()
    if busy0 is None or busy1 is None:
        return None
    return foreign_load(busy1 - busy0, time.process_time() - own0, time.perf_counter() - t0)


def _calibrate(directory: Path, attempts: int = 1) -> Path:
    """A calibration of this machine; ``MachineBusy`` if other processes, or the hypervisor
    (steal: on 2026-12-03 a calibration taken here while it took 20-45% of the cores read the
    GEMM peak 59 instead of 80-93 GFLOP/s and the all-reduce bus 0.5 instead of 0.9-1.5 GB/s, and
    predicted tp2-recompute 70% slow), held the CPUs during each of ``attempts`` tries."""
    import json
    for _ in range(attempts):
        path = run_calibration(directory / "measured_calibration.yaml", nprocs=2, name="measured-calibration",
                               sweeps=CALIBRATION_SWEEPS)
        summary = json.loads(sidecar_path(path).read_text())["summary"]
        wait, foreign = summary.get("cpu_wait_fraction") or 0.0, summary.get("foreign_load") or 0.0
        if wait <= LOADED and foreign <= LOADED:
            return path
    raise MachineBusy(f"during the calibration the ranks waited {wait:.0%} of the time for a CPU, and other "
                      f"processes or the hypervisor took {foreign:.0%} of the cores")


def _baseline_errors() -> dict:
    import pandas as pd
    if not BASELINE.is_file():
        return {}
    baseline = pd.read_csv(BASELINE)
    here = machine_fingerprint(device_kind="cuda" if torch.cuda.is_available() else "cpu")
    return dict(zip(baseline["name"], baseline[_drift_column(baseline)])) if (baseline["machine"] == here).any() else {}


def _drift_column(baseline) -> str:
    """Drift is judged against each row's median over the baseline's rounds where recorded."""
    return "rel_error_median" if "rel_error_median" in baseline else "rel_error"


def _loaded(df):
    """Rows whose ranks waited for a CPU another process held, or during which other processes
    or the hypervisor (``/proc/stat`` steal, invisible to a thread's own run-queue wait) kept
    more than ``LOADED`` of the cores busy."""
    foreign = df["foreign_load"].fillna(0.0) if "foreign_load" in df else 0.0
    return (df["cpu_wait_fraction"].fillna(0.0) > LOADED) | (foreign > LOADED)


def _share(x) -> str:
    return "?" if x is None or x != x else f"{x:.0%}"


def _off_rows(df) -> list[str]:
    """Quiet rows outside the bound or drifted from the committed baseline on their own."""
    base = _baseline_errors()
    quiet = ~_loaded(df)
    drift = row_drift(df["rel_error"].where(quiet), df["name"].map(base)).fillna(0.0)
    off = (df["rel_error"].abs() > ERROR_BOUND) | (drift > DRIFT_MARGIN)
    return list(df.loc[off & ~_loaded(df), "name"])


def _missed_pairs(df) -> list[tuple[str, ...]]:
    """(layout, reference) of each ratio pair whose predicted ratio misses the measured one on
    ``df``'s quiet rows (``_ratio_misses``)."""
    return [tuple(line.split(":", 1)[0].split("/")) for line in _ratio_misses(df[~_loaded(df)])]


def _suspect(df):
    """Rows a single round cannot vouch for, the ones a re-measurement helps most first: quiet
    rows outside the bound or drifted (a verdict hangs on them), then both rows of a pair whose
    predicted ratio misses the measured one (a verdict hangs on them too), then loaded rows (no
    verdict), then quiet rows off by more than ``MEAN_ERROR_BOUND``, then, when the quiet rows'
    mean is above its bound, the rest of them (these two tiers largest error first)."""
    suspects = _off_rows(df)
    # after the rows off on their own, whose re-measurement may mend the pair, and before the
    # loaded rows: a loaded row is only left unjudged, a missed ratio fails the test (CI,
    # 2026-12-06: tp2-recompute/tp2 measured 1.662 on one slow round, 1.288 on the rerun)
    missed = [n for pair in _missed_pairs(df) for n in pair]
    suspects += [n for n in dict.fromkeys(missed) if n not in suspects]
    loaded = _loaded(df)
    suspects += [n for n in df.loc[loaded, "name"] if n not in suspects]
    quiet = df[~loaded]
    by_error = quiet.assign(e=quiet["rel_error"].abs()).sort_values("e", ascending=False)
    # quiet rows off by more than the mean's bound, largest first: one slow round puts a row there
    # (the fresh clone's run of 2026-12-03 measured tp2-recompute once at 0.285 s, -30%, where
    # this VM measures 0.22-0.23 s), and one more such round would fail the row or the mean
    suspects += [n for n in by_error.loc[by_error["e"] > MEAN_ERROR_BOUND, "name"] if n not in suspects]
    if len(quiet) and quiet["rel_error"].abs().mean() > MEAN_ERROR_BOUND:
        # a verdict on the mean hangs on one round too: its largest errors first (a round in
        # which the whole VM ran slow moves every row alike, by up to ~0.25 in the full suite)
        by_error = quiet.assign(e=quiet["rel_error"].abs()).sort_values("e", ascending=False)["name"]
        suspects += [n for n in by_error if n not in suspects]
    return suspects


def _ratio_misses(df) -> list[str]:
    """``measured_bounds.ratio_failures`` of ``df``'s rows (pairs with both rows in it), with the
    committed baseline's ``rel_error_spread`` as each row's scatter; [] without a baseline."""
    import pandas as pd
    if not BASELINE.is_file() or "measured_step_s" not in df:
        return []
    spreads = pd.read_csv(BASELINE).set_index("name")["rel_error_spread"]
    rows = df.set_index("name")
    return ratio_failures(rows["rel_error"], rows["measured_step_s"], spreads)


def measure_set(directory: Path, calibration: Path | None = None, deadline: float | None = None,
                stop_when_busy: bool = False, configs=None):
    """Measure and simulate ``configs`` (default ``MEASURED_SET``; calibrating first unless
    ``calibration`` is given).

    Configurations are measured one at a time. With ``stop_when_busy``, two loaded rows before
    any quiet one raise ``MachineBusy`` at once. A row that was loaded, or that one round puts
    outside the bound or the drift margin, is measured again, one round at a time up to
    ``MAX_ROUNDS`` rounds, and judged on its fastest quiet round (one round on this VM moves a row
    by up to ~0.3; a real cost-model mistake moves it by more than 1), as long as each
    re-measurement ends before ``deadline`` (``time.monotonic()`` seconds; None: no limit). Both
    rows of a pair whose predicted ratio misses the measured one are measured again together, one
    round of each in turn, before loaded rows, and one such round of a missed pair is kept in
    reserve while any other row is measured again, so a ratio is never judged on one slow round
    for want of budget.
    """
    import time

    import pandas as pd
    configs = MEASURED_SET if configs is None else configs
    cluster = calibration if calibration is not None else _calibrate(directory, attempts=2)
    rows, seconds = [], []
    for cfg in configs:
        t0 = time.monotonic()
        rows.append(compare_measured(cluster, configs=[cfg], steps=STEPS, warmup=WARMUP))
        seconds.append(time.monotonic() - t0)
        loaded = [bool(_loaded(r).iloc[0]) for r in rows]
        if stop_when_busy and len(loaded) >= 2 and all(loaded):
            seen = "; ".join(f"{r['name'].iloc[0]}: ranks' CPU wait {_share(r['cpu_wait_fraction'].iloc[0])}, "
                             f"cores other processes or the hypervisor took {_share(r['foreign_load'].iloc[0])}"
                             for r in rows)
            raise MachineBusy(f"other processes or the hypervisor held the CPUs while measuring ({seen})")
    df = pd.concat(rows, ignore_index=True)
    df["rounds"] = 1
    per_config = dict(zip([c["name"] for c in configs], seconds))
    at = {name: df.index[df["name"] == name][0] for name in df["name"]}

    def again(name: str) -> None:
        """One more round of ``name``; its fastest quiet round stands, as the calibration keeps
        each benchmark's best: other tenants only ever slow a round down."""
        i, t0 = at[name], time.monotonic()
        cfg = next(c for c in configs if c["name"] == name)
        row = compare_measured(cluster, configs=[cfg], steps=STEPS, warmup=WARMUP).iloc[0]
        per_config[name] = max(per_config[name], time.monotonic() - t0)
        rounds = df.loc[i, "rounds"] + 1
        df.loc[i, "rounds"] = rounds
        if _loaded(row.to_frame().T).iloc[0]:
            return                           # a loaded round is no evidence either way
        if _loaded(df.loc[[i]]).iloc[0] or row["measured_step_s"] < df.loc[i, "measured_step_s"]:
            shared = [c for c in row.index if c in df.columns]
            df.loc[i, shared] = row[shared].values
            df.loc[i, "rounds"] = rounds

    def fits(names, reserve_s: float = 0.0) -> bool:
        return deadline is None or time.monotonic() + sum(per_config[n] for n in names) + reserve_s <= deadline

    while True:
        # re-judged after every round: a re-measurement may mend a row, a pair, or the mean
        open_rows = [n for n in _suspect(df) if df.loc[at[n], "rounds"] < MAX_ROUNDS]
        off = _off_rows(df)
        pairs = [[n for n in pair if df.loc[at[n], "rounds"] < MAX_ROUNDS] for pair in _missed_pairs(df)]
        pairs = [pair for pair in pairs if pair]
        chosen = None
        for name in open_rows:
            # a row off on its own is measured alone (its own round may mend its pair); a row of a
            # missed pair that is not, with its partner: one round of each, interleaved, so that
            # one slow round of either row, or a slow stretch of the host, cannot decide the ratio
            group = [name] if name in off else next((p for p in pairs if name in p), [name])
            # one round of each missed pair's rows stays in reserve while anything else is
            # measured again: the budget never runs out on a loaded row while a ratio misses
            reserve_s = sum(per_config[n] for p in pairs if not set(p) & set(group) for n in p)
            if fits(group, reserve_s):
                chosen = group
                break
        if chosen is None:
            break
        for name in chosen:
            again(name)
    df["machine"] = machine_fingerprint(device_kind="cuda" if torch.cuda.is_available() else "cpu")
    df.attrs["calibration"] = cluster
    return df


@pytest.fixture(scope="session")
def calibration(tmp_path_factory):
    """One calibration of this machine per test session, started only on a quiet machine."""
    import time
    start = time.monotonic()
    load = _probe_foreign_load()
    if load is not None and load > BUSY_AT_START:
        pytest.skip(f"machine busy: other processes kept {load:.0%} of the cores busy")
    try:
        path = _calibrate(tmp_path_factory.mktemp("calibration"))
    except MachineBusy as exc:
        pytest.skip(f"machine busy: {exc}")
    return path, start + BUDGET_S


@pytest.fixture(scope="session")
def measured(calibration, tmp_path_factory):
    """``MEASURED_SET`` measured on the session's calibration, within ``BUDGET_S``."""
    import time
    path, deadline = calibration
    try:
        df = measure_set(tmp_path_factory.mktemp("measured"), calibration=path, deadline=deadline,
                         stop_when_busy=True)
    except MachineBusy as exc:
        pytest.skip(f"machine busy: {exc}")
    df.attrs["elapsed_s"] = time.monotonic() - (deadline - BUDGET_S)    # calibration included
    return df


def _quiet_rows(df):
    quiet = df[~_loaded(df)]         # the rows the module docstring judges: neither wait nor foreign load
    if quiet.empty:
        pytest.skip("other processes kept this machine busy during every measurement")
    return quiet


def test_tensor_pipeline_and_data_parallel_gradients_match_unsharded_reference():
    results = check_parallel_equivalence()
    for name, errs in results.items():
        # float64 throughout: any indexing or missing-reduction bug is many orders above this
        assert errs["max_grad_abs_error"] <= 1e-12 * max(1.0, errs["grad_scale"]), (name, errs)
        assert errs["loss_abs_error"] <= 1e-12, (name, errs)


def _diagnosis(df) -> str:
    """Every row's measured and predicted parts, and the calibration they were predicted from:
    what a reader of a CI log needs to tell a slow machine from a wrong cost model."""
    import json

    from paraplan.measure.calibrate import sidecar_path
    parts = ["name", "rounds", "measured_step_s", "predicted_step_s", "rel_error", "cpu_wait_fraction",
             "foreign_load"]
    parts += [c for c in df.columns if c.startswith(("pred_", "measured_")) and c not in parts
              and c != "measured_step_times_s" and "memory" not in c and "tokens" not in c]
    text = df[parts].T.to_string(header=False, float_format=lambda x: f"{x:.4g}")
    calibration = df.attrs.get("calibration")
    if calibration is not None and sidecar_path(Path(calibration)).is_file():
        summary = json.loads(sidecar_path(Path(calibration)).read_text()).get("summary", {})
        keys = ("peak_flops_per_s", "gemm_half_dim", "kernel_overhead_s", "stream_bw_bytes_per_s",
                "hbm_fraction", "attention_peak_fraction", "allreduce_bus_bw_bytes_per_s", "link_latency_s",
                "collective_bw_fraction", "sync_skew_fraction", "cpu_wait_fraction")
        text += "\ncalibration: " + json.dumps({k: summary.get(k) for k in keys}, default=str)
        fits = summary.get("gemm_fits", {})
        text += "\nGEMM fit rms relative error: " + json.dumps({k: round(v.get("rms_rel_error", float("nan")), 3)
                                                              for k, v in fits.items()})
    text += f"\nmachine: {df['machine'].iloc[0]}; seconds spent: {df.attrs.get('elapsed_s', float('nan')):.0f}"
    return text


@pytest.mark.quiet_machine
def test_measured_step_time_prediction_error_is_within_bound(measured):
    import warnings
    quiet = _quiet_rows(measured)
    cols = ["name", "measured_step_s", "predicted_step_s", "rel_error", "cpu_wait_fraction"]
    diagnosis = _diagnosis(measured)
    print("\n" + diagnosis)
    # shown in the warnings summary of every run, passed or failed: the CI machine is not one a
    # developer can log into, and its numbers are the only view of the simulator on it
    warnings.warn(f"measured step times on this machine:\n{diagnosis}", UserWarning, stacklevel=1)
    assert (quiet["measured_step_s"] > 0).all()
    bad = quiet[quiet["rel_error"].abs() > ERROR_BOUND]
    assert bad.empty, f"prediction error above {ERROR_BOUND:.0%}:\n{bad[cols].to_string(index=False)}"
    mean = quiet["rel_error"].abs().mean()
    assert mean <= MEAN_ERROR_BOUND, f"mean |error| {mean:.1%} above {MEAN_ERROR_BOUND:.0%}"
    misses = _ratio_misses(quiet)
    assert not misses, "predicted ratio between layouts off the measured one:\n" + "\n".join(misses)


@pytest.mark.quiet_machine
def test_measured_prediction_error_has_not_drifted_from_baseline(measured):
    import pandas as pd
    if not BASELINE.is_file():
        pytest.skip(f"no {BASELINE.name}: run python tests/test_measure.py --refresh-baseline")
    baseline = pd.read_csv(BASELINE)
    here = measured["machine"].iloc[0]
    if not (baseline["machine"] == here).any():
        pytest.skip(f"baseline was recorded on {baseline['machine'].iloc[0]!r}, this is {here!r}")
    baseline = baseline.assign(rel_error_reference=baseline[_drift_column(baseline)])
    merged = _quiet_rows(measured).merge(baseline[["name", "rel_error_reference"]], on="name")
    assert not merged.empty, "no configuration of MEASURED_SET is in the baseline; refresh it"
    merged["drift"] = row_drift(merged["rel_error"], merged["rel_error_reference"])
    drifted = merged[merged["drift"] > DRIFT_MARGIN]
    assert drifted.empty, (f"relative error moved by more than {DRIFT_MARGIN} from {BASELINE.name} "
                           f"(refresh it if the change is intended):\n"
                           f"{drifted[['name', 'rel_error', 'rel_error_reference', 'drift']].to_string(index=False)}")


def refresh_baseline(path: Path = BASELINE, rounds: int = 3) -> None:
    """Calibrate and measure every layout of the committed baseline (``BASELINE_SET``: the live
    test's ``MEASURED_SET`` and the single-rank and data-parallel layouts the ratio checks pair
    them with) ``rounds`` times; keep the round whose mean |error| is the median as the baseline,
    with its calibration (``BASELINE_CALIBRATION``).

    Each round pairs a calibration with the measurements taken right after it: this VM drifts by
    10-20% over minutes, so a calibration and measurements minutes apart disagree by that much.
    The kept round is one consistent pair (the no-torch test re-predicts it exactly); the
    ``rel_error_spread`` column gives each row's spread over all rounds.
    """
    import shutil
    import tempfile

    import pandas as pd
    with tempfile.TemporaryDirectory() as d:
        runs = []
        for r in range(rounds):
            try:
                df = measure_set(Path(d) / f"round{r}", configs=BASELINE_SET)
            except MachineBusy as exc:
                raise SystemExit(f"not writing {path}: {exc}; rerun when the machine is quiet") from None
            loaded = df[_loaded(df)]
            if not loaded.empty:
                raise SystemExit(f"not writing {path}: other processes held the CPUs while measuring "
                                 f"{', '.join(sorted(loaded['name']))}; rerun when the machine is quiet")
            print(f"round {r}: mean |error| {df['rel_error'].abs().mean():.1%}, worst {df['rel_error'].abs().max():.1%}")
            runs.append(df)
        order = sorted(range(rounds), key=lambda r: runs[r]["rel_error"].abs().mean())
        kept = runs[order[(rounds - 1) // 2]]
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kept.attrs["calibration"], BASELINE_CALIBRATION)
    every = pd.concat(runs)
    config = ["name", "dp", "tp", "pp", "micro_batch", "global_batch", "zero_stage", "recompute"]
    numbers = ["measured_step_s", "predicted_step_s", "rel_error", "cpu_wait_fraction", "foreign_load"]
    df = kept[config + numbers].copy()
    spread = every.groupby("name")["rel_error"].agg(lambda x: x.max() - x.min())
    df["rel_error_spread"] = df["name"].map(spread)
    # each row's median over the rounds: the reference the live test's drift check uses
    df["rel_error_median"] = df["name"].map(every.groupby("name")["rel_error"].median())
    df["repeats"] = rounds
    df["machine"] = machine_fingerprint(device_kind="cuda" if torch.cuda.is_available() else "cpu")
    df.round(5).to_csv(path, index=False)
    print(df.round(4).to_string(index=False))
    err = df["rel_error"].abs()
    print(f"kept round: mean |error| {err.mean():.1%}, worst {err.max():.1%}")


def test_quiet_rows_drop_rows_other_processes_or_the_hypervisor_kept_busy():
    """No measurement: a row during which foreign load (or steal) held 40% of the cores is not
    judged, as the module docstring and ``_loaded`` say; ``_quiet_rows`` looked at the wait only."""
    import pandas as pd
    df = pd.DataFrame({"name": ["a", "b", "c", "d"], "rel_error": [0.1, 0.5, -0.6, 0.0],
                       "cpu_wait_fraction": [0.05, 0.02, 0.40, None], "foreign_load": [0.0, 0.40, 0.0, None]})
    assert list(_quiet_rows(df)["name"]) == ["a", "d"]
    assert list(_quiet_rows(df.drop(columns="foreign_load"))["name"]) == ["a", "b", "d"]
    with pytest.raises(pytest.skip.Exception):
        _quiet_rows(df.iloc[1:3])


def test_refresh_baseline_refuses_a_round_with_foreign_load(monkeypatch, tmp_path):
    """No measurement: the baseline is not written from a round other processes kept busy."""
    import pandas as pd
    module = sys.modules[__name__]
    busy = pd.DataFrame({"name": ["dp2", "tp2"], "rel_error": [0.1, 0.1], "cpu_wait_fraction": [0.01, 0.02],
                         "foreign_load": [0.05, 0.5]})
    monkeypatch.setattr(module, "measure_set", lambda *a, **k: busy)
    with pytest.raises(SystemExit, match="tp2"):
        refresh_baseline(tmp_path / "baseline.csv", rounds=1)
    assert not (tmp_path / "baseline.csv").exists()


def test_refresh_baseline_measures_every_layout_the_committed_baseline_holds(monkeypatch, tmp_path):
    """No measurement: a refresh measures the eight layouts of ``measured_baseline.csv`` (it
    measured only the live test's four, dropping the ratio checks' single-rank references)."""
    import pandas as pd
    module = sys.modules[__name__]
    asked = []

    def fake_measure_set(*args, configs=None, **kwargs):
        asked.append([c["name"] for c in (configs if configs is not None else MEASURED_SET)])
        raise SystemExit("stop after the first round")
    monkeypatch.setattr(module, "measure_set", fake_measure_set)
    with pytest.raises(SystemExit, match="stop"):
        refresh_baseline(tmp_path / "baseline.csv", rounds=1)
    assert set(asked[0]) == set(pd.read_csv(BASELINE)["name"]) == set(BASELINE_NAMES)


def test_a_round_whose_mean_is_over_its_bound_has_every_quiet_row_remeasured_largest_error_first():
    """No measurement: which rows ``measure_set`` measures again after one round."""
    import pandas as pd
    df = pd.DataFrame({"name": ["a", "b", "c", "d"], "rel_error": [-0.21, -0.28, -0.22, 0.01],
                       "cpu_wait_fraction": [0.05, 0.06, 0.04, 0.9]})
    # quiet rows a, b, c (mean 0.237 > 0.20), none outside the per-row bound; d is loaded
    assert _suspect(df) == ["d", "b", "c", "a"]
    calm = df.assign(rel_error=[-0.05, -0.10, 0.40, 0.0])      # mean 0.183: only c, then loaded d
    assert _suspect(calm) == ["c", "d"]
    # mean 0.187, none outside 0.35: only the row off by more than 0.20 is measured again
    near = df.iloc[:3].assign(rel_error=[-0.17, -0.30, -0.09])
    assert _suspect(near) == ["b"]



def test_both_rows_of_a_pair_whose_predicted_ratio_misses_are_measured_again():
    """No measurement: tp2 +12% and tp2-recompute -17.6% are each within the row bounds, but
    their predicted ratio 0.14 / 0.14 = 1 against the measured 0.17 / 0.125 = 1.36 is off by
    -26.5%, past the 18.1% the baseline's scatter allows (``measured_bounds.ratio_tolerance``)."""
    import pandas as pd
    df = pd.DataFrame({"name": ["tp2", "tp2-recompute"], "measured_step_s": [0.125, 0.17],
                       "predicted_step_s": [0.14, 0.14], "rel_error": [0.14 / 0.125 - 1, 0.14 / 0.17 - 1],
                       "cpu_wait_fraction": [0.02, 0.02], "foreign_load": [0.0, 0.0]})
    assert _suspect(df) == ["tp2-recompute", "tp2"]
    assert _ratio_misses(df) == ["tp2-recompute/tp2: measured ratio 1.360, predicted 1.000 (-26.5%, tolerance 18.1%)"]


def test_a_suspect_row_is_judged_on_its_fastest_quiet_round_within_the_budget(monkeypatch, tmp_path):
    """No measurement: ``measure_set`` with scripted rounds. tp2-recompute's first round is 2.2x
    slow (as on CI, 2026-12-02), its second is loaded (ignored), its third is quiet and fast."""
    import pandas as pd
    module = sys.modules[__name__]
    predicted = {"dp2-zero1": 0.165, "tp2": 0.172, "tp2-recompute": 0.226, "pp2-mb1x4": 0.172}
    script = {"dp2-zero1": [(0.160, 0.03)], "tp2": [(0.175, 0.03)],
              "tp2-recompute": [(0.527, 0.05), (0.20, 0.40), (0.24, 0.04)], "pp2-mb1x4": [(0.183, 0.03)]}
    calls = []

    def fake_compare(cluster, configs, steps, warmup):
        name = configs[0]["name"]
        measured, wait = script[name][sum(c == name for c in calls)]
        calls.append(name)
        return pd.DataFrame([{"name": name, "measured_step_s": measured, "predicted_step_s": predicted[name],
                              "rel_error": (predicted[name] - measured) / measured,
                              "cpu_wait_fraction": wait, "foreign_load": 0.0}])

    monkeypatch.setattr(module, "compare_measured", fake_compare)
    monkeypatch.setattr(module, "_baseline_errors", lambda: {})
    df = measure_set(tmp_path, calibration=tmp_path / "c.yaml").set_index("name")
    # tp2 is measured once: its pair with tp2-recompute misses only while that row's slow round stands
    assert calls == ["dp2-zero1", "tp2", "tp2-recompute", "pp2-mb1x4", "tp2-recompute", "tp2-recompute"]
    assert df.loc["tp2-recompute", "rounds"] == 3
    assert df.loc["tp2-recompute", "measured_step_s"] == 0.24
    assert abs(df.loc["tp2-recompute", "rel_error"] - (0.226 - 0.24) / 0.24) < 1e-12
    assert df.loc["dp2-zero1", "rounds"] == 1 and df.loc["dp2-zero1", "measured_step_s"] == 0.160
    # a deadline already past: no re-measurement, the slow round is what the test judges
    calls.clear()
    import time
    late = measure_set(tmp_path, calibration=tmp_path / "c.yaml", deadline=time.monotonic() - 1).set_index("name")
    assert calls == ["dp2-zero1", "tp2", "tp2-recompute", "pp2-mb1x4"]
    assert late.loc["tp2-recompute", "measured_step_s"] == 0.527 and late.loc["tp2-recompute", "rounds"] == 1


def test_two_stolen_rows_first_stop_the_measurement_and_say_how_loaded_the_machine_was(monkeypatch, tmp_path):
    """No measurement: a hypervisor taking 30% of the cores during the first two layouts (their
    ranks' own CPU wait 2%) ends ``measure_set`` there, with the shares in the message."""
    import pandas as pd
    module = sys.modules[__name__]
    calls = []

    def stolen(cluster, configs, steps, warmup):
        calls.append(configs[0]["name"])
        return pd.DataFrame([{"name": configs[0]["name"], "measured_step_s": 0.3, "predicted_step_s": 0.2,
                              "rel_error": -1 / 3, "cpu_wait_fraction": 0.02, "foreign_load": 0.30}])

    monkeypatch.setattr(module, "compare_measured", stolen)
    with pytest.raises(MachineBusy) as busy:
        measure_set(tmp_path, calibration=tmp_path / "c.yaml", stop_when_busy=True)
    assert calls == ["dp2-zero1", "tp2"]
    assert "tp2: ranks' CPU wait 2%, cores other processes or the hypervisor took 30%" in str(busy.value)


@pytest.mark.parametrize("wait, foreign, busy", [(0.02, 0.30, True), (0.30, 0.0, True), (0.02, 0.05, False)])
def test_a_calibration_the_hypervisor_or_other_processes_slowed_is_not_used(monkeypatch, tmp_path, wait, foreign, busy):
    """No measurement: ``_calibrate`` reads the sidecar's CPU wait and foreign load."""
    import json
    module = sys.modules[__name__]

    def fake_calibration(path, **kwargs):
        path = Path(path)
        path.write_text("name: c\n")
        sidecar_path(path).write_text(json.dumps({"summary": {"cpu_wait_fraction": wait, "foreign_load": foreign}}))
        return path

    monkeypatch.setattr(module, "run_calibration", fake_calibration)
    if busy:
        with pytest.raises(MachineBusy, match="hypervisor"):
            _calibrate(tmp_path)
    else:
        assert _calibrate(tmp_path) == tmp_path / "measured_calibration.yaml"


def test_a_round_the_hypervisor_or_other_processes_slowed_is_loaded_even_without_cpu_wait():
    import pandas as pd
    df = pd.DataFrame({"cpu_wait_fraction": [0.02, 0.02, 0.30, None], "foreign_load": [0.0, 0.40, 0.0, None]})
    assert list(_loaded(df)) == [False, True, True, False]


def _scripted_measure_set(monkeypatch, tmp_path, script, predicted, deadline_after_s=None, step_s=7.0):
    """``measure_set`` over scripted rounds ((measured seconds, CPU wait) per call of each layout),
    on a clock that advances ``step_s`` per measurement; the deadline ``deadline_after_s`` after
    the start (None: no limit). Returns (rows, layouts in the order measured)."""
    import time

    import pandas as pd
    module = sys.modules[__name__]
    clock, calls = [1000.0], []

    def fake_compare(cluster, configs, steps, warmup):
        name = configs[0]["name"]
        measured, wait = script[name][sum(c == name for c in calls)]
        calls.append(name)
        clock[0] += step_s
        return pd.DataFrame([{"name": name, "measured_step_s": measured, "predicted_step_s": predicted[name],
                              "rel_error": (predicted[name] - measured) / measured,
                              "cpu_wait_fraction": wait, "foreign_load": 0.0}])

    monkeypatch.setattr(module, "compare_measured", fake_compare)
    monkeypatch.setattr(module, "_baseline_errors", lambda: {})
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    deadline = None if deadline_after_s is None else clock[0] + deadline_after_s
    df = measure_set(tmp_path, calibration=tmp_path / "c.yaml", deadline=deadline, stop_when_busy=True)
    return df, calls


#: this VM's step times (quiet rounds) and a simulator that predicts them: tp2-recompute / tp2
#: measured 0.224 / 0.172 = 1.302, predicted 0.2214 / 0.172 = 1.287 (-1.2%, tolerance 18.1%)
_PREDICTED = {"dp2-zero1": 0.165, "tp2": 0.172, "tp2-recompute": 0.2214, "pp2-mb1x4": 0.172}


def test_a_ratio_missed_on_one_slow_round_is_measured_again_before_a_loaded_row_spends_the_budget(monkeypatch,
                                                                                                    tmp_path):
    """No measurement: CI's failure of 2026-12-06. One slow round of tp2-recompute (0.2859 s, -22.6%:
    within the row bound) puts tp2-recompute/tp2 at 1.662 against the predicted 1.287 (-22.6%,
    tolerance 18.1%), and pp2-mb1x4's round is loaded. The budget has room for two more rounds
    (7 s each, 17 s left after the first four). They went to the loaded row (no verdict), and the
    ratio failed the test on its one slow round; now both rows of the pair are measured again,
    one round each, the pair mends (0.224 / 0.172 = 1.302) and the test passes."""
    script = {"dp2-zero1": [(0.160, 0.03)], "tp2": [(0.172, 0.03), (0.175, 0.03)],
              "tp2-recompute": [(0.2859, 0.05), (0.224, 0.04)], "pp2-mb1x4": [(0.183, 0.30)] * 3}
    df, calls = _scripted_measure_set(monkeypatch, tmp_path, script, _PREDICTED, deadline_after_s=4 * 7 + 17)
    assert calls == ["dp2-zero1", "tp2", "tp2-recompute", "pp2-mb1x4", "tp2-recompute", "tp2"]
    rows = df.set_index("name")
    assert rows.loc["tp2-recompute", "measured_step_s"] == 0.224 and rows.loc["tp2", "measured_step_s"] == 0.172
    assert _ratio_misses(_quiet_rows(df)) == []
    test_measured_step_time_prediction_error_is_within_bound(df)          # passes: no AssertionError


@pytest.mark.parametrize("wrong, predicted, says", [
    # tp2-recompute predicted 2x what this VM measures: off on its own (+98%) and in its ratio
    ("2x", dict(_PREDICTED, **{"tp2-recompute": 2 * 0.2214}), "prediction error above"),
    # a simulator blind to recomputation: tp2-recompute predicted as tp2 (ratio 1 against 1.30,
    # -23%), each row within the per-row bound
    ("blind to recompute", dict(_PREDICTED, **{"tp2-recompute": 0.172}), "predicted ratio"),
])
def test_a_wrong_prediction_still_fails_after_every_re_measurement(monkeypatch, tmp_path, wrong, predicted, says):
    """No measurement: re-measuring cannot mend a wrong cost model. With the budget unlimited, the
    rows of the missed pair get ``MAX_ROUNDS`` rounds each, every one quiet and close to this VM's
    speed, and the live test still fails."""
    script = {"dp2-zero1": [(0.160, 0.03)] * 3, "tp2": [(0.172, 0.03), (0.175, 0.03), (0.171, 0.03)],
              "tp2-recompute": [(0.2859, 0.05), (0.224, 0.04), (0.226, 0.04)], "pp2-mb1x4": [(0.183, 0.03)] * 3}
    df, calls = _scripted_measure_set(monkeypatch, tmp_path, script, predicted)
    rows = df.set_index("name")
    assert rows.loc["tp2-recompute", "rounds"] == MAX_ROUNDS and rows.loc["tp2", "rounds"] == MAX_ROUNDS
    assert rows.loc["tp2-recompute", "measured_step_s"] == 0.224 and rows.loc["tp2", "measured_step_s"] == 0.171
    with pytest.raises(AssertionError, match=says):
        test_measured_step_time_prediction_error_is_within_bound(df)


if __name__ == "__main__":      # spawned ranks re-import this file: keep the work behind main
    if "--refresh-baseline" in sys.argv:
        refresh_baseline()
    else:
        print(__doc__)


def test_16_bit_weights_train_in_mixed_precision_as_the_simulator_prices_them(tmp_path):
    # A bf16 model's FlatOptimizer keeps an fp32 master copy and fp32 Adam moments (the 42 bytes
    # per parameter of simulator.step_model.ADAM_STEP_BYTES_PER_PARAM), and its bf16 weights
    # follow the master: after three Adam steps at lr 1e-2 they equal the fp32 master rounded
    # to bf16, and the update matches an fp32 model's run from the same start within bf16's
    # rounding (8 bits of mantissa: 2**-8 relative). fp32 weights are their own master.
    import torch.distributed as dist
    import torch.nn as nn
    from paraplan.measure.parallel import FlatOptimizer, build_mesh
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        results = {}
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(0)
            model = nn.Linear(16, 16).to(dtype)
            start = model.weight.detach().float().clone()
            opt = FlatOptimizer(model, build_mesh(1, 1, 1), 0, lr=1e-2)
            assert opt.mixed == (dtype == torch.bfloat16)
            assert opt.shard_param.dtype == torch.float32
            gen = torch.Generator().manual_seed(1)
            for _ in range(3):
                opt.zero_grad()
                model(torch.randn(4, 16, generator=gen).to(dtype)).pow(2).sum().backward()
                opt.check_grads_in_place()
                opt.reduce_gradients()
                opt.step()
            moments = [t.dtype for s in opt.adam.state.values() for k, t in s.items() if k != "step"]
            assert moments == [torch.float32, torch.float32]
            assert model.weight.data_ptr() == opt.flat.data_ptr()           # still views of the flat buffer
            results[dtype] = (start, model.weight.detach().float().clone(), opt)
        start32, w32, _ = results[torch.float32]
        start16, w16, opt16 = results[torch.bfloat16]
        master = opt16.shard_param.detach()[:w16.numel()].view_as(w16)
        assert torch.equal(w16, master.to(torch.bfloat16).float())
        assert (w32 - start32).abs().max().item() == pytest.approx(0.03, rel=0.02)    # 3 steps x lr
        assert torch.allclose(w16 - start16, w32 - start32, atol=2 * 2**-8 * float(w32.abs().max()))
    finally:
        dist.destroy_process_group()


def test_zero1_over_two_ranks_keeps_each_rank_s_fp32_master_shard_and_gathers_the_same_weights(tmp_path):
    # two gloo ranks, bf16 weights, ZeRO-1: each rank's Adam updates its half of the fp32 master
    # copy from the averaged gradient, and after the all-gather both hold the same bf16 weights,
    # equal to the fp32 masters rounded (the path a multi-GPU validate measured runs)
    import subprocess
    worker = Path(__file__).with_name("_zero1_mixed_worker.py")
    store, out = tmp_path / "store", tmp_path / "out"
    import os
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)}
    procs = [subprocess.Popen([sys.executable, str(worker), str(r), str(store), str(out)], env=env,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [0, 0], [p.stderr.read()[-2000:] for p in procs]
    got = [torch.load(f"{out}.{r}") for r in (0, 1)]
    assert torch.equal(got[0]["weight"], got[1]["weight"])
    assert (got[0]["lo"], got[1]["lo"]) == (0, got[0]["hi"])           # the two halves of the flat buffer
    flat = torch.cat([g["master"] for g in got])[:got[0]["weight"].numel()]
    assert got[0]["master"].dtype == torch.float32
    assert torch.equal(got[0]["weight"], flat.view_as(got[0]["weight"]).to(torch.bfloat16).float())
