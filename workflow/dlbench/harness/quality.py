"""Time to quality: train from a fixed seed until held-out accuracy reaches a target, MLPerf-style (standard
library only; dlbench.harness.rank runs it instead of the throughput loop when --quality is given).

MLPerf Training's rules, as far as they apply to one dlbench run:
- init (init_start .. init_stop): building the model, optimizer and input pipelines (train and evaluation). Not
  timed. run_start follows a barrier; time to train = run_stop - run_start, evaluation included.
- Seeds: spec.seed (+ rank), fixed per run; the workflow gives each repeat its own (repeat - 1), as MLPerf's runs
  differ in seed.
- The schedule: a step of spec.batch_size per rank at the learning rate `learning_rate(settings, step)` (linear
  warm-up from 0, then cosine, polynomial (power 2, MLPerf's LARS reference) or linear (power 1, Google's and
  MLPerf's BERT) decay to end_lr over decay_steps, or constant); every eval_every_steps steps an evaluation over the
  whole held-out split (ResNet: top-1 on the ImageNet validation shards; BERT: masked-LM accuracy on the held-out
  shard, datasets.bert_shards). ResNet trains with SGD (momentum, weight_decay below); BERT keeps its Adam or LAMB
  (bert.OPTIMIZERS: betas, epsilon, weight decay), only the learning rate follows this schedule.
- Stop at the first evaluation whose accuracy reaches the target (converged), or at the budget: max_steps steps
  or max_minutes minutes since run_start (whichever comes first; an evaluation ends every run, so the last point
  of the curve is always measured). A run that stops at the budget did not converge: MLPerf counts it as failed.

The settings (`Settings`, from the study's `quality` block: a JSON object on the command line) are part of the
configuration's identity (dlbench.vocabulary.identity), except the budget (identity.QUALITY_BUDGET). The log gets
one `eval` line per evaluation and the summary a `quality` entry (runlog.py); dlbench.collect.mlperf_writer writes the
MLPerf log from them.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from .runlog import append_line

DECAYS = ("cosine", "poly", "linear", "constant")


@dataclass(frozen=True)
class Settings:
    target: float  # held-out accuracy to reach, 0..1 (ResNet-50: top-1)
    eval_every_steps: int
    base_lr: float = 0.1  # per global batch as given; no scaling rule is applied
    warmup_steps: int = 0
    decay: str = "cosine"
    decay_steps: int = 0  # steps from the end of warm-up to end_lr (0: no decay)
    end_lr: float = 0.0
    momentum: float = 0.9  # SGD (ResNet) only
    weight_decay: float = 5e-5  # SGD (ResNet) only: BERT's Adam/LAMB keep bert.OPTIMIZERS' weight decay
    max_steps: int = 0  # budget: 0 = none
    max_minutes: float = 0.0  # budget: 0 = none

    def __post_init__(self) -> None:
        if not 0 < self.target <= 1:
            raise ValueError(f"quality target {self.target} is not an accuracy in (0, 1]")
        if self.eval_every_steps < 1:
            raise ValueError(f"quality eval_every_steps {self.eval_every_steps} must be at least 1")
        if self.decay not in DECAYS:
            raise ValueError(f"quality decay {self.decay!r} is not one of {', '.join(DECAYS)}")
        if not (self.max_steps or self.max_minutes):
            raise ValueError("quality needs a budget: max_steps or max_minutes (a run that never converges must end)")


def parse(text: str) -> Settings | None:
    """The --quality argument (a JSON object of Settings' fields) -> Settings; '' -> None (throughput)."""
    if not text:
        return None
    values = json.loads(text)
    known = {f.name for f in fields(Settings)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"quality: unknown setting(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return Settings(**values)


def learning_rate(settings: Settings, step: int) -> float:
    """The learning rate of step `step` (0-based): linear warm-up, then the decay."""
    s = settings
    if step < s.warmup_steps:
        return s.base_lr * (step + 1) / s.warmup_steps
    if s.decay == "constant" or s.decay_steps <= 0:
        return s.base_lr
    progress = min(1.0, (step - s.warmup_steps) / s.decay_steps)
    if s.decay == "cosine":
        return s.end_lr + (s.base_lr - s.end_lr) * 0.5 * (1 + math.cos(math.pi * progress))
    power = 1 if s.decay == "linear" else 2  # poly: power 2
    return s.end_lr + (s.base_lr - s.end_lr) * (1 - progress) ** power


def train_to_target(spec, settings: Settings, backend, world: int, log, init_start: float) -> dict:
    """Run after backend.setup(): build the evaluation, then train and evaluate until the target or the budget.
    Returns the summary's fields (rank 0 also writes the `eval` lines). `backend` follows backends/base.py."""
    backend.setup_quality(settings)
    backend.sync()
    backend.barrier()
    init_stop = run_start = time.time()
    global_batch = spec.batch_size * world
    records = backend.train_records()
    step, train_s, eval_s = 0, 0.0, 0.0
    evals: list[dict[str, Any]] = []
    converged, stopped_by = False, None
    block_start = time.perf_counter()
    while True:
        budget_steps = settings.max_steps and step >= settings.max_steps
        budget_time = settings.max_minutes and time.time() - run_start >= settings.max_minutes * 60
        due = step > 0 and (step % settings.eval_every_steps == 0 or budget_steps or budget_time)
        if due and (not evals or evals[-1]["step"] != step):
            loss = backend.loss()  # waits for the last step: the block's training time ends here
            train_block = time.perf_counter() - block_start
            started = time.perf_counter()
            correct, count = backend.evaluate()
            seconds = time.perf_counter() - started
            train_s, eval_s = train_s + train_block, eval_s + seconds
            accuracy = correct / count if count else 0.0
            entry = {
                "type": "eval",
                "step": step,
                "samples": step * global_batch,
                "epoch": step * global_batch / records if records else None,
                "accuracy": accuracy,
                "correct": correct,
                "count": count,
                "loss": loss,
                "lr": learning_rate(settings, step - 1),
                "time": time.time(),
                "elapsed_s": time.time() - run_start,
                "train_seconds": train_block,
                "eval_seconds": seconds,
            }
            evals.append(entry)
            if log is not None:
                append_line(log, entry)
                print(
                    f"[dlbench] step {step}: accuracy {accuracy:.4f} ({correct}/{count}), loss {loss:.4f}, "
                    f"{entry['elapsed_s']:.1f} s",
                    file=sys.stderr,
                )
            if accuracy >= settings.target:
                converged, stopped_by = True, "target"
                break
            block_start = time.perf_counter()
        if budget_steps or budget_time:
            stopped_by = "max_steps" if budget_steps else "max_minutes"
            break
        backend.set_learning_rate(learning_rate(settings, step))
        backend.step()
        step += 1
    backend.sync()
    run_stop = time.time()
    samples = step * global_batch
    return {
        "samples": samples,
        "elapsed_s": run_stop - run_start,
        # between evaluations: the training steps' own rate (compare with a throughput run)
        "throughput": samples / train_s if train_s else None,
        "loss_final": evals[-1]["loss"] if evals else None,
        "quality": {
            **asdict(settings),
            "converged": converged,
            "stopped_by": stopped_by,
            "steps": step,
            "samples_to_converge": samples if converged else None,
            "time_to_train_s": run_stop - run_start,
            "train_seconds": train_s,
            "eval_seconds": eval_s,
            "evaluations": len(evals),
            "accuracy_final": evals[-1]["accuracy"] if evals else None,
            "train_records": records,
            "eval_records": evals[-1]["count"] if evals else None,
            "global_batch_size": global_batch,
            "init_start": init_start,
            "init_stop": init_stop,
            "run_start": run_start,
            "run_stop": run_stop,
        },
    }
