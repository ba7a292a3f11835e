"""How often a sweep's fleet table calls a slow node slow, and a sound node slow, on repeated real runs.

    sudo PYTHONPATH=workflow .venv/bin/python benchmarks/node_verdicts.py [--runs 24] [--nodes 4] [--quota 0.85]
        [--repeats 3] [--tolerance 0.95] [--seed 1]

A fleet of `--nodes` "nodes" on this machine, each the same run of PyTorch's ResNet-tiny (build_verdicts.py's
shape: 64x64, batch 8, 5 + 30 steps, `python -m dlbench.harness` in the PyTorch environment, one fresh process a
run): the last node's runs in a cgroup whose CPU quota is `--quota` of this machine's cores (a node slowed for
real, as tests/slurm/slurm-local.sh slow-node does), the others without one. `--runs` rounds of one run per node,
in a random order per round (seeded), so the machine's drift falls on every node. The runs are then cut into
disjoint trials of `--repeats` repeats per node, and each trial judged as the report's fleet table judges
(dlbench.collect.fleet at the tolerance): detection rate = trials in which the slowed node is called slow;
false-alarm rate = (node, trial) pairs in which a sound node is called slow. Needs root (a cgroup).
Writes benchmarks/results/node_verdicts.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import resultfile
from build_verdicts import run_once

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from dlbench.collect import fleet  # noqa: E402

PERIOD_US = 10_000  # short: a run's measured window spans many periods (slurm-local.sh slow-node's)


def slow_cgroup(name: str, quota: float) -> Path:
    """A cgroup whose processes get `quota` of this machine's cores (v2 cpu.max, else v1's cfs quota)."""
    cores = os.cpu_count() or 1
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        group = Path("/sys/fs/cgroup", name)
        group.mkdir(exist_ok=True)
        (group / "cpu.max").write_text(f"{int(quota * cores * PERIOD_US)} {PERIOD_US}")
    else:
        group = Path("/sys/fs/cgroup/cpu", name)
        group.mkdir(exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(int(quota * cores * PERIOD_US)))
    return group


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=24, help="fresh-process runs per node")
    p.add_argument("--nodes", type=int, default=4, help="nodes in the fleet, the last one slowed")
    p.add_argument("--quota", type=float, default=0.85, help="the slowed node's share of this machine's cores")
    p.add_argument("--repeats", type=int, default=3, help="repeats per node in one trial (a sweep's)")
    p.add_argument("--tolerance", type=float, default=fleet.DEFAULT_TOLERANCE)
    p.add_argument("--seed", type=int, default=1, help="the order of the nodes in each round")
    p.add_argument("--python", default=next(iter(sorted(glob.glob(str(REPO / ".venvs/pytorch-*/bin/python")))), ""))
    args = p.parse_args()
    record = resultfile.Recorder(__file__)
    nodes = [f"n{i + 1}" for i in range(args.nodes)]
    slow = nodes[-1]
    group = slow_cgroup("dlbench-node-verdicts", args.quota)
    wrapper = ("sh", "-c", f'echo $$ > {group / "cgroup.procs"} && exec "$@"', "sh")
    values: dict[str, list[float]] = {n: [] for n in nodes}
    order = np.random.default_rng(args.seed)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                for node in order.permutation(nodes):
                    log = Path(tmp, f"{node}-{i}.jsonl")
                    value = run_once(args.python, log, "default", {}, wrapper if node == slow else ())
                    if value is not None:
                        values[str(node)].append(value)
                said = ", ".join(f"{n} {values[n][-1]:.1f}" for n in nodes if values[n])
                print(f"round {i + 1}/{args.runs}: {said}")
    finally:
        group.rmdir()
    trials = min(len(v) for v in values.values()) // args.repeats
    verdicts: dict[str, list[str]] = {n: [] for n in nodes}
    for t in range(trials):
        part = {n: np.array(values[n][t * args.repeats : (t + 1) * args.repeats]) for n in nodes}
        for node, ratio in fleet.node_ratios(part, 0.95).items():
            verdicts[node].append(fleet.verdict_of(ratio, len(part[node]), args.tolerance)[0])
    sound = [v for n in nodes[:-1] for v in verdicts[n]]
    effect = float(np.median(values[slow]) / np.median([x for n in nodes[:-1] for x in values[n]]))

    def spread(found: list[str]) -> str:
        return ", ".join(f"{found.count(v)} {v}" for v in dict.fromkeys(found))

    rows = [
        ["slowed node", f"{effect:.3f}", f"{verdicts[slow].count(fleet.SLOW)}/{trials}", spread(verdicts[slow])],
        ["sound nodes", "1 (by construction)", f"{sound.count(fleet.SLOW)}/{len(sound)}", spread(sound)],
    ]
    title = (
        f"PyTorch resnet_tiny 64x64 batch 8, 5 warm-up and 30 measured steps; a fleet of {args.nodes} nodes on "
        f"this machine, the last one's runs in a cgroup with {args.quota:.0%} of its cores; {args.runs} fresh runs "
        f"per node interleaved in random order; {trials} trials of {args.repeats} repeats per node at tolerance "
        f"{args.tolerance:g}"
    )
    columns = ["node", "median ÷ the sound nodes' over all runs", "called slow", "verdicts"]
    record.write(
        [resultfile.table(title, columns, rows)],
        notes=[
            "detection rate: trials in which the slowed node is called slow (the ratio's 95% bootstrap interval "
            "below the tolerance); false-alarm rate: (node, trial) pairs in which a sound node is called slow"
        ],
    )
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
