"""Telemetry overhead: throughput of real harness runs with the sampler ÷ without, same machine.

Run with the core environment (it starts the harness in the PyTorch environment; target: ratio >= 0.99 at the
default 100 ms):
    .venv/bin/python benchmarks/telemetry_overhead.py [--rounds 6 --interval-ms 100 --image-size 64 --batch-size 8]
Rounds are interleaved ABBA (without, with, with, without, ...) after one untimed run, so drift of the machine
hits both alike; each round's ratio is the mean of its two runs with ÷ the mean of its two without, and the
verdict is the median of those ratios with its interval (rounds.py; UNSTABLE when they are bimodal). Also reports
the sampler's own CPU use (cores) and other processes' CPU during the runs, as its records measured them. Writes
benchmarks/results/telemetry_overhead.json (figures.py renders it into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
import resultfile  # noqa: E402 - benchmarks/, next to this script
import rounds  # noqa: E402

from dlbench import logformats  # noqa: E402
from dlbench.harness.spec import TELEMETRY_PYTHON_ENV  # noqa: E402
from dlbench.venvs import env_prefix  # noqa: E402

# The PyTorch environment of the current envs/pytorch.yaml (older builds may sit beside it in .venvs/).
TORCH_PYTHON = env_prefix(REPO / ".venvs", REPO / "envs" / "pytorch.yaml") / "bin" / "python"


def run(python: str, log: Path, args: argparse.Namespace, interval_ms: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO / "workflow"), **{TELEMETRY_PYTHON_ENV: sys.executable})
    cmd = [
        python,
        "-m",
        "dlbench.harness",
        "--framework",
        "pytorch",
        "--model",
        "resnet50",
        "--topology",
        "1x1",
        "--image-size",
        str(args.image_size),
        "--batch-size",
        str(args.batch_size),
        "--device",
        "cpu",
        "--warmup-steps",
        "5",
        "--measured-steps",
        str(args.steps),
        "--telemetry-ms",
        str(interval_ms),
        "--log",
        str(log),
    ]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return logformats.parse(log)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--python", default=str(TORCH_PYTHON))
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=6, help="ABBA blocks (each: 2 runs with, 2 without)")
    p.add_argument("--interval-ms", type=int, default=100)
    args = p.parse_args()
    record = resultfile.Recorder(__file__)
    without: list[float] = []  # per round: the mean of its two runs
    with_: list[float] = []
    sampler: list[float] = []
    contention: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        run(args.python, Path(tmp, "warm-up", "run.jsonl"), args, 0)  # untimed: the first run pays for cold caches
        for r in range(args.rounds):
            runs: dict[bool, list[float]] = {False: [], True: []}
            for i, interval in enumerate((0, args.interval_ms, args.interval_ms, 0)):
                got = run(args.python, Path(tmp, f"r{r}-{i}", "run.jsonl"), args, interval)
                runs[bool(interval)].append(got["throughput"])
                if interval:
                    sampler.append(got["sampler_cores"])
                    contention.append(got["contention_cores"])
            without.append(statistics.fmean(runs[False]))
            with_.append(statistics.fmean(runs[True]))
            print(f"round {r + 1}: without {without[-1]:.2f}, with {with_[-1]:.2f} images/s", file=sys.stderr)
    loops, verdict = rounds.paired("without", without, "with sampler", with_, 0.99)
    title = (
        f"PyTorch ResNet-50 {args.image_size}x{args.image_size} batch {args.batch_size}, {args.steps} measured "
        f"steps; {args.rounds} ABBA rounds of separate harness runs, the sampler at {args.interval_ms} ms"
    )
    print(title)
    for loop in loops:
        print(f"  {rounds.line(loop, 25)}")
    own = [
        ["sampler's own CPU (cores, median of its runs)", round(statistics.median(sampler), 4)],
        ["other processes' CPU during the runs (cores, min–max)", f"{min(contention):.2f}–{max(contention):.2f}"],
    ]
    for label, value in own:
        print(f"  {label}: {value}")
    print(f"  {verdict}")
    record.write(
        [
            resultfile.table(title, rounds.columns("runs", "images/s"), [rounds.row(loop) for loop in loops]),
            resultfile.table("the sampler itself, from its records", ["figure", "value"], own),
        ],
        notes=[f"telemetry at {args.interval_ms} ms: {verdict}"],
    )


if __name__ == "__main__":
    main()
