"""Time-to-quality overhead: what the time-to-quality mode costs beside training, same machine, same configuration.

Run with the core environment (it starts the harness in the framework's environment):
    .venv/bin/python benchmarks/ttq_overhead.py [--framework pytorch --rounds 3 --data-dir DIR]
Two figures, from real runs of resnet_tiny at 32x32 on real data (a learnable sample made by the workflow's own
tools, as tests/test_quality.py makes it, unless --data-dir names prepared ImageNet shards):
  (a) evaluation share: eval_seconds / time to train of a time-to-quality run at the default schedule
      (workflow/studies/time-to-quality-cpu.yaml's `quality` block; the target is raised to 1.0 so that every run
      goes to the same step budget and evaluates the same number of times);
  (b) throughput between evaluations (the `eval` lines' train_seconds: training steps only) / the throughput of a
      throughput run of the same configuration. Target >= 0.95: the mode must not handicap training. The throughput
      run skips its warm-up steps, so (b) leaves out the first block between evaluations (its first steps are the
      warm-up); the ratio with every block is printed beside it.
Rounds are interleaved ABBA (throughput, quality, quality, throughput, ...) so drift of the machine hits both alike;
(b) is the median of the per-round ratios (each round: the mean of its two quality runs ÷ the mean of its two
throughput runs) with its interval, UNSTABLE when they are bimodal (rounds.py). Writes
benchmarks/results/ttq_overhead-<framework>.json (figures.py renders it into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

import resultfile  # noqa: E402 - benchmarks/, next to this script
import rounds  # noqa: E402

from dlbench.venvs import env_prefix  # noqa: E402

STUDY = REPO / "workflow/studies/time-to-quality-cpu.yaml"


def env_python(name: str) -> str:
    """The environment of the current envs/<name>.yaml (older builds may sit beside it in .venvs/)."""
    return str(env_prefix(REPO / ".venvs", REPO / "envs" / f"{name}.yaml") / "bin" / "python")


def tool(python: str, *args: str) -> None:
    subprocess.run(
        [python, "-m", *args], env=dict(os.environ, PYTHONPATH=str(REPO / "workflow")), check=True, capture_output=True
    )


def make_data(root: Path) -> Path:
    """A learnable ImageNet sample (10 classes, each from its own photo; 40 train and 10 held-out images each)."""
    wheels, tree, dataprep = root / "wheels", root / "tree", env_python("dataprep")
    tool(sys.executable, "dlbench.sample_wheels", "--dest", str(wheels), "--manifest", str(wheels / "w.json"))
    tool(
        dataprep,
        "dlbench.dataprep.sample_imagenet",
        "--wheels",
        str(wheels),
        "--out",
        str(tree),
        "--classes",
        "10",
        "--train-per-class",
        "40",
        "--validation-per-class",
        "10",
        "--long-side",
        "64",
        "96",
        "--photo-per-class",
        "--workers",
        "1",
    )
    tool(
        dataprep,
        "dlbench.dataprep.imagenet",
        "convert",
        "--train-dir",
        str(tree / "train"),
        "--validation-dir",
        str(tree / "validation"),
        "--validation-labels",
        str(tree / "validation_labels.txt"),
        "--synsets",
        str(tree / "synsets.txt"),
        "--out",
        str(root / "imagenet"),
        "--train-shards",
        "2",
        "--validation-shards",
        "1",
        "--workers",
        "1",
    )
    return root / "imagenet"


def lines(log: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        out.setdefault(entry["type"], []).append(entry)
    return out


def run(args: argparse.Namespace, data: Path, log: Path, quality: dict | None) -> dict:
    """One harness run (throughput, or time to quality with `quality`); its summary and eval lines."""
    cmd = [
        env_python(args.framework),
        "-m",
        "dlbench.harness",
        "--framework",
        args.framework,
        "--model",
        "resnet_tiny",
        "--topology",
        "1x1",
        "--batch-size",
        str(args.batch_size),
        "--data",
        "real",
        "--data-dir",
        str(data),
        "--image-size",
        "32",
        "--device",
        "cpu",
        "--cpus",
        str(args.cpus),
        "--telemetry-ms",
        "0",
        "--log",
        str(log),
    ]
    if quality:
        cmd += ["--quality", json.dumps(quality)]
    else:
        cmd += ["--warmup-steps", str(args.warmup_steps), "--measured-steps", str(args.steps)]
    subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=str(REPO / "workflow")), check=True, capture_output=True)
    got = lines(log)
    summary = got["summary"][-1]
    if summary["status"] != "ok":
        raise SystemExit(f"{log}: {summary['status']}: {summary.get('error')}")
    return {"summary": summary, "evals": got.get("eval", [])}


def between_evaluations(evals: list[dict], global_batch: int, skip_first: bool) -> float:
    """Samples / training seconds over the blocks between evaluations (without the first block: its warm-up)."""
    blocks = [(e["step"] - (evals[i - 1]["step"] if i else 0), e["train_seconds"]) for i, e in enumerate(evals)]
    blocks = blocks[1:] if skip_first else blocks
    return sum(steps for steps, _ in blocks) * global_batch / sum(seconds for _, seconds in blocks)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--framework", default="pytorch", choices=["pytorch", "tensorflow"])
    p.add_argument("--data-dir", type=Path, help="prepared ImageNet shards (default: make the learnable sample)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--cpus", type=int, default=1, help="cores per run (1: a shared 2-core machine)")
    p.add_argument("--evaluations", type=int, default=5, help="evaluations per time-to-quality run")
    p.add_argument("--warmup-steps", type=int, default=0, help="throughput run (default: the first block's steps)")
    p.add_argument("--steps", type=int, default=0, help="throughput run's measured steps (default: the rest)")
    p.add_argument("--rounds", type=int, default=3, help="ABBA blocks (each: 2 throughput, 2 quality runs)")
    args = p.parse_args()
    record = resultfile.Recorder(__file__)
    settings = yaml.safe_load(STUDY.read_text())["defaults"]["quality"]
    every = settings["eval_every_steps"]
    budget = every * args.evaluations
    # the default schedule, every run to the same budget: the target is out of reach, max_steps ends it
    quality = settings | {"target": 1.0, "max_steps": budget, "max_minutes": 30}
    # the same steps in both modes: the throughput run warms up for what the quality run's first block is
    args.warmup_steps = args.warmup_steps or every
    args.steps = args.steps or budget - every
    print(
        f"{args.framework} resnet_tiny 32x32 batch {args.batch_size}, {args.cpus} core(s): quality runs of {budget} "
        f"steps, an evaluation every {every}; throughput runs {args.warmup_steps} warm-up + {args.steps} measured",
        file=sys.stderr,
    )
    plain, steady, every_block, share, eval_s = [], [], [], [], []
    plain_rounds: list[float] = []  # per round: the mean of its two runs
    steady_rounds: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data_dir or make_data(Path(tmp, "data"))
        for r in range(args.rounds):
            for i, ttq in enumerate((False, True, True, False)):
                got = run(args, data, Path(tmp, f"r{r}-{i}", "run.jsonl"), quality if ttq else None)
                s = got["summary"]
                if not ttq:
                    plain.append(s["throughput"])
                    print(f"  throughput run: {s['throughput']:.1f} images/s", file=sys.stderr)
                    continue
                q, batch = s["quality"], s["quality"]["global_batch_size"]
                steady.append(between_evaluations(got["evals"], batch, skip_first=True))
                every_block.append(between_evaluations(got["evals"], batch, skip_first=False))
                share.append(q["eval_seconds"] / q["time_to_train_s"])
                eval_s.append(q["eval_seconds"] / q["evaluations"])
                print(
                    f"  quality run: between evaluations {steady[-1]:.1f} images/s ({every_block[-1]:.1f} with the "
                    f"first block), evaluation {share[-1]:.1%} of {q['time_to_train_s']:.1f} s",
                    file=sys.stderr,
                )
            plain_rounds.append(statistics.fmean(plain[-2:]))
            steady_rounds.append(statistics.fmean(steady[-2:]))
            print(
                f"round {r + 1}: throughput run {plain_rounds[-1]:.1f}, between evaluations "
                f"{steady_rounds[-1]:.1f} images/s",
                file=sys.stderr,
            )
    loops, verdict = rounds.paired("throughput run", plain_rounds, "between evaluations", steady_rounds, 0.95)
    with_first = statistics.median(every_block) / statistics.median(plain)
    title = (
        f"{args.framework} resnet_tiny 32x32 batch {args.batch_size}, {args.cpus} core(s), real data; "
        f"quality runs of {budget} steps with an evaluation every {every}, throughput runs {args.warmup_steps} "
        f"warm-up + {args.steps} measured; {args.rounds} ABBA rounds"
    )
    share_rows = [
        ["evaluation share of time to train (median)", f"{statistics.median(share):.1%}"],
        ["runs (min–max)", f"{min(share):.1%}–{max(share):.1%}"],
        ["seconds per evaluation (median)", round(statistics.median(eval_s), 3)],
    ]
    print(title)
    for label, value in share_rows:
        print(f"  (a) {label}: {value}")
    for loop in loops:
        print(f"  (b) {rounds.line(loop, 35)}")
    print(f"  (b) {verdict}; with the first block (ratio of medians) {with_first:.3f}")
    record.write(
        [
            resultfile.table(f"(a) evaluation share — {title}", ["figure", "value"], share_rows),
            resultfile.table(
                "(b) training throughput between evaluations ÷ a throughput run (images/s)",
                rounds.columns("runs", "images/s"),
                [rounds.row(loop) for loop in loops],
            ),
        ],
        notes=[
            f"(b) {verdict} (without the first block between evaluations, which holds the warm-up)",
            f"(b) with the first block: ratio of medians {with_first:.3f}",
        ],
        variant=args.framework,
    )


if __name__ == "__main__":
    main()
