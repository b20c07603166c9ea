"""Every time the planner's --explain and simulate's why line cite on an unfitted efficiency
prior carries the prior's mark, as the tables' cells beside them do (EfficiencyModel.is_prior:
"predictions resting on them must say so next to their numbers"); and the HSDP note says which
way the plan differs from sharding over every rank."""
import json
import re

from click.testing import CliRunner

from paraplan.cli import main

# mi300x (cdna3) rests on an unfitted prior, dgx-h100 (hopper) on fitted factors
PLAN = ["plan", "-m", "llama3-70b", "-n", "64", "--global-batch", "128", "--top", "2", "--explain"]
SIM = ["simulate", "-m", "llama3-70b", "-n", "64", "--tp", "8", "--pp", "4", "--micro-batch", "1",
       "--global-batch", "128", "--zero", "1", "--sequence-parallel", "--recompute", "full"]


def _run(args):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return res.output.splitlines()


def _explain_lines(cluster):
    out = _run(PLAN + ["-c", cluster])
    start = out.index(next(ln for ln in out if ln.startswith("  step-time part")))
    parts = out[start + 1:start + 14]           # the 12 parts and step_time_s
    assert parts[-1].lstrip().startswith("step_time_s"), parts
    why = next(ln for ln in out[start:] if ln.startswith("why: "))
    without = [ln for ln in out if ln.startswith("  without ")]
    split = next(ln for ln in out if "simulate's microbatch_stage_time_s" in ln)
    return parts, why, without, split


def test_plan_explain_marks_every_time_it_cites_on_an_unfitted_prior():
    parts, why, without, split = _explain_lines("mi300x-node")
    for line in parts:      # winner_s, runner_up_s and diff_s, each "<seconds> *"
        assert len(re.findall(r"[-+]?\d+\.\d{4} \*", line)) == 3, line
    assert re.search(r"\([-+]?[\d.]+ s \*\)", why), why
    assert without and all(re.search(r"% slower \* \([\d.]+ s/step \*\)|as fast \([\d.]+ s/step \*\)", ln)
                           for ln in without), without
    assert re.search(r"microbatch_stage_time_s [\d,.]+ ms \*", split), split


def test_plan_explain_marks_nothing_on_fitted_factors():
    parts, why, without, split = _explain_lines("dgx-h100")
    assert not any("*" in ln for ln in parts + [why, split] + without)


def test_simulate_why_line_marks_the_seconds_it_cites_on_a_prior_only():
    prior = _run(SIM + ["-c", "mi300x-node"])
    fitted = _run(SIM + ["-c", "dgx-h100"])
    why_prior = " ".join(ln.strip() for ln in prior[next(i for i, ln in enumerate(prior) if ln.startswith("why: ")):][:2])
    why_fitted = next(ln for ln in fitted if ln.startswith("why: "))
    # the part it names, with the seconds the table above prints for it and the mark
    name, seconds = re.search(r"largest other part is (\w+) = ([\d.]+) s \* \(", why_prior).groups()
    row = next(ln for ln in prior if ln.lstrip().startswith(name + " "))
    # the table's 4 decimals (5.2775) against the line's 4 significant digits (5.278)
    assert abs(float(row.split()[1]) - float(seconds)) <= 5.01e-4 and row.split()[2] == "*", (row, why_prior)
    assert "*" not in why_fitted and re.search(r"= [\d.]+ s \(", why_fitted), why_fitted


def test_hsdp_note_says_slower_when_the_fixed_hybrid_sharding_is_slower():
    out = "\n".join(_run(["plan", "-m", "llama3-70b", "-c", "mi300x-node", "-n", "128", "--global-batch", "128",
                          "--fix", "zero_shard_group=8", "--fix", "recompute=full", "--top", "1", "--explain"]))
    assert "dp=128 tp=1 pp=1 cp=1" in out and "micro_batch=1 zero=3 recompute=full shard_group=8" in out, out
    base = ["simulate", "-m", "llama3-70b", "-c", "mi300x-node", "-n", "128", "--micro-batch", "1",
            "--global-batch", "128", "--zero", "3", "--recompute", "full", "--no-sequence-parallel", "--json"]
    hsdp = json.loads(CliRunner().invoke(main, base + ["--zero-shard-group", "8"]).output)["step_time_s"]
    plain = json.loads(CliRunner().invoke(main, base).output)["step_time_s"]
    assert hsdp > plain         # over groups of 8 the gathers are no shorter here, the states larger
    note = re.search(r"\(HSDP\): [\d.]+ GiB, ([\d.]+) s \* per step (faster|slower) than sharding over all 128", out)
    assert note is not None, out
    assert note.group(2) == "slower" and note.group(1) == f"{hsdp - plain:.3g}", note.group(0)


def test_serve_simulate_s_decode_step_parts_say_they_rest_on_a_prior():
    """The decode step's parts come from the serving efficiency as TTFT and TPOT do: on A100
    (ampere: Hopper's factors, unfitted) the note the latencies carry heads the parts too; on H100
    (fitted) neither carries one."""
    args = ["serve", "simulate", "-m", "llama3.1-70b", "-b", "vllm", "--tp", "4", "--batch", "83"]
    prior = _run(args + ["-s", "dgx-a100-80gb"])
    note = next(ln for ln in prior if ln.startswith("latency and throughput")).removeprefix("latency and throughput")
    assert note.startswith(" [rests on an unfitted prior: no serving measurement of ampere GPUs"), note
    assert next(ln for ln in prior if ln.startswith("decode step")) == \
        "decode step (one token for every request of a rank)" + note
    fitted = _run(args + ["-s", "dgx-h100"])
    assert next(ln for ln in fitted if ln.startswith("decode step")) == "decode step (one token for every request of a rank)"
    assert not any("unfitted prior" in ln for ln in fitted)


SERVE_PLAN = ["serve", "plan", "-m", "llama3.1-70b", "-n", "8", "--tpot-ms", "50", "--top", "0"]
#: the front table's row: mode, layout, batch, prefill_batch, gpus_used, then the four numbers
_FRONT_ROW = re.compile(r"^  (agg|disagg)  .*?  (\d+(?: \*)?) +([\d.]+(?: \*)?) +([\d,]+(?: \*)?) +([\d.]+(?: \*)?)  (yes|no)$")


def _serve_plan(system):
    """(text lines, --json) of SERVE_PLAN on ``system``."""
    return _run(SERVE_PLAN + ["-s", system]), json.loads(CliRunner().invoke(main, SERVE_PLAN + ["-s", system, "--json"]).output)


def _numbers_line(b, star):
    return (f"      TTFT {b['ttft_ms']:.0f} ms{star} (p90 {b['ttft_p90_ms']:.0f}{star}), TPOT {b['tpot_ms']:.1f} ms{star}, "
            f"{b['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU{star}, {b['tokens_per_s_per_user']:.1f} tokens/s/user{star}")


def _front_cells(r, star):
    return (r["mode"], f"{r['ttft_ms']:.0f}{star}", f"{r['tpot_ms']:.1f}{star}", f"{r['tokens_per_s_per_gpu']:,.0f}{star}",
            f"{r['tokens_per_s_per_user']:.1f}{star}")


def test_serve_plan_marks_each_number_of_its_best_line_and_front_on_a_prior_gpu():
    """A100 (ampere: Hopper's fitted serving factors, unfitted here): the best line's TTFT, p90,
    TPOT and tokens/s and every time / rate cell of the front carry " *", as training's plan
    tables do, and a legend under the table says what it means; --json stays numeric."""
    out, data = _serve_plan("dgx-a100-80gb")
    best = data["best"]
    assert data["efficiency_fitted"] is False
    assert all(isinstance(best[k], float) for k in ("ttft_ms", "ttft_p90_ms", "tpot_ms", "tokens_per_s_per_gpu"))
    assert out[out.index(next(ln for ln in out if ln.startswith("best:"))) + 1] == _numbers_line(best, " *")
    # hopper's factors on A100's datasheet: an aggregated tp 8 at batch 166 since session 72's refit
    # (TTFT 993 ms, p90 1217, TPOT 49.8 ms as 2 x tp4 at batch 83 at session 68's)
    assert _numbers_line(best, " *") == "      TTFT 958 ms * (p90 1202 *), TPOT 49.9 ms *, 409 tokens/s/GPU *, 20.1 tokens/s/user *"
    rows = [m.groups() for m in map(_FRONT_ROW.match, out) if m]
    assert len(rows) == len(data["front"]) > 10
    assert sorted(r[:5] for r in rows) == sorted(_front_cells(r, " *") for r in data["front"])
    # the why lines' numbers too (they had been plain beside the marked best line)
    why = next(ln for ln in out if ln.startswith("why: "))
    assert why.endswith(f"reaches {best['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU * with TTFT {best['ttft_ms']:.0f} ms * "
                        f"and TPOT {best['tpot_ms']:.1f} ms * (SLO 1000 / 50 ms)"), why
    other = out[out.index(why) + 1]
    assert re.search(r"reaches [\d,]+ tokens/s/GPU \* \([\d.]+x less\) at TPOT [\d.]+ ms \*, TTFT \d+ ms \*: ", other), other
    assert out[-1] == ("* rests on an unfitted prior: no serving measurement of ampere GPUs was fitted; its factors are "
                       "hopper's fitted ones (hardware_specs/serving_efficiency/ampere.yaml); read the numbers marked * "
                       "as a sketch")


def test_serve_plan_marks_nothing_on_a_fitted_gpu():
    out, data = _serve_plan("dgx-h100")
    assert data["efficiency_fitted"] is True
    assert out[out.index(next(ln for ln in out if ln.startswith("best:"))) + 1] == _numbers_line(data["best"], "")
    rows = [m.groups() for m in map(_FRONT_ROW.match, out) if m]
    assert sorted(r[:5] for r in rows) == sorted(_front_cells(r, "") for r in data["front"]) and rows
    assert not any("*" in ln or "unfitted prior" in ln for ln in out)


def test_serve_plan_csv_stays_numeric_on_a_prior_gpu():
    import io

    import pandas as pd
    res = CliRunner().invoke(main, SERVE_PLAN + ["-s", "dgx-a100-80gb", "--csv"])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(io.StringIO(res.output))
    assert all(df[c].dtype.kind == "f" for c in ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_user"))
    assert df["efficiency_fitted"].tolist() == [False] * len(df)
