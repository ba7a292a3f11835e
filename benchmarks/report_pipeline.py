"""Parse + aggregate + report of 10,000 synthetic run logs (target <= 30 s).

    .venv/bin/python benchmarks/report_pipeline.py [--runs 10000]
Baseline, in the same run: reading every line of the same logs with json.loads (the floor any parser pays).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import resultfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from dlbench.collect.aggregate import write_all  # noqa: E402
from dlbench.logformats.run_log_fixtures import write_run_log  # noqa: E402
from dlbench.report import publish_report  # noqa: E402


def make_logs(root: Path, runs: int) -> list[str]:
    paths, i = [], 0
    topologies = ["1x1", "1x8", "2x8", "4x8"]
    while len(paths) < runs:
        topo = topologies[i % 4]
        bs = 16 * (1 + (i // 4) % 50)
        prec = ("fp32", "amp")[(i // 200) % 2]
        for rep in range(1, 8):
            status = "oom" if bs > 700 else "ok"
            p = root / f"results/runs/resnet50/pytorch/{topo}/bs{bs}-{prec}-nocompile-synthetic-{i}/rep{rep}.jsonl"
            paths.append(
                str(
                    write_run_log(
                        p,
                        topology=topo,
                        batch_size=bs,
                        precision=prec,
                        repeat=rep,
                        throughput=1000.0 + rep,
                        status=status,
                        error="OOM" * (status != "ok"),
                        measured_steps=100,
                        warmup_steps=20,
                    )
                )
            )
        i += 1
    return paths[:runs]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=10_000)
    args = p.parse_args()
    record = resultfile.Recorder(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        logs = make_logs(root, args.runs)
        started = time.perf_counter()
        lines = sum(1 for path in logs for line in open(path) if json.loads(line))
        floor = time.perf_counter() - started
        out = root / "agg"
        out.mkdir()
        started = time.perf_counter()
        write_all(logs, [], {"study": "bench"}, out / "records.csv", out / "summary.csv", out / "environment.json")
        aggregated = time.perf_counter() - started
        publish_report(out / "records.csv", out / "summary.csv", out / "environment.json", root / "reports", "auto")
        total = time.perf_counter() - started
    print(f"{args.runs} logs, {lines} lines: json.loads floor {floor:.1f} s")
    print(
        f"parse+aggregate {aggregated:.1f} s, +report {total - aggregated:.1f} s, total {total:.1f} s "
        f"(target <= 30 s; {total / floor:.1f}x the floor)"
    )
    record.write(
        [
            resultfile.table(
                f"{args.runs:,} synthetic run logs, {lines:,} lines",
                ["step", "seconds"],
                [
                    ["json.loads of every line (floor)", round(floor, 1)],
                    ["parse + aggregate", round(aggregated, 1)],
                    ["report", round(total - aggregated, 1)],
                    ["parse + aggregate + report (target <= 30 s)", round(total, 1)],
                    ["× the floor", round(total / floor, 1)],
                ],
            )
        ]
    )


if __name__ == "__main__":
    main()
