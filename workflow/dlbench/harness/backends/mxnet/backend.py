"""MXNet 1.9 backend: ResNet-50 v1.5 (Gluon, SGD with momentum) and BERT pretraining (Gluon, AdamWeightDecay
or LAMB, bert.py), synthetic data resident on the context or real data (data.py: DALI for ImageNet, h5py
for BERT's HDF5 shards; each step takes the pipeline's next batch, so reading, decoding and augmenting are in it).

The contract, and when the harness calls what: backends/base.py. Here:
- one `autograd.record()` step through `gluon.Trainer`. ResNet-50: softmax cross-entropy averaged over the
  global batch, SGD (lr 0.1, momentum 0.9, weight decay 5e-5). BERT: masked-LM + next-sentence loss (a
  mean per rank, averaged over the ranks), dropout on, Google's AdamWeightDecay or LAMB with
  bert.OPTIMIZERS' settings, LayerNorm and biases without weight decay (wd_mult 0), the learning rate set
  every step (bert.learning_rate), with grad_clip the gradients clipped by their global norm between
  `allreduce_grads()` and `update()` (GluonNLP's pattern);
- compiler on: `hybridize(static_alloc=True, static_shape=True)` (MXNet's cached graph); off: imperative;
- AMP (`mxnet.contrib.amp`): bfloat16 on CPU (oneDNN), float16 with dynamic loss scaling on GPU;
- several ranks, one process per device, on one node or several: the parameter-server kvstore 'dist_sync'
  built into MXNet (ps-lite). Rank 0 starts the scheduler at MASTER_ADDR:MASTER_PORT (the allocation's first
  node) and the first rank of every node (local rank 0) one server, as child processes in its process group,
  so the supervisor's stop() ends them too; every worker push-pulls its gradients through the servers (they
  sum them, each worker then applies the optimizer itself: update_on_kvstore=False, as an allreduce).
  spec.strategy (strategies.py) may pick dist_device_sync, a parameter server that runs the optimizer
  (dist_sync_ps, dist_async: update_on_kvstore=True) or Horovod.
"""

from __future__ import annotations

import os

# MXNet reads its thread settings when it is loaded. rank.py pins this process to its core share
# before importing the backend, so that share is the default (the supervisor sets OMP_NUM_THREADS).
if hasattr(os, "sched_getaffinity"):
    os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))

import atexit  # noqa: E402
import ctypes  # noqa: E402
import ctypes.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from importlib import metadata  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from ... import bert, sysinfo  # noqa: E402
from ...gather import ROW_BYTES, decode_rows, encode_row  # noqa: E402
from ...spec import RunSpec, Unsupported  # noqa: E402
from ..base import BackendBase  # noqa: E402
from . import bert as mx_bert  # noqa: E402 - this framework's BERT (bert: what every backend shares)
from . import data as mx_data  # noqa: E402
from .resnet import ResNet50, parameter_count  # noqa: E402

GATHER_KEY = 1 << 30  # kvstore key of all_gather's buffer (the Trainer uses 0..n_params-1)
KV_CHILD_WAIT_S = 30.0
# spec.strategy -> the kvstore type within one node (strategies.py); auto = dist_sync
KV_TYPES = {
    "auto": "dist_sync",
    "dist_sync": "dist_sync",
    "dist_device_sync": "dist_device_sync",
    "dist_sync_ps": "dist_sync",
    "dist_async": "dist_async",
}
SERVER_UPDATE = ("dist_sync_ps", "dist_async")  # the server runs the optimizer (update_on_kvstore=True)


def _feature(name: str) -> bool:
    features = mx.runtime.Features()
    return name in features and features[name].enabled


def address_towards(host: str, port: int) -> str:
    """This node's address on the interface that routes to `host` (a UDP connect sends nothing): the address the
    other nodes reach this one at, where the host name may resolve to loopback (Debian's 127.0.1.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return probe.getsockname()[0]


def _distribution() -> tuple[str, str | None]:
    """(pip distribution of MXNet, its CUDA version from the name, e.g. mxnet-cu112 -> 11.2)."""
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name == "mxnet" or name.startswith("mxnet-"):
            tag = name.removeprefix("mxnet").lstrip("-")
            cuda = f"{tag[2:-1]}.{tag[-1]}" if tag.startswith("cu") and tag[2:].isdigit() else None
            return name, cuda
    return "mxnet", None


def _cudnn_version() -> str | None:
    try:
        version = mx.base._LIB.cudnnGetVersion()
    except AttributeError:  # a CPU build, or cuDNN not exported by libmxnet
        return None
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}" if version >= 1000 else str(version)


def interpreter_facts() -> dict:
    """This interpreter's MXNet (dlbench.harness.probe): the wheel's CUDA, cuDNN and NCCL, and the GPUs it sees
    (MXNet names no GPU model: gpu0, gpu1, ...)."""
    _, cuda = _distribution()
    return {
        "framework_version": mx.__version__,
        "cuda": cuda if _feature("CUDA") else None,
        "cudnn": (_cudnn_version() or "enabled") if _feature("CUDNN") else None,
        "nccl": "enabled" if _feature("NCCL") else None,
        "gpus": [f"gpu{i}" for i in range(mx.context.num_gpus())] if _feature("CUDA") else [],
    }


MXCSR_FTZ_DAZ = 0x8040  # SSE control bits: flush subnormal results to zero, read subnormal inputs as zero
FENV_MXCSR_OFFSET = 28  # glibc's fenv_t on x86-64: the MXCSR is its last 4 bytes (of 32)


def flush_subnormals() -> bool:
    """Compute subnormal floats as zero on this thread and the threads started after it (MXNet's engine and OpenMP
    workers), as TensorFlow's runtime and dlbench's PyTorch backend do. ResNet-50's last BatchNorm of each
    bottleneck starts at γ = 0 (NVIDIA's and MLPerf's initialisation), so its outputs are tiny; MXNet has no
    setting of its own, and its GEMM on subnormal inputs is ~100x slower on an Intel Xeon. Through glibc's
    fegetenv/fesetenv on x86-64 Linux; False (nothing changed) elsewhere."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    env = ctypes.create_string_buffer(32)
    if libm.fegetenv(env) != 0:
        return False
    (mxcsr,) = struct.unpack_from("<I", env.raw, FENV_MXCSR_OFFSET)
    struct.pack_into("<I", env, FENV_MXCSR_OFFSET, mxcsr | MXCSR_FTZ_DAZ)
    return libm.fesetenv(env) == 0


class Backend(BackendBase):
    models = ("resnet50", "bert_base", "bert_tiny")
    data = ("synthetic", "real")
    oom_markers = (
        "out of memory",
        "cannot allocate memory",
        "std::bad_alloc",
        "failed to allocate",
        "can't allocate memory",
    )
    # The PyPI builds of MXNet 1.9 index tensors with int32 (USE_INT64_TENSOR_SIZE=0): a configuration
    # needing a tensor of 2^31 elements or more cannot run with them, whatever the memory.
    unsupported_markers = ("larger than 2^31 elements",)

    @classmethod
    def cpu_gemm(cls, n: int, threads: int, fmt: str) -> Callable[[], object]:
        """MXNet's threads are those OMP_NUM_THREADS gave it when it loaded (this module's first lines: the
        process's cores, as for a run)."""
        a, b = mx.nd.random.normal(shape=(n, n)), mx.nd.random.normal(shape=(n, n))
        if fmt == "fp32":
            return lambda: mx.nd.dot(a, b).wait_to_read()
        # bf16: through oneDNN's fully connected layer (a x b^T, the same FLOPs), an operator AMP runs in bf16;
        # MXNet's bfloat16 is its own numpy record type, which only amp_cast makes
        from mxnet.contrib import amp

        a, b = (mx.nd.amp_cast(x, dtype=amp.amp.bfloat16) for x in (a, b))
        return lambda: mx.nd.FullyConnected(a, b, num_hidden=n, no_bias=True).wait_to_read()

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int, threads: int) -> None:
        super().__init__(spec, rank, world, local_rank, threads)
        self.subnormals_flushed = flush_subnormals()  # before MXNet starts its engine's and OpenMP's threads
        self.ctx = self._pick_context(spec.device)
        self.net: Any = None  # the Gluon network, from setup_<model>()
        self.kv: Any = None  # a kvstore strategy: the KVStore
        self.kv_addresses: dict | None = None  # where ps-lite's scheduler is, the address this node joined with
        self.hvd: Any = None  # strategy horovod: the horovod.mxnet module
        self.distributed_backend: str | None = None
        self.update_on_kvstore = spec.strategy in SERVER_UPDATE
        self._kv_children: list[subprocess.Popen] = []
        self._finished = False
        self._loss: Any = None  # the last step's loss (an NDArray)

    def _pick_context(self, request: str) -> mx.Context:
        gpus = mx.context.num_gpus() if _feature("CUDA") else 0
        if request == "cuda" or (request == "auto" and gpus > 0):
            if gpus == 0:
                reason = "this MXNet build has no CUDA" if not _feature("CUDA") else "no GPU is visible"
                raise Unsupported(f"device 'cuda' requested but {reason}")
            if self.spec.devices_per_node > gpus:
                raise Unsupported(
                    f"topology {self.spec.topology} needs {self.spec.devices_per_node} GPUs per node; {gpus} visible"
                )
            return mx.gpu(self.local_rank)
        return mx.cpu()

    @property
    def gpu(self) -> bool:
        return self.ctx.device_type == "gpu"

    # ---- building
    def setup_runtime(self) -> None:
        spec = self.spec
        self.amp_dtype = self._amp_dtype() if spec.precision == "amp" else None
        if self.world > 1:
            self._init_distributed()
        mx.random.seed(spec.seed + self.rank)
        np.random.seed(spec.seed + self.rank)
        if self.amp_dtype is not None:
            from mxnet.contrib import amp  # patches the operator namespaces: before the net is built

            amp.init(target_dtype=self.amp_dtype)
        # MXNet's multi-tensor SGD (4 tensors per call by default, MXNET_OPTIMIZER_AGGREGATION_SIZE) is slower on CPU
        # than one call per tensor: 160 vs 112 ms per ResNet-50 update, +3-5% per step on the 2-core VM. GPUs keep
        # MXNet's default (fewer kernel launches), as does BERT's optimizer. None: MXNet's default.
        chosen = self.kind == "resnet" and not self.gpu and "MXNET_OPTIMIZER_AGGREGATION_SIZE" not in os.environ
        self.sgd_aggregation = 1 if chosen else None

    def _trainer(
        self, params: gluon.ParameterDict, optimizer: str | mx.optimizer.Optimizer, optimizer_params: dict | None = None
    ) -> gluon.Trainer:
        if self.hvd is not None:
            self.hvd.broadcast_parameters(params, root_rank=0)
            trainer = self.hvd.DistributedTrainer(params, optimizer, optimizer_params)
        else:
            # one process, one context: no kvstore; several: the dist kvstore sums the gradients and
            # every worker updates its own copy of the weights.
            trainer = gluon.Trainer(
                params,
                optimizer,
                optimizer_params,
                kvstore=self.kv,
                update_on_kvstore=self.update_on_kvstore if self.kv is not None else None,
            )
            if self.kv is not None:  # broadcast the first worker's weights now, not inside the first step
                trainer._init_kvstore()
                trainer._init_params()
        if self.amp_dtype == "float16":
            from mxnet.contrib import amp

            amp.init_trainer(trainer)
        return trainer

    def setup_resnet(self) -> None:
        spec = self.spec
        net = ResNet50()
        net.initialize(ctx=self.ctx)
        self.parameters = parameter_count(net)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        if spec.compiler:
            net.hybridize(static_alloc=True, static_shape=True)
            loss_fn.hybridize(static_alloc=True, static_shape=True)
        self.net, self.loss_fn = net, loss_fn
        sgd = {"learning_rate": 0.1, "momentum": 0.9, "wd": 5e-5}
        # gradients are summed over the ranks: normalise by the global batch (the mean, like DDP)
        self.global_batch = spec.batch_size * (self.world if self.hvd is None else 1)
        if self.update_on_kvstore and self.kv is not None:
            # The server's optimizer keeps the rescale_grad it was sent: give it 1/global batch now, step(1).
            sgd["rescale_grad"], self.global_batch = 1.0 / self.global_batch, 1
        optimizer = mx.optimizer.create("sgd", **sgd)
        if self.sgd_aggregation is not None:
            optimizer.aggregate_num = self.sgd_aggregation
        self.trainer = self._trainer(net.collect_params(), optimizer)
        self.scale_loss = self.amp_dtype == "float16"
        if spec.data == "real":
            self.pipeline = mx_data.imagenet_pipeline(spec, self.rank, self.world, self.threads, self.ctx)
            return
        size = spec.image_size
        self.images = mx.nd.random.normal(shape=(spec.batch_size, 3, size, size), ctx=self.ctx)
        self.labels = mx.nd.random.randint(0, 1000, shape=(spec.batch_size,), ctx=self.ctx).astype("float32")

    def setup_bert(self) -> None:
        spec = self.spec
        cfg = bert.CONFIGS[spec.model]
        net = mx_bert.build(cfg, self.ctx)  # Google's initialisation: normal(0.02), LayerNorm 1/0, biases 0
        self.parameters = mx_bert.parameter_count(net)
        mx_bert.exclude_from_weight_decay(net)
        loss_fn = mx_bert.PretrainingLoss()
        if spec.compiler:
            net.hybridize(static_alloc=True, static_shape=True)
            loss_fn.hybridize(static_alloc=True, static_shape=True)
        self.net, self.loss_fn = net, loss_fn
        self.settings = bert.OPTIMIZERS[spec.optimizer_name]
        self.trainer = self._trainer(net.collect_params(), mx_bert.optimizer(spec.optimizer_name))
        self.scale_loss = self.amp_dtype == "float16"
        # The loss is a mean per rank. The dist kvstore sums the ranks' gradients, update(world) divides
        # by the ranks (Horovod's trainer divides itself: update(1)), as DDP's mean.
        self.grad_batch = self.world if self.hvd is None else 1
        self._step_count = 0
        if spec.data == "real":
            self.pipeline = mx_data.bert_pipeline(spec, self.rank, self.world, self.ctx)
            return
        batch = bert.synthetic_batch(
            cfg, spec.batch_size, spec.seq_length, spec.predictions, seed=spec.seed + self.rank
        )
        self.inputs, self.targets = mx_bert.arrays(batch, self.ctx)

    def _amp_dtype(self) -> str:
        if self.gpu:
            return "float16"
        if not _feature("MKLDNN"):
            raise Unsupported("AMP on CPU needs bfloat16 kernels: this MXNet build has no oneDNN (MKLDNN)")
        flags = sysinfo.cpu_flags()
        if not {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
            raise Unsupported(
                "AMP on CPU runs in bfloat16, which MXNet's oneDNN kernels support only on "
                "CPUs with AVX-512 (avx512_core); this CPU has none"
            )
        return "bfloat16"

    def _init_distributed(self) -> None:
        name = self.spec.strategy
        if name in SERVER_UPDATE and self.is_bert:
            raise Unsupported(
                f"strategy {name!r} runs the optimizer on the kvstore server, but BERT's learning-rate "
                "schedule and gradient clipping run on the workers (ResNet-50 only)"
            )
        if name == "horovod":
            try:
                import horovod.mxnet as hvd
            except ImportError as exc:
                raise Unsupported(
                    f"strategy 'horovod' needs Horovod (horovod.mxnet), which is not installed ({exc}); "
                    "the dist kvstore (strategy auto) needs nothing more"
                ) from None
            hvd.init()
            if hvd.size() != self.world:
                raise RuntimeError(f"Horovod sees {hvd.size()} ranks, the launcher started {self.world}")
            if self.gpu:
                self.ctx = mx.gpu(hvd.local_rank())
            self.hvd, self.distributed_backend = hvd, "horovod"
            return
        self._init_kvstore(KV_TYPES[name])

    def _init_kvstore(self, kv_type: str) -> None:
        """ps-lite across the allocation: rank 0 starts the scheduler (at MASTER_ADDR:MASTER_PORT), the first rank
        of every node one server."""
        if not _feature("DIST_KVSTORE"):
            raise Unsupported(
                "MXNet multi-process training needs Horovod or a dist kvstore: this MXNet build has no DIST_KVSTORE"
            )
        port = os.environ.get("MASTER_PORT")
        if not port:
            raise Unsupported("MXNet multi-process training needs MASTER_PORT for its dist kvstore's scheduler")
        root = socket.gethostbyname(os.environ.get("MASTER_ADDR") or "127.0.0.1")
        dmlc = {
            "DMLC_PS_ROOT_URI": root,
            "DMLC_PS_ROOT_PORT": port,
            "DMLC_NUM_SERVER": str(self.spec.nodes),
            "DMLC_NUM_WORKER": str(self.world),
        }
        if "DMLC_INTERFACE" not in os.environ:  # the user's choice of interface wins (ps-lite reads it)
            dmlc["DMLC_NODE_HOST"] = os.environ.get("DMLC_NODE_HOST") or address_towards(root, int(port))
        roles = (["scheduler"] if self.rank == 0 else []) + (["server"] if self.local_rank == 0 else [])
        for role in roles:
            # a server only sums gradients: one thread, on this rank's cores (inherited)
            env = dict(os.environ, **dmlc, DMLC_ROLE=role, OMP_NUM_THREADS="1")
            self._kv_children.append(subprocess.Popen([sys.executable, "-c", "import mxnet"], env=env))
        os.environ.update(dmlc, DMLC_ROLE="worker")
        self.kv_addresses = {
            "scheduler": f"{root}:{port}",
            "node_host": dmlc.get("DMLC_NODE_HOST", ""),
            "servers": self.spec.nodes,
        }
        kv = mx.kv.create(kv_type)  # blocks until every worker and the server have joined
        if kv.num_workers != self.world:
            raise RuntimeError(f"dist kvstore sees {kv.num_workers} workers, the launcher started {self.world}")
        # ps-lite numbers the workers in its own order (by address): kv.rank may differ from ours
        if not self.update_on_kvstore:  # else the server would apply its optimizer to the buffer: all_gather
            kv.init(GATHER_KEY, mx.nd.zeros(self.world * ROW_BYTES))
        self.kv, self.distributed_backend = kv, f"kvstore {kv_type}"

    # ---- the measured work
    def resnet_step(self) -> None:
        if self.pipeline is not None:
            self.images, self.labels = self.pipeline.next()
        with autograd.record():
            loss = self.loss_fn(self.net(self.images), self.labels)
        self._backward(loss)
        self.trainer.step(self.global_batch)
        self._loss = loss  # not read here: reading it would wait for the step

    def bert_step(self) -> None:
        self.trainer.set_learning_rate(bert.learning_rate(self.settings, self._step_count))
        self._step_count += 1
        if self.pipeline is not None:
            self.inputs, self.targets = self.pipeline.next()
        with autograd.record():
            loss = self.loss_fn(*self.net(*self.inputs), *self.targets)
        self._backward(loss)
        if not self.spec.grad_clip:
            self.trainer.step(self.grad_batch)
        else:
            self.trainer.allreduce_grads()
            # The gradients here are the ranks' sum times the loss scale; update() multiplies them by
            # trainer._scale / grad_batch. Clip them at the same multiple of clip_norm. No isfinite
            # check (it would wait for the step); an fp16 overflow is skipped by AMP's update anyway.
            limit = self.settings.clip_norm * self.grad_batch / self.trainer._scale
            grads = [p.list_grad()[0] for p in self.trainer._params if p.grad_req != "null"]
            gluon.utils.clip_global_norm(grads, limit, check_isfinite=False)
            self.trainer.update(self.grad_batch)
        self._loss = loss

    def _backward(self, loss: mx.nd.NDArray) -> None:
        """Gradients of the loss (scaled by AMP's dynamic loss scale with float16)."""
        if self.scale_loss:
            from mxnet.contrib import amp

            with amp.scale_loss(loss, self.trainer) as scaled:
                autograd.backward(scaled)
        else:
            loss.backward()

    def loss(self) -> float:
        return float(self._loss.mean().asscalar()) if self._loss is not None else float("nan")

    def sync(self) -> None:
        mx.nd.waitall()

    def barrier(self) -> None:
        if self.kv is not None:
            self.kv._barrier()
        elif self.hvd is not None:
            self.hvd.allreduce(mx.nd.zeros(1), name="dlbench_barrier").wait_to_read()

    def all_gather(self, obj: dict) -> list[dict]:
        if self.kv is None and self.hvd is None:
            self._finished = True
            return [obj]
        if self.kv is not None and self.update_on_kvstore:
            return self._gather_files(obj)
        slot = self.kv.rank if self.kv is not None else self.hvd.rank()
        buf = np.zeros((self.world, ROW_BYTES), dtype=np.float32)  # this rank's slot: its record; the others zero
        buf[slot] = encode_row([self.rank, obj])
        nd = mx.nd.array(buf.reshape(-1))
        if self.kv is not None:
            self.kv.pushpull(GATHER_KEY, nd, out=nd)  # the server sums: every slot holds its rank's bytes
            summed = nd.asnumpy()
        else:
            summed = self.hvd.allreduce(nd, average=False, name="dlbench_gather").asnumpy()
        gathered = dict(decode_rows(summed))  # [rank, record] per slot
        self._finished = True
        return [gathered[r] for r in range(self.world)]

    def _gather_files(self, obj: dict) -> list[dict]:
        """all_gather when the server runs the optimizer (it would update a pushed buffer as a weight): through
        files in the run's rank directory, which every rank sees (the kvstore runs within one node)."""
        folder = Path(os.environ.get("DLBENCH_RANK_DIR") or f"{self.spec.log}.ranks")
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"gather-{self.rank}.json.tmp"
        tmp.write_text(json.dumps(obj))
        tmp.replace(folder / f"gather-{self.rank}.json")
        self.kv._barrier()
        self._finished = True
        return [json.loads((folder / f"gather-{r}.json").read_text()) for r in range(self.world)]

    def strategy_in_effect(self) -> dict:
        """Read back from MXNet: the kvstore's type and worker count and where the Trainer updates, or Horovod."""
        if self.hvd is not None:
            return {
                "library": "horovod",
                "size": self.hvd.size(),
                "summary": f"Horovod DistributedTrainer over {self.hvd.size()} ranks",
            }
        if self.kv is None:
            return {"summary": "none (one rank)"}
        on_server = bool(self.trainer._update_on_kvstore)
        assert self.kv_addresses is not None  # _init_kvstore sets it with the kvstore
        servers = self.kv_addresses["servers"]  # what ps-lite was told to wait for (_init_kvstore)
        facts = {
            "kvstore_type": self.kv.type,
            "num_workers": self.kv.num_workers,
            "num_servers": servers,
            "update_on_kvstore": on_server,
        }
        facts["summary"] = (
            f"kvstore {facts['kvstore_type']} (ps-lite, {facts['num_workers']} workers, "
            f"{servers} server{'s' if servers > 1 else ''}), "
            f"optimizer on {'the server' if on_server else 'each worker'}"
        )
        return facts

    # ---- facts for the log
    def device_name(self) -> str:
        if self.gpu:
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", str(self.ctx.device_id)],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                if out.returncode == 0 and out.stdout.strip():
                    return out.stdout.strip().splitlines()[0]
            except (OSError, subprocess.SubprocessError):
                pass
            return f"gpu({self.ctx.device_id})"
        return sysinfo.cpu_model()

    def peak_memory_bytes(self) -> int | None:
        if not self.gpu:
            return None  # the harness reports the process's peak RSS
        # MXNet keeps what it allocated in its pool: memory in use now is its high-water mark
        free, total = mx.context.gpu_memory_info(self.ctx.device_id)
        return int(total - free)

    def environment(self) -> dict:
        dist_name, cuda = _distribution()
        features = mx.runtime.Features()
        return {
            "framework": "mxnet",
            "framework_version": mx.__version__,
            "framework_distribution": dist_name,
            "numpy_version": np.__version__,
            "cuda": cuda if _feature("CUDA") else None,
            "cudnn": (_cudnn_version() or "enabled") if _feature("CUDNN") else None,
            "nccl": "enabled" if _feature("NCCL") else None,
            "onednn": _feature("MKLDNN"),
            "runtime_features": sorted(k for k, v in features.items() if v.enabled),
            "driver": sysinfo.nvidia_driver() if self.gpu else None,
            "device_type": self.ctx.device_type,
            "device_name": self.device_name(),
            "device_count": mx.context.num_gpus() if self.gpu else 0,
            "world_size": self.world,
            "distributed_backend": self.distributed_backend,
            "kvstore_processes": [p.pid for p in self._kv_children],  # rank 0's ps-lite scheduler and server
            "kvstore_addresses": self.kv_addresses,
            "threads": {
                "omp": self.threads,
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                "MXNET_CPU_WORKER_NTHREADS": os.environ.get("MXNET_CPU_WORKER_NTHREADS", "1"),
                "MXNET_ENGINE_TYPE": os.environ.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice"),
            },
            "settings": self.settings_in_effect(),
            "amp_dtype": self.amp_dtype,
            "compiler": "hybridize(static_alloc, static_shape)" if self.spec.compiler else None,
            "hybridize": bool(self.spec.compiler),
            "parameters": self.parameters,
            "input_pipeline": self.pipeline.describe()
            if self.pipeline is not None
            else "synthetic: one random batch resident on the context, reused every step",
            **(
                self.bert_environment(mx_bert.OPTIMIZER_NAMES[self.spec.optimizer_name], self.settings.clip_norm)
                if self.is_bert
                else {}
            ),
        }

    def settings_in_effect(self) -> dict:
        """What decides this framework's speed here, read back from MXNet and its environment (the report's
        settings column)."""
        facts = {
            "onednn": _feature("MKLDNN"),
            "omp_threads": self.threads,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "engine": os.environ.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice"),
            "hybridize": bool(self.spec.compiler),
            "memory_format": None if self.is_bert else "contiguous",
            "optimizer_aggregation": optimizer.aggregate_num
            if (optimizer := self._optimizer())
            else self.sgd_aggregation,
            "flush_subnormals": self.subnormals_flushed if not self.gpu else None,
        }
        where = "GPU" if self.gpu else f"oneDNN {'on' if facts['onednn'] else 'off'}"
        aggregation = facts["optimizer_aggregation"]
        facts["summary"] = (
            f"{where}, {facts['omp_threads']} OpenMP threads, {facts['engine']}, "
            f"{'hybridized' if facts['hybridize'] else 'imperative'}"
            + ("" if self.is_bert else ", NCHW")
            + (", subnormals flushed" if facts["flush_subnormals"] else "")
            + ("" if aggregation is None else f", optimizer updates {aggregation} tensor(s) per call")
        )
        return facts

    def _optimizer(self) -> mx.optimizer.Optimizer | None:
        """The optimizer the Trainer updates with (None before setup, or under Horovod's trainer)."""
        return getattr(getattr(self, "trainer", None), "_optimizer", None)

    def shutdown(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        kv, self.kv = self.kv, None
        if kv is not None and self._finished:
            mx.nd.waitall()  # nothing may still use the kvstore when it goes
            # free it now (the Trainer, which every Parameter references, holds it too): each worker
            # leaves ps-lite, kvstore rank 0 stops the server, and the scheduler ends with the last one
            mx.base.check_call(mx.base._LIB.MXKVStoreFree(kv.handle))
            kv.handle = None  # its __del__ then frees nothing
        elif kv is not None:
            # A rank failed, the others may be gone or blocked. Leaving ps-lite would wait for them (a
            # barrier), and so would MXNet's exit hook, which waits for every pending operation: a
            # push-pull whose peers never push never ends. Skip both; the process's end frees the rest.
            mx.base.check_call(mx.base._LIB.MXKVStoreSetBarrierBeforeExit(kv.handle, ctypes.c_int(0)))
            kv.handle = None
            atexit.unregister(mx.base._notify_shutdown)
        deadline = time.monotonic() + (KV_CHILD_WAIT_S if self._finished else 0.0)
        for child in self._kv_children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
