"""Each harness against the framework's own idiomatic training loop, plus the machine's GEMM peak.

Run with the framework environment's interpreter, from the repository root:
    PYTHONPATH=workflow .venvs/pytorch-*/bin/python    benchmarks/frameworks.py --framework pytorch
    PYTHONPATH=workflow .venvs/tensorflow-*/bin/python benchmarks/frameworks.py --framework tensorflow
    PYTHONPATH=workflow .venvs/mxnet-*/bin/python      benchmarks/frameworks.py --framework mxnet
    PYTHONPATH=workflow .venvs/jax-*/bin/python        benchmarks/frameworks.py --framework jax
    PYTHONPATH=workflow .venvs/paddle-*/bin/python     benchmarks/frameworks.py --framework paddle

    ... --framework pytorch --model bert_base --seq-length 128 --batch-size 2 --steps 3 --rounds 4
    ... --framework pytorch --model llama_tiny --seq-length 256 --batch-size 4 --precision amp

Prints, for the model (ResNet-50, BERT, Llama: PyTorch only) at the given shape:
- harness ÷ idiomatic: the harness's throughput over the plain loop a user of that framework writes
  (PyTorch: the textbook loop; TensorFlow: Keras `model.fit` on an in-memory dataset; MXNet: a Gluon
  `autograd.record()` loop; JAX: a Flax TrainState and a jitted step with the state donated; PaddlePaddle:
  paddle.vision's resnet50 in a dygraph loop with Momentum; BERT's in
  bert_idiomatic_<framework>.py; Llama's in llama_idiomatic_pytorch.py, Hugging Face's LlamaForCausalLM with the
  same shapes, bf16 autocast, fused AdamW), each with its own model and the
  harness's framework settings (threads, oneDNN, layout), its framework's default optimizer implementation (the
  harness's are its fastest: PyTorch fused SGD, MXNet one tensor per update call on CPU), interleaved in
  one process in short rounds (every order of the three in turn) with a second plain loop of its own model: the
  A/A pair, what two identical loops read against each other in the same sitting (the noise floor). The three
  models are built in rotation over the runs (--build-order): where a model was built moves its speed. Each loop's
  per-round distribution, two modes flagged (rounds.py: a bimodal loop is no comparison). Target (TARGET): over
  `--runs 6` consecutive runs (fresh processes), the median of the runs' median per-round ratios >= 1.00,
  each run's 95% bootstrap interval reaching 1.00, and no lower than the A/A ratios' low end (PASS or FAIL).
- MFU = achieved model FLOP/s / the machine's one peak (machine_peak.py's results file for this CPU model, the best
  GEMM of any library here in the run's format: fp32, or bf16 under AMP; on a GPU the workflow's peaks table,
  workflow/references/device_peaks.yaml, as the report's MFU, or --peak-gflops), the same for every framework;
  the framework's own GEMM is printed beside it as a diagnostic.
- the framework's settings in effect (its backend's `settings_in_effect`: threads, oneDNN, layout).
Writes benchmarks/results/frameworks-<framework>[-<model>].json (figures.py renders it into the docs).
Imports only the standard library, numpy and the framework.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import keras_fit
import machine_peak as machine_peak_file
import resultfile
import rounds
from torch_amp import TorchAmp, synchronize
from wheels import ensure_wheels, wheel_files

from dlbench.harness import flops, llama, rank, sysinfo
from dlbench.harness.peak import gemm
from dlbench.harness.spec import RunSpec


# ----------------------------------------------------------------------------- idiomatic loops
@dataclass
class Plain:
    """A plain loop: train(steps) -> samples/s, what it is (the results file says it), and for ResNet-50 in
    PyTorch the module it trains (measure() checks it is the harness's architecture)."""

    train: Callable[[int], float]
    description: str
    model: object = None


# torch release -> the torchvision release built for it and the Pillow its image code imports: brought by this
# benchmark into a folder of its own (the pytorch environment has neither, and must not gain them)
TORCHVISION = {"2.13.0": ("torchvision==0.28.0", "pillow==13.0.0")}
TORCHVISION_DIR = Path(os.environ.get("DLBENCH_TORCHVISION", "/tmp/dlbench-torchvision"))


def bring_torchvision(folder: Path = TORCHVISION_DIR) -> str:
    """Put a torchvision on sys.path: the environment's own, else this torch release's pinned wheels, downloaded
    (wheels.py) and unpacked into `folder` once. Returns where it comes from, or why there is none."""
    if importlib.util.find_spec("torchvision") is not None:
        return "the environment's"
    import torch

    release = torch.__version__.split("+")[0]
    if release not in TORCHVISION:
        return f"none pinned for torch {release} (frameworks.TORCHVISION)"
    site = folder / f"site-torch{release}"
    if not site.exists():
        requirements = list(TORCHVISION[release])
        try:
            ensure_wheels(folder, requirements, binary=True)
        except (OSError, subprocess.CalledProcessError, SystemExit) as exc:
            return f"its wheels could not be downloaded ({exc})"
        unpacking = folder / f"{site.name}.tmp"
        shutil.rmtree(unpacking, ignore_errors=True)
        for wheel in (w for r in requirements for w in wheel_files(folder, r)):
            with zipfile.ZipFile(wheel) as archive:  # a wheel unpacked is an installed package (--no-deps)
                archive.extractall(unpacking)
        unpacking.rename(site)
    sys.path.insert(0, str(site))
    return f"brought by frameworks.py: {', '.join(TORCHVISION[release])} from PyPI, unpacked without dependencies"


def torchvision_resnet50():
    """(torchvision's resnet50 builder, its version and how it was loaded). PyPI's Linux torchvision wheels are
    built for CUDA torch: with a CPU torch their compiled detection ops (nms, roi_align) do not load, and the
    package's __init__ fails registering them; the model code is plain torch.nn and needs neither, so it is then
    loaded under a bare package without that __init__."""
    try:
        from torchvision.models import resnet50

        how = "imported"
    except (ImportError, OSError, RuntimeError) as exc:
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        spec = importlib.util.find_spec("torchvision")
        if spec is None:
            raise
        package = types.ModuleType("torchvision")
        package.__spec__, package.__path__ = spec, list(spec.submodule_search_locations)
        sys.modules["torchvision"] = package
        from torchvision.models import resnet50

        how = f"its model code loaded without the package's __init__, whose compiled ops fail here: {exc}"
    return resnet50, importlib.import_module("torchvision.version").__version__, how


def plain_resnet50(definition: str) -> tuple[object, str]:
    """(model, what it is): with `definition` torchvision, torchvision's resnet50 where torchvision works here,
    else the harness's ResNet50; both are ResNet-50 v1.5 (measure() checks)."""
    from dlbench.harness.backends.pytorch.resnet import ResNet50

    why = "asked for (--plain-model harness)"
    if definition == "torchvision":
        where = bring_torchvision()
        try:
            resnet50, version, how = torchvision_resnet50()
        except (ImportError, OSError, RuntimeError) as exc:
            why = f"torchvision unusable here ({where}; {type(exc).__name__}: {exc})"
        else:
            return resnet50(), f"torchvision {version} resnet50 ({where}; {how})"
    return ResNet50(), f"the harness's ResNet50 (backends/pytorch/resnet.py), {why}"


def pytorch_idiomatic(
    batch: int,
    size: int,
    threads: int,
    channels_last: bool = False,
    device: str = "cpu",
    precision: str = "fp32",
    compiler: bool = False,
    definition: str = "torchvision",
) -> Plain:
    """The loop a strong PyTorch user writes: torchvision's resnet50, fused SGD (foreach where the device has no
    fused kernel), gradients set to None, PyTorch's AMP recipe (torch_amp.TorchAmp: autocast, and with fp16 a
    GradScaler, which hands a fused optimizer its scale and inf flag on the device), torch.compile with the
    compiler on; on CUDA channels_last, cuDNN benchmark and TF32; on a CPU the harness's layout."""
    import torch

    torch.set_num_threads(threads)
    if device == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        channels_last = True
    layout = torch.channels_last if channels_last else torch.contiguous_format
    model, what = plain_resnet50(definition)
    model = model.to(device, memory_format=layout)
    hyper = {"lr": 0.1, "momentum": 0.9, "weight_decay": 5e-5}
    try:
        optimizer, kind = torch.optim.SGD(model.parameters(), fused=True, **hyper), "fused"
    except RuntimeError:  # no fused SGD kernel for this device
        optimizer, kind = torch.optim.SGD(model.parameters(), foreach=True, **hyper), "foreach"
    forward = torch.compile(model) if compiler else model
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=layout)
    labels = torch.randint(0, 1000, (batch,), device=device)
    amp = TorchAmp(device, precision)

    def train(steps: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            with amp.autocast():
                loss = loss_fn(forward(images), labels)
            amp.step(loss, optimizer)
        synchronize(device)
        return batch * steps / (time.perf_counter() - start)

    cuda = ", cuDNN benchmark, TF32" if device == "cuda" else ""
    return Plain(
        train,
        f"{what}; SGD {kind}, zero_grad(set_to_none=True), {amp.describe()}, "
        f"{'channels_last' if channels_last else 'contiguous'}{cuda}, "
        f"{'torch.compile' if compiler else 'eager'}",
        model,
    )


def tensorflow_idiomatic(batch: int, size: int, threads: int, compiler: bool = False) -> Plain:
    """Keras `model.fit` on an in-memory tf.data dataset, Keras's SGD, the harness's model and settings; XLA
    (jit_compile) with the compiler on, as the harness."""
    import numpy as np
    import tensorflow as tf

    from dlbench.harness.backends.tensorflow.backend import WEIGHT_DECAY
    from dlbench.harness.backends.tensorflow.resnet import ResNet50, build

    model = build(ResNet50(), size)  # threads: set by the harness backend, created first
    # the harness's hyperparameters with Keras's own SGD, as a model.compile user writes it (the harness updates
    # with one fused kernel per variable: FusedSGD; as the PyTorch harness's fused SGD against the plain loop's)
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9, weight_decay=WEIGHT_DECAY),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=compiler,
    )
    images = np.random.randn(batch, size, size, 3).astype("float32")
    labels = np.random.randint(0, 1000, (batch,))
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat().prefetch(tf.data.AUTOTUNE)
    model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)  # trace and build once

    def train(steps: int) -> float:
        return batch * steps / keras_fit.timed_fit(model, dataset, steps)  # not fit's teardown: keras_fit.py

    return Plain(
        train,
        f"Keras model.fit on a prefetched in-memory tf.data dataset, Keras's SGD, jit_compile "
        f"{'on' if compiler else 'off'}, the harness's ResNet50 (backends/tensorflow/resnet.py)",
    )


def mxnet_idiomatic(
    batch: int, size: int, threads: int, compiler: bool = False, aggregation: int | None = None
) -> Plain:
    """The Gluon loop a strong user writes: `autograd.record()`, backward, `Trainer.step`, no synchronisation
    until the timed window ends (mx.nd.waitall); hybridized (static_alloc, static_shape: MXNet's cached graph) with
    the compiler on, imperative with it off, as the harness runs; the SGD updating `aggregation` tensors per call,
    as the harness's optimizer (its settings' optimizer_aggregation). Threads: MXNet reads OMP_NUM_THREADS when
    it loads (the harness backend, imported first, sets it)."""
    import mxnet as mx
    from mxnet import autograd, gluon

    from dlbench.harness.backends.mxnet.resnet import ResNet50

    net = ResNet50()
    net.initialize(mx.init.Xavier())
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if compiler:
        net.hybridize(static_alloc=True, static_shape=True)
        loss_fn.hybridize(static_alloc=True, static_shape=True)
    optimizer = mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9, wd=5e-5)
    if aggregation is not None:
        optimizer.aggregate_num = aggregation
    trainer = gluon.Trainer(net.collect_params(), optimizer)
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

    mode = "hybridize(static_alloc=True, static_shape=True)" if compiler else "imperative"
    return Plain(
        train,
        f"Gluon autograd.record() loop, {mode}, gluon.Trainer SGD updating "
        f"{optimizer.aggregate_num} tensor(s) per call, mx.nd.waitall only at the window's ends, the "
        "harness's ResNet50 (backends/mxnet/resnet.py)",
    )


def jax_idiomatic(batch: int, size: int, threads: int, compiler: bool = False) -> Plain:
    """The Flax/Optax loop a JAX user writes (Flax's ImageNet example): a flax.training TrainState carrying the
    BatchNorm statistics, a train step under jax.jit with the state donated, Optax's SGD (momentum 0.9, weight decay
    5e-5 added to the gradients, as the harness), the harness's Flax ResNet50, synchronised only at the window's
    ends. JAX always compiles: the harness has no compiler on (`unsupported`)."""
    from functools import partial
    from typing import Any

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax.training import train_state

    from dlbench.harness.backends.jax.backend import WEIGHT_DECAY
    from dlbench.harness.backends.jax.resnet import ResNet50

    class TrainState(train_state.TrainState):
        batch_stats: Any

    model = ResNet50()
    variables = jax.jit(lambda key: model.init(key, jnp.zeros((1, size, size, 3)), train=False))(jax.random.key(0))
    tx = optax.chain(optax.add_decayed_weights(WEIGHT_DECAY), optax.sgd(0.1, momentum=0.9))
    state = TrainState.create(
        apply_fn=model.apply, params=variables["params"], tx=tx, batch_stats=variables["batch_stats"]
    )

    @partial(jax.jit, donate_argnums=0)
    def train_step(state: TrainState, images: jax.Array, labels: jax.Array) -> tuple[TrainState, jax.Array]:
        def loss_fn(params):
            logits, updates = state.apply_fn(
                {"params": params, "batch_stats": state.batch_stats}, images, train=True, mutable=["batch_stats"]
            )
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), updates

        (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        return state.apply_gradients(grads=grads).replace(batch_stats=updates["batch_stats"]), loss

    rng = np.random.default_rng(0)
    images = jnp.asarray(rng.standard_normal((batch, size, size, 3), np.float32))
    labels = jnp.asarray(rng.integers(0, 1000, batch, dtype=np.int32))
    state, _ = train_step(state, images, labels)  # compile once
    jax.block_until_ready(state)

    def train(steps: int) -> float:
        nonlocal state
        start = time.perf_counter()
        for _ in range(steps):
            state, _ = train_step(state, images, labels)
        jax.block_until_ready(state)
        return batch * steps / (time.perf_counter() - start)

    return Plain(
        train,
        "Flax TrainState (with batch_stats) + a jax.jit train step, state donated, Optax SGD, "
        "block_until_ready only at the window's ends, the harness's Flax ResNet50 (backends/jax/resnet.py)",
    )


def paddle_idiomatic(batch: int, size: int, threads: int, compiler: bool = False) -> Plain:
    """The dygraph loop a Paddle user writes (Paddle's own ImageNet example): paddle.vision.models.resnet50 (ResNet-50
    v1.5: its stride on the 3x3 convolution), paddle.optimizer.Momentum (momentum 0.9, L2 weight decay 5e-5 added to
    the gradients, as the harness's SGD), forward, loss, backward, step, clear_grad; with the compiler on the model
    under paddle.jit.to_static, as the harness runs; the loss read back only at the window's end. Threads: Paddle's
    own setting, made by the harness backend before (settings_in_effect)."""
    import paddle

    paddle.set_device("cpu")
    net = paddle.vision.models.resnet50(num_classes=1000)
    if compiler:
        net = paddle.jit.to_static(net)
    optimizer = paddle.optimizer.Momentum(
        learning_rate=0.1, momentum=0.9, parameters=net.parameters(), weight_decay=5e-5
    )
    loss_fn = paddle.nn.CrossEntropyLoss()
    images = paddle.randn([batch, 3, size, size], dtype="float32")
    labels = paddle.randint(0, 1000, [batch], dtype="int64")

    def train(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            loss = loss_fn(net(images), labels)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
        float(loss)  # the last step's loss on the host: the window ends when its update has run
        return batch * steps / (time.perf_counter() - start)

    mode = "paddle.jit.to_static" if compiler else "dygraph"
    return Plain(
        train,
        f"Paddle {mode} loop, paddle.vision.models.resnet50, paddle.optimizer.Momentum with L2 weight decay, the "
        "loss read back only at the window's end",
    )


RESNET_IDIOMATIC = {
    "pytorch": pytorch_idiomatic,
    "tensorflow": tensorflow_idiomatic,
    "mxnet": mxnet_idiomatic,
    "jax": jax_idiomatic,
    "paddle": paddle_idiomatic,
}


def idiomatic_loop(
    framework: str,
    model: str,
    batch: int,
    size: int,
    seq_length: int,
    threads: int,
    settings: dict,
    device: str = "cpu",
    precision: str = "fp32",
    compiler: bool = False,
    definition: str = "torchvision",
) -> Plain:
    """The plain loop: ResNet-50 ones above; BERT's and Llama's in <bert|llama>_idiomatic_<framework>.py next to
    this file. The
    loop a strong user of the framework writes, with the harness's settings in effect (`settings`, its backend's:
    threads, layout, MXNet's optimizer aggregation), so that the ratio measures the loop."""
    extra = {"device": device, "precision": precision} if framework == "pytorch" else {}
    extra["compiler"] = compiler
    if model == "resnet50":
        if framework == "pytorch":
            extra |= {"channels_last": settings["memory_format"] == "channels_last", "definition": definition}
        if framework == "mxnet":
            extra["aggregation"] = settings.get("optimizer_aggregation")
        return RESNET_IDIOMATIC[framework](batch, size, threads, **extra)
    kind = "llama" if model in llama.CONFIGS else "bert"
    module = importlib.import_module(f"{kind}_idiomatic_{framework}")
    return Plain(*module.idiomatic(model, batch, seq_length, threads, **extra))


# ----------------------------------------------------------------------------- measurement
def emulated(args: argparse.Namespace) -> bool:
    """The run's matrix math has no native instructions here: bf16 (AMP) on a CPU without native bf16."""
    return args.device != "cuda" and gemm_kind(args) == "bf16" and sysinfo.native_bf16() is False


def machine_peak(args: argparse.Namespace) -> tuple[float | None, str, float | None]:
    """FLOP/s and source of the one peak every framework's MFU is measured against: --peak-gflops (a GPU's
    specification), else machine_peak.py's results file for this machine's CPU; and this framework's own GEMM
    figure (GFLOP/s) in that file, or None. No peak (None, why) for emulated math: none worth holding a run to."""
    if args.peak_gflops:
        return args.peak_gflops * 1e9, args.peak_source, None
    if args.device == "cuda":  # the workflow's table (the report's MFU); both loops run fp32 on TF32
        import torch

        from dlbench.vocabulary import devices

        name = torch.cuda.get_device_name()
        amp_dtype = "bfloat16" if args.model in llama.CONFIGS else "float16"  # Llama's AMP is bf16 everywhere
        peak, source = devices.peak_tflops(name, args.precision, tf32=True, amp_dtype=amp_dtype)
        if peak is None:
            raise SystemExit(
                f"--device cuda: {source} (workflow/references/device_peaks.yaml); give --peak-gflops (the GPU's "
                "dense peak for this precision from its specification) and --peak-source"
            )
        return peak * 1e12, source, None
    if emulated(args):
        return None, f"none: {sysinfo.EMULATED_BF16} (no MFU)", None
    cpu, fmt = resultfile.machine()["cpu"], gemm_kind(args)
    found = machine_peak_file.read_peak(cpu, fmt)
    if found is None:  # the first benchmark on this CPU model measures its one peak (refused on a busy machine)
        print(f"no {fmt} machine peak for {cpu!r} yet: measuring it (machine_peak.py)", file=sys.stderr)
        subprocess.run([sys.executable, machine_peak_file.__file__], check=True)
        found = machine_peak_file.read_peak(cpu, fmt)
        assert found is not None
    source = f"machine peak ({found['library']} {fmt} GEMM, machine_peak.py {found['date'][:10]})"
    return found["gflops"] * 1e9, source, found["libraries"].get(args.framework)


def measure(args: argparse.Namespace) -> dict:
    """One run: both loops interleaved in this process, then this framework's own GEMM."""
    threads = len(rank.pin_cores())
    with tempfile.TemporaryDirectory() as tmp:
        spec = RunSpec.of(
            framework=args.framework,
            model=args.model,
            nodes=1,
            devices_per_node=1,
            batch_size=args.batch_size,
            precision=args.precision,
            compiler=args.compiler == "on",
            data="synthetic",
            image_size=args.image_size,
            seq_length=args.seq_length,
            warmup_steps=1,
            measured_steps=args.steps,
            repeat=1,
            config_id="bench",
            log=str(Path(tmp) / "run.jsonl"),
            device=args.device,
        )
        backend = rank.load_backend(spec, 0, 1, 0, threads)  # first: it sets the framework's threads
        backend.check_model_settings()
        backend.setup_runtime()  # what every model shares (threads, layout, optimizer settings), before any is built
        runtime = backend.settings_in_effect()  # what the plain loops copy (PLAIN_COPIES)

        def make_plain() -> Plain:
            return idiomatic_loop(
                args.framework,
                args.model,
                args.batch_size,
                args.image_size,
                args.seq_length,
                threads,
                runtime,
                args.device,
                args.precision,
                args.compiler == "on",
                args.plain_model,
            )

        # the plain loop twice, each with its own model: the A/A pair's is what two identical loops read against
        # each other in this sitting (the noise floor a harness ÷ plain ratio is read against). The three models
        # are built in --build-order's order (where a model was built moves its speed by 2-3% on CPUs).
        built: dict[str, Plain] = {}
        order = build_orders(args.build_order, 1)[0]
        for loop in order:
            if loop == "h":
                backend.setup_model()
            else:
                built[loop] = make_plain()
        backend.setup = lambda: None  # rank.run must not rebuild the model each round
        settings = backend.environment()["settings"]
        if changed := [key for key in PLAIN_COPIES if runtime.get(key) != settings.get(key)]:
            raise SystemExit(
                f"the harness's {changed} changed while its model was built: the plain loops copied "
                f"{[runtime.get(key) for key in changed]}, the harness runs {[settings.get(key) for key in changed]}"
            )
        plain, again = built["p"], built["a"]
        same = same_architecture(plain.model, backend) if plain.model is not None else None

        def harness() -> float:
            throughput = rank.run(spec, backend, 0, 1, Path(spec.log))["throughput"]
            Path(spec.log).unlink()
            return throughput

        # one untimed round of each loop first (the harness's model is its own, as cold as the idiomatic loop's):
        # with only the idiomatic loop warmed (3 steps, until 2026-11-24), the harness's first 20 PyTorch steps ran
        # at 0.6-0.9 of its speed on a Zen 5 VM and its first two rounds' ratios read 0.68-0.93
        idiomatic, harnessed, idiomatic_again = rounds.interleaved(
            args.rounds, lambda: plain.train(args.steps), harness, lambda: again.train(args.steps), warmup=1
        )
    own_gemm = (
        machine_peak_file.cuda_gemm(args.gemm_n, 20, args.precision)
        if args.device == "cuda"
        else None  # emulated bf16: minutes on one core for a figure that is no peak
        if emulated(args)
        else gemm(args.framework, args.gemm_n, 5, threads, fmt=gemm_kind(args))
    )
    return {
        "idiomatic": idiomatic,
        "harness": harnessed,
        "idiomatic_again": idiomatic_again,
        "own_gemm": own_gemm,
        "settings": settings,
        "plain_loop": plain.description,
        "same_architecture": same,
        "device_name": backend.device_name(),
        "threads": threads,
        "build_order": order,
        "unit": backend.unit,
        "predictions": spec.predictions,
    }


def same_architecture(model, backend) -> str:
    """That the plain loop trains the harness's network (PyTorch): every convolution's channels, kernel and stride
    in order (v1.5: a downsampling bottleneck's stride on its 3x3) and the trainable parameters agree, or exit."""
    from torch import nn

    def shape(module) -> tuple[list, int]:
        module = getattr(module, "_orig_mod", module)  # under torch.compile
        convs = [
            (m.in_channels, m.out_channels, m.kernel_size, m.stride)
            for m in module.modules()
            if isinstance(m, nn.Conv2d)
        ]
        return convs, sum(p.numel() for p in module.parameters() if p.requires_grad)

    (plain_convs, plain_params), (convs, params) = shape(model), shape(backend.model)
    if plain_convs != convs or plain_params != params:
        differ = [(i, a, b) for i, (a, b) in enumerate(zip(plain_convs, convs, strict=False)) if a != b]
        raise SystemExit(
            f"the plain loop's model is not the harness's: {len(plain_convs)} vs {len(convs)} "
            f"convolutions, {plain_params:,} vs {params:,} parameters, differing convolutions "
            f"(index, plain, harness) {differ[:3]}"
        )
    strided = sum(1 for c in convs if c[2] == (3, 3) and c[3] == (2, 2))
    return (
        f"same architecture as the harness's: {len(convs)} convolutions (channels, kernel, stride) in order, "
        f"{strided} downsampling 3x3 convolutions with stride 2 (v1.5), {params:,} parameters"
    )


def run_in_processes(args: argparse.Namespace) -> list[dict]:
    """--runs N: N consecutive runs, each a fresh process of this interpreter (a run's allocator, thread pools
    and compiled graphs are its own), so three runs mean three independent starts; each builds its models in
    its build order (build_orders)."""
    results = []
    for order in build_orders(args.build_order, args.runs):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            child = [*sys.argv[1:], "--runs", "1", "--build-order", order, "--one-run", out.name]
            subprocess.run([sys.executable, __file__, *child], check=True)
            results.append(json.loads(Path(out.name).read_text()))
    return results


# h: the harness's model, p: the plain loop's, a: the A/A loop's (a second plain loop). In rotation each model is
# built first, second and third once in every three runs: a position's effect on speed (measured: 2-3% on CPUs,
# the same for every loop) falls on every loop alike instead of on whichever is always built in that place.
ROTATION = ("hpa", "pah", "ahp")  # a Latin square: each model in each position once
assert all(sorted(order.index(loop) for order in ROTATION) == [0, 1, 2] for loop in "hpa")
ORDERS = tuple("".join(order) for order in itertools.permutations("hpa"))
# What the plain loops copy from the harness's settings in effect (before its model is built, and checked after).
PLAIN_COPIES = ("memory_format", "optimizer_aggregation")


def build_orders(build_order: str, runs: int) -> list[str]:
    """Each run's order of building the three models: --build-order's, or ROTATION's in turn."""
    return [ROTATION[i % len(ROTATION)] if build_order == "rotate" else build_order for i in range(runs)]


def order_in_words(order: str) -> str:
    names = {"h": "harness", "p": "plain", "a": "A/A"}
    return ", ".join(names[loop] for loop in order)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--framework", choices=sorted(RESNET_IDIOMATIC), required=True)
    p.add_argument("--model", choices=("resnet50", "bert_base", "bert_tiny", *llama.CONFIGS), default="resnet50")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    # short rounds, many of them: this VM's throughput drifts by ±10% over tens of seconds, and only what
    # changes within one round pair is left in a per-round ratio
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument(
        "--runs", type=int, default=6, help="consecutive runs, each in a fresh process (6: each build order twice)"
    )
    p.add_argument("--gemm-n", type=int, default=2048)
    p.add_argument("--compiler", choices=("off", "on"), default="off")
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: PyTorch only (the CUDA builds "
        "of TensorFlow and MXNet are not installed by dlbench's environments here)",
    )
    p.add_argument(
        "--precision",
        choices=("fp32", "amp"),
        default="fp32",
        help="amp: autocast (fp16 + GradScaler on CUDA, bf16 on CPU; Llama: bf16 everywhere) in both loops",
    )
    p.add_argument(
        "--plain-model",
        choices=("torchvision", "harness"),
        default="torchvision",
        help="PyTorch ResNet-50: the plain loop's model definition (torchvision's where it works here)",
    )
    p.add_argument(
        "--build-order",
        choices=("rotate", *ORDERS),
        default="rotate",
        help="the order the three models are built in after the framework's runtime (h the harness's, p the plain "
        "loop's, a the A/A loop's): rotate (each run the next of hpa, pah, ahp: every model first, second and "
        "third once in three runs; --runs 6 builds each order twice) or one order for every run",
    )
    p.add_argument("--peak-gflops", type=float, help="the device's peak from its specification (GPUs)")
    p.add_argument("--peak-source", default="device specification", help="where --peak-gflops comes from")
    p.add_argument("--one-run", help=argparse.SUPPRESS)  # a child of --runs: write its measurement here
    args = p.parse_args()
    if args.device == "cuda" and args.framework != "pytorch":
        p.error(f"--device cuda: only pytorch (no CUDA build of {args.framework} in dlbench's environments)")
    if args.model in llama.CONFIGS and args.framework != "pytorch":
        p.error(f"--model {args.model}: only pytorch (the harness's Llama is PyTorch's)")
    if args.one_run:
        Path(args.one_run).write_text(json.dumps(measure(args)))
        return
    record = resultfile.Recorder(__file__)
    peak, peak_source, own_then = machine_peak(args)
    runs = run_in_processes(args) if args.runs > 1 else [measure(args)]
    report(args, runs, peak, peak_source, own_then, record)


def report(
    args: argparse.Namespace,
    runs: list[dict],
    peak: float | None,
    peak_source: str,
    own_then: float | None,
    record: resultfile.Recorder,
) -> None:
    """Print and write the runs: each loop's rounds (flagging two modes), the ratio, MFU against the one peak."""
    first = runs[0]
    unit, threads = first["unit"], first["threads"]
    train_flops = flops.model_flops(args.model, args.image_size, args.seq_length, first["predictions"])[
        "train_flops_per_sample"
    ]
    shape = f"{args.image_size}x{args.image_size}" if args.model == "resnet50" else f"seq {args.seq_length}"
    where = f"{first['device_name']}" if args.device == "cuda" else f"{threads} threads"
    title = (
        f"{args.framework}: {args.model} {shape} batch {args.batch_size} {args.precision}, compiler "
        f"{args.compiler}, {where}; per run {args.rounds} rounds × {args.steps} steps in one process, the three "
        "loops in every order in turn, after one untimed round of each; "
        + (
            f"models built in rotation ({', '.join(ROTATION)}: each first, second and third once in three runs)"
            if args.build_order == "rotate"
            else f"models built {order_in_words(args.build_order)}"
        )
    )
    print(title)
    rows, verdicts, readings = [], [], []
    for number, run in enumerate(runs, 1):
        loops, verdict, figures = rounds.parity(
            "idiomatic", run["idiomatic"], "harness", run["harness"], run["idiomatic_again"], TARGET
        )
        readings.append(figures)
        verdicts.append(f"run {number} (built {order_in_words(run['build_order'])}): {verdict}")
        for loop in loops:
            print(f"  run {number} {rounds.line(loop, 28)}")
            rows.append([number, *rounds.row(loop)])
        print(f"  {verdicts[-1]}")
    verdicts.insert(0, overall_verdict(readings))
    print(f"  {verdicts[0]}")
    pooled = {name: statistics.median(v for run in runs for v in run[name]) for name in ("harness", "idiomatic")}
    achieved = {name: value * train_flops for name, value in pooled.items()}
    owns = [run["own_gemm"] for run in runs if run["own_gemm"] is not None]
    own = statistics.median(owns) if owns else None
    mfu = [
        ["peak used for MFU (GFLOP/s)", round(peak / 1e9, 1) if peak else "none"],
        ["peak source", peak_source],
        [
            f"{args.framework}'s own {gemm_kind(args)} GEMM {args.gemm_n}² (GFLOP/s, diagnostic)",
            round(own / 1e9, 1) if own else "not measured (emulated)",
        ],
    ]
    for name in ("harness", "idiomatic"):
        mfu += [
            [f"{name}: median {unit} over all rounds", round(pooled[name], 2)],
            [f"{name}: achieved GFLOP/s", round(achieved[name] / 1e9, 1)],
            [f"{name}: MFU", f"{achieved[name] / peak:.1%}" if peak else "none (no peak)"],
        ]
    for label, value in mfu:
        print(f"  {label}: {value}")
    settings = first["settings"]["summary"]
    print(f"  settings: {settings}")
    plain = [f"plain loop: {first['plain_loop']}"]
    if first["same_architecture"]:
        plain.append(first["same_architecture"])
    for line in plain:
        print(f"  {line}")
    # the same GEMM, the same library: the machine changed
    if (then := own_then) and own and own / 1e9 < then * SLOWER_MACHINE:
        verdicts.append(
            f"WARNING: {args.framework}'s own GEMM reads {own / 1e9:.1f} GFLOP/s now and read {then:.1f} when the "
            f"machine peak was measured: this machine runs {1 - own / 1e9 / then:.0%} slower than then (a "
            "shared VM's neighbours, its clock), and every MFU here reads low by about as much"
        )
        print(f"  {verdicts[-1]}")
    if own and peak and own > peak * 1.02:  # one peak is only one peak if nothing here beats it
        verdicts.append(
            f"WARNING: {args.framework}'s own GEMM ({own / 1e9:.1f} GFLOP/s) is above the peak used "
            f"for MFU ({peak / 1e9:.1f}): the peak file is stale or was measured under load (rerun "
            "machine_peak.py, then this), or --peak-gflops is too low"
        )
        print(f"  {verdicts[-1]}")
    record.write(
        [
            resultfile.table(title, ["run", *rounds.columns("loop", unit)], rows),
            resultfile.table(f"{args.framework}: MFU against one peak", ["figure", "value"], mfu),
        ],
        notes=[*verdicts, f"{args.framework} settings: {settings}", *plain],
        variant=variant(args),
    )


TARGET = 1.00  # harness ÷ the strongest plain loop: the instrument never reads low
# A framework's own GEMM below this share of its figure in the machine peak file: the machine is slower than when
# its peak was measured (GEMM rates of one library repeat within a few percent on a quiet machine).
SLOWER_MACHINE = 0.9


def overall_verdict(readings: list[dict]) -> str:
    """Over the runs (fresh processes): the median of their harness ÷ plain medians at TARGET or above, every
    run's interval reaching TARGET, and that median no lower than the median of the runs' A/A low ends."""
    ratio = statistics.median(r["ratio"] for r in readings)
    aa_low = statistics.median(r["aa_interval"][0] for r in readings)
    aa = statistics.median(r["aa_ratio"] for r in readings)
    reaching = sum(r["interval"][1] >= TARGET for r in readings)
    met = ratio >= TARGET and reaching == len(readings) and ratio >= aa_low
    return (
        f"{'PASS' if met else 'FAIL'}: over {len(readings)} run(s) harness ÷ idiomatic {ratio:.4f} (median of runs), "
        f"{reaching} of {len(readings)} runs' intervals reach {TARGET:.2f}; A/A {aa:.3f}, its low end {aa_low:.3f} "
        f"(target: median >= {TARGET:.2f}, every interval reaching it, no lower than the A/A low end)"
    )


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
    if args.build_order != "rotate":
        parts.append(f"built-{args.build_order}")
    return "-".join(parts)


def gemm_kind(args: argparse.Namespace) -> str:
    """The number format of the run's matrix products, which its peak and the diagnostic GEMM use: on CPUs fp32, or
    bf16 under AMP (autocast's CPU dtype); on CUDA the one machine_peak.cuda_gemm multiplies in."""
    if args.device == "cuda":
        return machine_peak_file.CUDA_GEMM_FORMAT[args.precision]
    return "bf16" if args.precision == "amp" else "fp32"


if __name__ == "__main__":
    main()
