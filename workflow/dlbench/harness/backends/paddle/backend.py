"""PaddlePaddle 3 backend: ResNet-50 v1.5 (paddle.nn, Momentum) and BERT pretraining (paddle.nn, AdamW or LAMB,
bert.py), synthetic data resident on the device or real data (data.py: DALI for the ImageNet TFRecords, h5py for
BERT's HDF5 shards; each step takes the pipeline's next batch, so reading, decoding and augmenting are in it).

The contract, and when the harness calls what: backends/base.py. Here:
- dynamic graph (eager) by default; compiler on: the model's forward and loss as one static program
  (`paddle.jit.to_static(full_graph=True)`, its backward with it; CINN where the build has it);
- AMP (`paddle.amp.auto_cast`): on a GPU fp16 with dynamic loss scaling (GradScaler), as DLPerf ran Paddle; on a
  CPU Paddle has no bfloat16 training kernels (auto_cast warns and computes float32): such a run is
  `unsupported`, read from Paddle itself (a probe product's dtype), never an fp32 run labelled AMP;
- threads: Paddle's own setting (core.set_num_threads: its OpenMP and MKL pools) to the rank's cores, read back
  from the OpenMP and MKL runtimes Paddle loaded (Paddle forces one OpenMP thread at import when none is set);
- several ranks, one process per device: Paddle's collective mode (`paddle.distributed.init_parallel_env` from
  the PADDLE_* variables, made here from dlbench's rank, world and MASTER_ADDR:MASTER_PORT: the rendezvous store
  on the first node), Gloo on CPUs and NCCL on GPUs, gradients averaged by `paddle.DataParallel` (bucketed
  all-reduce during backward). Strategy auto only.
"""

from __future__ import annotations

import os

os.environ.setdefault("GLOG_minloglevel", "2")  # Paddle's C++ INFO and WARNING lines, read when it loads

import ctypes  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
from paddle import nn  # noqa: E402

from ... import bert, strategies, sysinfo  # noqa: E402
from ...spec import RunSpec, Unsupported  # noqa: E402
from ..base import BackendBase, EventClock, StepClock  # noqa: E402
from . import bert as paddle_bert  # noqa: E402 - this framework's BERT (bert: what every backend shares)
from . import data as paddle_data  # noqa: E402
from .resnet import ResNet50, parameter_count  # noqa: E402

CPU_AMP_UNSUPPORTED = (
    "PaddlePaddle {version} has no bfloat16 training kernels on a CPU: paddle.amp.auto_cast casts on CUDA places "
    "only, and a product under auto_cast(dtype='bfloat16') came out {dtype} here{warning}; an AMP run would be an "
    "fp32 run labelled AMP"
)


def _version(read: Callable[[], object]) -> str | None:
    """One of paddle.version's build facts, None where this build has none ('False', or missing)."""
    try:
        value = str(read())
    except (AttributeError, RuntimeError, ValueError):
        return None
    return None if value in ("False", "0", "") else value


def cuda_versions() -> dict:
    return {
        "cuda": _version(lambda: paddle.version.cuda()),
        "cudnn": _version(lambda: paddle.version.cudnn()),
        "nccl": _version(lambda: paddle.version.nccl()),
    }


def interpreter_facts() -> dict:
    """This interpreter's Paddle (dlbench.harness.probe): its version, the CUDA it was built with, its GPUs."""
    cuda = paddle.is_compiled_with_cuda()
    count = paddle.device.cuda.device_count() if cuda else 0
    return {
        "framework_version": paddle.__version__,
        **cuda_versions(),
        "gpus": [paddle.device.cuda.get_device_name(i) for i in range(count)],
    }


def _loaded_library(fragment: str) -> ctypes.CDLL | None:
    """A shared library this process has loaded (from /proc/self/maps), e.g. Paddle's libiomp5."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.split()[-1]
                if fragment in path:
                    return ctypes.CDLL(path)
    except OSError:
        pass
    return None


def runtime_threads() -> dict:
    """The thread counts Paddle's OpenMP and MKL runtimes will use (None for a runtime this build lacks)."""
    omp, mkl = _loaded_library("libiomp5"), _loaded_library("libmklml")
    return {
        "openmp": omp.omp_get_max_threads() if omp is not None else None,
        "mkl": mkl.MKL_Get_Max_Threads() if mkl is not None else None,
    }


def flag(name: str) -> bool | None:
    """One of Paddle's FLAGS_<name>, None where this build has no such flag (a CPU build has no cuDNN's)."""
    try:
        return bool(paddle.get_flags([f"FLAGS_{name}"])[f"FLAGS_{name}"])
    except ValueError:
        return None


class ResNetLoss(nn.Layer):
    """ResNet-50 and its loss as one layer, what DataParallel wraps and to_static compiles (whose programs take
    named arguments): softmax cross entropy, the mean over the batch. BERT's model computes its loss itself."""

    def __init__(self, model: nn.Layer) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        return F.cross_entropy(self.model(images), labels)


class Backend(BackendBase):
    models = ("resnet50", "resnet_tiny", "bert_base", "bert_tiny")
    data = ("synthetic", "real")
    oom_markers = (
        "out of memory",
        "resourceexhausted",
        "fail to alloc",
        "cannot allocate memory",
        "std::bad_alloc",
        "failed to allocate",
    )

    @classmethod
    def cpu_gemm(cls, n: int, threads: int, fmt: str) -> Callable[[], object]:
        """Paddle's CPU kernels run as they are called (no queue), with the threads set as for a run."""
        paddle.set_device("cpu")
        paddle.base.core.set_num_threads(threads)
        a, b = paddle.randn([n, n]), paddle.randn([n, n])
        if fmt == "bf16":
            a, b = a.astype("bfloat16"), b.astype("bfloat16")
            try:
                paddle.matmul(a[:2, :2], b[:2, :2])
            except RuntimeError as exc:  # no kernel registered for this place and type
                first = str(exc).strip().splitlines()[0]
                version = paddle.__version__
                raise ValueError(f"PaddlePaddle {version} has no bfloat16 matmul on a CPU: {first}") from None
        return lambda: paddle.matmul(a, b)

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int, threads: int) -> None:
        super().__init__(spec, rank, world, local_rank, threads)
        paddle.base.core.set_num_threads(threads)
        self.gpu = self._pick_device(spec.device)  # the rank's GPU index, or None on a CPU
        self.model: Any = None  # ResNetLoss or the BERT model (wrapped by DataParallel, compiled), from setup_<model>()
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.scaler: Any = None
        self._dp: paddle.DataParallel | None = None
        self._distributed = False
        self._loss: paddle.Tensor | None = None
        self.parameters = 0
        self.amp_dtype: str | None = None

    def _pick_device(self, request: str) -> int | None:
        cuda_build = paddle.is_compiled_with_cuda()
        count = paddle.device.cuda.device_count() if cuda_build else 0
        if request == "cuda" or (request == "auto" and count):
            if not count:
                why = (
                    "a CPU-only build: PyPI's paddlepaddle; docs/gpu.md says how a GPU node brings Paddle's CUDA build"
                    if not cuda_build
                    else "no GPU visible"
                )
                raise Unsupported(f"device 'cuda' requested but PaddlePaddle {paddle.__version__} finds none ({why})")
            per_node = self.spec.devices_per_node
            if count >= per_node:
                index = self.local_rank
            elif count == 1:
                index = 0  # SLURM bound one GPU to each task (CUDA_VISIBLE_DEVICES)
            else:
                raise Unsupported(f"topology {self.spec.topology} needs {per_node} GPUs per node; {count} visible")
            paddle.set_device(f"gpu:{index}")
            return index
        paddle.set_device("cpu")
        return None

    # ---- building
    def setup_runtime(self) -> None:
        spec = self.spec
        if self.world > 1:
            if self.gpu is None and (reason := strategies.cpu_problem("paddle", spec.strategy)):
                raise Unsupported(reason)
            self._join()
        paddle.seed(spec.seed + self.rank)
        if spec.precision == "amp":
            if self.gpu is None:
                self._refuse_cpu_amp()
            # fp16 with dynamic loss scaling, as DLPerf's Paddle runs (and PyTorch's backend on a GPU)
            self.amp_dtype = "float16"
            self.scaler = paddle.amp.GradScaler(init_loss_scaling=2.0**15, use_dynamic_loss_scaling=True)
        if self.gpu is not None:
            # cuDNN's algorithm search for our fixed shapes, as PyTorch's cudnn.benchmark (read back in settings)
            paddle.set_flags({"FLAGS_cudnn_exhaustive_search": True})

    def _refuse_cpu_amp(self) -> None:
        """AMP on a CPU, decided by Paddle itself: a product under auto_cast(bfloat16) that is not bfloat16 means
        Paddle would train this run in float32."""
        x = paddle.ones([4, 4])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with paddle.amp.auto_cast(dtype="bfloat16"):
                dtype = paddle.matmul(x, x).dtype
        if dtype == paddle.bfloat16:
            raise Unsupported(
                f"PaddlePaddle {paddle.__version__} casts to bfloat16 on this CPU, but dlbench's Paddle AMP on a CPU "
                "is not implemented (its loss scaling and kernels are the GPU's)"
            )
        said = next((str(w.message).split(".")[0] for w in caught), "")
        raise Unsupported(
            CPU_AMP_UNSUPPORTED.format(
                version=paddle.__version__,
                dtype=str(dtype).replace("paddle.", ""),
                warning=f' (Paddle: "{said}")' if said else "",
            )
        )

    def _rank_hosts(self) -> list[str]:
        """Each rank's host: this machine for our launcher's ranks; under srun the allocation's nodes in srun's
        block distribution (ranks 0..n-1 on the first node, ...), as TensorFlow's SlurmClusterResolver."""
        address = os.environ.get("MASTER_ADDR", "127.0.0.1")
        if "SLURM_PROCID" not in os.environ or "DLBENCH_RANK" in os.environ:
            return [address] * self.world
        hosts = sysinfo.slurm_hostnames(os.environ.get("SLURM_JOB_NODELIST", ""))
        per_node = self.spec.devices_per_node
        return [hosts[min(r // per_node, len(hosts) - 1)] for r in range(self.world)]

    def _join(self) -> None:
        """Paddle's collective mode over the ranks: the PADDLE_* variables init_parallel_env reads, the rendezvous
        store at MASTER_ADDR:MASTER_PORT (rank 0's), each rank's endpoint on its host at the next ports."""
        port = int(os.environ.get("MASTER_PORT", "29500"))
        per_node = self.spec.devices_per_node
        endpoints = [f"{host}:{port + 1 + r % per_node}" for r, host in enumerate(self._rank_hosts())]
        os.environ.update(
            PADDLE_TRAINER_ID=str(self.rank),
            PADDLE_TRAINERS_NUM=str(self.world),
            PADDLE_TRAINER_ENDPOINTS=",".join(endpoints),
            PADDLE_CURRENT_ENDPOINT=endpoints[self.rank],
            PADDLE_MASTER=f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{port}",
            PADDLE_DISTRI_BACKEND="nccl" if self.gpu is not None else "gloo",
            PADDLE_RANK_IN_NODE=str(self.local_rank),
            PADDLE_LOCAL_SIZE=str(per_node),
        )
        if self.gpu is not None:
            os.environ["FLAGS_selected_gpus"] = str(self.gpu)
        dist.init_parallel_env()
        self._distributed = True

    def _wrap(self, model: nn.Layer) -> nn.Layer:
        """The model with its loss, compiled with compiler on, then DataParallel over the ranks."""
        loss = model if self.is_bert else ResNetLoss(model)
        if self.spec.compiler:
            loss = paddle.jit.to_static(loss, full_graph=True)
        if self._distributed:
            self._dp = paddle.DataParallel(loss)
            return self._dp
        return loss

    def strategy_in_effect(self) -> dict:
        """Read back from Paddle: the collective group's backend and DataParallel's gradient buckets."""
        if not self._distributed or self._dp is None:
            return {"summary": "none (one rank)"}
        group = dist.get_group()
        facts = {
            "process_group_backend": str(group.backend).lower(),
            "wrapper": type(self._dp).__name__,
            "comm_buffer_mb": self._dp.comm_buffer_size / 2**20,
            "last_comm_buffer_mb": self._dp.last_comm_buffer_size / 2**20,
            "ranks": group.nranks,
        }
        facts["summary"] = (
            f"paddle.DataParallel over {facts['process_group_backend']} ({group.nranks} ranks), buckets "
            f"{facts['comm_buffer_mb']:g} MiB (last {facts['last_comm_buffer_mb']:g} MiB)"
        )
        return facts

    def setup_resnet(self) -> None:
        spec = self.spec
        model = ResNet50(model=spec.model)
        self.parameters = parameter_count(model)
        # SGD with momentum, L2 weight decay on the gradient (PyTorch SGD's weight_decay); multi-tensor: one
        # merged update for all parameters, Paddle's fastest
        self.optimizer = paddle.optimizer.Momentum(
            learning_rate=0.1,
            momentum=0.9,
            parameters=model.parameters(),
            weight_decay=5e-5,
            use_multi_tensor=True,
        )
        self.model = self._wrap(model)
        if spec.data == "real":
            self.pipeline = paddle_data.imagenet_pipeline(spec, self.rank, self.world, self.threads, self.gpu)
        else:
            size = spec.image_size
            self.inputs = (paddle.randn([spec.batch_size, 3, size, size]), paddle.randint(0, 1000, [spec.batch_size]))

    def setup_bert(self) -> None:
        spec = self.spec
        cfg = bert.CONFIGS[spec.model]
        if spec.seq_length > cfg.max_position_embeddings:
            raise Unsupported(
                f"seq_length {spec.seq_length} exceeds BERT's {cfg.max_position_embeddings} position embeddings"
            )
        model = paddle_bert.BertForPreTraining(cfg, seed=spec.seed)  # the same weights on every rank
        self.parameters = parameter_count(model)
        self.settings = bert.OPTIMIZERS[spec.optimizer_name]
        clip = nn.ClipGradByGlobalNorm(self.settings.clip_norm) if spec.grad_clip else None
        self.optimizer, self.scheduler = paddle_bert.make_optimizer(
            model, spec.optimizer_name, self.settings, grad_clip=clip
        )
        self.model = self._wrap(model)  # dropout on: layers start in training mode
        if spec.data == "real":
            self.pipeline = paddle_data.bert_pipeline(spec, self.rank, self.world)
        else:
            batch = bert.synthetic_batch(
                cfg, spec.batch_size, spec.seq_length, spec.predictions, seed=spec.seed + self.rank
            )
            self.inputs = tuple(paddle_bert.batch_tensors(batch).values())

    # ---- the measured work
    def step(self) -> None:
        # Gradients dropped before the forward pass (as PyTorch's backend: not alive through the next forward)
        self.optimizer.clear_grad(set_to_zero=False)
        super().step()

    def resnet_step(self) -> None:
        if self.pipeline is not None:
            self.inputs = self.pipeline.next()
        self._update(self._forward(self.inputs))

    def bert_step(self) -> None:
        if self.pipeline is not None:
            batch = self.pipeline.next()
            self.inputs = tuple(batch[name] for name in bert.FEATURES)
        self._update(self._forward(self.inputs))
        self.scheduler.step()

    def _forward(self, inputs: tuple) -> paddle.Tensor:
        """The step's loss: ResNetLoss's output, BERT's third (after the masked-LM and next-sentence logits)."""
        with paddle.amp.auto_cast(enable=self.amp_dtype is not None, dtype=self.amp_dtype or "float16", level="O1"):
            out = self.model(*inputs)
        return out[2] if self.is_bert else out

    def _update(self, loss: paddle.Tensor) -> None:
        """Backward (loss-scaled with fp16; DataParallel all-reduces the gradients), optimizer step (its grad_clip
        clips by the global norm of the unscaled, all-reduced gradients)."""
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self._loss = loss.detach()

    def loss(self) -> float:
        return float(self._loss) if self._loss is not None else float("nan")

    def sync(self) -> None:
        if self.gpu is not None:
            paddle.device.synchronize()

    def barrier(self) -> None:
        if self._distributed:
            dist.barrier()

    def step_clock(self, steps: int) -> StepClock:
        if self.gpu is None:
            return StepClock()
        return EventClock(steps, lambda: paddle.device.cuda.Event(enable_timing=True))  # CUDA events in the stream

    def all_gather(self, obj: dict) -> list[dict]:
        if not self._distributed:
            return [obj]
        out: list = []
        dist.all_gather_object(out, obj)
        return out

    # ---- facts for the log
    def device_name(self) -> str:
        if self.gpu is not None:
            return paddle.device.cuda.get_device_name(self.gpu)
        return sysinfo.cpu_model()

    def peak_memory_bytes(self) -> int | None:
        return int(paddle.device.cuda.max_memory_allocated(self.gpu)) if self.gpu is not None else None

    def environment(self) -> dict:
        gpu = self.gpu is not None
        env = {
            "framework": "paddle",
            "framework_version": paddle.__version__,
            "numpy_version": np.__version__,
            **(cuda_versions() if gpu else {"cuda": None, "cudnn": None, "nccl": None}),
            "driver": sysinfo.nvidia_driver() if gpu else None,
            "device_type": "cuda" if gpu else "cpu",
            "device_name": self.device_name(),
            "device_count": paddle.device.cuda.device_count() if gpu else 0,
            "world_size": self.world,
            "distributed_backend": (
                f"paddle collective ({str(dist.get_group().backend).lower()})" if self._distributed else None
            ),
            "threads": {**runtime_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
            "memory_format": None if self.is_bert else "NCHW",
            "settings": self.settings_in_effect(),
            "amp_dtype": self.amp_dtype,
            "loss_scaling": "dynamic (paddle.amp.GradScaler)" if self.scaler is not None else None,
            "compiler": "paddle.jit.to_static" if self.spec.compiler else None,
            "parameters": self.parameters,
            "input_pipeline": self.pipeline.describe()
            if self.pipeline is not None
            else "synthetic: one random batch resident on the device, reused every step",
        }
        if self.is_bert:
            env |= self.bert_environment(paddle_bert.OPTIMIZER_NAMES[self.spec.optimizer_name], self.settings.clip_norm)
            env["attention"] = "scaled_dot_product_attention"
        return env

    def settings_in_effect(self) -> dict:
        """What decides Paddle's speed here, read back from Paddle and the runtimes it loaded."""
        gpu = self.gpu is not None
        values = {name: flag(name) for name in ("use_mkldnn", "cudnn_exhaustive_search", "allow_tf32_cublas")}
        threads = runtime_threads()
        facts = {
            "openmp_threads": threads["openmp"],
            "mkl_threads": threads["mkl"],
            "onednn": bool(values["use_mkldnn"]),
            "cudnn_exhaustive_search": values["cudnn_exhaustive_search"] if gpu else None,
            "tf32_matmul": values["allow_tf32_cublas"] if gpu else None,
            "to_static": "full_graph" if self.spec.compiler else None,
            "cinn": paddle.is_compiled_with_cinn(),
            "optimizer": type(self.optimizer).__name__ if self.optimizer is not None else None,
        }
        where = (
            f"cuDNN exhaustive search {'on' if facts['cudnn_exhaustive_search'] else 'off'}, TF32 matmul "
            f"{'on' if facts['tf32_matmul'] else 'off'}"
            if gpu
            else f"oneDNN {'on' if facts['onednn'] else 'off'}, {facts['openmp_threads']} OpenMP / "
            f"{facts['mkl_threads']} MKL threads"
        )
        static = f"static graph (to_static{', CINN' if facts['cinn'] else ''})"
        graph = static if self.spec.compiler else "dynamic graph"
        facts["summary"] = f"{where}, {graph}, {facts['optimizer']}"
        return facts

    def shutdown(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        if self._distributed and hasattr(dist, "destroy_process_group"):
            try:
                dist.destroy_process_group()
            except (RuntimeError, ValueError):  # peers gone after a failure: nothing to wait for
                pass
