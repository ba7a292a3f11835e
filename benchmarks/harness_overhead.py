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
A/A interval's low end. Beside the ratio, the cost measured directly, which fresh processes' spread cannot hide:
the CPU time the supervisor and the sampler use during the rank's measured window, as a share of theirs and the
rank's together (their /proc counters, read every 0.2 s in every run alike, at the log's window ends).

Prints each loop's rounds (two modes flagged) and writes benchmarks/results/harness_overhead-<framework>-<model>
[-supervised].json (figures.py puts it in the docs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import resultfile
import rounds

from dlbench.harness import rank
from dlbench.harness.frameworks import NAMES
from dlbench.harness.runlog import last_line
from dlbench.harness.spec import TELEMETRY_PYTHON_ENV, RunSpec
from dlbench.telemetry.summary import delta
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


TICK_S = 1 / os.sysconf("SC_CLK_TCK")
POLL_S = 0.2  # how often the CPU counters are read (in every run, so that reading costs each run the same)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid`, every thread (/proc/<pid>/stat); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime: fields 14 and 15 of stat


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found


class HelperWatch:
    """The CPU seconds the supervisor and its helpers (the sampler) use while its rank runs, against the rank's own:
    each poll reads both from /proc while a rank is alive, and the share is taken over the run's measured window."""

    def __init__(self) -> None:
        self.ts: list[float] = []
        self.helpers: list[float] = []
        self.ranks: list[float] = []

    def poll(self, supervisor: int) -> None:
        helpers, ranks, alive = cpu_s(supervisor), 0.0, False
        for child in children(supervisor):
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if b"dlbench.harness.rank" in command:  # an exiting rank has no command line: not counted then
                ranks, alive = ranks + cpu_s(child), True
            elif command:
                helpers += cpu_s(child)
        if alive:
            self.ts.append(time.time())
            self.helpers.append(helpers)
            self.ranks.append(ranks)

    def share(self, start: float, end: float) -> float | None:
        """The helpers' share of the CPU time used from `start` to `end` (wall clock: the log's measured window),
        each counter interpolated between the polls around each end; None where no poll fell inside."""
        if not any(start <= t <= end for t in self.ts):
            return None
        helpers = delta(self.ts, self.helpers, start, end)
        ranks = delta(self.ts, self.ranks, start, end)
        return helpers / (helpers + ranks) if helpers + ranks > 0 else None


def supervised(args: argparse.Namespace, record: resultfile.Recorder) -> None:
    """Fresh processes alternating: the supervisor starting the rank (with the sampler) and the rank alone."""
    python = sys.executable
    env = dict(os.environ, **{TELEMETRY_PYTHON_ENV: os.environ.get(TELEMETRY_PYTHON_ENV, str(core_python()))})
    helper_shares: list[float] = []  # per supervised run: the supervisor's and sampler's share of its CPU time
    with tempfile.TemporaryDirectory() as tmp:
        spec = run_spec(args, Path(tmp) / "run.jsonl")
        options = spec.to_args()
        log = Path(spec.log)

        def one(module: str, *extra: str) -> float:
            log.unlink(missing_ok=True)
            command = [python, "-m", module, *options, "--warmup-steps", str(args.warmup), *extra]
            watch = HelperWatch()
            stderr = log.with_name("stderr.txt")  # a file, not a pipe: a pipe nobody reads while polling fills
            with (
                stderr.open("wb") as err,
                subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err) as proc,
            ):
                while proc.poll() is None:  # every run polls alike, so that the poller costs each the same
                    watch.poll(proc.pid)
                    time.sleep(POLL_S)
            assert proc.returncode == 0, (
                f"{module} exited {proc.returncode}: {stderr.read_text(errors='replace')[-2000:]}"
            )
            summary = json.loads(last_line(log) or "{}")  # a run log ends with its summary
            assert summary.get("type") == "summary", f"{module}: {log} ends without a summary"
            if module == "dlbench.harness":
                window = next(e for e in map(json.loads, log.read_text().splitlines()) if e["type"] == "window")
                share = watch.share(window["measure_start"], window["measure_end"])
                if share is not None:
                    helper_shares.append(share)
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
    cpu_note = (
        f"measured directly: the supervisor and the sampler used {statistics.median(helper_shares):.2%} of the CPU "
        f"time in a supervised run's measured window (median of {len(helper_shares)} runs; "
        f"{min(helper_shares):.2%}–{max(helper_shares):.2%}), against the {1 - SUPERVISED_TARGET:.0%} the target allows"
        if helper_shares
        else "measured directly: no poll fell inside a measured window (windows shorter than 0.2 s): no CPU share"
    )
    title = (
        f"{args.framework} {args.model}: `python -m dlbench.harness` (supervisor, guard, "
        f"{f'sampler at {args.telemetry_ms} ms' if args.telemetry_ms else 'no sampler'}) "
        f"÷ `python -m dlbench.harness.rank` alone, {args.pairs} fresh-process rounds, every order in turn "
        "(the rank alone twice: the A/A pair), "
        f"{args.warmup} warm-up + {args.steps} measured steps each"
    )
    sampler = "" if args.telemetry_ms == TELEMETRY_MS else f"-sampler{args.telemetry_ms}"
    variant = f"{args.framework}-{args.model}-supervised{sampler}"
    report(title, loops, verdict, None, "throughput", record, variant, [cpu_note])


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
    more: list[str] = (),
) -> None:
    print(title)
    for loop in loops:
        print(f"  {rounds.line(loop, 24)}")
    notes = [verdict, *more] + ([f"settings: {settings}"] if settings else [])
    for note in notes:
        print(f"  {note}")
    record.write(
        [resultfile.table(title, rounds.columns("loop", unit), [rounds.row(loop) for loop in loops])],
        notes=notes,
        variant=variant,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--framework", required=True, choices=NAMES)
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
