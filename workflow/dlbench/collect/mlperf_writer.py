"""The MLPerf log of a dlbench time-to-quality run (rule `mlperf_log`): :::MLLOG lines written with
mlperf_logging.mllog from the run's dlbench log, so that MLPerf's own tools (compliance checker, result
summarizer) read it; logformats/mlperf.py reads such logs back. Core environment."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import constants as K
from mlperf_logging.mllog import mllog

from ..harness.bert import OPTIMIZERS  # the values every backend uses (stdlib + numpy)
from ..logformats.mlperf import BENCHMARKS
from ..logformats.runlogs import read_run
from .records import LogError, model_inputs

# The last MLPerf Training ruleset with ResNet (it left the suite in 5.0); BERT's is the same one.
RULESET = "4.0.0"
DIVISION = "open"  # other model sizes, data sets and targets than MLPerf's closed division allows
ORGANIZATION = "dlbench"
AVAILABILITY = "research"


DECAY_POWER = {"poly": 2, "linear": 1}  # harness/quality.py's polynomial decays


def bert_hyperparameters(event: Any, cfg: dict, settings: dict) -> None:
    """closed_bert.yaml's keys for a BERT run: the quality schedule's learning rate (warm-up, then decay over
    decay_steps) on the run's Adam or LAMB with harness/bert.py's betas, epsilon and weight decay. MLPerf's names
    are LAMB's (opt_lamb_*); Adam's are logged as opt_adam_* (keys of our own, as MLPerf has none)."""
    inputs = model_inputs(cfg)  # the optimizer `auto` stands for, the sequence length
    name = inputs["optimizer"]
    optimizer = OPTIMIZERS[name]
    event(K.OPT_NAME, name)
    event(K.OPT_BASE_LR, settings["base_lr"])
    event(K.OPT_LR_WARMUP_STEPS, settings["warmup_steps"])
    event(K.NUM_WARMUP_STEPS, settings["warmup_steps"])
    event(K.START_WARMUP_STEP, 0)
    event(K.OPT_LR_TRAINING_STEPS, settings["warmup_steps"] + settings["decay_steps"])
    event(f"opt_{name}_learning_rate_decay_poly_power", DECAY_POWER.get(settings["decay"]))
    event(f"opt_{name}_learning_rate_decay_schedule", settings["decay"])  # a key of our own
    event(f"opt_{name}_beta_1", optimizer.beta1)
    event(f"opt_{name}_beta_2", optimizer.beta2)
    event(f"opt_{name}_epsilon", optimizer.epsilon)
    event(f"opt_{name}_weight_decay_rate", optimizer.weight_decay)
    event(K.OPT_GRADIENT_CLIP_NORM, optimizer.clip_norm if inputs["grad_clip"] else None)
    event(K.MAX_SEQUENCE_LENGTH, inputs["seq_length"])


def write_log(run_log: str | Path, out: str | Path) -> Path:
    """The MLPerf log (:::MLLOG lines, written by mlperf_logging.mllog with the run's own timestamps) of a dlbench
    time-to-quality run, from its dlbench log: submission_*, cache_clear, init_start/stop, the hyperparameters
    (global_batch_size, opt_name sgd and the sgd_opt_* keys, warm-up epochs, model_bn_span, seed,
    train_samples/eval_samples), run_start, per evaluation block_start/stop (the training steps since the last
    evaluation, epoch_count in epochs of the training split), eval_start, eval_accuracy, eval_stop, and run_stop with
    status success (target reached) or aborted (budget). MLPerf's training ruleset RULESET, division open.
    LogError when the run is not a completed time-to-quality run."""
    run_log, out = Path(run_log), Path(out)
    header, env, summary, evals = read_run(run_log)
    cfg = header["config"]
    quality = (summary or {}).get("quality")
    if not cfg.get("quality") or not quality:
        raise LogError(f"{run_log}: not a completed time-to-quality run (no summary with `quality`)")
    settings = quality  # the harness's settings, defaults filled in (harness/quality.py)
    records, gbs = quality["train_records"], quality["global_batch_size"]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    handler = logging.FileHandler(tmp, mode="w", encoding="utf-8")
    logger = logging.getLogger(f"dlbench.mlperf.{id(handler)}")
    logger.propagate, logger.level = False, logging.INFO
    logger.addHandler(handler)
    try:
        ml = mllog.MLLogger(logger=logger)

        def event(key: str, value: Any = None, at: float = quality["init_start"], **metadata: Any) -> None:
            ml.event(key=key, value=value, metadata=metadata or None, time_ms=round(at * 1000))

        event(K.SUBMISSION_BENCHMARK, BENCHMARKS[cfg["model"]])
        event(K.SUBMISSION_ORG, ORGANIZATION)
        event(K.SUBMISSION_DIVISION, DIVISION)
        event(K.SUBMISSION_STATUS, AVAILABILITY)
        event(K.SUBMISSION_PLATFORM, f"{cfg['nodes']}x{env.get('device_name') or header.get('cpu_model')}")
        event(K.CACHE_CLEAR, True)
        ml.start(key=K.INIT_START, time_ms=round(quality["init_start"] * 1000))
        event(K.SEED, cfg["seed"])
        event(K.GLOBAL_BATCH_SIZE, gbs)
        event(K.GRADIENT_ACCUMULATION_STEPS, 1)
        event(K.TRAIN_SAMPLES, records)
        event(K.EVAL_SAMPLES, quality["eval_records"])
        if BENCHMARKS[cfg["model"]] == "bert":
            bert_hyperparameters(event, cfg, settings)
        else:
            event(K.OPT_NAME, K.SGD)  # the sgd_opt_* keys: closed_resnet_sgd.yaml's (mllog has no constants for them)
            event("sgd_opt_base_learning_rate", settings["base_lr"])
            event("sgd_opt_end_learning_rate", settings["end_lr"])
            event("sgd_opt_learning_rate_decay_steps", settings["decay_steps"])
            event("sgd_opt_learning_rate_decay_schedule", settings["decay"])  # poly (power 2) or cosine
            event("sgd_opt_learning_rate_decay_poly_power", 2 if settings["decay"] == "poly" else None)
            event("sgd_opt_weight_decay", settings["weight_decay"])
            event("sgd_opt_momentum", settings["momentum"])
            event(K.OPT_LR_WARMUP_EPOCHS, settings["warmup_steps"] * gbs / records)
            event(K.MODEL_BN_SPAN, cfg["batch_size"])  # BatchNorm statistics per device
        ml.end(key=K.INIT_STOP, time_ms=round(quality["init_stop"] * 1000))
        ml.start(key=K.RUN_START, time_ms=round(quality["run_start"] * 1000))
        previous_end, previous_epoch = quality["run_start"], 0.0
        for entry in evals:
            eval_start = entry["time"] - entry["eval_seconds"]
            epoch = entry["samples"] / records
            ml.start(
                key=K.BLOCK_START,
                time_ms=round(previous_end * 1000),
                metadata={
                    K.FIRST_EPOCH_NUM: previous_epoch,
                    K.EPOCH_COUNT: epoch - previous_epoch,
                    "samples_count": entry["samples"],
                },
            )
            ml.end(
                key=K.BLOCK_STOP,
                time_ms=round(eval_start * 1000),
                metadata={K.FIRST_EPOCH_NUM: previous_epoch, "samples_count": entry["samples"]},
            )
            ml.start(key=K.EVAL_START, time_ms=round(eval_start * 1000), metadata={K.EPOCH_NUM: epoch})
            event(K.EVAL_ACCURACY, entry["accuracy"], entry["time"], epoch_num=epoch, samples_count=entry["samples"])
            ml.end(key=K.EVAL_STOP, time_ms=round(entry["time"] * 1000), metadata={K.EPOCH_NUM: epoch})
            previous_end, previous_epoch = entry["time"], epoch
        ml.end(
            key=K.RUN_STOP,
            time_ms=round(quality["run_stop"] * 1000),
            metadata={K.STATUS: K.SUCCESS if quality["converged"] else K.ABORTED},
        )
    finally:
        logger.removeHandler(handler)
        handler.close()
    tmp.replace(out)
    return out
