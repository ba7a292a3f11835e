"""Two harness runs side by side, as two pytest-xdist workers start them, with OpenMP's default wait policy and
with OMP_WAIT_POLICY=PASSIVE (what tests/conftest.py sets for the suite).

    .venv/bin/python benchmarks/omp_side_by_side.py [--rounds 2]

Each round runs both policies, in ABBA order across rounds, each pair as two concurrent PyTorch BERT-Tiny runs
(1x1, 30 measured steps) on the machine's cores. The baseline is the default policy (the runtimes' own
spin-then-sleep), the A/A noise the spread of the same policy across rounds. Not a benchmark of dlbench's runs:
a benchmark run owns its cores, and the harness sets no wait policy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import resultfile

REPO = Path(__file__).resolve().parents[1]
RUN = ["--framework", "pytorch", "--model", "bert_tiny", "--topology", "1x1", "--seq-length", "64",
       "--batch-size", "8", "--warmup-steps", "2", "--measured-steps", "30", "--device", "cpu"]  # fmt: skip


def torch_python() -> Path:
    found = sorted((REPO / ".venvs").glob("pytorch-*/bin/python"))
    if not found:
        raise SystemExit("omp_side_by_side: no PyTorch environment in .venvs/ (run the tests or the workflow once)")
    return found[-1]


def pair(python: Path, policy: str | None, work: Path) -> float:
    """Wall seconds of two concurrent runs with this wait policy (None: the runtime's default)."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "workflow"))
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    started = time.perf_counter()
    runs = [
        subprocess.Popen(
            [str(python), "-m", "dlbench.harness", *RUN, "--log", str(work / f"{policy}-{i}.jsonl")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for i in range(2)
    ]
    assert all(run.wait() == 0 for run in runs)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    record = resultfile.Recorder(__file__)
    python = torch_python()
    seconds: dict[str, list[float]] = {"default": [], "PASSIVE": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = ["default", "PASSIVE"] if i % 2 == 0 else ["PASSIVE", "default"]
            for policy in order:
                seconds[policy].append(pair(python, None if policy == "default" else policy, Path(tmp)))
    default, passive = statistics.median(seconds["default"]), statistics.median(seconds["PASSIVE"])
    rows = [
        ["default (spin, then sleep)", ", ".join(f"{s:.1f}" for s in seconds["default"]), round(default, 1), 1.0],
        ["OMP_WAIT_POLICY=PASSIVE", ", ".join(f"{s:.1f}" for s in seconds["PASSIVE"]), round(passive, 1),
         round(default / passive, 2)],
    ]  # fmt: skip
    for row in rows:
        print(" | ".join(str(cell) for cell in row))
    record.write(
        [resultfile.table("Two PyTorch BERT-Tiny runs side by side (wall seconds per pair)",
                          ["wait policy", "pairs, s", "median, s", "speed-up over default"], rows)],
        notes=["A/A noise: the spread of each policy's pairs; ABBA order across rounds"],
    )  # fmt: skip


if __name__ == "__main__":
    main()
