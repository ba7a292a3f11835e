"""A stand-in for tensorflow/benchmarks' tf_cnn_benchmarks.py (no TensorFlow here): the tests run the shipped
definition `tf_cnn_resnet50` against it.

It takes tf_cnn_benchmarks' flags as absl does (`--name=value`, `--name` / `--noname` for booleans; an unknown
flag is a fatal parsing error), fails as TensorFlow does where the real script fails without a GPU (the GPU
flags: no GPU device, `NcclAllReduce` has no CPU kernel; NCHW convolutions on the CPU), and otherwise trains a
small numpy model on synthetic 224x224 images (tf_cnn_benchmarks has no image-size flag) and prints the real
script's header, step and `total images/sec` lines.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

import numpy as np

IMAGE = 224  # resnet50_v1.5's input: tf_cnn_benchmarks trains at it whatever else is asked
CLASSES = 1000
FLAGS = {
    "model": "trivial",
    "num_gpus": "1",
    "batch_size": "0",
    "num_warmup_batches": "10",
    "num_batches": "100",
    "variable_update": "parameter_server",
    "all_reduce_spec": "",
    "local_parameter_device": "gpu",
    "optimizer": "sgd",
    "data_format": "NCHW",
    "device": "gpu",
    "data_dir": "",
    "data_name": "",
    "display_every": "10",
}
BOOLEANS = {"use_fp16": False, "xla": False}
TRACEBACK = """Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/tensorflow/python/client/session.py", line 1402, in _do_call
    return fn(*args)
  File "/usr/lib/python3/dist-packages/tensorflow/python/client/session.py", line 1385, in _run_fn
    self._extend_graph()
"""


def parse(argv: list[str]) -> tuple[dict[str, str], dict[str, bool]]:
    values, switches = dict(FLAGS), dict(BOOLEANS)
    for arg in argv:
        name, _, value = arg.removeprefix("--").partition("=")
        if name in values and value:
            values[name] = value
        elif name in switches:
            switches[name] = value.lower() not in ("false", "0") if value else True
        elif name.startswith("no") and name[2:] in switches and not value:
            switches[name[2:]] = False
        else:
            print(f"FATAL Flags parsing error: Unknown command line flag '{name}'", file=sys.stderr)
            print("Pass --helpshort or --helpfull to see help on flags.", file=sys.stderr)
            sys.exit(1)
    return values, switches


def tensorflow_error(kind: str, message: str) -> None:
    """Exit as the real script does when its graph cannot run: TensorFlow's traceback, then its error."""
    print("Running warm up", flush=True)
    print(TRACEBACK + f"tensorflow.python.framework.errors_impl.{kind}: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def gpu_visible() -> bool:
    return os.environ.get("CUDA_VISIBLE_DEVICES") not in ("", "-1") and shutil.which("nvidia-smi") is not None


def main() -> None:
    flags, switches = parse(sys.argv[1:])
    device, per_device, towers = flags["device"], int(flags["batch_size"]), int(flags["num_gpus"])
    fmt = flags["data_format"]
    print(
        f"TensorFlow:  2.15\nModel:       {flags['model']}\n"
        f"Dataset:     imagenet{'' if flags['data_dir'] else ' (synthetic)'}\nMode:        training\n"
        f"Batch size:  {per_device * towers} global\n             {per_device} per device\n"
        f"Num batches: {flags['num_batches']}\nDevices:     {[f'/{device}:{i}' for i in range(towers)]}\n"
        f"Data format: {fmt}\nOptimizer:   {flags['optimizer']}\nVariables:   {flags['variable_update']}\n"
        + (f"AllReduce:   {flags['all_reduce_spec']}\n" if flags["all_reduce_spec"] else "")
        + "==========\nGenerating training model",
        flush=True,
    )
    if device == "gpu" and not gpu_visible():
        if flags["all_reduce_spec"] == "nccl":
            tensorflow_error(
                "InvalidArgumentError",
                "No OpKernel was registered to support Op 'NcclAllReduce' used by {{node NcclAllReduce}} with "
                'these attrs: [reduction="sum", shared_name="c0", T=DT_FLOAT, num_devices=1]\n'
                "Registered devices: [CPU]\nRegistered kernels:\n  <no registered kernels>",
            )
        tensorflow_error(
            "InvalidArgumentError",
            "Cannot assign a device for operation tower_0/v/cg/conv0/conv2d/Conv2D: {{node "
            "tower_0/v/cg/conv0/conv2d/Conv2D}} was explicitly assigned to /device:GPU:0 but available devices "
            "are [ /job:localhost/replica:0/task:0/device:CPU:0 ].",
        )
    if device == "cpu" and fmt == "NCHW":
        tensorflow_error(
            "UnimplementedError",
            "The Conv2D op currently only supports the NHWC tensor format on the CPU. The op was given the "
            "format: NCHW",
        )

    # A per-pixel dense layer (3 -> 16 channels), ReLU, global average pooling and a 1000-way classifier,
    # trained with SGD on random 224x224 images: real work per image, at the real script's input size.
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((3, 16)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((16, CLASSES)).astype(np.float32) * 0.1
    batch = per_device * towers
    warmup, measured = int(flags["num_warmup_batches"]), int(flags["num_batches"])
    print("Running warm up", flush=True)
    times: list[float] = []
    for step in range(warmup + measured):
        if step == warmup:
            print("Done warm up\nStep\tImg/sec\ttotal_loss", flush=True)
        started = time.perf_counter()
        x = rng.standard_normal((batch, IMAGE * IMAGE, 3), dtype=np.float32)
        labels = rng.integers(0, CLASSES, batch)
        hidden = np.maximum(x @ w1, 0.0)
        pooled = hidden.mean(axis=1)
        logits = pooled @ w2
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        loss = float(-np.log(probs[np.arange(batch), labels]).mean())
        probs[np.arange(batch), labels] -= 1.0
        grad_pooled = probs @ w2.T / batch
        grad_hidden = (hidden > 0) * grad_pooled[:, None, :] / hidden.shape[1]
        w2 -= 0.01 * pooled.T @ probs / batch
        w1 -= 0.01 * np.einsum("bpc,bph->ch", x, grad_hidden)
        if step >= warmup:
            times.append(time.perf_counter() - started)
            speeds = [batch / t for t in times]
            print(
                f"{len(times)}\timages/sec: {np.mean(speeds):.1f} +/- {np.std(speeds):.1f} (jitter = 0.0)\t{loss:.3f}"
            )
    print("-" * 64 + f"\ntotal images/sec: {batch * len(times) / sum(times):.2f}\n" + "-" * 64, flush=True)


if __name__ == "__main__":
    main()
