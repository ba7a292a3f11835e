"""The statistics layer, checked by simulation: synthetic repeat sets and step series at realistic noise, fixed
seeds, and the measured rates printed (`pytest -s tests/test_stats.py -k rate`)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import read_log, run_env, run_harness, snakemake, tiny_config, write_config
from dlbench.collect import stats
from dlbench.collect.aggregate import SUMMARY_COLUMNS, records_frame, summarise, write_all
from dlbench.logformats.run_log_fixtures import write_run_log
from dlbench.logformats.runlogs import parse as parse_run_log

SEED = 11


def repeats(rng: np.random.Generator, n: int, median: float, cv: float, trials: int) -> np.ndarray:
    """`trials` sets of `n` repeats: normal noise of the given CV around `median` (the true median)."""
    return median * (1.0 + cv * rng.standard_normal((trials, n)))


def step_series(rng: np.random.Generator, n: int, cv: float, drift: float = 0.0, phi: float = 0.0) -> np.ndarray:
    """Measured step times: 0.1 s, noise of the given CV, AR(1) correlation phi, a linear drift over the window."""
    e = rng.standard_normal(n)
    for k in range(1, n):
        e[k] = phi * e[k - 1] + math.sqrt(1 - phi * phi) * e[k]
    return 0.1 * (1.0 + drift * np.arange(n) / (n - 1)) * (1.0 + cv * e)


def report(name: str, rate: float, trials: int) -> None:
    se = math.sqrt(max(rate * (1 - rate), 1e-9) / trials)
    print(f"\n[rate] {name}: {rate:.3f} (± {se:.3f}, {trials} trials)")


# ---------------------------------------------------------------------------------------------- intervals
def test_order_statistic_interval_needs_six_repeats_at_95_percent():
    assert stats.min_repeats(0.95) == 6 and stats.min_repeats(0.99) == 8 and stats.min_repeats(0.90) == 5
    few = stats.median_ci([100, 101, 99, 102, 98], 0.95)
    assert not few.ok and few.low is None and few.median == 100 and "not enough repeats: 5 < 6" in few.note
    seven = stats.median_ci([100, 107, 99, 102, 98, 101, 97], 0.95)
    assert (seven.low, seven.high, seven.n) == (97, 107, 7)
    assert seven.coverage == pytest.approx(1 - 2 / 2**7)  # [min, max] of 7: 98.4%
    ten = stats.median_ci(range(1, 11), 0.95)
    assert (ten.low, ten.high) == (2, 9) and ten.coverage == pytest.approx(1 - 2 * 11 / 1024)
    assert stats.median_ci([1, 2, 3, 4, 5], 0.90).ok  # 5 repeats suffice at 90%
    assert stats.median_ci([1.0, float("nan"), 2, 3, 4, 5, 6], 0.95).n == 6  # NaN (a failed run) is not a repeat


def test_median_interval_covers_the_true_median_at_its_stated_rate():
    rng = np.random.default_rng(SEED)
    trials = 4000
    for n, cv in ((7, 0.02), (10, 0.05), (20, 0.01)):
        sets = repeats(rng, n, 1000.0, cv, trials)
        cis = [stats.median_ci(s, 0.95) for s in sets]
        covered = np.mean([c.low <= 1000.0 <= c.high for c in cis])
        report(f"median interval coverage, n={n}, CV {cv:.0%} (stated {cis[0].coverage:.3f})", covered, trials)
        assert covered >= 0.95 - 0.01
        assert covered == pytest.approx(cis[0].coverage, abs=0.015)


def test_median_interval_is_distribution_free():
    """Skewed repeats (a busy machine slows some runs, never speeds them up): the coverage holds."""
    rng = np.random.default_rng(SEED + 1)
    trials, n = 4000, 9
    sets = 1000.0 * np.exp(0.03 * rng.standard_normal((trials, n)) - 0.05 * rng.exponential(size=(trials, n)))
    true_median = np.median(
        1000.0 * np.exp(0.03 * rng.standard_normal(2_000_000) - 0.05 * rng.exponential(size=2_000_000))
    )
    cis = [stats.median_ci(s, 0.95) for s in sets]
    covered = np.mean([c.low <= true_median <= c.high for c in cis])
    report(f"median interval coverage, skewed, n={n} (stated {cis[0].coverage:.3f})", covered, trials)
    assert covered == pytest.approx(cis[0].coverage, abs=0.015)


def test_ratio_interval_covers_the_true_ratio():
    rng = np.random.default_rng(SEED + 2)
    trials = 600
    for n, cv in ((7, 0.02), (7, 0.05), (10, 0.02)):
        a, b = repeats(rng, n, 1000.0, cv, trials), repeats(rng, n, 1900.0, cv, trials)
        cis = [stats.ratio_ci(y, x, 0.95) for x, y in zip(a, b, strict=True)]
        covered = np.mean([c.low <= 1.9 <= c.high for c in cis])
        report(f"ratio-of-medians bootstrap coverage, n={n} per side, CV {cv:.0%} (nominal 0.95)", covered, trials)
        assert 0.90 <= covered <= 0.995


def test_ratio_interval_is_reproducible_and_refuses_tiny_sets():
    a, b = [100, 102, 98, 101, 99], [190, 195, 200, 205, 210]
    assert stats.ratio_ci(b, a) == stats.ratio_ci(b, a)
    first = stats.ratio_ci(b, a)
    assert first.ratio == pytest.approx(2.0) and first.low < 2.0 < first.high
    tiny = stats.ratio_ci([200, 210], a)
    assert tiny.ratio == pytest.approx(2.05) and not tiny.ok and "not enough repeats" in tiny.note
    assert stats.ratio_ci([], a).ratio is None


# --------------------------------------------------------------------------------------------- comparison
def test_exact_rank_test_matches_scipy():
    from scipy.stats import mannwhitneyu

    rng = np.random.default_rng(SEED + 3)
    for m, n in ((3, 3), (7, 7), (5, 9), (10, 10)):
        x, y = rng.standard_normal(m), rng.standard_normal(n) + 0.5
        for alternative in ("less", "greater"):
            expected = mannwhitneyu(x, y, alternative=alternative, method="exact").pvalue
            assert stats._rank_test_p(x, y, alternative) == pytest.approx(expected, abs=1e-12)


def test_a_true_5_percent_slowdown_is_called_slower():
    """CV 2%, 7 repeats per side: the slowdown is found in >= 90% of trials."""
    rng = np.random.default_rng(SEED + 4)
    trials = 1000
    a, b = repeats(rng, 7, 1000.0, 0.02, trials), repeats(rng, 7, 950.0, 0.02, trials)
    verdicts = [stats.compare_repeats(x, y, 0.95, resamples=200).verdict for x, y in zip(a, b, strict=True)]
    rate = verdicts.count("slower") / trials
    report("5% slowdown, CV 2%, 7 vs 7: called slower", rate, trials)
    assert rate >= 0.90 and "faster" not in verdicts


def test_no_change_is_rarely_called_significant():
    """Same distribution on both sides: a verdict other than "no significant change" in <= ~5% of trials."""
    rng = np.random.default_rng(SEED + 5)
    trials = 2000
    for n, cv in ((7, 0.02), (10, 0.05)):
        a, b = repeats(rng, n, 1000.0, cv, trials), repeats(rng, n, 1000.0, cv, trials)
        verdicts = [stats.compare_repeats(x, y, 0.95, resamples=50).verdict for x, y in zip(a, b, strict=True)]
        rate = 1 - verdicts.count("no significant change") / trials
        report(f"no change, CV {cv:.0%}, {n} vs {n}: called significant (stated level 0.05)", rate, trials)
        assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)


def test_tolerance_separates_practical_from_statistical_significance():
    rng = np.random.default_rng(SEED + 6)
    trials = 400
    a, b = repeats(rng, 7, 1000.0, 0.01, trials), repeats(rng, 7, 980.0, 0.01, trials)  # a real 2% slowdown
    plain = [stats.compare_repeats(x, y, resamples=50).verdict for x, y in zip(a, b, strict=True)]
    tolerant = [stats.compare_repeats(x, y, tolerance=0.05, resamples=50).verdict for x, y in zip(a, b, strict=True)]
    report("2% slowdown, CV 1%, 7 vs 7: called slower without tolerance", plain.count("slower") / trials, trials)
    assert plain.count("slower") / trials >= 0.8
    assert "slower" not in tolerant and tolerant.count("within tolerance") / trials >= 0.8
    big = [
        stats.compare_repeats(x, y * 0.9 / 0.98, tolerance=0.05, resamples=50).verdict
        for x, y in zip(a[:100], b[:100], strict=True)
    ]  # a 10% slowdown is beyond a 5% tolerance
    assert big.count("slower") >= 95


def test_comparison_says_when_it_cannot_decide():
    three = stats.compare_repeats([100, 101, 99], [80, 81, 79])
    assert three.verdict == "no significant change" and three.p_value == pytest.approx(0.1)
    assert "cannot reach p < 0.05" in three.note and three.ratio == pytest.approx(0.8)
    one = stats.compare_repeats([100], [80, 81, 79])
    assert one.verdict == "too few repeats" and one.p_value is None
    base = np.array([100, 101, 99, 100.5, 99.5, 100.2, 99.8])
    faster = stats.compare_repeats(base, base * 1.1)
    assert faster.verdict == "faster" and faster.low > 1.0 and faster.p_value < 0.01


# ------------------------------------------------------------------------------------------- steady state
@pytest.mark.parametrize("cv", [0.01, 0.02])
def test_steady_state_flags_a_3_percent_drift_and_not_stationary_noise(cv):
    """100 measured steps of independent noise: a 3% drift over the window is flagged in >= 95% of trials,
    stationary noise is not flagged in >= 95%."""
    rng = np.random.default_rng(SEED + 7)
    trials = 1000
    drift = [stats.steady_state(step_series(rng, 100, cv, drift=0.03)) for _ in range(trials)]
    still = [stats.steady_state(step_series(rng, 100, cv)) for _ in range(trials)]
    flagged = np.mean([not s.steady for s in drift])
    false = np.mean([not s.steady for s in still])
    report(f"steady state, 3% drift, step CV {cv:.0%}: flagged", flagged, trials)
    report(f"steady state, stationary, step CV {cv:.0%}: flagged (false alarm)", false, trials)
    assert flagged >= 0.95 and false <= 0.05
    assert np.median([s.drift for s in drift]) == pytest.approx(0.03, abs=0.005)


def test_steady_state_rates_under_correlated_and_noisier_steps():
    """Recorded, not promised: slowly wandering step times (AR(1), phi 0.5) and 5% step noise."""
    rng = np.random.default_rng(SEED + 8)
    trials = 500
    for cv, phi in ((0.02, 0.5), (0.05, 0.0)):
        flagged = np.mean([not stats.steady_state(step_series(rng, 100, cv, 0.03, phi)).steady for _ in range(trials)])
        false = np.mean([not stats.steady_state(step_series(rng, 100, cv, 0.0, phi)).steady for _ in range(trials)])
        report(f"steady state, 3% drift, step CV {cv:.0%}, AR {phi}: flagged", flagged, trials)
        report(f"steady state, stationary, step CV {cv:.0%}, AR {phi}: flagged (false alarm)", false, trials)
        assert false <= 0.15


def test_steady_state_finds_warm_up_left_in_the_measured_steps():
    rng = np.random.default_rng(SEED + 9)
    trials = 500
    found = []
    for _ in range(trials):
        x = step_series(rng, 100, 0.01)
        x[:10] *= 1 + 0.3 * np.exp(-np.arange(10) / 3)  # the first steps still 30%..3% slow
        found.append(stats.steady_state(x))
    rate = np.mean([not s.steady for s in found])
    report("steady state, warm-up left in the first 10 steps, step CV 1%: flagged", rate, trials)
    assert rate >= 0.9
    assert np.median([s.warmup_like_steps for s in found if s.warmup_like_steps]) <= 15


def test_steady_state_edge_cases():
    flat = stats.steady_state([0.1] * 100)
    assert flat.steady is True and flat.p_value == 1.0 and flat.warmup_like_steps == 0
    short = stats.steady_state([0.1, 0.2, 0.3])
    assert short.steady is None and "too few" in short.note
    long = stats.steady_state(step_series(np.random.default_rng(1), 5000, 0.02))
    assert long.steady is True and "means of" in long.note
    # one slow step (a sync, a GC pause) at the end is not a trend
    x = step_series(np.random.default_rng(2), 100, 0.01)
    x[-1] *= 5
    assert stats.steady_state(x).steady is True


# ------------------------------------------------------------------------------------------ plausibility
def test_plausibility_flags_name_a_likely_cause():
    quiet = {
        "n_ok": 7,
        "median": 100,
        "q25": 99,
        "q75": 101,
        "cv": 0.01,
        "ci_level": 0.95,
        "efficiency": 0.9,
        "efficiency_low": 0.85,
        "efficiency_high": 0.95,
        "steady_runs": 7,
        "nonsteady_runs": 0,
    }
    assert stats.plausibility_flags(quiet) == []
    codes = lambda row: [f.code for f in stats.plausibility_flags(quiet | row)]  # noqa: E731
    assert codes({"q25": 60, "q75": 101, "cv": 0.25}) == ["wide_spread"]
    assert "another process" in stats.format_flags(stats.plausibility_flags(quiet | {"cv": 0.3}))
    assert codes({"n_ok": 3}) == ["few_repeats"]
    assert codes({"efficiency": 1.2, "efficiency_low": 1.1, "efficiency_high": 1.3}) == ["superlinear"]
    assert codes({"efficiency": 1.05, "efficiency_low": 0.95, "efficiency_high": 1.15}) == []  # noise
    assert codes({"steady_runs": 5, "nonsteady_runs": 2}) == ["not_steady"]
    assert codes({"steady_runs": 6, "nonsteady_runs": 1}) == []  # one in seven: a false alarm is likely
    assert codes({"warmup_unstable_runs": 2}) == ["warmup_unstable"]
    assert all(
        ";" not in f.text
        for f in stats.plausibility_flags(
            quiet | {"n_ok": 3, "cv": 0.3, "efficiency": 1.3, "nonsteady_runs": 3, "warmup_unstable_runs": 1}
        )
    )


# ------------------------------------------------------------------------------- records and the summary
def log_with_steps(path, step_times: np.ndarray, **kwargs):
    """A synthetic run log whose measured steps are `step_times` scaled to the log's wall time (so the
    summary's throughput still agrees with its steps)."""
    measured = len(step_times)
    path = write_run_log(path, measured_steps=measured, **kwargs)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    elapsed = next(e for e in lines if e["type"] == "summary")["elapsed_s"]
    scaled = iter(step_times / step_times.sum() * elapsed)
    for entry in lines:
        if entry["type"] == "step" and entry["phase"] == "measure":
            entry["seconds"] = next(scaled)
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return path


def test_record_carries_the_steady_state_of_its_measured_steps(tmp_path):
    rng = np.random.default_rng(SEED + 10)
    drifting = parse_run_log(log_with_steps(tmp_path / "d.jsonl", step_series(rng, 100, 0.005, drift=0.05)))
    assert drifting["status"] == "ok" and drifting["steady"] is False
    assert drifting["steady_drift"] == pytest.approx(0.05, abs=0.01) and drifting["steady_p"] < 0.01
    assert drifting["steady_statistic"] > 0.3
    flat = parse_run_log(log_with_steps(tmp_path / "f.jsonl", step_series(rng, 100, 0.005)))
    assert flat["steady"] is True and flat["warmup_like_steps"] == 0
    assert (flat["warmup_steps"], flat["warmup_auto"], flat["warmup_stable"]) == (2, False, None)
    failed = parse_run_log(write_run_log(tmp_path / "x.jsonl", status="oom", throughput=None, error="OOM"))
    assert failed["steady"] is None and failed["steady_statistic"] is None


def test_summary_has_intervals_steady_counts_and_flags(tmp_path):
    rng = np.random.default_rng(SEED + 11)
    logs = []
    base = [100, 101, 99, 102, 98, 100.5, 99.5]
    for topology, scale in (("1x1", 1.0), ("1x2", 2.1)):
        for rep, value in enumerate(base, start=1):
            drift = 0.05 if (topology == "1x2" and rep <= 3) else 0.0  # three of seven 1x2 runs drift
            path = tmp_path / f"{topology}/rep{rep}.jsonl"
            logs.append(
                str(
                    log_with_steps(
                        path,
                        step_series(rng, 100, 0.005, drift=drift),
                        topology=topology,
                        repeat=rep,
                        throughput=value * scale,
                    )
                )
            )
    summary = summarise(records_frame(logs)).set_index("topology")
    one, two = summary.loc["1x1"], summary.loc["1x2"]
    assert (one["ci_low"], one["ci_high"], one["ci_level"]) == (98, 102, 0.95)
    assert one["ci_coverage"] == pytest.approx(1 - 2 / 2**7) and "order statistics 1 and 7" in one["ci_note"]
    assert (one["speedup_low"], one["speedup_high"]) == (1.0, 1.0)
    assert two["speedup_low"] < 2.1 < two["speedup_high"] and two["efficiency_low"] == two["speedup_low"] / 2
    assert (one["steady_runs"], one["nonsteady_runs"], two["steady_runs"], two["nonsteady_runs"]) == (7, 0, 4, 3)
    assert one["flags"] == "" and two["flags"].startswith("superlinear: ") and "not_steady: 3 of 7 runs" in two["flags"]
    assert list(summary.columns) == [c for c in SUMMARY_COLUMNS if c != "topology"]


def test_summary_from_csv_records_and_the_studys_level(tmp_path):
    """Records read back from records.csv (booleans as text) give the same counts; write_all takes the level
    from report.confidence."""
    logs = [str(write_run_log(tmp_path / f"rep{r}.jsonl", repeat=r, throughput=100.0 + r)) for r in range(1, 7)]
    out = tmp_path / "agg"
    out.mkdir()
    write_all(logs, [], {"report": {"confidence": 0.99}}, out / "records.csv", out / "summary.csv", out / "e.json")
    row = pd.read_csv(out / "summary.csv").iloc[0]
    assert row["ci_level"] == 0.99 and math.isnan(row["ci_low"]) and "not enough repeats: 6 < 8" in row["ci_note"]
    assert row["flags"].startswith("few_repeats: 6 ok repeats")
    again = summarise(pd.read_csv(out / "records.csv")).iloc[0]
    assert (again["steady_runs"], again["nonsteady_runs"], again["ci_low"]) == (6, 0, 101.0)


# ------------------------------------------------------------------------------------------ warm-up auto
def test_warmed_up_criterion():
    from dlbench.harness.rank import warmed_up

    assert not warmed_up([1.0] * 9)  # never before a whole window
    assert warmed_up([30.0] + [1.0] * 9)  # a compile in step 0 is outvoted by the median
    assert warmed_up([1.0, 1.04, 0.98, 1.02, 1.0, 0.99, 1.03, 1.01, 0.97, 1.0])
    falling = [2.0 * 0.97**k for k in range(40)]  # 3% faster per step: 14% per half-window
    assert not any(warmed_up(falling[: k + 1]) for k in range(40))
    assert warmed_up([2.0, 1.8, 1.6, 1.4, 1.2] + [1.0] * 10)


def test_harness_accepts_auto_and_the_run_id_does_not_change():
    from dlbench.harness.spec import parser, spec_from_args

    args = [
        "--framework",
        "pytorch",
        "--model",
        "bert_tiny",
        "--topology",
        "1x1",
        "--batch-size",
        "2",
        "--log",
        "x.jsonl",
        "--config-id",
        "c",
    ]
    auto = spec_from_args(parser("t").parse_args([*args, "--warmup-steps", "auto", "--max-warmup-steps", "50"]))
    fixed = spec_from_args(parser("t").parse_args([*args, "--warmup-steps", "20"]))
    assert (auto.warmup_steps, auto.max_warmup_steps, fixed.warmup_steps) == ("auto", 50, 20)
    assert auto.run_id == fixed.run_id == "c/rep1"
    assert spec_from_args(parser("t").parse_args(auto.to_args())) == auto
    with pytest.raises(SystemExit):
        parser("t").parse_args([*args, "--warmup-steps", "-3"])


BERT_TINY = ["--seq-length", "32", "--batch-size", "2", "--measured-steps", "12", "--device", "cpu"]


def test_auto_warm_up_in_a_real_run(torch_python, tmp_path):
    """bert_tiny: warm-up runs until the step times settle, the log says how many steps it took, and with two
    ranks both stop at the same step (their collectives would hang otherwise). The warm-up is rank.py's, the same
    for every framework; the ranks agree through the backend's all_gather, which every framework's two-rank
    contract run exercises (tests/test_contract_framework.py). One rank's: the test after this one."""
    log = tmp_path / "run.jsonl"
    result = run_harness(
        torch_python,
        log,
        "--topology",
        "1x2",
        *BERT_TINY,
        "--warmup-steps",
        "auto",
        "--max-warmup-steps",
        "200",  # room for the step times to settle beside other tests' load (quiet: 10 to 40 steps)
        model="bert_tiny",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    entries = read_log(log)
    summary = entries["summary"][0]
    assert summary["status"] == "ok", summary
    warmup = summary["warmup"]
    assert warmup["mode"] == "auto" and warmup["stable"] is True and 10 <= warmup["steps"] < 200
    assert len([s for s in entries["step"] if s["phase"] == "warmup"]) == warmup["steps"]
    assert entries["header"][0]["config"]["warmup_steps"] == "auto"
    assert f"warm-up auto: settled after {warmup['steps']} steps" in result.stderr
    record = parse_run_log(log)
    assert (record["warmup_steps"], record["warmup_auto"], record["warmup_stable"]) == (warmup["steps"], True, True)
    assert record["steady"] in (True, False) and record["run_id"] == "adhoc/rep1"


@pytest.mark.slow
def test_auto_warm_up_that_does_not_settle_is_flagged(torch_python, tmp_path):
    log = tmp_path / "results/runs/bert_tiny/pytorch/1x1/bs2-fp32-nocompile-synthetic-seq32-adam-noclip/rep1.jsonl"
    result = run_harness(
        torch_python,
        log,
        "--topology",
        "1x1",
        *BERT_TINY,
        "--warmup-steps",
        "auto",
        "--max-warmup-steps",
        "3",
        model="bert_tiny",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_log(log)["summary"][0]["warmup"] == {
        "mode": "auto",
        "steps": 3,
        "stable": False,
        "max_steps": 3,
        "window": 10,
        "tolerance": 0.05,
    }
    assert "not settled within 3 steps" in result.stderr
    summary = summarise(records_frame([str(log)])).iloc[0]
    assert summary["warmup_unstable_runs"] == 1
    assert "warmup_unstable: 1 of 1 runs stopped warming up at max_warmup_steps" in summary["flags"]


def test_study_carries_auto_warm_up_to_the_run_command(tmp_path):
    """warmup_steps: auto reaches the harness with its bound; the configuration's id (and so its paths) does not
    change, and runs with a fixed warm-up keep their command line."""
    config = tiny_config(
        defaults={
            "repeats": 1,
            "warmup_steps": "auto",
            "max_warmup_steps": 50,
            "measured_steps": 2,
            "image_size": 32,
            "timeout_minutes": 10,
        },
        overrides=[{"match": {"topology": "1x2"}, "set": {"warmup_steps": 4}}],
    )
    result = snakemake(tmp_path, "-n", "-p", "--configfile", str(write_config(tmp_path / "s.yaml", config)))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    commands = [line for line in out.splitlines() if "-m dlbench.harness" in line]
    one = next(c for c in commands if "--topology 1x1" in c)
    two = next(c for c in commands if "--topology 1x2" in c)
    assert "--warmup-steps auto --max-warmup-steps 50 " in one and "results/runs/resnet50/pytorch/1x1/" in one
    assert "--warmup-steps 4 --measured-steps" in two and "max-warmup" not in two


# ------------------------------------------------------------------------------------------------ compare
def result_set(root, values: dict[tuple[str, str], list[float | str]]) -> Path:
    """records.csv made the way the workflow makes it: run logs (dlbench.logformats.run_log_fixtures) -> write_all."""
    logs = []
    for (topology, precision), throughputs in values.items():
        for rep, value in enumerate(throughputs, start=1):
            path = root / f"runs/{topology}-{precision}/rep{rep}.jsonl"
            failed = isinstance(value, str)
            logs.append(
                str(
                    write_run_log(
                        path,
                        topology=topology,
                        precision=precision,
                        repeat=rep,
                        throughput=None if failed else value,
                        status=value if failed else "ok",
                        error="OOM" if failed else "",
                    )
                )
            )
    out = root / "report"
    out.mkdir(parents=True)
    write_all(logs, [], {}, out / "records.csv", out / "summary.csv", out / "environment.json")
    return out


JITTER = np.array([0.0, 0.011, -0.009, 0.004, -0.013, 0.007, -0.002])  # about 1% noise, 7 repeats


def compare_cli(*args: str) -> subprocess.CompletedProcess:
    return run_env(sys.executable, "-m", "dlbench.collect.compare", *map(str, args), check=False)


def test_compare_cli_finds_the_regression_and_lists_one_sided_configurations(tmp_path):
    a = result_set(
        tmp_path / "a",
        {
            ("1x1", "fp32"): list(1000 * (1 + JITTER)),
            ("1x2", "fp32"): list(1900 * (1 + JITTER)),
            ("1x4", "fp32"): list(3500 * (1 + JITTER)),
        },
    )
    b = result_set(
        tmp_path / "b",
        {
            ("1x1", "fp32"): list(1000 * (1 + JITTER[::-1])),
            ("1x2", "fp32"): list(1700 * (1 + JITTER[::-1])),  # 10.5% slower
            ("1x1", "amp"): list(2500 * (1 + JITTER)),
        },
    )
    result = compare_cli(
        a, b / "records.csv", "--tolerance", "0.05", "--csv", tmp_path / "c.csv", "--plot", tmp_path / "c.png"
    )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("resnet50/")}
    assert lines["resnet50/pytorch/1x2/bs32-fp32-nocompile-synthetic"].endswith("slower")
    assert "0.895 [" in lines["resnet50/pytorch/1x2/bs32-fp32-nocompile-synthetic"]
    assert lines["resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic"].endswith("no significant change")
    assert lines["resnet50/pytorch/1x4/bs32-fp32-nocompile-synthetic"].endswith("only in A")
    assert lines["resnet50/pytorch/1x1/bs32-amp-nocompile-synthetic"].endswith("only in B")
    assert "1 configuration(s) significantly slower by more than 5.0%" in result.stderr
    table = pd.read_csv(tmp_path / "c.csv")
    assert list(table["present"]) == ["both", "both", "A only", "B only"]
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_compare_cli_passes_a_change_inside_the_tolerance(tmp_path):
    a = result_set(tmp_path / "a", {("1x1", "fp32"): list(1000 * (1 + JITTER / 4))})
    b = result_set(tmp_path / "b", {("1x1", "fp32"): list(980 * (1 + JITTER[::-1] / 4))})  # 2% slower, CV 0.25%
    strict = compare_cli(a, b)
    assert strict.returncode == 1 and strict.stdout.splitlines()[3].endswith("slower")
    tolerant = compare_cli(a, b, "--tolerance", "0.05")
    assert tolerant.returncode == 0, tolerant.stdout + tolerant.stderr
    assert tolerant.stdout.splitlines()[3].endswith("within tolerance")


@pytest.mark.slow
def test_compare_cli_with_failed_runs_bad_inputs_and_help(tmp_path):
    a = result_set(tmp_path / "a", {("1x1", "fp32"): list(1000 * (1 + JITTER))})
    b = result_set(tmp_path / "b", {("1x1", "fp32"): ["oom"] * 3})
    result = compare_cli(a, b)
    assert result.returncode == 0 and "too few repeats" in result.stdout
    missing = compare_cli(a, tmp_path / "nowhere")
    assert missing.returncode == 2 and "no records.csv" in missing.stderr
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    assert compare_cli(a, tmp_path / "x.csv").returncode == 2
    assert compare_cli(a, b, "--tolerance", "1.5").returncode == 2
    helptext = compare_cli("--help").stdout
    assert "Noise model" in helptext and "Mann-Whitney" in helptext and "multiplicative shift" in helptext


def test_compare_function_and_plot_for_the_report(tmp_path):
    from matplotlib.figure import Figure

    from dlbench.collect.compare import compare, load_records, plot_comparison, regressions

    a = load_records(
        result_set(
            tmp_path / "a", {("1x1", "fp32"): list(1000 * (1 + JITTER)), ("1x2", "fp32"): list(1900 * (1 + JITTER))}
        )
    )
    b = load_records(
        result_set(
            tmp_path / "b", {("1x1", "fp32"): list(1100 * (1 + JITTER)), ("1x2", "fp32"): list(1900 * (1 + JITTER))}
        )
    )
    result = compare(a, b)
    assert list(result["verdict"]) == ["faster", "no significant change"] and regressions(result).empty
    assert result.loc[0, "ratio"] == pytest.approx(1.1) and result.loc[0, "ratio_low"] > 1.0
    assert set(result.loc[0, ["framework", "topology", "precision"]]) == {"pytorch", "1x1", "fp32"}
    fig = plot_comparison(result, title="v2 against v1")
    assert isinstance(fig, Figure) and fig.axes[0].get_title() == "v2 against v1"
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][-1].startswith("resnet50/pytorch/1x1")


# --------------------------------------------------------------------------------------------- references
def test_published_references_are_complete():
    from dlbench.collect.references import load_references
    from dlbench.harness.spec import FRAMEWORKS
    from dlbench.vocabulary.identity import throughput_unit

    refs = load_references()
    assert len(refs) == 86 and refs["url"].str.startswith("https://").all()
    assert set(refs["model"]) == {"resnet50", "bert_base", "bert_large", "llama3_8b"}
    assert set(refs["precision"]) == {"fp32", "amp"} and refs["topology"].str.fullmatch(r"[1-9]\d*x[1-9]\d*").all()
    assert set(refs["framework"].dropna()) <= set(FRAMEWORKS)  # JAX's published figures are on TPUs: none here
    assert (refs["published_low"] > 0).all() and (refs["published_low"] <= refs["published_high"]).all()
    # bert_large is a published model only (no dlbench model): BERT's unit
    unit = refs["model"].map(lambda m: "sequences/s" if m.startswith("bert") else throughput_unit(m))
    assert (refs["unit"] == unit).all()
    dlperf = refs[refs["source"].str.startswith("DLPerf Benchmark Test Report")]
    assert len(dlperf) == 40 and dlperf["batch_size"].notna().all() and (dlperf["topology"] == "4x8").all()
    # DLPerf's PaddlePaddle pages: 1x1 and 1x8 (and 4x8 where the report has none), each batch size and DALI said
    paddle = refs[refs["framework"] == "paddle"]
    assert len(paddle) == 27 and set(paddle["topology"]) == {"1x1", "1x8", "4x8"} and paddle["batch_size"].notna().all()
    dali = paddle[paddle["label"].str.endswith("with DALI")]
    assert sorted(zip(dali["topology"], dali["published"], strict=True)) == [
        ("1x1", 887.17),
        ("1x8", 6862.17),
        ("4x8", 11617.57),
    ]
    ngc_pytorch = dlperf[(dlperf["label"] == "NGC PyTorch (NVIDIA DLE)") & (dlperf["precision"] == "fp32")].iloc[0]
    assert (ngc_pytorch["published"], ngc_pytorch["published_speedup"]) == (10917.09, 29.72)
    lambda_range = refs[refs["label"].str.startswith("PyTorch (Lambda")].iloc[0]
    assert (lambda_range["published_low"], lambda_range["published_high"], lambda_range["published"]) == (
        2616,
        2800,
        2708,
    )


def test_match_references_gives_our_median_over_published(tmp_path):
    from dlbench.collect.references import match_references

    values = {
        ("4x8", "fp32", "real", "pytorch", 128): 10917.09 * 0.9 * (1 + JITTER),
        ("1x1", "amp", "synthetic", "pytorch", 256): 2000 * (1 + JITTER),
        ("4x8", "fp32", "real", "tensorflow", 128): 9000 * (1 + JITTER),
        ("1x2", "fp32", "synthetic", "pytorch", 64): 500 * (1 + JITTER),
        ("1x1", "fp32", "real", "paddle", 128): 352.72 * 0.5 * (1 + JITTER),
    }
    logs = []
    for (topology, precision, data, framework, batch), series in values.items():
        for rep, value in enumerate(series, start=1):
            path = tmp_path / f"{framework}-{topology}-{precision}/rep{rep}.jsonl"
            logs.append(
                str(
                    write_run_log(
                        path,
                        framework=framework,
                        topology=topology,
                        precision=precision,
                        data=data,
                        batch_size=batch,
                        repeat=rep,
                        throughput=value,
                    )
                )
            )
    out = tmp_path / "agg"
    out.mkdir()
    write_all(logs, [], {}, out / "records.csv", out / "summary.csv", out / "environment.json")
    matches = match_references(pd.read_csv(out / "summary.csv"))  # as the report reads it back
    by = {(m.config_id.split("/")[1], m.topology, m.label): m for m in matches.itertuples()}
    dlperf = by[("pytorch", "4x8", "NGC PyTorch (NVIDIA DLE)")]
    assert dlperf.ratio == pytest.approx(0.9) and dlperf.ratio_low < 0.9 < dlperf.ratio_high
    # a ResNet figure lacks none of BERT's settings
    assert "batch_size" in dlperf.compared_on and dlperf.not_published == "compiler"
    assert ("pytorch", "4x8", "PyTorch (pytorch/examples)") in by
    a100 = by[("pytorch", "1x1", "PyTorch (DLE 21.03)")]
    assert a100.ratio == pytest.approx(2000 / 2470) and "batch_size" in a100.not_published
    h100 = by[("pytorch", "1x1", "PyTorch (Lambda, DLE-based)")]
    assert h100.ratio == pytest.approx(2000 / 2708) and h100.ratio_low == pytest.approx(min(2000 * (1 + JITTER)) / 2800)
    tf = {label for fw, _, label in by if fw == "tensorflow"}
    assert tf == {"NGC TensorFlow 1.x (NVIDIA DLE)", "TensorFlow 2.x (TensorFlow-models)"}  # XLA rows need compiler on
    assert not any(topology == "1x2" for _, topology, _ in by)
    paddle = by[("paddle", "1x1", "PaddlePaddle (PaddleCV)")]  # DLPerf's Paddle figure beside our Paddle row
    assert paddle.ratio == pytest.approx(0.5) and {label for fw, _, label in by if fw == "paddle"} == {
        "PaddlePaddle (PaddleCV)"
    }
    assert match_references(pd.read_csv(out / "summary.csv").iloc[0:0]).empty
