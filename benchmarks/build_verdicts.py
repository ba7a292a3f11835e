"""How often the report's build comparison calls a planted slowdown slower, and an identical build different.

    PYTHONPATH=workflow .venv/bin/python benchmarks/build_verdicts.py [--runs 40] [--repeats 4] [--seed 1]
        [--variables ONEDNN_MAX_CPU_ISA=SSE41 ATEN_CPU_CAPABILITY=default]

Three builds of PyTorch's ResNet-tiny in the case's shape (.test/config_builds: 64x64, batch 8, 5 + 30 steps; one
rank, as the workflow runs it: `python -m dlbench.harness` in the PyTorch environment): `default`, `same` (the
identical software: an A/A pair) and `slow` (the same software with the given variables set, the planted
slowdown; by default the case's, oneDNN and ATen at their baseline instruction sets). `--runs` rounds of one
fresh-process run of each, in a random order per round (seeded): the machine's drift falls on all three, and no
build always runs after another (in a fixed order default, same, slow, `same` read 7% below `default` over 20
rounds on a 2-core VM: a position effect). The runs are then cut into disjoint trials of `--repeats` repeats per
build, and each trial compared as the report compares builds (dlbench.collect.builds:
dlbench.collect.stats.compare_repeats at 95%): detection rate = trials in which `slow` is called slower than
`default`; false-alarm rate = trials in which `same` is called slower or faster.
Writes benchmarks/results/build_verdicts.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import resultfile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from dlbench.collect import stats  # noqa: E402

BUILDS = ("default", "same", "slow")


def run_once(
    python: str, log: Path, build: str, variables: dict[str, str], wrapper: tuple[str, ...] = ()
) -> float | None:
    """One run as the workflow starts it (under `wrapper`, a command that execs the rest); its throughput (None:
    it failed)."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "workflow"), **(variables if build == "slow" else {}))
    command = [*wrapper, python, "-m", "dlbench.harness", "--framework", "pytorch", "--model", "resnet_tiny"]
    command += ["--topology", "1x1", "--batch-size", "8", "--image-size", "64", "--device", "cpu"]
    command += ["--warmup-steps", "5", "--measured-steps", "30", "--log", str(log), "--build", build]
    subprocess.run(command, env=env, capture_output=True, check=False, timeout=600)
    for line in reversed(log.read_text().splitlines() if log.exists() else []):
        entry = json.loads(line)
        if entry.get("type") == "summary":
            return entry.get("throughput") if entry.get("status") == "ok" else None
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=40, help="fresh-process runs per build")
    p.add_argument("--repeats", type=int, default=4, help="repeats per build in one trial")
    p.add_argument("--seed", type=int, default=1, help="the order of the three builds in each round")
    p.add_argument("--variables", nargs="*", default=["ONEDNN_MAX_CPU_ISA=SSE41", "ATEN_CPU_CAPABILITY=default"])
    p.add_argument("--python", default=next(iter(sorted(glob.glob(str(REPO / ".venvs/pytorch-*/bin/python")))), ""))
    args = p.parse_args()
    record = resultfile.Recorder(__file__)
    variables = dict(v.split("=", 1) for v in args.variables)
    values: dict[str, list[float]] = {b: [] for b in BUILDS}
    order = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for build in order.permutation(BUILDS):  # a fixed order would put a position effect on one build
                value = run_once(args.python, Path(tmp, f"{build}-{i}.jsonl"), str(build), variables)
                if value is not None:
                    values[str(build)].append(value)
            print(f"run {i + 1}/{args.runs}: " + ", ".join(f"{b} {values[b][-1]:.1f}" for b in BUILDS if values[b]))
    trials = min(len(v) for v in values.values()) // args.repeats
    verdicts: dict[str, list[str]] = {"slow": [], "same": []}
    for t in range(trials):
        part = {b: np.array(values[b][t * args.repeats : (t + 1) * args.repeats]) for b in BUILDS}
        for build in verdicts:
            verdicts[build].append(stats.compare_repeats(part["default"], part[build]).verdict)
    effect = stats.ratio_ci(values["slow"], values["default"])
    aa = stats.ratio_ci(values["same"], values["default"])
    detected = sum(v == "slower" for v in verdicts["slow"])
    alarms = sum(v in ("slower", "faster") for v in verdicts["same"])
    rows = [
        ["slow ÷ default", f"{effect.ratio:.3f} [{effect.low:.3f}–{effect.high:.3f}]", f"{detected}/{trials}"]
        + [", ".join(f"{verdicts['slow'].count(v)} {v}" for v in stats.VERDICTS if verdicts["slow"].count(v))],
        ["same ÷ default (A/A)", f"{aa.ratio:.3f} [{aa.low:.3f}–{aa.high:.3f}]", f"{alarms}/{trials}"]
        + [", ".join(f"{verdicts['same'].count(v)} {v}" for v in stats.VERDICTS if verdicts["same"].count(v))],
    ]
    title = (
        f"PyTorch resnet_tiny 64x64 batch 8, 5 warm-up and 30 measured steps, {args.runs} fresh runs per build "
        f"interleaved in random order, {trials} trials of "
        f"{args.repeats} vs {args.repeats} repeats; slow sets {' '.join(args.variables)}"
    )
    columns = ["pair", "ratio over all runs [95%]", "called (slower / slower or faster)", "verdicts"]
    record.write(
        [resultfile.table(title, columns, rows)],
        notes=[
            "detection rate: trials in which the planted slowdown is called slower (exact rank test, p < 0.05); "
            "false-alarm rate: trials in which the identical build is called slower or faster",
        ],
    )
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
