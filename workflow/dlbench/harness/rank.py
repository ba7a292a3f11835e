"""What each rank runs: `python -m dlbench.harness.rank ...` (started by `dlbench.harness`).

Timing, shared by every framework: warm-up steps (not timed), a barrier, then the measured steps
with the device synchronised at both ends. Each measured step's duration is the gap between
consecutive step-end marks of the backend's step clock (the host's clock; on CUDA, events in the stream, read
after the window), the last step taking the rest of the window, so the durations add up exactly to the measured
wall time and
   throughput = batch size per device x ranks x measured steps / measured wall time
(Llama: x seq_length, in tokens/s).
Rank 0 writes the log; every rank reports a failure to its own file for the supervisor.

Warm-up `auto`: warm up until the step times have settled (warmed_up: the median of the last
AUTO_WARMUP_WINDOW/2 steps within AUTO_WARMUP_TOLERANCE of the median of the half-window before, which
a compile, an autotuning pass or a cold cache fails), at most max_warmup_steps; every rank must agree
(all_gather), so that all ranks start measuring at the same step. The summary line records how many.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from statistics import median

from . import flops, quality, sysinfo
from .frameworks import REGISTRY
from .runlog import append_line, failure_summary, utc_now
from .spec import INTERPRETER_ENV, RunSpec, Unsupported, parser, spec_from_args


def rank_from_env() -> tuple[int, int, int, int]:
    """(rank, world size, local rank, local world size): from our launcher, else from srun."""
    if "DLBENCH_RANK" in os.environ:
        get = lambda k: int(os.environ[f"DLBENCH_{k}"])  # noqa: E731
        return get("RANK"), get("WORLD_SIZE"), get("LOCAL_RANK"), get("LOCAL_WORLD_SIZE")
    if "SLURM_PROCID" in os.environ:
        ntasks = int(os.environ["SLURM_NTASKS"])
        nnodes = int(os.environ.get("SLURM_NNODES", "1"))
        return int(os.environ["SLURM_PROCID"]), ntasks, int(os.environ["SLURM_LOCALID"]), ntasks // nnodes
    return 0, 1, 0, 1


def pin_cores() -> list[int]:
    """Bind this rank to its share of the node's cores: given by our supervisor (DLBENCH_CPUS), or
    under srun SLURM_CPUS_PER_TASK cores of the step's set (SLURM may bind tasks itself, or not)."""
    cpus = [int(c) for c in os.environ.get("DLBENCH_CPUS", "").split(",") if c]
    if not cpus and "SLURM_CPUS_PER_TASK" in os.environ and "SLURM_LOCALID" in os.environ:
        per_task, local = int(os.environ["SLURM_CPUS_PER_TASK"]), int(os.environ["SLURM_LOCALID"])
        usable = sysinfo.usable_cpus()
        if len(usable) >= per_task * (local + 1):
            cpus = usable[per_task * local : per_task * (local + 1)] if len(usable) > per_task else usable
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    return cpus or sysinfo.usable_cpus()


def load_backend(spec: RunSpec, rank: int, world: int, local_rank: int, threads: int):
    module = importlib.import_module(REGISTRY[spec.framework].backend_module)
    return module.Backend(spec, rank=rank, world=world, local_rank=local_rank, threads=threads)


def peak_host_memory_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def address_space() -> dict[str, int]:
    """This process's virtual memory now and at its peak (VmSize, VmPeak, bytes; Linux's /proc, else empty)."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return {}
    fields = {"VmSize": "vm_bytes", "VmPeak": "vm_peak_bytes"}
    return {fields[k]: int(v.split()[0]) * 1024 for k, _, v in (line.partition(":") for line in lines) if k in fields}


def limit_memory(spec: RunSpec, backend) -> dict[str, int | float]:
    """platform.memory_limit_gb on CPU: RLIMIT_AS = the address space once the framework is loaded and the backend
    built + the budget, so an allocation beyond the budget fails in the framework as out of memory. Relative to
    that baseline because frameworks reserve very different amounts of address space on import (TensorFlow
    most). Returns what the record keeps: the budget, the baseline and the limit in bytes."""
    if spec.memory_limit_gb <= 0:
        return {}
    if backend.peak_memory_bytes() is not None:  # a GPU: CUDA maps far more address space than it uses
        raise Unsupported(
            "memory_limit_gb is a CPU memory budget; on a GPU the framework's own out-of-memory "
            "errors mark the limit (use platform.device: cpu)"
        )
    baseline = address_space().get("vm_bytes")
    if baseline is None:
        raise Unsupported("memory_limit_gb needs /proc/self/status (Linux) to read the address space")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = baseline + int(spec.memory_limit_gb * 2**30)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return {"memory_limit_gb": spec.memory_limit_gb, "vm_baseline_bytes": baseline, "address_space_limit_bytes": limit}


def memory_facts(backend, limits: dict[str, int | float]) -> dict[str, int | float | None]:
    """Peak memory of this rank (the device's, else peak RSS), its peak address space and the limit it ran under."""
    device = backend.peak_memory_bytes() if backend is not None else None
    return {
        "peak_memory_bytes": device or peak_host_memory_bytes(),
        **limits,
        "vm_peak_bytes": address_space().get("vm_peak_bytes"),
    }


AUTO_WARMUP_WINDOW = 10  # steps: the last 5 against the 5 before
AUTO_WARMUP_TOLERANCE = 0.05  # their medians within 5% of each other


def warmed_up(times: list[float], window: int = AUTO_WARMUP_WINDOW, tolerance: float = AUTO_WARMUP_TOLERANCE) -> bool:
    """The warm-up step times have settled: the median of the last window/2 steps is within `tolerance` of the
    median of the window/2 before. Medians, so one slow step (a compile, a GC pause) does not count; a level
    still falling by more than the tolerance over half a window does."""
    if len(times) < window:
        return False
    half = window // 2
    recent, before = median(times[-half:]), median(times[-2 * half : -half])
    return abs(recent - before) <= tolerance * before


def step_stats(durations: list[float]) -> dict[str, float]:
    ordered = sorted(durations)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"median": median(ordered), "min": ordered[0], "max": ordered[-1], "p10": pick(0.1), "p90": pick(0.9)}


def warm_up(spec: RunSpec, backend, world: int, log: Path | None) -> dict:
    """Run the warm-up steps, each timed (the loss synchronises); with `auto`, until warmed_up agrees on every
    rank or max_warmup_steps. Returns the summary's `warmup` entry: mode, steps run, and for auto whether the
    step times settled (false: stopped at the bound) and the criterion."""
    auto = spec.warmup_steps == "auto"
    limit = spec.max_warmup_steps if auto else int(spec.warmup_steps)
    times: list[float] = []
    settled = False
    for step in range(limit):
        started = time.perf_counter()
        backend.step()
        loss = backend.loss()  # synchronises: warm-up steps are timed one by one
        times.append(time.perf_counter() - started)
        if log is not None:
            append_line(log, {"type": "step", "phase": "warmup", "step": step, "seconds": times[-1], "loss": loss})
        if auto and len(times) >= AUTO_WARMUP_WINDOW:
            settled = warmed_up(times)
            if world > 1:  # every rank must stop at the same step
                settled = all(r["settled"] for r in backend.all_gather({"settled": settled}))
            if settled:
                break
    if not auto:
        return {"mode": "fixed", "steps": len(times)}
    if log is not None:
        print(
            f"[dlbench] warm-up auto: {'settled after' if settled else 'not settled within'} {len(times)} steps",
            file=sys.stderr,
        )
    return {
        "mode": "auto",
        "steps": len(times),
        "stable": settled,
        "max_steps": spec.max_warmup_steps,
        "window": AUTO_WARMUP_WINDOW,
        "tolerance": AUTO_WARMUP_TOLERANCE,
    }


def run(
    spec: RunSpec, backend, rank: int, world: int, log: Path | None, limits: dict[str, int | float] | None = None
) -> dict:
    """Warm up, time the measured steps, return the summary (rank 0 also logs every step). `limits`: the
    memory budget this rank runs under (limit_memory), kept in its entry of the summary's ranks."""
    if spec.model not in backend.models:
        raise Unsupported(f"model {spec.model!r} is not implemented for {spec.framework} yet")
    if spec.data not in backend.data:
        raise Unsupported(
            f"data {spec.data!r} is not available for {spec.framework} yet (available: {', '.join(backend.data)})"
        )
    init_start = time.time()
    backend.setup()
    if log is not None:
        in_effect = backend.strategy_in_effect()
        # The interpreter is recorded for every run: the study's own (software.python) or a built environment's.
        append_line(
            log,
            {
                "type": "environment",
                **backend.environment(),
                "strategy": spec.strategy,
                "strategy_in_effect": in_effect,
                "interpreter": sys.executable,
                "interpreter_identity": os.environ.get(INTERPRETER_ENV),
                "build": spec.build,
                "packages": sysinfo.installed_packages(),
            },
        )
        print(f"[dlbench] strategy {spec.strategy}: {in_effect['summary']}", file=sys.stderr)
    settings = quality.parse(spec.quality)
    if settings is not None:  # time to quality: train to the target instead of timing steps
        measured = quality.train_to_target(spec, settings, backend, world, log, init_start)
        return make_summary(
            spec,
            backend,
            rank,
            world,
            measured,
            backend.all_gather(rank_facts(backend, rank, measured["elapsed_s"], limits or {})),
        )
    warmup_start = time.time()  # wall clock: the sampler's timestamps are time.time() too
    warmup = warm_up(spec, backend, world, log)
    warmup_end = time.time()
    backend.sync()
    backend.barrier()
    # Python's garbage collector: a full collection with a framework loaded scans ~300k objects (0.2 s with
    # PyTorch on the 2-core VM, 4% of a 5 s window). Collect setup's and warm-up's garbage now, and freeze what
    # lives, so that a collection the steps trigger scans only their own objects.
    gc.collect()
    gc.freeze()
    clock = backend.step_clock(spec.measured_steps)
    measure_start = time.time()
    start = time.perf_counter()
    clock.start()
    for _ in range(spec.measured_steps):
        backend.step()  # no host synchronisation between measured steps
        clock.mark()
    backend.sync()
    backend.barrier()
    end = time.perf_counter()
    measure_end = time.time()
    gc.unfreeze()
    elapsed = end - start
    durations = clock.durations()
    # The last step ends when every rank's device has finished: it takes the rest of the window, so that the
    # durations add up to the measured wall time.
    durations[-1] += elapsed - sum(durations)
    loss = backend.loss()
    ranks = backend.all_gather(rank_facts(backend, rank, elapsed, limits or {}))
    if log is not None:
        for step, seconds in enumerate(durations):
            append_line(log, {"type": "step", "phase": "measure", "step": step, "seconds": seconds})
        append_line(
            log,
            {
                "type": "window",
                "warmup_start": warmup_start,
                "warmup_end": warmup_end,
                "measure_start": measure_start,
                "measure_end": measure_end,
            },
        )
    samples = spec.batch_size * world * spec.measured_steps
    # Llama's unit is tokens/s (backend.unit): its samples are the tokens of the sequences, seq_length each
    # (every position is trained on); sequences/s is kept beside it.
    per_sequence = {"sequences_per_s": samples / elapsed} if backend.kind == "llama" else {}
    samples *= spec.seq_length if backend.kind == "llama" else 1
    return make_summary(
        spec,
        backend,
        rank,
        world,
        {
            "samples": samples,
            "elapsed_s": elapsed,
            "throughput": samples / elapsed,
            **per_sequence,
            "step_time_s": step_stats(durations),
            "warmup": warmup,
            "loss_final": loss,
        },
        ranks,
    )


def make_summary(spec: RunSpec, backend, rank: int, world: int, measured: dict, ranks: list[dict]) -> dict:
    """The summary line of a completed run: what was measured, the FLOPs and every rank's facts (rank_facts)."""
    model_flops = flops.model_flops(spec.model, spec.image_size, spec.seq_length, spec.predictions)
    throughput = measured.get("throughput")
    return {
        "type": "summary",
        "status": "ok",
        **measured,
        "unit": backend.unit,
        "world_size": world,
        **model_flops,
        "achieved_tflops": throughput * model_flops["train_flops_per_sample"] / 1e12 if throughput else None,
        "ranks": ranks,
        "hosts": sorted({r["host"] for r in ranks}),
        "finished_at": utc_now(),
    }


def rank_facts(backend, rank: int, elapsed: float, limits: dict[str, int | float]) -> dict:
    """What every rank reports for the summary (all_gather), its memory and budget included."""
    return {
        "rank": rank,
        "host": sysinfo.hostname(),
        "pid": os.getpid(),
        "elapsed_s": elapsed,
        "device": backend.device_name(),
        "threads": backend.threads,
        **memory_facts(backend, limits),
    }


def main(argv: list[str] | None = None) -> int:
    spec = spec_from_args(parser("python -m dlbench.harness.rank").parse_args(argv))
    rank, world, local_rank, _ = rank_from_env()
    log = Path(spec.log) if rank == 0 else None
    rank_dir = Path(os.environ.get("DLBENCH_RANK_DIR", Path(spec.log).with_name(Path(spec.log).name + ".ranks")))
    report = {"rank": rank, "status": "ok", "error": ""}
    backend = None
    limits: dict[str, int | float] = {}
    try:
        cpus = pin_cores()
        backend = load_backend(spec, rank, world, local_rank, threads=len(cpus))
        limits = limit_memory(spec, backend)
        summary = run(spec, backend, rank, world, log, limits)
        if log is not None:
            append_line(log, summary)
            if "quality" in summary:
                q = summary["quality"]
                print(
                    f"[dlbench] {spec.run_id}: {'converged' if q['converged'] else 'did not converge'} "
                    f"({q['accuracy_final']}) in {q['time_to_train_s']:.1f} s, {q['steps']} steps",
                    file=sys.stderr,
                )
            else:
                print(
                    f"[dlbench] {spec.run_id}: {summary['throughput']:.2f} {summary['unit']} over {world} rank(s)",
                    file=sys.stderr,
                )
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a record
        if isinstance(exc, Unsupported):
            status = "unsupported"
        elif backend is not None:
            status = backend.classify(exc)
        else:
            status = "oom" if isinstance(exc, MemoryError) else "error"
        message = f"{type(exc).__name__}: {exc}".strip()[:2000]
        traceback.print_exc()
        # The memory at the failure: where an out-of-memory probe of a batch-size search stood.
        try:
            memory = memory_facts(backend, limits)
        except Exception:  # noqa: BLE001 - a broken device must not hide the failure itself
            memory = dict(limits)
        report = {"rank": rank, "status": status, "error": message, "memory": memory}
        if log is not None:
            append_line(log, failure_summary(status, message, memory=report["memory"]))
    finally:
        if backend is not None:
            backend.shutdown()
    rank_dir.mkdir(parents=True, exist_ok=True)
    (rank_dir / f"rank{rank}.json").write_text(json.dumps(report))
    return 0 if report["status"] == "ok" else 3


if __name__ == "__main__":
    sys.exit(main())
