"""The contract every framework backend fulfils, and what they share (standard library only).

A framework is a package backends/<framework>/ (registered in harness/frameworks.py) whose backend.py defines
`Backend`, a subclass of `BackendBase` below that implements every abstract method. dlbench.harness.rank
drives it, in this order, on every rank:

    backend = Backend(spec, rank, world, local_rank, threads)   # after this process is pinned to its cores
    rank.run checks spec.model in backend.models and spec.data in backend.data   (else: unsupported)
    backend.setup()
    backend.environment(), backend.strategy_in_effect()          # rank 0: the log's environment line
                                                                 # (with settings_in_effect() as `settings`)
    warm-up:   backend.step(); backend.loss()                    # each step timed alone (loss() waits for it)
    backend.sync(); backend.barrier()
    clock = backend.step_clock(measured_steps)                   # made before the window
    measured:  backend.step(); clock.mark() x measured_steps     # timed back to back, no host synchronisation
    backend.sync(); backend.barrier()                            # the last step ends when every rank is done
    backend.loss(); backend.all_gather({... device_name(), threads, peak_memory_bytes() ...})
    time to quality (--quality, harness/quality.py) instead of warm-up and measured steps:
               backend.setup_quality(settings); train_records(); then set_learning_rate(lr); step() per step
               and every eval_every_steps steps loss(); evaluate()
    finally:   backend.shutdown()                                # also after a failure, then classify(exc)

Timing discipline: step() only queues work (on GPUs, asynchronously; it must not read a value back), so the
measured steps run back to back and each one's time is the gap between step ends. Only sync() waits for the
device, and only loss() reads a value back. What a step does is what training does: with real data it takes
the input pipeline's next batch, so reading, decoding and augmenting count.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from itertools import pairwise

from ...vocabulary.axes import kinds_in_words
from ...vocabulary.identity import throughput_unit
from ..datasets import InputPipeline
from ..frameworks import REGISTRY
from ..spec import RunSpec, Unsupported, is_bert


class StepClock:
    """The measured steps' boundaries, marked without waiting for the device and read after the window: start()
    before the first step, mark() after each; durations() the gaps in seconds, one per step."""

    def __init__(self) -> None:
        self.marks: list[float] = []

    def start(self) -> None:
        self.marks = [time.perf_counter()]

    def mark(self) -> None:
        self.marks.append(time.perf_counter())

    def durations(self) -> list[float]:
        return [b - a for a, b in pairwise(self.marks)]


class EventClock(StepClock):
    """Step ends as device events recorded in the stream after each step (no host synchronisation), read after the
    window: each step's time on the device, not the host's time to queue it. `make_event()` gives one timing event
    (CUDA's, in the framework's API: record() and elapsed_time(later) in milliseconds); the events are made before
    the window."""

    def __init__(self, steps: int, make_event: Callable[[], object]) -> None:
        super().__init__()
        self.events: list = [make_event() for _ in range(steps + 1)]
        self.recorded = 0

    def start(self) -> None:
        self.recorded = 0
        self.mark()

    def mark(self) -> None:
        self.events[self.recorded].record()
        self.recorded += 1

    def durations(self) -> list[float]:
        return [a.elapsed_time(b) / 1000 for a, b in pairwise(self.events[: self.recorded])]


class BackendBase(ABC):
    """One rank's training of spec.model in one framework. Subclasses set the class attributes below and
    implement the abstract methods; `setup()` and `step()` call the model kind's hooks (ResNet-50 or BERT)."""

    models: tuple[str, ...] = ("resnet50",)  # what rank.run accepts before setup()
    data: tuple[str, ...] = ("synthetic",)
    # classify(): the framework's out-of-memory exceptions (MemoryError always counts) and the lower-case
    # fragments of an error message that mean out of memory, or a limit of this build ("unsupported").
    oom_errors: tuple[type[BaseException], ...] = ()
    oom_markers: tuple[str, ...] = ()
    unsupported_markers: tuple[str, ...] = ()

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int, threads: int) -> None:
        """Called once the process is pinned to its share of the node's cores (`threads` of them, the count the
        summary reports): set the framework's thread pools and pick this rank's device (raise Unsupported when
        it is missing). No collective and no model yet: rank.run still checks `models` and `data`."""
        self.spec, self.rank, self.world, self.local_rank = spec, rank, world, local_rank
        self.threads = threads
        self.is_bert = is_bert(spec.model)  # BERT pretraining, else ResNet-50 (or Llama: self.kind)
        self.kind = spec.kind  # resnet, bert or llama: which setup_<kind> and <kind>_step run
        self.pipeline: InputPipeline | None = None  # data real: the input pipeline, built by setup()

    @property
    def unit(self) -> str:
        return throughput_unit(self.spec.model)

    # ---- building
    def setup(self) -> None:
        """Everything before the first step: refuse settings of the other models, start the runtime shared by
        every model (setup_runtime), then build model, optimizer and inputs (setup_resnet, setup_bert or
        setup_llama)."""
        self.check_model_settings()
        self.setup_runtime()
        self.setup_model()

    def setup_model(self) -> None:
        """Build model, optimizer and inputs (setup_resnet, setup_bert or setup_llama), once setup_runtime ran:
        settings_in_effect reads the runtime's settings between the two."""
        getattr(self, f"setup_{self.kind}")()

    def check_model_settings(self) -> None:
        """A model axis of another kind (BERT's optimizer on ResNet-50) must not reach a model that would ignore
        it; a compiler mode only a framework that has it (frameworks.py, `compiler_modes`)."""
        framework = REGISTRY[self.spec.framework]
        if self.spec.compiler_mode and not framework.compiler_modes:
            raise Unsupported(
                f"compiler mode {self.spec.compiler_mode} is torch.compile's; {framework.display_name}'s "
                f"compiler ({framework.compiler}) is on or off"
            )
        if foreign := self.spec.foreign_inputs():
            name = foreign[0].name
            raise Unsupported(
                f"{name} {self.spec.inputs[name]!r} is a {kinds_in_words(name)} setting; "
                f"{self.spec.model} does not read it"
            )

    @abstractmethod
    def setup_runtime(self) -> None:
        """What both models need first: with several ranks the collectives (process group, strategy, kvstore:
        this may block until every rank has joined), the precision (AMP) settings, seeds (spec.seed + rank)."""

    @abstractmethod
    def setup_resnet(self) -> None:
        """ResNet-50 v1.5, SGD with momentum, and its inputs: one synthetic batch resident on the device, or
        (data real) `self.pipeline` over the ImageNet shards."""

    @abstractmethod
    def setup_bert(self) -> None:
        """BERT pretraining (bert.CONFIGS[spec.model]), spec.optimizer_name's optimizer and schedule, and its
        inputs: one bert.synthetic_batch resident on the device, or (data real) `self.pipeline`."""

    def setup_llama(self) -> None:
        """Llama decoder pretraining (llama.CONFIGS[spec.model]) at spec.seq_length, AdamW (llama.ADAMW), bf16
        autocast with amp, spec.activation_checkpointing, and its inputs: one llama.synthetic_tokens batch
        resident on the device, or (data real) `self.pipeline` over the packed token shards
        (datasets.TokenShards). A backend that implements it lists the Llama models in `models`; the others
        never get here (rank.run records `unsupported`), and this default says why if one does."""
        raise Unsupported(f"the Llama models are not implemented for {self.spec.framework} yet")

    # ---- the measured work
    def step(self) -> None:
        """One training step of spec.batch_size samples on this rank: forward, loss, backward, gradients
        combined over the ranks, update. Queued only: no read-back, no host synchronisation."""
        getattr(self, f"{self.kind}_step")()

    @abstractmethod
    def resnet_step(self) -> None:
        """step() for ResNet-50 (softmax cross-entropy, the mean over the global batch)."""

    @abstractmethod
    def bert_step(self) -> None:
        """step() for BERT (masked-LM + next-sentence loss, dropout on, the learning-rate schedule advanced,
        with spec.grad_clip the gradients clipped by their global norm over the ranks)."""

    def llama_step(self) -> None:
        """step() for Llama (causal LM cross entropy over every position's next token)."""
        raise Unsupported(f"the Llama models are not implemented for {self.spec.framework} yet")

    @abstractmethod
    def loss(self) -> float:
        """The last step's loss on this rank, read back to the host (so it waits for that step)."""

    @abstractmethod
    def sync(self) -> None:
        """Wait until everything queued on this rank's device, the last update included, has finished."""

    @abstractmethod
    def barrier(self) -> None:
        """Return once every rank has reached it (nothing to do with one rank)."""

    def step_clock(self, steps: int) -> StepClock:
        """What marks the end of each of `steps` measured steps: the host's clock here (a step is timed by when the
        host finished queuing it, which on a CPU is when it ran). A device that runs steps asynchronously gives a
        clock of its own (PyTorch on CUDA: events in the stream), read only after the window."""
        return StepClock()

    @abstractmethod
    def all_gather(self, obj: dict) -> list[dict]:
        """Every rank's JSON-able `obj`, in rank order, on every rank (called once, after the measured steps)."""

    # ---- time to quality (harness/quality.py); a framework without it records `unsupported`
    def setup_quality(self, settings) -> None:
        """After setup(): for ResNet the optimizer's momentum and weight decay from `settings` (quality.Settings);
        for BERT its Adam/LAMB unchanged but with no schedule of its own (set_learning_rate sets every step's rate).
        And the evaluation over the held-out split (ResNet: the ImageNet validation shards, resized to 1.14 x
        image_size and centre-cropped, no augmentation; BERT: the held-out shard, datasets.bert_split; this rank's
        1/world of the records)."""
        raise Unsupported(f"time to quality is not implemented for {self.spec.framework} yet")

    def train_records(self) -> int:
        """Records of the training split (all ranks together): what an epoch is."""
        raise Unsupported(f"time to quality is not implemented for {self.spec.framework} yet")

    def set_learning_rate(self, lr: float) -> None:
        """The learning rate of the next step (the schedule is quality.learning_rate's, the same everywhere)."""
        raise Unsupported(f"time to quality is not implemented for {self.spec.framework} yet")

    def evaluate(self) -> tuple[int, int]:
        """One pass over the held-out split in inference mode: (correct, evaluated) summed over the ranks
        (ResNet: top-1 over images; BERT: masked-LM accuracy over the real masked positions). Training mode is
        restored afterwards."""
        raise Unsupported(f"time to quality is not implemented for {self.spec.framework} yet")

    # ---- the CPU's peak for MFU (harness/peak.py times it; no run does)
    @classmethod
    @abstractmethod
    def cpu_gemm(cls, n: int, threads: int, fmt: str) -> Callable[[], object]:
        """One n x n matrix product in `fmt` (peak.FORMATS: fp32, or bf16 as AMP multiplies on a CPU; both
        operands and the product in it), with `threads` threads set as this framework's runs set them: a callable
        that returns once its product is done (an asynchronous framework would otherwise be timed on queuing it).
        ValueError, with the reason, for a format it cannot multiply in on this CPU."""

    # ---- facts for the log
    @abstractmethod
    def environment(self) -> dict:
        """The log's environment line (rank 0, after setup): framework and library versions, device, world
        size and distributed backend, threads, precision, compiler, parameters, input pipeline; for BERT also
        bert_environment()'s keys."""

    @abstractmethod
    def strategy_in_effect(self) -> dict:
        """How the ranks exchange gradients, read back from the framework's own objects after setup (not echoed
        from spec.strategy): a dict of facts with `summary`, one line (the record's strategy_in_effect). With
        one rank: {"summary": "none (one rank)"}. spec.strategy's GPU-only or build-dependent cases raise
        Unsupported in setup_runtime, before any model is built (harness/strategies.py)."""

    @abstractmethod
    def settings_in_effect(self) -> dict:
        """The framework settings that decide its speed on this device, read back from the framework after
        setup (threads, oneDNN/cuDNN, memory layout, compiler): its documented best, so that a reader sees why one
        framework beat another. A dict of facts with `summary`, one line; environment() records it as
        `settings` (the report's environment table shows the summary)."""

    def bert_environment(self, optimizer: str, clip_norm: float) -> dict:
        """The BERT keys of environment(): the optimizer as this framework implements it, clipping, shapes."""
        spec = self.spec
        return {
            "optimizer": optimizer,
            "grad_clip": spec.grad_clip,
            "clip_norm": clip_norm if spec.grad_clip else None,
            "seq_length": spec.seq_length,
            "max_predictions": spec.predictions,
        }

    @abstractmethod
    def device_name(self) -> str:
        """The device's name (the GPU's, or the CPU model)."""

    @abstractmethod
    def peak_memory_bytes(self) -> int | None:
        """Peak device memory of this rank; None on CPU (the harness then reports the process's peak RSS)."""

    # ---- the end
    def classify(self, exc: BaseException) -> str:
        """The status a failure records (Unsupported never reaches here): oom, unsupported or error."""
        if isinstance(exc, (MemoryError, *self.oom_errors)):
            return "oom"
        text = str(exc).lower()
        if any(marker in text for marker in self.unsupported_markers):
            return "unsupported"
        if any(marker in text for marker in self.oom_markers):
            return "oom"
        return "error"

    @abstractmethod
    def shutdown(self) -> None:
        """Release pipelines, collectives and helper processes. Always called once the backend exists, also
        after a failure in setup() or a step; then the other ranks may be gone, so it must not wait for them."""
