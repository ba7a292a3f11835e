"""Statistics on run records (core environment): intervals, comparisons, steady state, plausibility flags.

Reads numbers only (throughputs of repeats, step times of one run), never logs, so it serves imported external
results as well as our own. The noise model everywhere: repeats of a configuration are independent draws from
one distribution whose shape we do not know (no normality assumed); a change between two result sets is a
multiplicative shift of that distribution. Hence the median (robust to the one slow run a busy machine
produces), order-statistic and rank methods (distribution-free), and bootstrap for ratios of medians.

    median_ci(values, level)              distribution-free interval for the median, or "not enough repeats"
    ratio_ci(numerator, denominator)      bootstrap interval for median(numerator) / median(denominator)
    compare_repeats(a, b, level, tol)     B against A: ratio, interval, rank-test verdict (faster/slower/...)
    steady_state(step_times)              trend (Mann-Kendall) and warm-up-like start (MSER-5) of one run
    plausibility_flags(row)               why a configuration's median may not be a finding
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np


def _scipy_stats() -> Any:
    """scipy.stats, imported on first use: importing it takes seconds, and every Snakemake start imports this
    module (a study's imports are checked with the log formats) while only the aggregate computes with it."""
    from scipy import stats

    return stats


DEFAULT_LEVEL = 0.95
DEFAULT_RESAMPLES = 2000  # bootstrap resamples: the interval's ends move by < 0.1% of the ratio between seeds
BOOTSTRAP_SEED = 20260101  # fixed: the same records give the same intervals in every report
MIN_RATIO_REPEATS = 3  # a bootstrap of fewer repeats per side has almost no distinct resamples

# Steady state: one run is checked, but a study checks hundreds, so the thresholds are strict and a trend must
# also be large enough to matter. Chosen by simulation (tests/test_stats.py prints the rates): at 100 measured
# steps with 2% step-time noise a 3% drift is flagged in ~96% of runs, stationary noise in ~2%.
STEADY_ALPHA = 0.02  # Mann-Kendall trend, two-sided
STEADY_MIN_DRIFT = 0.015  # relative change of the step time over the measured window
WARMUP_ALPHA = 0.001  # the first steps slower than the rest, one-sided rank test
WARMUP_HEAD = (0.1, 5, 50)  # the first 10% of the measured steps, at least 5, at most 50
STEADY_MIN_STEPS = 10
STEADY_MAX_POINTS = 400  # longer series are reduced to batch means (the trend test is O(n^2))
MSER_BATCH = 5

# A spread this large means the median describes a mixture of machine states, not the configuration.
SPREAD_MAX_Q75_Q25 = 1.5
SPREAD_MAX_CV = 0.2

VERDICTS = ("faster", "slower", "no significant change", "within tolerance", "too few repeats")


# ------------------------------------------------------------------------------------------ median interval
@dataclass(frozen=True)
class MedianCI:
    """Interval [low, high] that holds the true median with probability `coverage` (>= level by construction;
    the order statistics make it a step function of n). low/high are None when n is too small for the level."""

    median: float | None
    low: float | None
    high: float | None
    level: float
    coverage: float | None
    n: int
    note: str

    @property
    def ok(self) -> bool:
        return self.low is not None


def min_repeats(level: float = DEFAULT_LEVEL) -> int:
    """Fewest repeats for which [min, max] already covers the median with probability >= level."""
    return max(1, math.ceil(math.log2(2.0 / (1.0 - level)) - 1e-12))


@lru_cache(maxsize=4096)
def order_statistic_rank(n: int, level: float) -> tuple[int, float] | None:
    """(l, coverage): the interval [x_(l), x_(n+1-l)] of the sorted sample, the narrowest symmetric one whose
    coverage 1 - 2 P(Bin(n, 1/2) <= l - 1) is >= level; None when even [min, max] falls short."""
    if n < 1:
        return None
    alpha = 1.0 - level
    k = int(_scipy_stats().binom.ppf(alpha / 2, n, 0.5))  # smallest k with cdf(k) >= alpha/2
    if _scipy_stats().binom.cdf(k, n, 0.5) > alpha / 2 + 1e-12:
        k -= 1
    if k < 0:
        return None
    rank = k + 1
    return rank, float(1.0 - 2.0 * _scipy_stats().binom.cdf(rank - 1, n, 0.5))


def median_ci(values: Iterable[float], level: float = DEFAULT_LEVEL) -> MedianCI:
    """Distribution-free (order-statistic, binomial) interval for the median of independent repeats."""
    x = np.sort(_finite(values))
    n = len(x)
    median = float(np.median(x)) if n else None
    found = order_statistic_rank(n, float(level))
    if found is None:
        need = min_repeats(level)
        return MedianCI(
            median,
            None,
            None,
            level,
            None,
            n,
            f"not enough repeats: {n} < {need} for a {level:.0%} interval of the median",
        )
    rank, coverage = found
    return MedianCI(
        median,
        float(x[rank - 1]),
        float(x[n - rank]),
        level,
        coverage,
        n,
        f"order statistics {rank} and {n + 1 - rank} of {n}: coverage {coverage:.1%}",
    )


def time_to_train_ci(times: Iterable[float], failed: int, level: float = DEFAULT_LEVEL) -> MedianCI:
    """median_ci of times to train where each failed run (not converged, crashed) counts as infinitely slow, as
    MLPerf counts it: the order statistics stay valid, so the median or the interval's ends may be inf."""
    x = np.sort(np.concatenate([_finite(times), np.full(failed, np.inf)]))
    n = len(x)
    median = float(np.median(x)) if n else None  # inf when half the runs or more failed
    found = order_statistic_rank(n, float(level))
    if found is None:
        return MedianCI(
            median,
            None,
            None,
            level,
            None,
            n,
            f"not enough repeats: {n} < {min_repeats(level)} for a {level:.0%} interval of the median",
        )
    rank, coverage = found
    return MedianCI(
        median,
        float(x[rank - 1]),
        float(x[n - rank]),
        level,
        coverage,
        n,
        f"order statistics {rank} and {n + 1 - rank} of {n} ({failed} failed = inf): coverage {coverage:.1%}",
    )


# ------------------------------------------------------------------------------------------- ratio interval
@dataclass(frozen=True)
class RatioCI:
    """median(numerator) / median(denominator) with a percentile-bootstrap interval (None: too few repeats)."""

    ratio: float | None
    low: float | None
    high: float | None
    level: float
    n_numerator: int
    n_denominator: int
    note: str

    @property
    def ok(self) -> bool:
        return self.low is not None


def bootstrap_medians(x: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `resamples` resamples of x (sorting short rows beats np.median's generality 3 to 1)."""
    n = len(x)
    rows = np.sort(x[rng.integers(0, n, size=(resamples, n))], axis=1)
    return 0.5 * (rows[:, (n - 1) // 2] + rows[:, n // 2])


def ratio_ci(
    numerator: Iterable[float],
    denominator: Iterable[float],
    level: float = DEFAULT_LEVEL,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> RatioCI:
    """Interval for a ratio of medians (speedup, efficiency, B vs A): the two sets are resampled independently,
    vectorised, with a fixed seed so a report is reproducible. Percentile interval; its coverage at 7 repeats
    per side is checked by simulation in tests/test_stats.py."""
    num, den = _finite(numerator), _finite(denominator)
    if len(num) == 0 or len(den) == 0:
        return RatioCI(None, None, None, level, len(num), len(den), "no ok runs on one side")
    ratio = float(np.median(num) / np.median(den))
    if min(len(num), len(den)) < MIN_RATIO_REPEATS:
        return RatioCI(
            ratio,
            None,
            None,
            level,
            len(num),
            len(den),
            f"not enough repeats: {len(num)} and {len(den)}, an interval needs >= {MIN_RATIO_REPEATS} each",
        )
    rng = np.random.default_rng(seed)
    ratios = bootstrap_medians(num, resamples, rng) / bootstrap_medians(den, resamples, rng)
    alpha = 1.0 - level
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    return RatioCI(
        ratio, float(low), float(high), level, len(num), len(den), f"percentile bootstrap, {resamples} resamples"
    )


# -------------------------------------------------------------------------------------------- comparison
@dataclass(frozen=True)
class Comparison:
    """B against A. ratio = median(B) / median(A) (> 1: B is faster), its bootstrap interval, and a verdict from
    a rank test (Mann-Whitney, exact for small sets) at threshold 1 - level, two-sided, against the tolerance
    band [1 - tolerance, 1 + tolerance] of ratios that do not matter."""

    ratio: float | None
    low: float | None
    high: float | None
    p_value: float | None
    verdict: str
    level: float
    tolerance: float
    n_a: int
    n_b: int
    note: str

    def columns(self) -> dict[str, Any]:
        """The comparison as a table's columns (dlbench.collect.compare's, and every table that reuses them)."""
        return {"ratio": self.ratio, "ratio_low": self.low, "ratio_high": self.high, "p_value": self.p_value} | {
            "verdict": self.verdict,
            "note": self.note,
        }


@lru_cache(maxsize=256)
def _u_null_counts(m: int, n: int) -> np.ndarray:
    """How many of the C(m+n, m) orderings of two untied sets give U = 0, 1, ..., m*n (the exact null): the
    coefficients of the Gaussian binomial [m+n choose m]_q = prod_i (1 - q^(n+i)) / (1 - q^i), as power series
    truncated after q^(mn), which is exact because the result has degree mn."""
    counts = np.zeros(m * n + 1)
    counts[0] = 1.0
    for i in range(1, m + 1):
        shift = n + i
        if shift < len(counts):
            counts[shift:] -= counts[:-shift].copy()
        for r in range(i):  # divide by (1 - q^i): a running sum along each residue class mod i
            counts[r::i] = np.cumsum(counts[r::i])
    return counts


EXACT_MAX_PAIRS = 2500  # exact null distribution up to 50 x 50 repeats; beyond, scipy's normal approximation


def _rank_test_p(x: np.ndarray, y: np.ndarray, alternative: str) -> float:
    """One-sided p-value of Mann-Whitney U (x against y; "less": x tends smaller). Exact for untied sets of
    benchmark size (the null counts are cached per pair of sizes), else scipy's tie-corrected approximation."""
    m, n = len(x), len(y)
    if m * n <= EXACT_MAX_PAIRS and len(np.unique(np.concatenate([x, y]))) == m + n:
        u = int((x[:, None] > y[None, :]).sum())
        counts = _u_null_counts(m, n)
        tail = counts[: u + 1].sum() if alternative == "less" else counts[u:].sum()
        return float(tail / counts.sum())
    return float(_scipy_stats().mannwhitneyu(x, y, alternative=alternative, method="asymptotic").pvalue)


def min_attainable_p(n_a: int, n_b: int) -> float:
    """Smallest two-sided p-value a rank test can give for these set sizes (all of B above all of A)."""
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def compare_repeats(
    a: Iterable[float],
    b: Iterable[float],
    level: float = DEFAULT_LEVEL,
    tolerance: float = 0.0,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Comparison:
    """Is B faster or slower than A (throughputs of repeats, higher = faster)?

    "slower" means: B is significantly below (1 - tolerance) x A, i.e. the rank test of log B against
    log A + log(1 - tolerance) rejects at two-sided threshold 1 - level; "faster" likewise above 1 + tolerance.
    A significant change inside the tolerance band is "within tolerance". With 3 vs 3 repeats no rank test can
    reach p < 0.05 (the smallest p is 0.1), and the verdict says so rather than pretending."""
    xa, xb = _finite(a), _finite(b)
    na, nb = len(xa), len(xb)
    ci = ratio_ci(xb, xa, level, resamples, seed)
    if na < 2 or nb < 2 or np.any(xa <= 0) or np.any(xb <= 0):
        return Comparison(
            ci.ratio,
            ci.low,
            ci.high,
            None,
            "too few repeats",
            level,
            tolerance,
            na,
            nb,
            f"{na} vs {nb} ok repeats: a comparison needs >= 2 positive values on each side",
        )
    alpha = 1.0 - level
    la, lb = np.log(xa), np.log(xb)
    p_slower = _rank_test_p(lb, la + math.log1p(-tolerance), "less")
    p_faster = _rank_test_p(lb, la + math.log1p(tolerance), "greater")
    p_value = min(1.0, 2.0 * min(p_slower, p_faster))
    if p_value < alpha:
        verdict = "slower" if p_slower < p_faster else "faster"
    elif tolerance > 0 and min(1.0, 2.0 * min(_rank_test_p(lb, la, "less"), _rank_test_p(lb, la, "greater"))) < alpha:
        verdict = "within tolerance"
    else:
        verdict = "no significant change"
    notes = [f"threshold: two-sided Mann-Whitney p < {alpha:.3g}" + (f" beyond ±{tolerance:.1%}" if tolerance else "")]
    floor = min_attainable_p(na, nb)
    if floor >= alpha:
        notes.append(f"{na} vs {nb} repeats cannot reach p < {alpha:.3g} (smallest p {floor:.3g}): add repeats")
    if not ci.ok:
        notes.append(ci.note)
    return Comparison(ci.ratio, ci.low, ci.high, p_value, verdict, level, tolerance, na, nb, "; ".join(notes))


# ------------------------------------------------------------------------------------------- steady state
@dataclass(frozen=True)
class SteadyState:
    """Whether one run's measured step times look stationary.

    statistic: Kendall's tau of step time against step index (Mann-Kendall); p_value: its two-sided p, the
    variance corrected for autocorrelation (Hamed & Rao); drift: Theil-Sen slope x window / median step time
    (+0.03 = steps 3% slower at the end than at the start); warmup_like_steps: leading steps MSER-5 would cut
    and that differ significantly from the rest. steady = no significant drift of at least STEADY_MIN_DRIFT
    and no warm-up-like start; None when the run has too few steps to tell."""

    steady: bool | None
    statistic: float | None
    p_value: float | None
    drift: float | None
    warmup_like_steps: int | None
    n: int
    note: str


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n (average ranks for ties)."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    if len(np.unique(x)) < len(x):
        return _scipy_stats().rankdata(x)
    return ranks


def _median(x: np.ndarray) -> float:
    """np.median without its generality (it runs several times for every parsed log)."""
    n = len(x)
    lower, upper = (n - 1) // 2, n // 2
    part = np.partition(x, [lower, upper])
    return 0.5 * float(part[lower] + part[upper])


def _normal_two_sided(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2.0))


@lru_cache(maxsize=64)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    i, j = np.triu_indices(n, 1)
    return i, j, (j - i).astype(float)


def mann_kendall(x: np.ndarray) -> tuple[float, float, float]:
    """(tau, two-sided p, Theil-Sen slope) of a series against its index. The variance of S is inflated by the
    significant rank autocorrelations of the detrended series (Hamed & Rao 1998), so a run whose step times
    wander slowly (clock boost, a neighbour process) is not mistaken for a trend as easily."""
    n = len(x)
    i, j, gap = _pairs(n)
    diff = x[j] - x[i]
    s = float(np.sign(diff).sum())
    _, ties = np.unique(x, return_counts=True)
    var = (n * (n - 1) * (2 * n + 5) - float((ties * (ties - 1) * (2 * ties + 5)).sum())) / 18.0
    slope = _median(diff / gap)
    if var <= 0:
        return 0.0, 1.0, slope
    ranks = _ranks(x - slope * np.arange(n))
    ranks -= ranks.mean()
    denominator = float(ranks @ ranks)
    factor = 1.0
    if denominator > 0:
        lags = np.arange(1, max(1, n // 4) + 1)
        rho = np.correlate(ranks, ranks, mode="full")[n : n + len(lags)] / denominator
        keep = np.abs(rho) > 1.96 / math.sqrt(n)
        k = lags[keep]
        factor += float((2.0 * (n - k) * (n - k - 1) * (n - k - 2) * rho[keep]).sum()) / (n * (n - 1) * (n - 2))
    z = (s - math.copysign(1.0, s)) / math.sqrt(var * max(factor, 1.0)) if s else 0.0
    return s / (n * (n - 1) / 2), _normal_two_sided(z), slope


def mser_truncation(x: np.ndarray, batch: int = MSER_BATCH) -> int:
    """MSER-5 (White 1997): the number of leading steps whose removal minimises the squared standard error of
    the remaining batch means; searched over the first half only (its known end effect)."""
    m = len(x) // batch
    if m < 4:
        return 0
    y = x[: m * batch].reshape(m, batch).mean(axis=1)
    suffix = np.cumsum(y[::-1])[::-1]
    suffix_sq = np.cumsum((y * y)[::-1])[::-1]
    count = m - np.arange(m)
    mser = (suffix_sq - suffix * suffix / count) / count**2
    return int(np.argmin(mser[: m // 2 + 1])) * batch


def warmup_like(x: np.ndarray, alpha: float = WARMUP_ALPHA, min_drift: float = STEADY_MIN_DRIFT) -> int:
    """Leading measured steps that still look like warm-up: the head (WARMUP_HEAD) is slower than the rest by
    >= min_drift and a one-sided rank test agrees at alpha. Counted by MSER-5 (White 1997: the cut that
    minimises the standard error of the remaining batch means), or the head's length where MSER-5 cuts none.
    Only slower: on a GPU the first measured steps may look fast while the host fills the launch queue."""
    fraction, least, most = WARMUP_HEAD
    head_len = min(max(least, int(len(x) * fraction)), most)
    head, tail = x[:head_len], x[head_len:]
    if len(tail) < head_len or _median(head) < (1.0 + min_drift) * _median(tail):
        return 0
    if _rank_test_p(head, tail, "greater") >= alpha:
        return 0
    return mser_truncation(x) or head_len


def steady_state(
    step_times: Sequence[float], alpha: float = STEADY_ALPHA, min_drift: float = STEADY_MIN_DRIFT
) -> SteadyState:
    """Check one run's measured step times for a trend and a warm-up-like start (see SteadyState).

    Rank methods: a measured step that absorbs a device sync, or one garbage-collection pause, barely moves them."""
    x = _finite(step_times)
    n = len(x)
    if n < STEADY_MIN_STEPS:
        return SteadyState(
            None, None, None, None, None, n, f"{n} measured steps: too few to judge (< {STEADY_MIN_STEPS})"
        )
    series, notes = x, []
    if n > STEADY_MAX_POINTS:
        size = math.ceil(n / STEADY_MAX_POINTS)
        m = n // size
        series = x[: m * size].reshape(m, size).mean(axis=1)
        notes.append(f"trend on means of {size} steps")
    tau, p, slope = mann_kendall(series)
    centre = _median(series)
    drift = slope * (len(series) - 1) / centre if centre > 0 else 0.0
    trend = p < alpha and abs(drift) >= min_drift
    warm = warmup_like(x, min_drift=min_drift)
    if trend:
        notes.append(f"step time drifts {drift:+.1%} over the measured steps (p={p:.2g})")
    if warm:
        notes.append(f"the first {warm} measured steps are slower than the rest: warm-up-like")
    return SteadyState(not trend and not warm, tau, p, drift, warm, n, "; ".join(notes))


# ---------------------------------------------------------------------------------------- plausibility
@dataclass(frozen=True)
class Flag:
    """A reason the number may not be a finding, with its likely cause (no ';' in the text: they are joined)."""

    code: str
    text: str

    def __str__(self) -> str:
        return f"{self.code}: {self.text}"


def _number(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    if value is None or isinstance(value, str):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def plausibility_flags(row: Mapping[str, Any]) -> list[Flag]:
    """Flags for one summary row (keys as in aggregate.SUMMARY_COLUMNS; missing keys are skipped)."""
    out = []
    n_ok = int(_number(row, "n_ok") or 0)
    median, q25, q75, cv = (_number(row, k) for k in ("median", "q25", "q75", "cv"))
    if n_ok and median is not None:
        if n_ok < min_repeats(_number(row, "ci_level") or DEFAULT_LEVEL):
            out.append(
                Flag(
                    "few_repeats",
                    f"{n_ok} ok repeats: too few for an interval of the median, "
                    "add repeats before reading differences of a few percent",
                )
            )
        ratio = q75 / q25 if q25 and q75 else None
        if (ratio is not None and ratio > SPREAD_MAX_Q75_Q25) or (cv is not None and cv > SPREAD_MAX_CV):
            out.append(
                Flag(
                    "wide_spread",
                    f"repeats spread too far for the median to be a finding "
                    f"(q75/q25 {ratio or float('nan'):.2f}, CV {cv or 0:.0%}): another "
                    "process on the machine, throttling, or runs on different hosts",
                )
            )
    efficiency, low = _number(row, "efficiency"), _number(row, "efficiency_low")
    if efficiency is not None and efficiency > 1.0 and (low is None or low > 1.0):
        basis = f"interval {low:.2f}-{_number(row, 'efficiency_high'):.2f}" if low is not None else "no interval"
        out.append(
            Flag(
                "superlinear",
                f"scaling efficiency {efficiency:.2f} > 1 ({basis}): more than the "
                "devices allow at a fixed batch per device. Was the 1x1 baseline slowed "
                "(another process, a cold cache) or are the ranks' samples miscounted?",
            )
        )
    nonsteady, steady = int(_number(row, "nonsteady_runs") or 0), int(_number(row, "steady_runs") or 0)
    checked = nonsteady + steady
    if nonsteady and nonsteady >= max(1, math.ceil(0.25 * checked)):
        out.append(
            Flag(
                "not_steady",
                f"{nonsteady} of {checked} runs drift or start slow during the measured "
                "steps: warm-up too short (raise warmup_steps or use auto), thermal "
                "throttling, or another process",
            )
        )
    unstable = int(_number(row, "warmup_unstable_runs") or 0)
    if unstable:
        out.append(
            Flag(
                "warmup_unstable",
                f"{unstable} of {n_ok} runs stopped warming up at max_warmup_steps, "
                "their step times not settled: raise max_warmup_steps, or look for "
                "another process on the machine",
            )
        )
    contended = int(_number(row, "contended_runs") or 0)
    if contended:  # dlbench.telemetry: other processes used CPU during the measured window
        most = _number(row, "contention_cores") or 0.0
        out.append(
            Flag(
                "contention",
                f"{contended} of {n_ok} runs shared the machine with other processes "
                f"(up to {most:.2f} cores on average in the measured window): keep the "
                "machine quiet (docs/telemetry.md) and rerun",
            )
        )
    throttled = int(_number(row, "throttled_runs") or 0)
    if throttled:
        out.append(
            Flag(
                "throttled",
                f"{throttled} of {n_ok} runs had a GPU slowed by a power or thermal limit "
                "during the measured window (NVML clock-event reasons)",
            )
        )
    return out


def format_flags(flags: Iterable[Flag]) -> str:
    return "; ".join(map(str, flags))


def _finite(values: Iterable[float]) -> np.ndarray:
    x = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    return x[np.isfinite(x)]
