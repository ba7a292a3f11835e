"""Harness overhead: harness throughput / a bare training loop of the same model and step, same process.

Run with the PyTorch environment's interpreter (target: ratio >= 0.98):
    PYTHONPATH=workflow .venvs/pytorch-*/bin/python benchmarks/harness_overhead.py [--image-size 64 --batch-size 8]
The two are interleaved ABBA so drift of the machine hits both alike; prints each loop's per-round distribution
(flagging two modes) and writes benchmarks/results/harness_overhead.json (figures.py puts it in the docs).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import resultfile
import rounds

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
    p.add_argument("--steps", type=int, default=10)  # short rounds, many: as frameworks.py
    p.add_argument("--rounds", type=int, default=16)
    args = p.parse_args()
    record = resultfile.Recorder(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        spec = RunSpec.of(
            framework="pytorch",
            model="resnet50",
            nodes=1,
            devices_per_node=1,
            batch_size=args.batch_size,
            precision="fp32",
            compiler=False,
            data="synthetic",
            image_size=args.image_size,
            warmup_steps=0,
            measured_steps=args.steps,
            repeat=1,
            config_id="bench",
            log=str(Path(tmp) / "run.jsonl"),
        )
        backend = Backend(spec, rank=0, world=1, local_rank=0, threads=len(rank.pin_cores()))
        backend.setup()
        backend.setup = lambda: None  # one model for both loops: rank.run must not rebuild it
        for _ in range(5):  # warm-up shared by both
            backend.step()

        def harness() -> float:
            throughput = rank.run(spec, backend, 0, 1, Path(spec.log))["throughput"]
            Path(spec.log).unlink()
            return throughput

        bare, harnessed = rounds.interleaved(args.rounds, lambda: bare_loop(backend, args.steps), harness)
        settings = backend.settings_in_effect()["summary"]
    loops, verdict = rounds.paired("bare loop", bare, "harness", harnessed, 0.98)
    verdict += f"; ratio of medians {loops[1]['median'] / loops[0]['median']:.3f}"
    title = (
        f"PyTorch ResNet-50 {args.image_size}x{args.image_size} batch {args.batch_size} fp32, "
        f"{args.rounds} rounds × {args.steps} steps ABBA, one process, one model"
    )
    print(title)
    for loop in loops:
        print(f"  {rounds.line(loop)}")
    print(f"  {verdict}\n  settings: {settings}")
    record.write(
        [resultfile.table(title, rounds.columns("loop", "images/s"), [rounds.row(loop) for loop in loops])],
        notes=[verdict, f"PyTorch settings: {settings}"],
    )


if __name__ == "__main__":
    main()
