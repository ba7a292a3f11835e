"""Compare two 10,000-run result sets with `python -m dlbench.collect.compare`'s code path (target <= 30 s).

    .venv/bin/python benchmarks/compare_sets.py [--runs 10000] [--resamples 2000]
Both sets are records.csv files: ~1,430 configurations x 7 repeats at 2% noise; in B every 10th configuration is
5% slower. Timed: reading both files, the rank test and the bootstrap interval (2,000 resamples) of every
configuration, the table. Baseline, in the same run: reading the same files and a pandas group-by median ratio
per configuration (what a comparison without any statistics costs).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import resultfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from dlbench.collect import compare  # noqa: E402
from dlbench.vocabulary.identity import config_id  # noqa: E402

REPEATS = 7


def configurations(runs: int) -> list[dict]:
    out = []
    for i in range(runs // REPEATS + 1):
        axes = {
            "framework": ("pytorch", "tensorflow", "mxnet")[i % 3],
            "model": "resnet50",
            "topology": ("1x1", "1x8", "2x8", "4x8")[(i // 3) % 4],
            "batch_size": 16 * (1 + i // 24),
            "precision": ("fp32", "amp")[(i // 12) % 2],
            "compiler": False,
            "data": "synthetic",
            "image_size": 224,
        }
        out.append({**axes, "config_id": config_id(axes)})
    return out


def write_set(path: Path, configs: list[dict], runs: int, seed: int, slower_every: int = 0) -> None:
    rng = np.random.default_rng(seed)
    rows = []
    for i, c in enumerate(configs):
        level = 1000.0 * (1 + i % 7) * (0.95 if slower_every and i % slower_every == 0 else 1.0)
        for rep, value in enumerate(level * (1 + 0.02 * rng.standard_normal(REPEATS)), start=1):
            rows.append(
                {
                    **c,
                    "run_id": f"{c['config_id']}/rep{rep}",
                    "repeat": rep,
                    "status": "ok",
                    "throughput": value,
                    "unit": "images/s",
                }
            )
    pd.DataFrame(rows[:runs]).to_csv(path, index=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--resamples", type=int, default=compare.stats.DEFAULT_RESAMPLES)
    args = p.parse_args()
    record = resultfile.Recorder(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "a.csv"), Path(tmp, "b.csv")
        configs = configurations(args.runs)
        write_set(a, configs, args.runs, seed=1)
        write_set(b, configs, args.runs, seed=2, slower_every=10)

        started = time.perf_counter()
        ra, rb = pd.read_csv(a), pd.read_csv(b)
        ok = lambda r: r[r["status"] == "ok"].groupby("config_id", sort=False)["throughput"].median()  # noqa: E731
        plain = (ok(rb) / ok(ra)).dropna()
        baseline = time.perf_counter() - started

        started = time.perf_counter()
        result = compare.compare(
            compare.load_records(a), compare.load_records(b), tolerance=0.0, resamples=args.resamples
        )
        with contextlib.redirect_stdout(io.StringIO()):
            print(compare.format_table(result))
        elapsed = time.perf_counter() - started

    n_configs = int((result["present"] == "both").sum())
    injected = set(c["config_id"] for i, c in enumerate(configs) if i % 10 == 0) & set(result["config_id"])
    found = set(result.loc[result["verdict"] == "slower", "config_id"])
    print(f"runs per set: {args.runs:,}, configurations compared: {n_configs:,}, bootstrap resamples: {args.resamples}")
    print(
        f"compare (read both sets, rank test + bootstrap interval per configuration, table): {elapsed:.2f} s "
        f"({elapsed / n_configs * 1e3:.2f} ms per configuration)"
    )
    print(
        f"baseline (read both sets, group-by median ratio, no statistics): {baseline:.2f} s "
        f"({len(plain):,} ratios) -> {elapsed / baseline:.1f}x the baseline"
    )
    print(
        f"injected 5% slowdowns called slower: {len(found & injected)}/{len(injected)}; "
        f"other configurations called slower: {len(found - injected)}/{n_configs - len(injected)}"
    )
    print("target <= 30 s: " + ("met" if elapsed <= 30 else "MISSED"))
    record.write(
        [
            resultfile.table(
                f"two sets of {args.runs:,} runs, {n_configs:,} configurations, "
                f"{args.resamples} bootstrap resamples each",
                ["figure", "value"],
                [
                    [
                        "compare: read, rank test + bootstrap interval per configuration, table (s; target <= 30)",
                        round(elapsed, 2),
                    ],
                    ["ms per configuration", round(elapsed / n_configs * 1e3, 2)],
                    ["baseline: read + group-by median ratio, no statistics (s)", round(baseline, 2)],
                    ["injected 5% slowdowns called slower", f"{len(found & injected)}/{len(injected)}"],
                    ["other configurations called slower", f"{len(found - injected)}/{n_configs - len(injected)}"],
                ],
            )
        ]
    )


if __name__ == "__main__":
    main()
