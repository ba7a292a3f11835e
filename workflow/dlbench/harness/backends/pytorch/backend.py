"""PyTorch backend: ResNet-50 v1.5 (SGD with momentum), BERT pretraining (AdamW or LAMB, bert.py) and Llama
decoder pretraining (AdamW, llama.py; bf16 autocast with amp on every device), synthetic data resident on the
device or real data (data.py: DALI for the ImageNet TFRecords, h5py for BERT's HDF5 shards, np.memmap for Llama's
token shards; each step takes the pipeline's next batch, so reading, decoding and augmenting are in it).
Several ranks: DDP, or what spec.strategy names (bucket size, a compression hook, FSDP2: strategies.py).
The contract, and when the harness calls what: backends/base.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ... import bert, datasets, llama, strategies, sysinfo
from ...spec import RunSpec, Unsupported
from ..base import BackendBase, EventClock, StepClock
from . import bert as torch_bert  # this framework's BERT (bert: what every backend shares)
from . import data as torch_data
from . import llama as torch_llama
from .resnet import ResNet50, parameter_count


def interpreter_facts() -> dict:
    """This interpreter's PyTorch (dlbench.harness.probe): build facts that do not depend on a GPU being visible
    (they identify the build), and the GPUs it sees."""
    cuda = torch.cuda.is_available()
    try:
        cudnn = torch.backends.cudnn.version()  # the cuDNN this build loads; None in a CPU build
    except (RuntimeError, AttributeError):
        cudnn = None
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
    except (RuntimeError, AttributeError):
        nccl = None
    return {
        "framework_version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "nccl": nccl,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
    }


def optimizer_implementation(optimizer: torch.optim.Optimizer | None) -> str | None:
    """The optimizer's class and the implementation it was built with (fused, foreach or for-loop)."""
    if optimizer is None:
        return None
    defaults = optimizer.defaults
    kind = "fused" if defaults.get("fused") else "foreach" if defaults.get("foreach") else "default"
    return f"{type(optimizer).__name__} {kind}"


class Backend(BackendBase):
    models = ("resnet50", "resnet_tiny", "bert_base", "bert_tiny", *llama.CONFIGS)
    data = ("synthetic", "real")
    oom_errors = (torch.OutOfMemoryError,)
    oom_markers = ("out of memory", "can't allocate memory", "not enough memory", "failed to allocate")
    # Time to quality (setup_quality): BERT's held-out batches (a list), ResNet's torch_data.ImagenetEval.
    evaluation: Any

    @classmethod
    def cpu_gemm(cls, n: int, threads: int, fmt: str) -> Callable[[], object]:
        torch.set_num_threads(threads)
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[fmt]
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        return lambda: a @ b

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int, threads: int) -> None:
        super().__init__(spec, rank, world, local_rank, threads)
        torch.set_num_threads(threads)
        self.device = self._pick_device(spec.device)
        # Subnormal floats flushed to zero on the CPU (and treated as zero), as TensorFlow's runtime does on its
        # threads; set before the first parallel region, whose OpenMP threads inherit it. Each bottleneck's last
        # BatchNorm starts at γ = 0 (the reference's initialisation) and the tiny values that follow made every
        # ResNet-50 step 15-20% slower on an Intel Xeon (AMX) with the same operations (benchmarks/README.md).
        self.flush_denormal = self.device.type == "cpu" and torch.set_flush_denormal(True)
        self.model: Any = None  # an nn.Module (wrapped by DDP or FSDP, compiled), from setup_<model>()
        self._loss = torch.zeros(())
        self._distributed = False
        self._ddp: nn.parallel.DistributedDataParallel | None = None

    def _pick_device(self, request: str) -> torch.device:
        if request == "cuda" or (request == "auto" and torch.cuda.is_available()):
            if not torch.cuda.is_available():
                raise Unsupported("device 'cuda' requested but torch.cuda.is_available() is False")
            per_node = self.spec.devices_per_node
            if per_node > torch.cuda.device_count():
                raise Unsupported(
                    f"topology {self.spec.topology} needs {per_node} GPUs per node; {torch.cuda.device_count()} visible"
                )
            torch.cuda.set_device(self.local_rank)
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    # ---- building
    def _process_group_backend(self) -> str:
        """The process group's backend for spec.strategy (strategies.py): NCCL on GPUs and Gloo on CPUs unless
        the strategy names one; GPU-only strategies on a CPU run are unsupported (before any collective)."""
        name, cuda = self.spec.strategy, self.device.type == "cuda"
        if not cuda and (reason := strategies.cpu_problem("pytorch", name)):
            raise Unsupported(reason)
        return "gloo" if name == "ddp_gloo" or not cuda else "nccl"

    def setup_runtime(self) -> None:
        spec = self.spec
        if self.world > 1:
            dist.init_process_group(self._process_group_backend(), rank=self.rank, world_size=self.world)
            self._distributed = True
        torch.manual_seed(spec.seed + self.rank)
        # AMP: fp16 with loss scaling on CUDA; bf16 (no scaling needed) on CPU, and for Llama everywhere (bf16
        # autocast with fp32 master weights, as Llama is pretrained).
        cuda = self.device.type == "cuda"
        half = torch.float16 if cuda and self.kind != "llama" else torch.bfloat16
        # channels_last pays off with tensor cores (ResNet's convolutions); on CPU the oneDNN default layout is as
        # fast, and the transformers' activations are matrices.
        self.memory_format = torch.channels_last if cuda and self.kind == "resnet" else torch.contiguous_format
        self.amp_dtype = half if spec.precision == "amp" else None
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype is torch.float16 else None
        if cuda:
            # NVIDIA's tuned scripts (DeepLearningExamples) and PyTorch's performance guide: let cuDNN time its
            # algorithms for our fixed shapes, and run fp32 matrix products on TF32 tensor cores as cuDNN's
            # convolutions already do by default (and TensorFlow's fp32 does on Ampere and later): the "fp32"
            # of the published A100/H100 figures. Both read back into settings_in_effect.
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = True

    @property
    def _sharded(self) -> bool:
        """Parameters sharded by FSDP2 (strategy fsdp over several ranks), not replicated by DDP."""
        return self._distributed and self.spec.strategy == "fsdp"

    def _shard(self, model: nn.Module) -> nn.Module:
        """Strategy fsdp: FSDP2's fully_shard on every block of model.layers (ResNet's bottlenecks, BERT's
        encoder layers), then the root, in place: before the optimizer is built, which must see the sharded
        parameters."""
        if self._sharded:
            from torch.distributed.fsdp import fully_shard

            for block in model.layers:
                fully_shard(block)
            fully_shard(model)
        return model

    def _wrap(self, model: nn.Module) -> nn.Module:
        """DDP over the ranks (unless sharded: fsdp), with the strategy's bucket size or communication hook, then
        the compiler: the same for every model."""
        name = self.spec.strategy
        if self._distributed and not self._sharded:
            cuda = self.device.type == "cuda"
            bucket = strategies.number("pytorch", name) if name.startswith("ddp_bucket") else None
            model = nn.parallel.DistributedDataParallel(
                model, device_ids=[self.local_rank] if cuda else None, bucket_cap_mb=bucket
            )
            self._ddp = model
            if name in ("ddp_fp16", "ddp_bf16", "ddp_powersgd"):
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

                if name == "ddp_powersgd":
                    state = powerSGD_hook.PowerSGDState(
                        process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2
                    )
                    model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
                else:
                    hook = default_hooks.fp16_compress_hook if name == "ddp_fp16" else default_hooks.bf16_compress_hook
                    model.register_comm_hook(None, hook)
        if self.spec.compiler:
            model = torch.compile(model, mode=self.spec.compiler_mode or None)
        return model

    def strategy_in_effect(self) -> dict:
        """Read back from PyTorch: the process group's backend and DDP's own logging data (bucket size, the
        registered hook), or FSDP2's parameter placements."""
        if not self._distributed:
            return {"summary": "none (one rank)"}
        facts: dict = {"process_group_backend": dist.get_backend()}
        if self._ddp is not None:
            data = self._ddp._get_ddp_logging_data()  # what DDP itself records about its setup
            # (its bucket_sizes are not read: before the first backward they are not yet the cap's)
            facts |= {
                "wrapper": type(self._ddp).__name__,
                "bucket_cap_bytes": data.get("bucket_cap_bytes"),
                "comm_hook": data.get("comm_hook"),
            }
            hook = f", comm hook {facts['comm_hook']}" if facts["comm_hook"] else ""
            facts["summary"] = (
                f"DistributedDataParallel over {facts['process_group_backend']}, buckets "
                f"{facts['bucket_cap_bytes'] / 2**20:g} MiB{hook}"
            )
            return facts
        from torch.distributed.fsdp import FSDPModule
        from torch.distributed.tensor import DTensor

        model = getattr(self.model, "_orig_mod", self.model)  # under torch.compile
        param = next(model.parameters())
        placements = [str(p) for p in param.placements] if isinstance(param, DTensor) else []
        mesh = param.device_mesh.size() if isinstance(param, DTensor) else None
        facts |= {
            "wrapper": "fully_shard" if isinstance(model, FSDPModule) else type(model).__name__,
            "placements": placements,
            "mesh_size": mesh,
        }
        facts["summary"] = (
            f"FSDP2 {facts['wrapper']} over {facts['process_group_backend']}, parameters "
            f"{'/'.join(placements) or 'not sharded'} over {mesh} ranks"
        )
        return facts

    def setup_resnet(self) -> None:
        spec = self.spec
        model = ResNet50(model=spec.model).to(self.device, memory_format=self.memory_format)
        self.parameters = parameter_count(model)
        model = self._shard(model)
        # fused: PyTorch's documented fastest implementation (CPU and CUDA), one kernel per tensor; the default
        # for-loop one took 30 ms per ResNet-50 update on the 2-core VM, fused 15. FSDP2's sharded
        # parameters (DTensor) have no fused SGD kernel: the default there.
        self.optimizer = torch.optim.SGD(
            model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5, fused=not self._sharded
        )
        self.model = self._wrap(model)
        if spec.data == "real":
            self.pipeline = torch_data.imagenet_pipeline(
                spec, self.rank, self.world, self.threads, self.device, self.memory_format
            )
        else:
            size = spec.image_size
            self.images = torch.randn(spec.batch_size, 3, size, size, device=self.device).contiguous(
                memory_format=self.memory_format
            )
            self.labels = torch.randint(0, 1000, (spec.batch_size,), device=self.device)
        self.loss_fn = nn.CrossEntropyLoss()

    def setup_bert(self) -> None:
        spec = self.spec
        cfg = bert.CONFIGS[spec.model]
        if spec.seq_length > cfg.max_position_embeddings:
            raise Unsupported(
                f"seq_length {spec.seq_length} exceeds BERT's {cfg.max_position_embeddings} position embeddings"
            )
        model = torch_bert.BertForPreTraining(cfg).to(self.device)
        self.parameters = torch_bert.parameter_count(model)
        model = self._shard(model)
        self.settings = bert.OPTIMIZERS[spec.optimizer_name]
        self.optimizer = torch_bert.make_optimizer(model, spec.optimizer_name, self.settings)
        self.scheduler = torch_bert.make_scheduler(self.optimizer, self.settings)
        self.model = self._wrap(model)  # dropout on: modules start in training mode
        if spec.data == "real":
            self.pipeline = torch_data.bert_pipeline(spec, self.rank, self.world, self.device)
        else:
            batch = bert.synthetic_batch(
                cfg, spec.batch_size, spec.seq_length, spec.predictions, seed=spec.seed + self.rank
            )
            self.batch = torch_bert.batch_tensors(batch, self.device)

    def setup_llama(self) -> None:
        spec = self.spec
        cfg = llama.CONFIGS[spec.model]
        model = torch_llama.LlamaForCausalLM(cfg, spec.activation_checkpointing).to(self.device)
        self.parameters = torch_llama.parameter_count(model)
        model = self._shard(model)
        # fused AdamW: one kernel for all parameters (CPU and CUDA); FSDP2's sharded parameters (DTensor) have
        # it on CUDA only, foreach on CPU.
        self.optimizer = torch_llama.make_optimizer(
            model, llama.ADAMW, fused=not self._sharded or self.device.type == "cuda"
        )
        self.model = self._wrap(model)
        if spec.data == "real":
            self.pipeline = torch_data.llama_pipeline(spec, cfg, self.rank, self.world, self.device)
        else:
            tokens = llama.synthetic_tokens(cfg, spec.batch_size, spec.seq_length, seed=spec.seed + self.rank)
            self.tokens = torch.from_numpy(tokens).to(self.device)

    # ---- the measured work
    def step(self) -> None:
        # Gradients dropped before the forward pass, as PyTorch's own training loops do: dropped after it, the
        # last step's gradients (100 MB for ResNet-50) stay alive through the forward, and every step took
        # 4,300-6,600 more fresh pages from the kernel (13,600-15,900 vs 9,300 page faults per step at 64 px,
        # batch 8) and ~9% more CPU time than the plain training loop (benchmarks/frameworks.py).
        self.optimizer.zero_grad(set_to_none=True)
        super().step()

    def resnet_step(self) -> None:
        if self.pipeline is not None:
            self.images, self.labels = self.pipeline.next()
        with self._autocast():
            loss = self.loss_fn(self.model(self.images), self.labels)
        self._update(loss)

    def bert_step(self) -> None:
        if self.pipeline is not None:
            self.batch = self.pipeline.next()
        with self._autocast():
            _, _, loss = self.model(**self.batch)
        self._update(loss, clip=self.spec.grad_clip)
        if self.scheduler is not None:
            self.scheduler.step()

    def llama_step(self) -> None:
        if self.pipeline is not None:
            self.tokens = self.pipeline.next()
        with self._autocast():
            loss = self.model(self.tokens)
        self._update(loss)

    # ---- time to quality
    def setup_quality(self, settings) -> None:
        if self.kind == "llama":
            raise Unsupported("time to quality is not implemented for the Llama models (no held-out evaluation)")
        if self.spec.data != "real":
            raise Unsupported("time to quality needs real data (synthetic data has no held-out split)")
        if self.is_bert:  # Adam/LAMB as configured; the quality schedule sets the learning rate
            self.scheduler = None
            self.evaluation = torch_data.bert_eval_batches(self.spec, self.rank, self.world, self.device)
            return
        for group in self.optimizer.param_groups:
            group.update(momentum=settings.momentum, weight_decay=settings.weight_decay)
        self.evaluation = torch_data.ImagenetEval(
            self.spec, self.rank, self.world, self.threads, self.device, self.memory_format
        )

    def train_records(self) -> int:
        if self.is_bert:
            return datasets.bert_records(self.spec, "train")
        return datasets.imagenet_records(self.spec, "train")

    def set_learning_rate(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def evaluate(self) -> tuple[int, int]:
        """ResNet: top-1 over the validation shards; BERT: masked-LM accuracy over the held-out shard's real
        (weight 1) masked positions, as MLPerf's BERT evaluation counts it. Dropout off."""
        self.model.eval()
        counts = torch.zeros(2, dtype=torch.int64, device=self.device)
        with torch.no_grad(), self._autocast():
            if self.is_bert:
                for batch in self.evaluation:
                    mlm_logits, _, _ = self.model(**batch)
                    real = batch["masked_lm_weights"] > 0
                    counts[0] += ((mlm_logits.argmax(-1) == batch["masked_lm_ids"]) & real).sum()
                    counts[1] += real.sum()
            else:
                for images, labels in self.evaluation.epoch():
                    counts[0] += (self.model(images).argmax(1) == labels).sum()
                    counts[1] += labels.numel()
        self.model.train()
        if self._distributed:
            dist.all_reduce(counts)
        return int(counts[0]), int(counts[1])

    def _autocast(self) -> torch.autocast:
        return torch.autocast(
            self.device.type, dtype=self.amp_dtype or torch.float32, enabled=self.amp_dtype is not None
        )

    def _update(self, loss: torch.Tensor, clip: bool = False) -> None:
        """Backward (loss-scaled with fp16), optionally clip, optimizer step (the gradients were dropped by step())."""
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            if clip:
                self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
                self._clip()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            if clip:
                self._clip()
            self.optimizer.step()
        self._loss = loss.detach()

    def _clip(self) -> None:
        """Clip by the global norm over every gradient (after DDP's all-reduce: the same on every rank)."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, self.settings.clip_norm)

    def loss(self) -> float:
        return float(self._loss)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self._distributed:
            dist.barrier()

    def step_clock(self, steps: int) -> StepClock:
        if self.device.type != "cuda":
            return StepClock()
        return EventClock(steps, lambda: torch.cuda.Event(enable_timing=True))  # CUDA events in the stream

    def all_gather(self, obj: dict) -> list[dict]:
        if not self._distributed:
            return [obj]
        out: list = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    # ---- facts for the log
    def device_name(self) -> str:
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return sysinfo.cpu_model()

    def peak_memory_bytes(self) -> int | None:
        return torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None

    def environment(self) -> dict:
        cuda = self.device.type == "cuda"
        env = {
            "framework": "pytorch",
            "framework_version": torch.__version__,
            "numpy_version": np.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "driver": sysinfo.nvidia_driver() if cuda else None,
            "device_type": self.device.type,
            "device_name": self.device_name(),
            "device_count": torch.cuda.device_count() if cuda else 0,
            "world_size": self.world,
            "distributed_backend": dist.get_backend() if self._distributed else None,
            "threads": {
                "intra_op": torch.get_num_threads(),
                "inter_op": torch.get_num_interop_threads(),
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            },
            "memory_format": "channels_last" if self.memory_format is torch.channels_last else "contiguous",
            "settings": self.settings_in_effect(),
            "amp_dtype": str(self.amp_dtype).replace("torch.", "") if self.amp_dtype else None,
            "compiler": (
                None
                if not self.spec.compiler
                else f"torch.compile (mode {self.spec.compiler_mode})"
                if self.spec.compiler_mode
                else "torch.compile"
            ),
            "parameters": self.parameters,
            "input_pipeline": self.pipeline.describe()
            if self.pipeline is not None
            else "synthetic: one random batch resident on the device, reused every step",
        }
        if self.kind == "llama":
            cfg = llama.CONFIGS[self.spec.model]
            env |= {
                "optimizer": optimizer_implementation(self.optimizer),
                "seq_length": self.spec.seq_length,
                "activation_checkpointing": self.spec.activation_checkpointing,
                "attention": "scaled_dot_product_attention (causal, grouped-query)",
                "tie_embeddings": cfg.tie_embeddings,
                "flop_parameters": llama.flop_parameters(cfg),
            }
        if self.is_bert:
            env |= self.bert_environment(torch_bert.OPTIMIZER_NAMES[self.spec.optimizer_name], self.settings.clip_norm)
            env["attention"] = "scaled_dot_product_attention"
        return env

    def settings_in_effect(self) -> dict:
        """What decides this framework's speed here, read back from PyTorch (the report's settings column)."""
        cuda = self.device.type == "cuda"
        facts = {
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
            "parallel_backend": "OpenMP" if torch.backends.openmp.is_available() else "native",
            "onednn": torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "memory_format": "channels_last" if self.memory_format is torch.channels_last else "contiguous",
            "cudnn_benchmark": torch.backends.cudnn.benchmark if cuda else None,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32 if cuda else None,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32 if cuda else None,
            "optimizer": optimizer_implementation(getattr(self, "optimizer", None)),
            "flush_denormal": self.flush_denormal if not cuda else None,
        }
        where = (
            f"cuDNN benchmark {'on' if facts['cudnn_benchmark'] else 'off'}, TF32 matmul "
            f"{'on' if facts['tf32_matmul'] else 'off'} / conv {'on' if facts['tf32_cudnn'] else 'off'}"
            if cuda
            else f"oneDNN {'on' if facts['onednn'] else 'off'} ({facts['cpu_capability']}), "
            f"{facts['intra_op_threads']} intra-op / {facts['inter_op_threads']} inter-op threads "
            f"({facts['parallel_backend']}){', subnormals flushed' if facts['flush_denormal'] else ''}"
        )
        facts["summary"] = f"{where}, {facts['memory_format']}, {facts['optimizer']}"
        return facts

    def shutdown(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        if self._distributed and dist.is_initialized():
            dist.destroy_process_group()
