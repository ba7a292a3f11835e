"""The gradient-exchange strategies of each framework: the `strategy` axis (standard library only: the study, the
supervisor and the backends all read it).

tf_cnn_benchmarks made "how the ranks combine their gradients" an axis (`variable_update`: parameter_server,
replicated, collective_all_reduce, horovod, ...) because the fastest choice depended on the platform and the
model. Here each framework lists the options its current API offers. `auto` (every framework, the only one of a
framework with no entries here) is what the backend does without one: its declaration's `collectives`
(frameworks.py), e.g. PyTorch DDP over NCCL on GPUs and Gloo on CPUs.

A strategy names a way to exchange gradients between ranks, so any other than `auto` needs several ranks. What
cannot run is decided before any model is built: `problem(spec)` (the supervisor, before the ranks start: a
strategy of another framework, one rank) and each backend's setup_runtime (what depends on the device or the
build: NCCL needs GPUs, Horovod must be importable), both ending in an `unsupported` record with the reason.
What a run actually used is read back from the framework by the backend (`Backend.strategy_in_effect`).

Names are lower-case words joined by `_` (they go into config ids as `-via_<name>`, dlbench.vocabulary.identity); a
pattern entry such as `ddp_bucket<N>mb` takes a whole number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

AUTO = "auto"
NAME = re.compile(r"^[a-z0-9_]+$")


@dataclass(frozen=True)
class Strategy:
    framework: str
    name: str  # the axis value; a pattern with <N> for a whole number (e.g. ddp_bucket<N>mb)
    means: str  # what it does, for the README and errors
    gpu_only: str = ""  # why it does not run on CPUs (the backend's unsupported reason there); "" = it does
    note: str = ""  # why it does not run anywhere in dlbench (the supervisor's unsupported reason)

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.escape(self.name).replace("<N>", "([0-9]+)") + "$")

    def number(self, name: str) -> int | None:
        """The <N> of a pattern entry's name (ddp_bucket4mb -> 4), else None."""
        match = self.pattern.match(name)
        return int(match.group(1)) if match and match.groups() else None


NCCL_ONLY = "it needs NCCL, which needs GPUs"
ONE_PROCESS = (
    "{what} drives every device of a node from one process; dlbench runs one process per device "
    "(its launcher, its timing and its records are per rank), so it is not implemented"
)
STRATEGIES: tuple[Strategy, ...] = (
    # PyTorch: DistributedDataParallel (bucketed all-reduce overlapping backward) or FSDP sharding.
    Strategy("pytorch", "ddp_gloo", "DDP over the Gloo backend (TCP; CPU or GPU tensors), 25 MiB buckets"),
    Strategy("pytorch", "ddp_nccl", "DDP over NCCL (GPUs only), 25 MiB buckets", gpu_only=NCCL_ONLY),
    Strategy(
        "pytorch",
        "ddp_bucket<N>mb",
        "DDP (the auto backend) with bucket_cap_mb=N: gradients all-reduced in "
        "buckets of N MiB as backward produces them",
    ),
    Strategy(
        "pytorch",
        "ddp_fp16",
        "DDP with the fp16_compress_hook: gradients cast to float16 for the all-reduce, back to float32 after",
    ),
    Strategy(
        "pytorch", "ddp_bf16", "DDP with the bf16_compress_hook (NCCL 2.10+ with CUDA 11+ only)", gpu_only=NCCL_ONLY
    ),
    Strategy(
        "pytorch",
        "ddp_powersgd",
        "DDP with the PowerSGD hook (rank-1 low-rank compression, error feedback; "
        "plain all-reduce for the first 2 steps)",
        gpu_only="PowerSGD over Gloo crashed here (a rank's connection reset inside the hook's compute_qs at "
        "its first compressed step), so it is allowed on GPUs (NCCL) only",
    ),
    Strategy(
        "pytorch",
        "fsdp",
        "FSDP2 fully_shard: parameters, gradients and optimizer state sharded over the "
        "ranks (all-gather before use, reduce-scatter of gradients) - ZeRO-3",
    ),
    # TensorFlow: tf.distribute strategies.
    Strategy(
        "tensorflow",
        "mwms_ring",
        "MultiWorkerMirroredStrategy, collectives CommunicationImplementation.RING (gRPC ring all-reduce)",
    ),
    Strategy(
        "tensorflow", "mwms_nccl", "MultiWorkerMirroredStrategy, collectives NCCL (GPUs only)", gpu_only=NCCL_ONLY
    ),
    Strategy(
        "tensorflow",
        "mwms_auto",
        "MultiWorkerMirroredStrategy, CommunicationImplementation.AUTO (the runtime picks: NCCL on GPUs, ring on CPUs)",
    ),
    Strategy(
        "tensorflow",
        "mwms_pack<N>mb",
        "MultiWorkerMirroredStrategy (the auto implementation) with "
        "bytes_per_pack=N MiB: gradients all-reduced in packs of N MiB",
    ),
    Strategy(
        "tensorflow",
        "mirrored_nccl",
        "MirroredStrategy with NcclAllReduce cross-device ops",
        note=ONE_PROCESS.format(what="MirroredStrategy"),
    ),
    Strategy(
        "tensorflow",
        "mirrored_hierarchical_copy",
        "MirroredStrategy with HierarchicalCopyAllReduce (DGX-1-style copies)",
        note=ONE_PROCESS.format(what="MirroredStrategy"),
    ),
    Strategy(
        "tensorflow",
        "mirrored_reduce_to_one_device",
        "MirroredStrategy with ReductionToOneDevice (sum on one device, broadcast back)",
        note=ONE_PROCESS.format(what="MirroredStrategy"),
    ),
    Strategy(
        "tensorflow",
        "parameter_server",
        "ParameterServerStrategy: variables on parameter-server tasks, steps scheduled by a coordinator",
        note="ParameterServerStrategy needs a coordinator process that schedules steps on worker tasks and "
        "parameter-server tasks holding the variables (ClusterCoordinator); dlbench's ranks are symmetric "
        "workers timed in lockstep, so it is not implemented",
    ),
    # MXNet: kvstore types (ps-lite: a server per node) or Horovod.
    Strategy(
        "mxnet",
        "dist_sync",
        "kvstore dist_sync: ps-lite servers (one per node) sum the gradients, every worker "
        "updates its own weights (update_on_kvstore=False, an all-reduce)",
    ),
    Strategy(
        "mxnet",
        "dist_device_sync",
        "kvstore dist_device_sync: as dist_sync, gradients aggregated on the device (GPU) before the push",
    ),
    Strategy(
        "mxnet",
        "dist_sync_ps",
        "kvstore dist_sync with update_on_kvstore=True: the server holds the "
        "weights and runs the optimizer, workers push gradients and pull weights (a parameter server)",
    ),
    Strategy(
        "mxnet",
        "dist_async",
        "kvstore dist_async: a parameter server applying each worker's gradients "
        "as they arrive (asynchronous SGD, no barrier per step)",
    ),
    Strategy("mxnet", "horovod", "Horovod's DistributedTrainer (ring all-reduce over MPI/Gloo, NCCL on GPUs)"),
    Strategy(
        "mxnet",
        "device",
        "kvstore device: gradients summed on GPUs within one process",
        note=ONE_PROCESS.format(what="kvstore 'device'"),
    ),
    Strategy(
        "mxnet",
        "local",
        "kvstore local: gradients summed in CPU memory within one process",
        note=ONE_PROCESS.format(what="kvstore 'local'"),
    ),
    # JAX: jax.distributed over the processes, a Mesh over their devices (one each).
    Strategy(
        "jax",
        "gspmd",
        "the step jitted on the global batch with NamedShardings: XLA's SPMD partitioner inserts the "
        "all-reduces (BatchNorm statistics over the global batch, synchronous BatchNorm)",
    ),
    Strategy(
        "jax",
        "pmean_fp16",
        "jax.shard_map as auto, the gradients cast to float16 for the all-reduce (one flat buffer), back to "
        "float32 after (DDP's fp16_compress_hook in JAX)",
    ),
    Strategy(
        "jax",
        "pmap",
        "jax.pmap over a node's devices (the legacy single-program data parallelism)",
        note=ONE_PROCESS.format(what="jax.pmap"),
    ),
)


def find(framework: str, name: str) -> Strategy | None:
    """The framework's entry for `name` (a pattern entry matches its numbered names), else None."""
    return next((s for s in STRATEGIES if s.framework == framework and s.pattern.match(name)), None)


def number(framework: str, name: str) -> int | None:
    """The <N> of one of the framework's numbered strategy names (ddp_bucket4mb -> 4), else None."""
    entry = find(framework, name)
    return entry.number(name) if entry else None


def known(name: str) -> bool:
    """Some framework has a strategy of this name (or it is auto)."""
    return name == AUTO or any(s.pattern.match(name) for s in STRATEGIES)


def names(framework: str | None = None) -> list[str]:
    return [s.name for s in STRATEGIES if framework in (None, s.framework)]


def problem(framework: str, name: str, world_size: int) -> str | None:
    """Why `name` cannot run for this framework and world size whatever the device (an `unsupported` record),
    else None. The device-dependent checks are the backends' (setup_runtime)."""
    if name == AUTO:
        return None
    entry = find(framework, name)
    if entry is None:
        return f"strategy {name!r} is not one of {framework}'s (its strategies: {', '.join([AUTO, *names(framework)])})"
    if entry.note:
        return f"strategy {name!r}: {entry.note}"
    if entry.number(name) == 0:
        return f"strategy {name!r}: the size must be at least 1 MiB"
    if world_size < 2:
        return (
            f"strategy {name!r} exchanges gradients between ranks and this run has one; use a topology with "
            "several devices (its 1x1 baseline is the auto strategy)"
        )
    return None


def cpu_problem(framework: str, name: str) -> str | None:
    """Why this strategy cannot run on CPUs (the backends' unsupported reason on a CPU run), else None."""
    entry = find(framework, name)
    return f"strategy {name!r} runs on GPUs only: {entry.gpu_only}" if entry and entry.gpu_only else None
