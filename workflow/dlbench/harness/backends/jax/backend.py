"""JAX backend (JAX with Flax and Optax): ResNet-50 v1.5 (resnet.py) with SGD and momentum, and BERT pretraining
(bert.py) with AdamW or LAMB; synthetic data resident on the device or real data (data.py: DALI for the ImageNet
TFRecords, h5py for BERT's HDF5 shards). The contract, and when the harness calls what: backends/base.py. Here:

- The step is what a JAX user writes: forward, loss, jax.value_and_grad, the Optax update, all in one function
  compiled by XLA (jax.jit) with the training state donated (its buffers reused by the new state). JAX has no
  uncompiled training mode, so this is `compiler off`; `on` is unsupported (COMPILER_ON_UNSUPPORTED).
- ResNet-50: optax SGD, momentum 0.9, lr 0.1, weight decay 5e-5 added to the gradient (PyTorch's coupled
  weight decay); BatchNorm running statistics are part of the state.
- BERT (bert_base, bert_tiny): masked-LM + next-sentence loss, dropout on (a key in the state, folded with the
  rank), optimizer by spec.optimizer_name (bert.make_optimizer: optax.adamw or optax.lamb with bert.OPTIMIZERS'
  settings and learning-rate schedule), with grad_clip optax.clip_by_global_norm(1.0) after the gradients are
  averaged over the ranks (so it sees the global norm).
- amp: bfloat16 compute with float32 parameters and optimizer state (Flax's `dtype`), on CPUs and on GPUs
  (Ampere or later; an older GPU has no bfloat16 and records unsupported). float16 with loss scaling is not
  offered: bfloat16 needs no loss scaling, and a GPU that lacks it (before Ampere) is not one JAX's CUDA 12
  builds are worth benchmarking on.
- One process per device, as the other backends. With several ranks: jax.distributed.initialize at
  MASTER_ADDR:MASTER_PORT (our launcher's, or the supervisor's under srun), one device per process, a Mesh over
  every process's device with the axis 'data'; the batch is the global array of every rank's local batch
  (jax.make_array_from_single_device_arrays), the state replicated. spec.strategy (strategies.py): auto =
  jax.shard_map over the mesh, each rank's forward and backward on its own batch (its own BatchNorm statistics,
  as DDP) and the gradients averaged with lax.pmean; gspmd = the step jitted on the global batch with
  NamedShardings, XLA's SPMD partitioner inserting the collectives (BatchNorm statistics over the global batch);
  pmean_fp16 = auto with the gradients all-reduced in float16.
  Collectives: Gloo on CPUs (jax_cpu_collectives_implementation), NCCL on GPUs.
- Out of memory: XLA's RESOURCE_EXHAUSTED (a JaxRuntimeError) is `oom`; so is a failed host allocation under the
  CPU memory budget (memory_limit_gb), which XLA reports the same way.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ... import bert, strategies, sysinfo
from ...gather import decode_rows, encode_row
from ...spec import RunSpec, Unsupported
from ..base import BackendBase
from . import bert as jax_bert  # this framework's BERT (bert: what every backend shares)
from . import data as jax_data
from . import resnet as jax_resnet

WEIGHT_DECAY = 5e-5  # as the PyTorch backend
AXIS = "data"  # the mesh's one axis: data parallel over every process's device
SHUTDOWN_TIMEOUT_S = 30  # jax.distributed's exit barrier: a rank whose peer failed must not wait minutes
COMPILER_ON_UNSUPPORTED = (
    "JAX compiles every training step with XLA (jax.jit), so `compiler off` already is the compiled step; there "
    "is no further compiler to turn on (jax.disable_jit, the only uncompiled mode, is a debugging aid)"
)


def interpreter_facts() -> dict:
    """This interpreter's JAX (dlbench.harness.probe): its version, its CUDA plugin's versions and its GPUs."""
    try:
        gpus = [d.device_kind for d in jax.devices("gpu")]
    except RuntimeError:  # no GPU backend in this build, or no GPU
        gpus = []
    return {"framework_version": jax.__version__, **_cuda_versions(), "gpus": gpus}


def _cuda_versions() -> dict:
    """The CUDA and cuDNN versions JAX's CUDA plugin reports (None without one)."""
    try:
        from jax._src.lib import cuda_versions  # the module jax.print_environment_info reads
    except ImportError:
        cuda_versions = None
    if cuda_versions is None:
        return {"cuda": None, "cudnn": None, "nccl": None}
    return {
        "cuda": str(cuda_versions.cuda_runtime_get_version()),
        "cudnn": str(cuda_versions.cudnn_get_version()),
        "nccl": None,  # in the CUDA plugin; JAX does not report its version
    }


def pmean(tree, wire: jnp.dtype = jnp.float32):
    """The mean over the ranks of every array of a pytree, as one all-reduce of one flat buffer (in `wire`'s dtype,
    back to the tree's after): XLA's CPU collectives (Gloo) pay a round trip per all-reduce, and one per tensor
    took ~1 s per ResNet step on 2 ranks."""
    flat, unravel = ravel_pytree(tree)
    return unravel(jax.lax.pmean(flat.astype(wire), AXIS).astype(flat.dtype))


class Backend(BackendBase):
    models = ("resnet50", "resnet_tiny", "bert_base", "bert_tiny")
    data = ("synthetic", "real")
    # XLA's errors are one exception type (JaxRuntimeError); its status code says what failed.
    oom_markers = (
        "resource_exhausted",
        "resource exhausted",
        "out of memory",
        "can't allocate memory",
        "failed to allocate",
        "bad_alloc",
    )

    def classify(self, exc: BaseException) -> str:
        """As every backend's, and: under a CPU memory budget (memory_limit_gb) XLA's matrix-product library reports
        an allocation it could not make as INTERNAL "YNNPACK operation failed" (seen here one batch below the
        budget's RESOURCE_EXHAUSTED), which is out of memory too."""
        status = super().classify(exc)
        if status == "error" and self.spec.memory_limit_gb and "ynnpack operation failed" in str(exc).lower():
            return "oom"
        return status

    @classmethod
    def cpu_gemm(cls, n: int, threads: int, fmt: str) -> Callable[[], object]:
        """XLA's CPU client uses the process's cores (its affinity), as for a run."""
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        dtype = {"fp32": jnp.float32, "bf16": jnp.bfloat16}[fmt]
        a, b = (jnp.asarray(np.random.randn(n, n), dtype=dtype) for _ in range(2))
        matmul = jax.jit(jnp.matmul)
        return lambda: matmul(a, b).block_until_ready()

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int, threads: int) -> None:
        super().__init__(spec, rank, world, local_rank, threads)
        # Before JAX starts a backend (the first jax.devices()): which platform, and XLA's CPU threads = this
        # rank's cores (XLA sizes its pool from the affinity rank.py set; stated here so the log shows it).
        if spec.device == "cpu":
            jax.config.update("jax_platforms", "cpu")
        elif spec.device == "cuda":
            jax.config.update("jax_platforms", "cuda")
        self.mesh: Any = None  # several ranks: a Mesh over every device
        self.dtype = jnp.float32
        self.state: dict | None = None
        self._loss: jax.Array | None = None
        self._inputs: tuple = ()
        self._step: Any = None  # the jitted training step, from setup_<model>()
        self.parameters = 0
        self.optimizer_name = ""
        # JAX needs jax.distributed before its first backend starts, and the rank's memory budget
        # (rank.limit_memory, right after this) must find XLA's client already made: so both happen here.
        self._distributed = False
        if world > 1:
            self._join()
        self.device = self._pick_device()
        # XLA's runtime up (its compiler's and executor's threads, made on first use) before rank.limit_memory sets the
        # rank's memory budget: under the budget a thread that cannot be made aborts the process, whatever the model.
        jax.block_until_ready(jax.jit(lambda x: x + 1)(jax.device_put(np.zeros(2, np.float32), self.device)))

    def _pick_device(self) -> jax.Device:
        spec = self.spec
        try:
            devices = jax.local_devices()
        except RuntimeError as exc:  # jax_platforms names a platform this build or machine lacks
            raise Unsupported(f"device {spec.device!r}: JAX {jax.__version__} finds none ({exc})") from None
        self.gpu = devices[0].platform == "gpu"
        if spec.device == "cuda" and not self.gpu:
            raise Unsupported(f"device 'cuda' requested but JAX {jax.__version__} finds no GPU")
        return devices[0]  # one rank: its only device; several: jax.distributed gave each process one

    # ---- building
    def setup_runtime(self) -> None:
        spec = self.spec
        if spec.compiler:
            raise Unsupported(COMPILER_ON_UNSUPPORTED)
        if self.world > 1:
            name = spec.strategy
            if not self.gpu and (reason := strategies.cpu_problem("jax", name)):
                raise Unsupported(reason)
            self.mesh = Mesh(np.array(jax.devices()), (AXIS,))
        if spec.precision == "amp":
            capability = getattr(self.device, "compute_capability", None)
            if self.gpu and capability is not None and float(capability) < 8.0:
                raise Unsupported(
                    f"amp is bfloat16 in JAX, which needs a GPU of compute capability 8.0 (Ampere) or later; "
                    f"{self.device.device_kind} has {capability} (float16 with loss scaling is not offered)"
                )
            self.dtype = jnp.bfloat16

    def _join(self) -> None:
        """jax.distributed over the ranks: rank 0 runs the coordinator at MASTER_ADDR:MASTER_PORT; each process
        keeps one device (its local rank's GPU, or its CPU)."""
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        local = 0 if len(visible) == 1 else self.local_rank  # SLURM may have bound one GPU to each task
        address = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ.get('MASTER_PORT', '29500')}"
        jax.distributed.initialize(
            coordinator_address=address,
            num_processes=self.world,
            process_id=self.rank,
            local_device_ids=[local] if self.spec.device != "cpu" else None,
            shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_S,
        )
        self._distributed = True

    def strategy_in_effect(self) -> dict:
        """Read back from JAX: the processes and devices it joined, the mesh, the CPU collectives and the step's
        form (shard_map with pmean, or one SPMD-partitioned step)."""
        if self.world == 1:
            return {"summary": "none (one rank)"}
        facts = {
            "processes": jax.process_count(),
            "devices": jax.device_count(),
            "mesh": dict(self.mesh.shape),
            "collectives": "NCCL" if self.gpu else f"{jax.config.jax_cpu_collectives_implementation} (CPU)",
            "step": self._step_form,
        }
        facts["summary"] = (
            f"{facts['step']} over a mesh {facts['mesh']} of {facts['devices']} devices in {facts['processes']} "
            f"processes (jax.distributed), collectives {facts['collectives']}"
        )
        return facts

    @property
    def _step_form(self) -> str:
        if self.spec.strategy == "gspmd":
            return "jax.jit on the global batch (NamedSharding; XLA's SPMD partitioner inserts the all-reduces)"
        wire = jnp.dtype(self._wire).name
        return f"jax.shard_map per rank, gradients averaged by lax.pmean in {wire} (one flat buffer)"

    def setup_resnet(self) -> None:
        spec = self.spec
        model = jax_resnet.ResNet50(model=spec.model, dtype=self.dtype)
        # Same initial weights on every rank (the key is the study's seed, not the rank's).
        params, batch_stats = jax_resnet.init(model, jax.random.PRNGKey(spec.seed), spec.image_size)
        self.parameters = jax_resnet.parameter_count(params)
        optimizer = optax.chain(optax.add_decayed_weights(WEIGHT_DECAY), optax.sgd(0.1, momentum=0.9))
        self.optimizer_name = "optax add_decayed_weights + sgd (momentum 0.9)"

        def loss_fn(params, batch_stats, images, labels):
            logits, updates = model.apply(
                {"params": params, "batch_stats": batch_stats}, images, train=True, mutable=["batch_stats"]
            )
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, updates["batch_stats"]

        def step(state, images, labels):
            (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                state["params"], state["batch_stats"], images, labels
            )
            if self._per_rank:
                grads, batch_stats = pmean(grads, self._wire), pmean(batch_stats)
            updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
            params = optax.apply_updates(state["params"], updates)
            return {"params": params, "batch_stats": batch_stats, "opt_state": opt_state}, loss

        state = {"params": params, "batch_stats": batch_stats, "opt_state": optimizer.init(params)}
        self._build(step, state, inputs=2)
        if spec.data == "real":
            self.pipeline = jax_data.imagenet_pipeline(spec, self.rank, self.world, self.threads, self.device)
            return
        rng = np.random.default_rng(spec.seed + self.rank)
        size = spec.image_size
        self._inputs = self._place(
            rng.standard_normal((spec.batch_size, size, size, 3), np.float32),
            rng.integers(0, 1000, spec.batch_size, dtype=np.int32),
        )

    def setup_bert(self) -> None:
        spec = self.spec
        cfg = bert.CONFIGS[spec.model]
        model = jax_bert.BertPretraining(cfg, dtype=self.dtype)
        params = jax_bert.init(model, jax.random.PRNGKey(spec.seed), spec.seq_length)
        self.parameters = jax_bert.parameter_count(params)
        self.settings = bert.OPTIMIZERS[spec.optimizer_name]
        optimizer = jax_bert.make_optimizer(
            spec.optimizer_name, params, clip_norm=self.settings.clip_norm if spec.grad_clip else None
        )

        def step(state, features):
            # dropout: a fresh key per step, and another on every rank
            key, next_key = jax.random.split(state["key"])
            if self._per_rank:
                key = jax.random.fold_in(key, jax.lax.axis_index(AXIS))

            def loss_fn(params):
                return model.apply({"params": params}, features, train=True, rngs={"dropout": key})[2]

            loss, grads = jax.value_and_grad(loss_fn)(state["params"])
            if self._per_rank:
                grads = pmean(grads, self._wire)  # before clipping: the global norm
            updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
            params = optax.apply_updates(state["params"], updates)
            return {"params": params, "opt_state": opt_state, "key": next_key}, loss

        state = {"params": params, "opt_state": optimizer.init(params), "key": jax.random.PRNGKey(spec.seed + 1)}
        self._build(step, state, inputs=1)
        if spec.data == "real":
            self.pipeline = jax_data.bert_pipeline(spec, self.rank, self.world)
            return
        batch = bert.synthetic_batch(
            cfg, spec.batch_size, spec.seq_length, spec.predictions, seed=spec.seed + self.rank
        )
        self._inputs = self._place(jax_bert.batch_arrays(batch))

    @property
    def _wire(self) -> jnp.dtype:
        """The gradients' dtype in the all-reduce: float16 with strategy pmean_fp16, else float32."""
        return jnp.float16 if self.spec.strategy == "pmean_fp16" else jnp.float32

    @property
    def _per_rank(self) -> bool:
        """The step runs per rank inside shard_map (strategy auto with several ranks): it averages itself."""
        return self.world > 1 and self.spec.strategy != "gspmd"

    def _build(self, step, state: dict, inputs: int) -> None:
        """Compile-ready step with the state donated, and the state placed: on this device (one rank), or
        replicated over the mesh. Several ranks: shard_map (auto) or the global step with shardings (gspmd)."""
        if self.world == 1:
            self._step = jax.jit(step, donate_argnums=0)
            self.state = jax.device_put(state, self.device)
            return
        replicated, sharded = NamedSharding(self.mesh, P()), NamedSharding(self.mesh, P(AXIS))
        host = jax.tree.map(np.asarray, state)
        self.state = jax.tree.map(lambda x: jax.make_array_from_process_local_data(replicated, x), host)
        if self._per_rank:

            def per_rank(state, *batch):
                new_state, loss = step(state, *batch)
                return new_state, loss[None]  # this rank's loss, one row per rank

            self._step = jax.jit(
                jax.shard_map(per_rank, mesh=self.mesh, in_specs=(P(), *[P(AXIS)] * inputs), out_specs=(P(), P(AXIS))),
                donate_argnums=0,
            )
        else:
            self._step = jax.jit(
                step,
                in_shardings=(replicated, *[sharded] * inputs),
                out_shardings=(replicated, replicated),
                donate_argnums=0,
            )

    def _place(self, *batch):
        """A batch (arrays, or dicts of arrays) on this rank's device; with several ranks as this rank's part of
        the global batch (rank r's rows r*B .. (r+1)*B - 1)."""
        local = jax.device_put(batch, self.device)
        if self.world == 1:
            return local
        sharding = NamedSharding(self.mesh, P(AXIS))
        return jax.tree.map(
            lambda x: jax.make_array_from_single_device_arrays((x.shape[0] * self.world, *x.shape[1:]), sharding, [x]),
            local,
        )

    # ---- the measured work
    def resnet_step(self) -> None:
        self._train_step()

    def bert_step(self) -> None:
        self._train_step()

    def _train_step(self) -> None:
        """One step on the resident batch or the pipeline's next one; dispatched only (JAX runs it
        asynchronously): the next step queues behind it."""
        if self.pipeline is not None:
            batch = self.pipeline.next()
            self._inputs = self._place(*batch) if isinstance(batch, tuple) else self._place(batch)
        self.state, self._loss = self._step(self.state, *self._inputs)

    def loss(self) -> float:
        if self._loss is None:
            return 0.0
        return float(np.asarray(self._loss.addressable_shards[0].data).reshape(-1)[0])

    def sync(self) -> None:
        jax.block_until_ready((self.state, self._loss))  # the last update included

    def barrier(self) -> None:
        if self.world > 1:
            multihost_utils.sync_global_devices("dlbench barrier")

    def all_gather(self, obj: dict) -> list[dict]:
        """Every rank's `obj`, in rank order: its JSON bytes in a fixed-size row, gathered over the processes."""
        if self.world == 1:
            return [obj]
        return decode_rows(multihost_utils.process_allgather(encode_row(obj)))

    # ---- facts for the log
    def device_name(self) -> str:
        return self.device.device_kind if self.gpu else sysinfo.cpu_model()

    def peak_memory_bytes(self) -> int | None:
        if not self.gpu:
            return None
        return int((self.device.memory_stats() or {}).get("peak_bytes_in_use", 0)) or None

    def environment(self) -> dict:
        import flax

        gpu = self.gpu
        return {
            "framework": "jax",
            "framework_version": jax.__version__,
            "jaxlib_version": jax.lib.__version__ if hasattr(jax.lib, "__version__") else None,
            "flax_version": flax.__version__,
            "optax_version": optax.__version__,
            "numpy_version": np.__version__,
            **(_cuda_versions() if gpu else {"cuda": None, "cudnn": None, "nccl": None}),
            "driver": sysinfo.nvidia_driver() if gpu else None,
            "device_type": "cuda" if gpu else "cpu",
            "device_name": self.device_name(),
            "device_count": len(jax.local_devices()) if gpu else 0,
            "world_size": self.world,
            "distributed_backend": (
                f"jax.distributed ({'nccl' if gpu else jax.config.jax_cpu_collectives_implementation})"
                if self._distributed
                else None
            ),
            "threads": {
                "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            },
            "memory_format": None if self.is_bert else "channels_last",  # NHWC, JAX's native layout
            "settings": self.settings_in_effect(),
            "amp_dtype": "bfloat16" if self.dtype == jnp.bfloat16 else None,
            "loss_scaling": False,
            "compiler": None,  # the axis is off; the step is always XLA-compiled (jit below)
            "jit": "the whole training step jax.jit-compiled by XLA, its state donated",
            "parameters": self.parameters,
            "input_pipeline": self.pipeline.describe()
            if self.pipeline is not None
            else "synthetic: one batch resident on the device, reused every step",
            **(self._bert_environment() if self.is_bert else {}),
        }

    def _bert_environment(self) -> dict:
        name = self.spec.optimizer_name
        return {
            "memory_format": None,  # no images
            **self.bert_environment(jax_bert.OPTIMIZER_NAMES[name], bert.OPTIMIZERS[name].clip_norm),
        }

    def settings_in_effect(self) -> dict:
        """What decides JAX's speed here, read back from JAX (the report's settings column)."""
        facts = {
            "platform": self.device.platform,
            "backend_version": jax.extend.backend.get_backend().platform_version if hasattr(jax, "extend") else None,
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
            # a persistent cache spares a repeat its compiles (warm-up, never the measured steps)
            "compilation_cache": jax.config.jax_compilation_cache_dir,
            "jit": "whole step, donated state",
            "compute_dtype": jnp.dtype(self.dtype).name,
            "memory_format": None if self.is_bert else "NHWC",
            "optimizer": self.optimizer_name or None,
            # fp32 matrix products on TF32 tensor cores: XLA's default precision on GPUs (jax_default_matmul_precision)
            "default_matmul_precision": jax.config.jax_default_matmul_precision if self.gpu else None,
        }
        where = "GPU" if self.gpu else f"XLA CPU, {facts['cpus']} cores"
        facts["summary"] = f"{where}, jit whole step (donated state), {facts['compute_dtype']} compute" + (
            "" if self.is_bert else ", NHWC"
        )
        return facts

    def shutdown(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        if self._distributed:
            try:
                jax.distributed.shutdown()
            except Exception as exc:  # a peer already gone: its failure is the one recorded
                print(f"[dlbench] jax.distributed.shutdown: {exc}", file=sys.stderr)
