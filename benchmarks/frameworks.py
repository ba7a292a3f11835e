"""Each harness against the framework's own idiomatic training loop, plus the machine's GEMM peak.

Run with the framework environment's interpreter, from the repository root:
    PYTHONPATH=workflow .venvs/pytorch-*/bin/python    benchmarks/frameworks.py --framework pytorch
    PYTHONPATH=workflow .venvs/tensorflow-*/bin/python benchmarks/frameworks.py --framework tensorflow
    PYTHONPATH=workflow .venvs/mxnet-*/bin/python      benchmarks/frameworks.py --framework mxnet

    ... --framework pytorch --model bert_base --seq-length 128 --batch-size 2 --steps 3 --rounds 4

Prints, for the model (ResNet-50, BERT) at the given shape:
- harness ÷ idiomatic: the harness's throughput over the plain loop a user of that framework writes
  (PyTorch: the textbook loop; TensorFlow: Keras `model.fit` on an in-memory dataset; MXNet: a Gluon
  `autograd.record()` loop; BERT's in bert_idiomatic_<framework>.py), each with its own model and the
  harness's framework settings (threads, oneDNN, layout), its framework's default optimizer implementation (the
  harness's are its fastest: PyTorch fused SGD, MXNet one tensor per update call on CPU), interleaved ABBA in
  one process in short rounds; each loop's per-round distribution, two modes flagged (rounds.py: a bimodal
  loop is no comparison). Target: median of per-round ratios >= 1.00 (printed with its 95% bootstrap
  interval), in each of `--runs 3` consecutive runs (fresh processes).
- MFU = achieved model FLOP/s / the machine's one peak (machine_peak.py's results file, the best fp32 GEMM of
  any library here; on a GPU --peak-gflops from the device's specification), the same for every framework;
  the framework's own GEMM is printed beside it as a diagnostic.
- the framework's settings in effect (its backend's `settings_in_effect`: threads, oneDNN, layout).
Writes benchmarks/results/frameworks-<framework>[-<model>].json (figures.py renders it into the docs).
Imports only the standard library, numpy and the framework.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import keras_fit
import machine_peak as machine_peak_file
import resultfile
import rounds
from torch_amp import TorchAmp, synchronize

from dlbench.harness import flops, rank
from dlbench.harness.spec import RunSpec


# ----------------------------------------------------------------------------- idiomatic loops
def pytorch_idiomatic(batch: int, size: int, threads: int, channels_last: bool = False, device: str = "cpu",
                      precision: str = "fp32", compiler: bool = False) -> Callable[[int], float]:
    """The textbook loop; with amp PyTorch's AMP recipe (autocast, and on CUDA fp16 with a GradScaler)."""
    import torch

    from dlbench.harness.backends.pytorch.resnet import ResNet50

    torch.set_num_threads(threads)
    # the layout the harness runs in (its settings): what PyTorch's guidance tells a user of this device
    layout = torch.channels_last if channels_last else torch.contiguous_format
    model = ResNet50().to(device, memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    forward = torch.compile(model) if compiler else model
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=layout)
    labels = torch.randint(0, 1000, (batch,), device=device)
    amp = TorchAmp(device, precision)

    def train(steps: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad()
            with amp.autocast():
                loss = loss_fn(forward(images), labels)
            amp.step(loss, optimizer)
        synchronize(device)
        return batch * steps / (time.perf_counter() - start)

    return train


def tensorflow_idiomatic(batch: int, size: int, threads: int) -> Callable[[int], float]:
    import numpy as np
    import tensorflow as tf

    from dlbench.harness.backends.tensorflow.backend import WEIGHT_DECAY
    from dlbench.harness.backends.tensorflow.resnet import ResNet50, build

    model = build(ResNet50(), size)  # threads: set by the harness backend, created first
    # the harness's hyperparameters with Keras's own SGD, as a model.compile user writes it (the harness updates
    # with one fused kernel per variable: FusedSGD; as the PyTorch harness's fused SGD against the plain loop's)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9, weight_decay=WEIGHT_DECAY),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    images = np.random.randn(batch, size, size, 3).astype("float32")
    labels = np.random.randint(0, 1000, (batch,))
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat().prefetch(tf.data.AUTOTUNE)
    model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)  # trace and build once

    def train(steps: int) -> float:
        return batch * steps / keras_fit.timed_fit(model, dataset, steps)  # not fit's teardown: keras_fit.py

    return train


def mxnet_idiomatic(batch: int, size: int, threads: int) -> Callable[[int], float]:
    import mxnet as mx
    from mxnet import autograd, gluon

    from dlbench.harness.backends.mxnet.resnet import ResNet50

    net = ResNet50()
    net.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 5e-5})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    images = mx.nd.random.normal(shape=(batch, 3, size, size))
    labels = mx.nd.random.randint(0, 1000, shape=(batch,)).astype("float32")

    def train(steps: int) -> float:
        mx.nd.waitall()
        start = time.perf_counter()
        for _ in range(steps):
            with autograd.record():
                loss = loss_fn(net(images), labels)
            loss.backward()
            trainer.step(batch)
        mx.nd.waitall()
        return batch * steps / (time.perf_counter() - start)

    return train


RESNET_IDIOMATIC = {"pytorch": pytorch_idiomatic, "tensorflow": tensorflow_idiomatic, "mxnet": mxnet_idiomatic}


def idiomatic_loop(framework: str, model: str, batch: int, size: int, seq_length: int, threads: int,
                   settings: dict, device: str = "cpu", precision: str = "fp32",
                   compiler: bool = False) -> Callable[[int], float]:
    """The plain loop: ResNet-50 ones above; BERT ones in bert_idiomatic_<framework>.py next to this file. With
    the harness's settings in effect (`settings`, its backend's): the loop a user following the framework's
    guidance writes, so that the ratio measures the loop."""
    extra = {"device": device, "precision": precision, "compiler": compiler} if framework == "pytorch" else {}
    if model == "resnet50":
        if framework == "pytorch":
            extra["channels_last"] = settings["memory_format"] == "channels_last"
        return RESNET_IDIOMATIC[framework](batch, size, threads, **extra)
    module = importlib.import_module(f"bert_idiomatic_{framework}")
    return module.idiomatic(model, batch, seq_length, threads, **extra)


# ----------------------------------------------------------------------------- measurement
def machine_peak(args: argparse.Namespace) -> tuple[float, str]:
    """FLOP/s and source of the one peak every framework's MFU is measured against: --peak-gflops (a GPU's
    specification), else machine_peak.py's results file for this machine's CPU."""
    if args.peak_gflops:
        return args.peak_gflops * 1e9, args.peak_source
    if args.device == "cuda":
        raise SystemExit("--device cuda: give --peak-gflops (the GPU's dense fp16/bf16 tensor-core peak from its "
                         "specification, e.g. 989400 for an H100 SXM) and --peak-source")
    found = machine_peak_file.read_peak()
    cpu = resultfile.machine()["cpu"]
    if found is None or found["cpu"] != cpu:
        raise SystemExit(f"no machine peak for {cpu!r}: run `.venv/bin/python benchmarks/machine_peak.py` first "
                         "(or give --peak-gflops from the device's specification)")
    return found["gflops"] * 1e9, f"machine peak ({found['library']} fp32 GEMM, machine_peak.py {found['date'][:10]})"


def measure(args: argparse.Namespace) -> dict:
    """One run: both loops interleaved in this process, then this framework's own GEMM."""
    threads = len(rank.pin_cores())
    with tempfile.TemporaryDirectory() as tmp:
        spec = RunSpec(framework=args.framework, model=args.model, nodes=1, devices_per_node=1,
                       batch_size=args.batch_size, precision=args.precision, compiler=args.compiler == "on",
                       data="synthetic", image_size=args.image_size, seq_length=args.seq_length, warmup_steps=1,
                       measured_steps=args.steps, repeat=1, config_id="bench", log=str(Path(tmp) / "run.jsonl"),
                       device=args.device)
        backend = rank.load_backend(spec, 0, 1, 0, threads)  # first: it sets the framework's threads
        backend.setup()
        backend.setup = lambda: None  # rank.run must not rebuild the model each round
        settings = backend.environment()["settings"]
        train = idiomatic_loop(args.framework, args.model, args.batch_size, args.image_size, args.seq_length, threads,
                               settings, args.device, args.precision, args.compiler == "on")

        def harness() -> float:
            throughput = rank.run(spec, backend, 0, 1, Path(spec.log))["throughput"]
            Path(spec.log).unlink()
            return throughput

        # one untimed round of each loop first (the harness's model is its own, as cold as the idiomatic loop's):
        # with only the idiomatic loop warmed (3 steps, until 2026-11-24), the harness's first 20 PyTorch steps ran
        # at 0.6-0.9 of its speed on a Zen 5 VM and its first two rounds' ratios read 0.68-0.93
        idiomatic, harnessed = rounds.interleaved(args.rounds, lambda: train(args.steps), harness, warmup=1)
    own_gemm = (machine_peak_file.cuda_gemm(args.gemm_n, 20, args.precision) if args.device == "cuda"
                else machine_peak_file.gemm(args.framework, args.gemm_n, 5, threads))
    return {"idiomatic": idiomatic, "harness": harnessed, "own_gemm": own_gemm, "settings": settings,
            "device_name": backend.device_name(),
            "threads": threads, "unit": backend.unit, "predictions": spec.predictions}


def run_in_processes(args: argparse.Namespace) -> list[dict]:
    """--runs N: N consecutive runs, each a fresh process of this interpreter (a run's allocator, thread pools
    and compiled graphs are its own), so three runs mean three independent starts."""
    results = []
    for _ in range(args.runs):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--runs", "1", "--one-run", out.name],
                           check=True)
            results.append(json.loads(Path(out.name).read_text()))
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--framework", choices=sorted(RESNET_IDIOMATIC), required=True)
    p.add_argument("--model", choices=("resnet50", "bert_base", "bert_tiny"), default="resnet50")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    # short rounds, many of them: this VM's throughput drifts by ±10% over tens of seconds, and only what
    # changes within one round pair is left in a per-round ratio
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--runs", type=int, default=1, help="consecutive runs, each in a fresh process")
    p.add_argument("--gemm-n", type=int, default=2048)
    p.add_argument("--compiler", choices=("off", "on"), default="off")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: PyTorch only (the CUDA builds "
                   "of TensorFlow and MXNet are not installed by dlbench's environments here)")
    p.add_argument("--precision", choices=("fp32", "amp"), default="fp32",
                   help="amp: autocast (fp16 + GradScaler on CUDA, bf16 on CPU) in both loops")
    p.add_argument("--peak-gflops", type=float, help="the device's peak from its specification (GPUs)")
    p.add_argument("--peak-source", default="device specification", help="where --peak-gflops comes from")
    p.add_argument("--one-run", help=argparse.SUPPRESS)  # a child of --runs: write its measurement here
    args = p.parse_args()
    if args.device == "cuda" and args.framework != "pytorch":
        p.error(f"--device cuda: only pytorch (no CUDA build of {args.framework} in dlbench's environments)")
    if args.one_run:
        Path(args.one_run).write_text(json.dumps(measure(args)))
        return
    record = resultfile.Recorder(__file__)
    peak, peak_source = machine_peak(args)
    runs = run_in_processes(args) if args.runs > 1 else [measure(args)]
    report(args, runs, peak, peak_source, record)


def report(args: argparse.Namespace, runs: list[dict], peak: float, peak_source: str,
           record: resultfile.Recorder) -> None:
    """Print and write the runs: each loop's rounds (flagging two modes), the ratio, MFU against the one peak."""
    first = runs[0]
    unit, threads = first["unit"], first["threads"]
    train_flops = flops.model_flops(args.model, args.image_size, args.seq_length,
                                    first["predictions"])["train_flops_per_sample"]
    shape = f"{args.image_size}x{args.image_size}" if args.model == "resnet50" else f"seq {args.seq_length}"
    where = f"{first['device_name']}" if args.device == "cuda" else f"{threads} threads"
    title = (f"{args.framework}: {args.model} {shape} batch {args.batch_size} {args.precision}, compiler "
             f"{args.compiler}, {where}; per run {args.rounds} rounds × {args.steps} steps ABBA in one process, "
             "after one untimed round of each")
    print(title)
    rows, verdicts = [], []
    for number, run in enumerate(runs, 1):
        loops, verdict = rounds.paired("idiomatic", run["idiomatic"], "harness", run["harness"], 1.0)
        verdicts.append(f"run {number}: {verdict}")
        for loop in loops:
            print(f"  run {number} {rounds.line(loop)}")
            rows.append([number, *rounds.row(loop)])
        print(f"  {verdicts[-1]}")
    pooled = {name: statistics.median(v for run in runs for v in run[name]) for name in ("harness", "idiomatic")}
    achieved = {name: value * train_flops for name, value in pooled.items()}
    own = statistics.median(run["own_gemm"] for run in runs)
    mfu = [["peak used for MFU (GFLOP/s)", round(peak / 1e9, 1)], ["peak source", peak_source],
           [f"{args.framework}'s own {gemm_kind(args)} GEMM {args.gemm_n}² (GFLOP/s, diagnostic)",
            round(own / 1e9, 1)]]
    for name in ("harness", "idiomatic"):
        mfu += [[f"{name}: median {unit} over all rounds", round(pooled[name], 2)],
                [f"{name}: achieved GFLOP/s", round(achieved[name] / 1e9, 1)],
                [f"{name}: MFU", f"{achieved[name] / peak:.1%}"]]
    for label, value in mfu:
        print(f"  {label}: {value}")
    settings = first["settings"]["summary"]
    print(f"  settings: {settings}")
    if own > peak * 1.02:  # one peak is only one peak if nothing here beats it
        verdicts.append(f"WARNING: {args.framework}'s own GEMM ({own / 1e9:.1f} GFLOP/s) is above the peak used "
                        f"for MFU ({peak / 1e9:.1f}): the peak file is stale or was measured under load (rerun "
                        "machine_peak.py, then this), or --peak-gflops is too low")
        print(f"  {verdicts[-1]}")
    record.write([resultfile.table(title, ["run", *rounds.columns("loop", unit)], rows),
                  resultfile.table(f"{args.framework}: MFU against one peak", ["figure", "value"], mfu)],
                 notes=[*verdicts, f"{args.framework} settings: {settings}"],
                 variant=variant(args))


def variant(args: argparse.Namespace) -> str:
    """The results file's variant: `pytorch`, `pytorch-bert_base`, `pytorch-amp`, `pytorch-cuda-fp32`, ... (the
    defaults, ResNet-50 and fp32 on a CPU, left out)."""
    parts = [args.framework]
    if args.model != "resnet50":
        parts.append(args.model)
    if args.device != "cpu":
        parts.append(args.device)
    if args.device != "cpu" or args.precision != "fp32":
        parts.append(args.precision)
    return "-".join(parts)


def gemm_kind(args: argparse.Namespace) -> str:
    """The diagnostic GEMM's number format: fp32 on CPUs; on CUDA the one machine_peak.cuda_gemm multiplies in."""
    return machine_peak_file.CUDA_GEMM_FORMAT[args.precision] if args.device == "cuda" else "fp32"


if __name__ == "__main__":
    main()
