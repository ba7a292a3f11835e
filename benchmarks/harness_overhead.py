"""The harness's own cost, measured directly, in every framework and model family.

Run with the framework environment's interpreter, from the repository root:
    PYTHONPATH=workflow .venvs/<framework>-*/bin/python benchmarks/harness_overhead.py --framework pytorch
    ... --framework jax --model bert_base          ... --framework pytorch --model llama_tiny
    ... --framework mxnet --supervised

In one process (the default): the harness's timed loop (`rank.run`: barrier, collected and frozen garbage, the
measured steps, the log's lines) against the identical step called bare (the same backend's `step()`, the device
synchronised at both ends: the plain loop around the same step function), and a second bare loop as the A/A pair,
interleaved in short rounds on one model (every order of the three in turn, rounds.interleaved). Target:
harness ÷ bare >= 0.995 (at most 0.5% per step), and no lower than the A/A interval's low end.

--supervised: what a workflow run adds around a rank (the supervisor with its relay thread and guard, and the
telemetry sampler at the workflow's default interval): `python -m dlbench.harness` against `python -m
dlbench.harness.rank` alone (the same options, no supervisor, no sampler) and the rank alone again (the A/A
pair), fresh processes interleaved, --pairs rounds. Target: supervised ÷ rank alone >= 0.99, and no lower than the
A/A interval's low end.

Prints each loop's rounds (two modes flagged) and writes benchmarks/results/harness_overhead-<framework>-<model>
[-supervised].json (figures.py puts it in the docs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import resultfile
import rounds

from dlbench.harness import rank
from dlbench.harness.runlog import last_line
from dlbench.harness.spec import TELEMETRY_PYTHON_ENV, RunSpec
from dlbench.vocabulary.identity import model_kind

IN_PROCESS_TARGET = 0.995  # at most 0.5% of a step
SUPERVISED_TARGET = 0.99
TELEMETRY_MS = 100  # the workflow's default sampling interval (config schema: telemetry.interval_ms)
# A shape per model family that takes tenths of a second per step on a 2-core CPU.
SHAPES = {
    "resnet": {"image_size": 64, "batch_size": 8},
    "bert": {"seq_length": 64, "batch_size": 4},
    "llama": {"seq_length": 256, "batch_size": 4},
}


SHAPE_KEYS = ("image_size", "seq_length", "batch_size")  # options that override SHAPES


def run_spec(args: argparse.Namespace, log: Path) -> RunSpec:
    shape = {**SHAPES[model_kind(args.model)], **{k: v for k, v in vars(args).items() if k in SHAPE_KEYS and v}}
    axes = {"image_size": shape["image_size"]} if "image_size" in shape else {"seq_length": shape["seq_length"]}
    return RunSpec.of(
        framework=args.framework,
        model=args.model,
        nodes=1,
        devices_per_node=1,
        batch_size=shape["batch_size"],
        precision="fp32",
        compiler=False,
        data="synthetic",
        warmup_steps=0,
        measured_steps=args.steps,
        repeat=1,
        config_id="bench",
        log=str(log),
        device="cpu",
        **axes,
    )


def bare_loop(backend, steps: int) -> float:
    """The plain loop around the same step: synchronised at both ends, timed around the whole loop."""
    backend.sync()
    start = time.perf_counter()
    for _ in range(steps):
        backend.step()
    backend.sync()
    return backend.spec.batch_size * steps / (time.perf_counter() - start)


def in_process(args: argparse.Namespace, record: resultfile.Recorder) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spec = run_spec(args, Path(tmp) / "run.jsonl")
        backend = rank.load_backend(spec, 0, 1, 0, len(rank.pin_cores()))
        backend.setup()
        backend.setup = lambda: None  # one model for every loop: rank.run must not rebuild it
        scale = spec.seq_length if backend.kind == "llama" else 1  # rank.run counts Llama's tokens

        def harness() -> float:
            throughput = rank.run(spec, backend, 0, 1, Path(spec.log))["throughput"] / scale
            Path(spec.log).unlink()
            return throughput

        bare, harnessed, again = rounds.interleaved(
            args.rounds,
            lambda: bare_loop(backend, args.steps),
            harness,
            lambda: bare_loop(backend, args.steps),
            warmup=1,
        )
        settings = backend.settings_in_effect()["summary"]
        unit = "samples/s" if backend.kind == "llama" else backend.unit
        shape = spec.image_size if backend.kind == "resnet" else spec.seq_length
    loops, verdict, _ = rounds.parity("bare", bare, "harness", harnessed, again, IN_PROCESS_TARGET)
    title = (
        f"{args.framework} {args.model} ({'image' if model_kind(args.model) == 'resnet' else 'seq'} {shape}) batch "
        f"{spec.batch_size} fp32: harness ÷ the same step bare, {args.rounds} rounds × {args.steps} steps, every "
        "order in turn, one process, one model"
    )
    report(title, loops, verdict, settings, unit, record, variant=f"{args.framework}-{args.model}")


def supervised(args: argparse.Namespace, record: resultfile.Recorder) -> None:
    """Fresh processes alternating: the supervisor starting the rank (with the sampler) and the rank alone."""
    python = sys.executable
    env = dict(os.environ, **{TELEMETRY_PYTHON_ENV: os.environ.get(TELEMETRY_PYTHON_ENV, str(core_python()))})
    with tempfile.TemporaryDirectory() as tmp:
        spec = run_spec(args, Path(tmp) / "run.jsonl")
        options = spec.to_args()
        log = Path(spec.log)

        def one(module: str, *extra: str) -> float:
            log.unlink(missing_ok=True)
            command = [python, "-m", module, *options, "--warmup-steps", str(args.warmup), *extra]
            subprocess.run(command, env=env, check=True, capture_output=True)
            summary = json.loads(last_line(log) or "{}")  # a run log ends with its summary
            assert summary.get("type") == "summary", f"{module}: {log} ends without a summary"
            return summary["throughput"]

        alone, with_supervisor, alone_again = rounds.interleaved(
            args.pairs,
            lambda: one("dlbench.harness.rank"),
            lambda: one("dlbench.harness", "--telemetry-ms", str(args.telemetry_ms)),
            lambda: one("dlbench.harness.rank"),
        )
    loops, verdict, _ = rounds.parity(
        "rank alone", alone, "supervised", with_supervisor, alone_again, SUPERVISED_TARGET
    )
    title = (
        f"{args.framework} {args.model}: `python -m dlbench.harness` (supervisor, guard, "
        f"{f'sampler at {args.telemetry_ms} ms' if args.telemetry_ms else 'no sampler'}) "
        f"÷ `python -m dlbench.harness.rank` alone, {args.pairs} fresh-process rounds, every order in turn "
        "(the rank alone twice: the A/A pair), "
        f"{args.warmup} warm-up + {args.steps} measured steps each"
    )
    sampler = "" if args.telemetry_ms == TELEMETRY_MS else f"-sampler{args.telemetry_ms}"
    report(title, loops, verdict, None, "throughput", record, f"{args.framework}-{args.model}-supervised{sampler}")


def core_python() -> Path:
    """The core environment's python (the sampler's), beside the framework environments."""
    return resultfile.REPO / ".venv" / "bin" / "python"


def report(
    title: str,
    loops: list[dict],
    verdict: str,
    settings: str | None,
    unit: str,
    record: resultfile.Recorder,
    variant: str,
) -> None:
    print(title)
    for loop in loops:
        print(f"  {rounds.line(loop, 24)}")
    notes = [verdict] + ([f"settings: {settings}"] if settings else [])
    for note in notes:
        print(f"  {note}")
    record.write(
        [resultfile.table(title, rounds.columns("loop", unit), [rounds.row(loop) for loop in loops])],
        notes=notes,
        variant=variant,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--framework", required=True, choices=("pytorch", "tensorflow", "mxnet", "jax"))
    p.add_argument("--model", default="resnet50", help="resnet50, bert_base, bert_tiny, llama_tiny (PyTorch), ...")
    p.add_argument("--image-size", dest="image_size", type=int)
    p.add_argument("--seq-length", dest="seq_length", type=int)
    p.add_argument("--batch-size", dest="batch_size", type=int)
    p.add_argument("--steps", type=int, default=10, help="measured steps per round (per run with --supervised)")
    p.add_argument("--rounds", type=int, default=18, help="a multiple of 6: each order of the three loops as often")
    p.add_argument("--supervised", action="store_true", help="the supervisor's cost around a rank, fresh processes")
    p.add_argument("--pairs", type=int, default=8, help="--supervised: fresh-process pairs")
    p.add_argument("--warmup", type=int, default=5, help="--supervised: warm-up steps of each run")
    p.add_argument(
        "--telemetry-ms", type=int, default=TELEMETRY_MS, help="--supervised: the sampler's interval (0: no sampler)"
    )
    args = p.parse_args()
    record = resultfile.Recorder(__file__)
    (supervised if args.supervised else in_process)(args, record)


if __name__ == "__main__":
    main()
