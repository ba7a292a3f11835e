"""The per-round distribution of an interleaved benchmark, and whether it is bimodal (standard library only).

A median over rounds hides two modes: with 6 rounds, 4 fast and 2 slow give the fast figure, 3 and 3 any figure
in between. So rounds are split at their widest gap; two groups, each at least a quarter of the rounds (and two),
whose levels are at least BIMODAL_GAP apart with an empty band of at least half that between them, are two
modes. A lone round or two far off is an outlier, which the median already ignores; 12 rounds spread evenly
over 30% always have some widest gap, but no empty band.

What decides a comparison is its per-round *ratios* (`ratio_verdict`): when the machine itself switches between
levels (this VM does, for tens of seconds), both loops of a round pair see the same level and the ratio stays
put, while a mode of one loop alone (TensorFlow's `fit` teardown, benchmarks/keras_fit.py) splits the ratios too. So the
benchmarks report a comparison as UNSTABLE when its ratios are bimodal, and print each loop's own modes as the
machine's levels.
"""

from __future__ import annotations

import itertools
import random
import statistics
from collections.abc import Callable

BIMODAL_GAP = 0.20  # a machine's round-to-round noise here is ~±5%; two levels 20% apart are not that noise


def interleaved(rounds: int, *loops: Callable[[], float], warmup: int = 0) -> list[list[float]]:
    """Each loop's rounds, interleaved: round i runs the loops in the i-th of their orders, cycling through every
    order (ABBA for two loops; for three ABC, ACB, BAC, BCA, CAB, CBA), so that drift of the machine hits every
    loop alike and no loop always holds one place in a round or follows one other loop (ABCCBA kept the second
    loop in the middle, never after itself). Rounds in a multiple of the orders' count balance it exactly.
    `warmup` untimed rounds of each first: all loops start the timed rounds equally warm."""
    for _ in range(warmup):
        for run in loops:
            run()
    values: list[list[float]] = [[] for _ in loops]
    orders = list(itertools.permutations(range(len(loops))))
    for i in range(rounds):
        for index in orders[i % len(orders)]:
            values[index].append(loops[index]())
    return values


def modes(values: list[float], gap: float = BIMODAL_GAP) -> tuple[list[float], list[float]] | None:
    """The two groups (low, high) when `values` fall into two levels, else None."""
    ordered = sorted(values)
    if len(ordered) < 4:
        return None
    widest = max(range(1, len(ordered)), key=lambda i: ordered[i] / ordered[i - 1])
    low, high = ordered[:widest], ordered[widest:]
    least = max(2, -(-len(ordered) // 4))  # a quarter of the rounds, rounded up
    if len(low) < least or len(high) < least or statistics.median(high) < (1 + gap) * statistics.median(low):
        return None
    if ordered[widest] < (1 + gap / 2) * ordered[widest - 1]:  # no empty band between them: one broad spread
        return None
    return low, high


def describe(values: list[float]) -> str:
    """min–max and, when bimodal, the two levels: `12.3–15.1` or `BIMODAL 3× ~12.3, 3× ~24.9`."""
    split = modes(values)
    spread = f"{min(values):.3g}–{max(values):.3g}"
    if split is None:
        return spread
    low, high = split
    return f"BIMODAL {len(low)}× ~{statistics.median(low):.3g}, {len(high)}× ~{statistics.median(high):.3g} ({spread})"


def median_interval(values: list[float], level: float = 0.95, resamples: int = 2000) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of `values` (fixed seed: a rerun on the same rounds prints the
    same interval). For per-round ratios: what the rounds' noise allows the run's ratio to be."""
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1 - level) / 2
    return medians[int(tail * resamples)], medians[min(resamples - 1, int((1 - tail) * resamples))]


def ratio_verdict(ratios: list[float], target: float) -> str:
    """`median of per-round ratios 1.012 [0.981–1.043] (at target >= 1.00)`: the paired statistic of an
    interleaved comparison (each round's two loops ran back to back, so the machine's drift cancels in it)."""
    median = statistics.median(ratios)
    low, high = median_interval(ratios)
    return (
        f"median of per-round ratios {median:.3f} [{low:.3f}–{high:.3f}] "
        f"({'at' if median >= target else 'below'} target >= {target:.2f})"
    )


def summary(name: str, values: list[float]) -> dict:
    """A loop's rounds: median, spread, the rounds themselves and the bimodality verdict."""
    return {
        "name": name,
        "median": statistics.median(values),
        "spread": describe(values),
        "bimodal": modes(values) is not None,
        "rounds": [round(v, 3) for v in values],
    }


def per_round(values: list[float], baseline: list[float]) -> list[float]:
    """Each round's value ÷ the baseline's of the same round."""
    return [v / b for v, b in zip(values, baseline, strict=True)]


def paired(
    baseline_name: str, baseline: list[float], name: str, values: list[float], target: float
) -> tuple[list[dict], str]:
    """The three summaries of an interleaved comparison (baseline, candidate, per-round candidate ÷ baseline) and its
    verdict: the ratio with its interval, or UNSTABLE when the per-round ratios are bimodal."""
    ratios = per_round(values, baseline)
    loops = [summary(baseline_name, baseline), summary(name, values), summary(f"{name} ÷ {baseline_name}", ratios)]
    verdict = (
        "UNSTABLE: per-round ratios bimodal, no comparison" if loops[2]["bimodal"] else ratio_verdict(ratios, target)
    )
    return loops, verdict


def parity(
    baseline_name: str, baseline: list[float], name: str, values: list[float], again: list[float], target: float
) -> tuple[list[dict], str, dict]:
    """A comparison beside its noise floor: `again` is a second baseline loop interleaved with the two (A/A), so
    baseline-again ÷ baseline shows what identical loops read in this sitting. Meets the target when the median of
    per-round candidate ÷ baseline is at least `target` and no lower than the A/A ratios' interval (a reading
    inside the noise floor is no evidence of a bias, one below it is). Returns the five summaries (baseline,
    candidate, A/A loop, the two ratios), the verdict, and its figures."""
    ratios, same = per_round(values, baseline), per_round(again, baseline)
    loops = [
        summary(baseline_name, baseline),
        summary(name, values),
        summary(f"{baseline_name} (A/A)", again),
        summary(f"{name} ÷ {baseline_name}", ratios),
        summary(f"A/A: {baseline_name} ÷ {baseline_name}", same),
    ]
    median, (low, high) = statistics.median(ratios), median_interval(ratios)
    aa_median, (aa_low, aa_high) = statistics.median(same), median_interval(same)
    figures = {
        "ratio": median,
        "interval": [low, high],
        "aa_ratio": aa_median,
        "aa_interval": [aa_low, aa_high],
        "met": median >= target and median >= aa_low and not loops[3]["bimodal"],
    }
    reading = (
        f"{name} ÷ {baseline_name} {median:.3f} [{low:.3f}–{high:.3f}], "
        f"A/A {aa_median:.3f} [{aa_low:.3f}–{aa_high:.3f}]"
    )
    if loops[3]["bimodal"] or loops[4]["bimodal"]:
        verdict = f"UNSTABLE: per-round ratios bimodal, no comparison ({reading})"
    elif figures["met"]:
        verdict = f"{reading}: at target (median >= {target:g} and >= the A/A interval's low end)"
    elif median >= aa_low:
        verdict = f"{reading}: below target >= {target:g}, within the noise floor (A/A interval)"
    else:
        verdict = (
            f"{reading}: below target >= {target:g} and below the noise floor: a bias of {1 - median / aa_median:.1%}"
        )
    return loops, verdict, figures


def columns(first: str, unit: str) -> list[str]:
    """The header of a results table of summaries (`row`): `first` names the loops, `unit` their medians'."""
    return [first, f"median ({unit}; ratio)", "rounds (min–max, modes)", "per round"]


def row(loop: dict) -> list:
    """A summary as a results-table row: name, median, spread (modes flagged), every round."""
    return [loop["name"], round(loop["median"], 3), loop["spread"], " ".join(f"{v:.3g}" for v in loop["rounds"])]


def line(loop: dict, width: int = 20) -> str:
    """A summary as a printed line: name, median, spread and every round."""
    return (
        f"{loop['name']:{width}s} median {loop['median']:8.3f}  rounds {loop['spread']}: "
        f"{', '.join(f'{v:.3f}' for v in loop['rounds'])}"
    )
