"""Caveats a reader must see before comparing a report's numbers with anything (read from the records)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..harness.frameworks import EAGER, REGISTRY
from ..vocabulary import identity

NEEDED = (
    "source",
    "platform",
    "topology",
    "config_id",
    "image_size",
    "device_name",
    "cpu_model",
    "framework",
    "compiler",
    "train_flops_per_sample",
    "seq_length",
    "model",
    "max_predictions",
    "warmup_steps",
    "measured_steps",
    "warmup_auto",
)


def _steps(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def applies_to(runs: pd.DataFrame) -> str:
    """The runs a note is about, in words: each model with its frameworks, 'resnet50 (pytorch, tensorflow)'."""
    models = runs.groupby(runs["model"].fillna("?"), sort=True)["framework"]
    return "; ".join(f"{model} ({', '.join(sorted({str(f) for f in fws.dropna()}))})" for model, fws in models)


def mfu_caveat(summary: pd.DataFrame) -> list[str]:
    """How MFU is counted and the peaks the configurations with an MFU were held to (none: no MFU shown)."""
    if "mfu" not in summary or not summary["mfu"].notna().any():
        return []
    peaks = sorted({str(n) for n in summary.loc[summary["mfu"].notna(), "mfu_note"].dropna()})
    return [
        "MFU = achieved model TFLOP/s per device (TFLOP/s / devices) / the device's dense peak for the math the "
        "run used (workflow/references/device_peaks.yaml, NVIDIA datasheets, sparsity figures halved): AMP runs "
        "against the bf16 or fp16 tensor-core peak, fp32 runs with TF32 on against the TF32 peak, else FP32. On a "
        "CPU whose peak the study measured (platform.cpu_peak: measure): TFLOP/s per node / the node's fp32 GEMM "
        "peak, the highest of the frameworks' libraries. A device without a known peak (an unlisted GPU, a CPU not "
        "measured) has no MFU. Peaks used: " + " · ".join(peaks)
    ]


def imported_hardware(records: pd.DataFrame) -> list[str]:
    """The hardware of imported sets as their logs or labels state it (MLPerf's submission_platform, a device name,
    the topology); a set that states none gets no line: nothing is said that its logs do not say."""
    imported = records[records["source"].notna() & (records["source"] != "dlbench")]
    described = []
    for config, group in imported.groupby("config_id", sort=True):
        said = [
            *(f"platform {p}" for p in sorted({str(p) for p in group["platform"].dropna()})),
            *sorted({str(d) for d in group["device_name"].dropna()}),
        ]
        if said:
            topology = sorted({str(t) for t in group["topology"].dropna()})
            where = f" ({', '.join(topology)} devices)" if topology else ""
            described.append(f"{config}: {', '.join(said)}{where}")
    if not described:
        return []
    return ["Imported results ran on the hardware their logs name, not on this machine: " + "; ".join(described) + "."]


def caveats(records: pd.DataFrame) -> list[str]:
    """Caveats a reader must see before comparing the numbers with anything."""
    records = records.reindex(columns=list(dict.fromkeys([*records.columns, *NEEDED])))  # records of any source
    out = []
    sizes = sorted({int(s) for s in records["image_size"].dropna()})
    if sizes and sizes != [224]:
        out.append(
            f"Images are {', '.join(f'{s}x{s}' for s in sizes)} pixels, not 224x224: throughput is "
            "not comparable with published ResNet-50 figures."
        )
    own = records[records["source"].isna() | (records["source"] == "dlbench")]  # dlbench's runs, not imports
    if len(own) and (
        own["device_name"].dropna().eq(own["cpu_model"].dropna()).any() or own["device_name"].isna().all()
    ):
        out.append(
            "Runs on CPU: the ranks of a topology share one node's cores (threads_per_rank each), so "
            "1xN splits the same cores N ways rather than adding devices."
        )
    out += imported_hardware(records)
    present = [REGISTRY[f] for f in sorted(set(records["framework"].dropna())) if f in REGISTRY]
    if present and records["compiler"].map(lambda v: v is True or str(v).lower() == "true").any():
        not_eager = [f"{f.display_name}: {f.compiler_off}" for f in present if f.compiler_off != EAGER]
        out.append(
            "Compiler on means "
            + "; ".join(f.compiler_meaning for f in present)
            + ". Off: eager / imperative execution"
            + (f", except {'; '.join(not_eager)}" if not_eager else "")
            + "."
        )
    if records["train_flops_per_sample"].notna().any():
        out.append(
            "TFLOP/s = throughput x the model's training FLOPs per sample, counted from the architecture: "
            "3 x the forward pass, 2 FLOPs per multiply-accumulate (ResNet-50 forward: 4.09 GMAC at 224x224; "
            "BERT: the encoder's projections, attention and feed-forward per token, the masked-LM head at the "
            "masked positions only, about 6 x parameters x tokens plus attention)."
        )
    llama = records[records["model"].map(identity.is_llama)]
    if len(llama):
        shapes = llama[["model", "seq_length"]].drop_duplicates()
        out.append(
            "Llama decoder pretraining (causal LM), throughput in tokens/s (every position of every sequence; "
            "sequences/s = tokens/s / sequence length): "
            + "; ".join(
                f"{model} at {int(length)} tokens"
                for model, length in zip(shapes["model"], shapes["seq_length"], strict=True)
            )
            + ". Its training FLOPs per token: 6 x N + 12 x layers x hidden x sequence length (PaLM, appendix B), "
            "N = every parameter but the input embedding table (the output projection counted once, tied or not); "
            "activation checkpointing's recomputation is not counted. AdamW, bf16 autocast with amp."
        )
    bert = records[records["seq_length"].notna() & records["model"].map(identity.is_bert)]
    if len(bert):
        shapes = bert[["model", "seq_length", "max_predictions"]].drop_duplicates()
        out.append(
            "BERT pretraining (masked LM + next sentence), throughput in sequences/s: "
            + "; ".join(
                f"{model} at {int(length)} tokens with "
                + (
                    f"{int(predictions)} masked positions" if pd.notna(predictions) else "masked positions not recorded"
                )  # an import's labels may give the length only
                for model, length, predictions in zip(
                    shapes["model"], shapes["seq_length"], shapes["max_predictions"], strict=True
                )
            )
            + ". Optimizer adam = Adam with decoupled weight decay and linear warm-up "
            "(Google's); lamb = LAMB (NVIDIA's); clip = gradients clipped by global norm 1.0."
        )
    auto = records["warmup_auto"].map(lambda v: v is True or str(v).lower() == "true")
    fixed = records.loc[~auto].dropna(subset=["warmup_steps", "measured_steps"])
    warmup: Any  # a group's warm-up and measured steps (numbers, floats when read back from CSV)
    measured: Any
    for (warmup, measured), runs in fixed.groupby(["warmup_steps", "measured_steps"], sort=True):
        out.append(
            f"{applies_to(runs)}: {_steps(int(warmup), 'warm-up step')} skipped, "
            f"{_steps(int(measured), 'step')} timed per run."
        )
    if auto.any():
        taken = records.loc[auto, "warmup_steps"].dropna().astype(int)
        out.append(
            f"{applies_to(records.loc[auto])}: warm-up auto, each run warmed up until its step times settled "
            f"({taken.min()}-{taken.max()} "
            "steps, recorded per run as warmup_steps), then timed its measured steps."
        )
    return out
