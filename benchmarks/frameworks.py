"""Each harness against the framework's own idiomatic training loop, plus the machine's GEMM peak.

Run with the framework environment's interpreter, from the repository root:
    PYTHONPATH=workflow .venvs/pytorch-*/bin/python    benchmarks/frameworks.py --framework pytorch
    PYTHONPATH=workflow .venvs/tensorflow-*/bin/python benchmarks/frameworks.py --framework tensorflow
    PYTHONPATH=workflow .venvs/mxnet-*/bin/python      benchmarks/frameworks.py --framework mxnet

    ... --framework pytorch --model bert_base --seq-length 128 --batch-size 2 --steps 3 --rounds 4

Prints, for the model (ResNet-50, BERT) at the given shape:
- harness ÷ idiomatic: the harness's throughput over the plain loop a user of that framework writes
  (PyTorch: the textbook loop; TensorFlow: Keras `model.fit` on an in-memory dataset; MXNet: a Gluon
  `autograd.record()` loop; BERT's in bert_idiomatic_<framework>.py), each with its own model, interleaved
  ABBA in one process. Target >= 1.00.
- GEMM peak: a large fp32 matrix multiply in that framework (FLOP/s = 2 n^3 / t), and each harness's
  MFU = achieved model FLOP/s / that peak.
Imports only the standard library, numpy and the framework.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dlbench.harness import flops, rank
from dlbench.harness.spec import RunSpec


# ----------------------------------------------------------------------------- idiomatic loops
def pytorch_idiomatic(batch: int, size: int, threads: int) -> Callable[[int], float]:
    import torch

    from dlbench.harness.backends.pytorch.resnet import ResNet50

    torch.set_num_threads(threads)
    model = ResNet50()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    loss_fn = torch.nn.CrossEntropyLoss()
    images, labels = torch.randn(batch, 3, size, size), torch.randint(0, 1000, (batch,))

    def train(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
        return batch * steps / (time.perf_counter() - start)

    return train


def pytorch_gemm(n: int) -> float:
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    start = time.perf_counter()
    for _ in range(5):
        a @ b
    return 5 * 2 * n**3 / (time.perf_counter() - start)


def tensorflow_idiomatic(batch: int, size: int, threads: int) -> Callable[[int], float]:
    import numpy as np
    import tensorflow as tf

    from dlbench.harness.backends.tensorflow.resnet import ResNet50, build

    model = build(ResNet50(), size)  # threads: set by the harness backend, created first
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    images = np.random.randn(batch, size, size, 3).astype("float32")
    labels = np.random.randint(0, 1000, (batch,))
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat().prefetch(tf.data.AUTOTUNE)
    model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)  # trace and build once

    def train(steps: int) -> float:
        start = time.perf_counter()
        model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
        return batch * steps / (time.perf_counter() - start)

    return train


def tensorflow_gemm(n: int) -> float:
    import tensorflow as tf

    a, b = tf.random.normal((n, n)), tf.random.normal((n, n))
    tf.linalg.matmul(a, b).numpy()
    start = time.perf_counter()
    for _ in range(5):
        c = tf.linalg.matmul(a, b)
    c.numpy()
    return 5 * 2 * n**3 / (time.perf_counter() - start)


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


def mxnet_gemm(n: int) -> float:
    import mxnet as mx

    a, b = mx.nd.random.normal(shape=(n, n)), mx.nd.random.normal(shape=(n, n))
    mx.nd.dot(a, b).wait_to_read()
    start = time.perf_counter()
    for _ in range(5):
        c = mx.nd.dot(a, b)
    c.wait_to_read()
    return 5 * 2 * n**3 / (time.perf_counter() - start)


RESNET_IDIOMATIC = {"pytorch": pytorch_idiomatic, "tensorflow": tensorflow_idiomatic, "mxnet": mxnet_idiomatic}
GEMM = {"pytorch": pytorch_gemm, "tensorflow": tensorflow_gemm, "mxnet": mxnet_gemm}


def idiomatic_loop(framework: str, model: str, batch: int, size: int, seq_length: int,
                   threads: int) -> Callable[[int], float]:
    """The plain loop: ResNet-50 ones above; BERT ones in bert_idiomatic_<framework>.py next to this file."""
    if model == "resnet50":
        return RESNET_IDIOMATIC[framework](batch, size, threads)
    module = importlib.import_module(f"bert_idiomatic_{framework}")
    return module.idiomatic(model, batch, seq_length, threads)


# ----------------------------------------------------------------------------- measurement
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--framework", choices=sorted(GEMM), required=True)
    p.add_argument("--model", choices=("resnet50", "bert_base", "bert_tiny"), default="resnet50")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--gemm-n", type=int, default=2048)
    p.add_argument("--compiler", choices=("off", "on"), default="off")
    args = p.parse_args()

    threads = len(rank.pin_cores())
    with tempfile.TemporaryDirectory() as tmp:
        spec = RunSpec(framework=args.framework, model=args.model, nodes=1, devices_per_node=1,
                       batch_size=args.batch_size, precision="fp32", compiler=args.compiler == "on",
                       data="synthetic", image_size=args.image_size, seq_length=args.seq_length, warmup_steps=3,
                       measured_steps=args.steps, repeat=1, config_id="bench", log=str(Path(tmp) / "run.jsonl"),
                       device="cpu")
        backend = rank.load_backend(spec, 0, 1, 0, threads)  # first: it sets the framework's threads
        train = idiomatic_loop(args.framework, args.model, args.batch_size, args.image_size, args.seq_length, threads)
        backend.setup()
        backend.setup = lambda: None  # rank.run must not rebuild the model each round
        train(3)  # warm-up of the idiomatic loop
        idiomatic, harness = [], []
        for i in range(args.rounds):
            order = ("idiomatic", "harness") if i % 2 == 0 else ("harness", "idiomatic")
            for which in order:
                if which == "idiomatic":
                    idiomatic.append(train(args.steps))
                else:
                    harness.append(rank.run(spec, backend, 0, 1, Path(spec.log))["throughput"])
                    Path(spec.log).unlink()
    peak = statistics.median(GEMM[args.framework](args.gemm_n) for _ in range(3))
    train_flops = flops.model_flops(args.model, args.image_size, args.seq_length,
                                    spec.predictions)["train_flops_per_sample"]
    h, b = statistics.median(harness), statistics.median(idiomatic)
    shape = f"{args.image_size}x{args.image_size}" if args.model == "resnet50" else f"seq {args.seq_length}"
    unit = backend.unit
    print(f"{args.framework}: {args.model} {shape} batch {args.batch_size} fp32, compiler {args.compiler}, "
          f"{threads} threads")
    print(f"  idiomatic loop {b:8.2f} {unit}   harness {h:8.2f} {unit}   harness/idiomatic {h / b:.3f}"
          f" (target >= 1.00; rounds: {', '.join(f'{x / y:.3f}' for x, y in zip(harness, idiomatic, strict=True))})")
    print(f"  fp32 GEMM {args.gemm_n}^2 peak {peak / 1e9:7.1f} GFLOP/s   harness {h * train_flops / 1e9:6.1f} GFLOP/s"
          f"   MFU {h * train_flops / peak:.1%}   (idiomatic {b * train_flops / peak:.1%})")


if __name__ == "__main__":
    main()
