"""Telemetry overhead: throughput of real harness runs with the sampler ÷ without, same machine.

Run with the core environment (it starts the harness in the PyTorch environment; target: ratio >= 0.99 at the
default 100 ms):
    .venv/bin/python benchmarks/telemetry_overhead.py [--rounds 6 --interval-ms 100 --image-size 64 --batch-size 8]
Rounds are interleaved ABBA (without, with, with, without, ...) so drift of the machine hits both alike. Also
prints the sampler's own CPU use (cores) as its records measured it.
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

from dlbench import logformats  # noqa: E402
from dlbench.harness.spec import TELEMETRY_PYTHON_ENV  # noqa: E402
from dlbench.venvs import env_prefix  # noqa: E402

# The PyTorch environment of the current envs/pytorch.yaml (older builds may sit beside it in .venvs/).
TORCH_PYTHON = env_prefix(REPO / ".venvs", REPO / "envs" / "pytorch.yaml") / "bin" / "python"


def run(python: str, log: Path, args: argparse.Namespace, interval_ms: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO / "workflow"), **{TELEMETRY_PYTHON_ENV: sys.executable})
    cmd = [python, "-m", "dlbench.harness", "--framework", "pytorch", "--model", "resnet50", "--topology", "1x1",
           "--image-size", str(args.image_size), "--batch-size", str(args.batch_size), "--device", "cpu",
           "--warmup-steps", "5", "--measured-steps", str(args.steps), "--telemetry-ms", str(interval_ms),
           "--log", str(log)]
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
    without, with_, sampler = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for i, interval in enumerate((0, args.interval_ms, args.interval_ms, 0)):
                record = run(args.python, Path(tmp, f"r{r}-{i}", "run.jsonl"), args, interval)
                (with_ if interval else without).append(record["throughput"])
                if interval:
                    sampler.append(record["sampler_cores"])
                print(f"  {'with' if interval else 'without'}: {record['throughput']:.2f} images/s, other processes "
                      f"{record['contention_cores'] if interval else float('nan'):.2f} cores", file=sys.stderr)
            print(f"round {r + 1}: without {statistics.median(without):.2f}, with {statistics.median(with_):.2f} "
                  f"images/s", file=sys.stderr)
    ratio = statistics.median(with_) / statistics.median(without)
    print(f"telemetry at {args.interval_ms} ms: with {statistics.median(with_):.2f} vs without "
          f"{statistics.median(without):.2f} images/s: ratio of medians {ratio:.3f} "
          f"(runs range {min(with_):.2f}-{max(with_):.2f} vs {min(without):.2f}-{max(without):.2f}); "
          f"sampler CPU {statistics.median(sampler):.4f} cores")


if __name__ == "__main__":
    main()
