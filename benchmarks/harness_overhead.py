"""Harness overhead: harness throughput / a bare training loop of the same model and step, same process.

Run with the PyTorch environment's interpreter (target: ratio >= 0.98):
    PYTHONPATH=workflow .venvs/pytorch-*/bin/python benchmarks/harness_overhead.py [--image-size 64 --batch-size 8]
The two are interleaved (bare, harness, bare, ...) so drift of the machine hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from dlbench.harness import rank
from dlbench.harness.backends.pytorch.backend import Backend
from dlbench.harness.spec import RunSpec


def bare_loop(backend: Backend, steps: int) -> float:
    """The plain loop a user would write: the same step, timed around the whole loop."""
    backend.sync()
    start = time.perf_counter()
    for _ in range(steps):
        backend.step()
    backend.sync()
    return backend.spec.batch_size * steps / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=12)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec = RunSpec(framework="pytorch", model="resnet50", nodes=1, devices_per_node=1,
                       batch_size=args.batch_size, precision="fp32", compiler=False, data="synthetic",
                       image_size=args.image_size, warmup_steps=0, measured_steps=args.steps, repeat=1,
                       config_id="bench", log=str(Path(tmp) / "run.jsonl"))
        backend = Backend(spec, rank=0, world=1, local_rank=0, threads=len(rank.pin_cores()))
        backend.setup()
        backend.setup = lambda: None  # one model for both loops: rank.run must not rebuild it
        for _ in range(5):  # warm-up shared by both
            backend.step()
        bare, harness = [], []
        for i in range(args.rounds):
            order = ("bare", "harness") if i % 2 == 0 else ("harness", "bare")  # no order bias
            for which in order:
                if which == "bare":
                    bare.append(bare_loop(backend, args.steps))
                else:
                    harness.append(rank.run(spec, backend, 0, 1, Path(spec.log))["throughput"])
                    Path(spec.log).unlink()
    ratios = [h / b for h, b in zip(harness, bare, strict=True)]
    print(f"bare loop   : {statistics.median(bare):8.2f} images/s (median of {args.rounds})")
    print(f"harness     : {statistics.median(harness):8.2f} images/s")
    rounds = ", ".join(f"{r:.3f}" for r in ratios)
    print(f"ratio of medians harness/bare: {statistics.median(harness) / statistics.median(bare):.3f}"
          f" (target >= 0.98); median of per-round ratios {statistics.median(ratios):.3f} (rounds: {rounds})")


if __name__ == "__main__":
    main()
