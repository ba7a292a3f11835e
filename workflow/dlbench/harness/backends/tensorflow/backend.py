"""TensorFlow 2 backend: ResNet-50 v1.5 (Keras, resnet.py) with SGD and momentum, and BERT pretraining (Keras,
bert.py) with AdamW or LAMB; synthetic data on the device.

The contract, and when the harness calls what: backends/base.py. Here:

- ResNet-50: the custom `tf.function` step of `resnet.make_train_step` (forward, cross-entropy, gradients, SGD
  momentum 0.9, lr 0.1, weight decay 5e-5 as in the PyTorch backend: `resnet.FusedSGD`, one fused kernel per
  variable; Keras's SGD under a loss-scale optimizer with float16); compiler on = XLA (`jit_compile=True`).
- BERT (bert_base, bert_tiny): the step of `bert.make_train_step` (masked-LM + next-sentence loss, dropout
  on, clipping by global norm 1.0 with grad_clip on), optimizer by spec.optimizer_name (`bert.make_optimizer`:
  AdamW or LAMB with bert.OPTIMIZERS' settings and learning-rate schedule); one bert.synthetic_batch per rank.
  AMP, XLA and several ranks as for ResNet-50, except that the step all-reduces the gradients itself (so
  that clipping sees the global norm).
- data real (--data-dir): tf.data pipelines of `data.py` (ImageNet TFRecords: random crop, flip, normalise;
  BERT TFRecords: run_pretraining.py's records), built in setup(); each step takes the next batch from their
  iterator (read, decode and augment overlap the steps through prefetching, as in training).
- amp: Keras policy `mixed_bfloat16` on CPU; `mixed_float16` with a `LossScaleOptimizer` on GPU.
- One process per device. With several ranks: `tf.distribute.MultiWorkerMirroredStrategy`, its
  cluster from our launcher's variables (MASTER_ADDR, MASTER_PORT + rank per worker, as TF_CONFIG)
  or, under `srun` without our launcher, from `SlurmClusterResolver`. Collectives: NCCL on GPUs,
  ring over gRPC on CPUs, or what spec.strategy names (mwms_ring/nccl/auto, mwms_pack<N>mb: strategies.py).
  Each worker feeds `batch_size` images: the global batch is batch x world,
  the loss is scaled by 1/world and the optimizer sums the gradients of all workers (= the mean).
  With XLA and several ranks only forward + backward are compiled: the gradient all-reduce and the
  update run outside the cluster (XLA on CPU has no cross-worker collectives).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # keep TensorFlow's C++ INFO lines out of the rule's log
# TensorFlow's CPU guidance: its oneDNN kernels. It turns them on by itself only on CPUs with AVX-512 VNNI/BF16 or
# AMX; elsewhere (e.g. an AMD EPYC with AVX2) it would run Eigen kernels that this build compiled without FMA.
# Read when TensorFlow loads, so before the import; a user's explicit 0 stands (and is recorded).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.keras is Keras 3: make sure it runs on TensorFlow

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from ... import bert, datasets, strategies, sysinfo  # noqa: E402
from ...gather import ROW_BYTES, decode_rows, encode_row  # noqa: E402
from ...spec import RunSpec, Unsupported  # noqa: E402
from ..base import BackendBase  # noqa: E402
from . import bert as tf_bert  # noqa: E402 - this framework's BERT (bert: what every backend shares)
from . import data as tf_data  # noqa: E402
from . import resnet as tf_models  # noqa: E402

if TYPE_CHECKING:  # the annotations name keras classes: mypy needs the module there, not the variable tf.keras
    from tensorflow import keras
else:
    keras = tf.keras

WEIGHT_DECAY = 5e-5  # as the PyTorch backend
INTER_OP_THREADS = 2  # 1 risks stalls on blocking ops, and ResNet-50 ran 5-15% slower with 1 (2-core CPU VM)
DONE_TIMEOUT_S = 60.0


def interpreter_facts() -> dict:
    """This interpreter's TensorFlow (dlbench.harness.probe): its build's CUDA and cuDNN, and the GPUs it sees."""
    info = tf.sysconfig.get_build_info()
    gpus = tf.config.list_physical_devices("GPU")
    return {
        "framework_version": tf.__version__,
        "cuda": info.get("cuda_version"),
        "cudnn": info.get("cudnn_version"),
        "nccl": None,  # bundled with the CUDA build; TensorFlow does not report its version
        "gpus": [tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus],
    }


class Backend(BackendBase):
    models = ("resnet50", "resnet_tiny", "bert_base", "bert_tiny")
    data = ("synthetic", "real")
    oom_errors = (tf.errors.ResourceExhaustedError,)
    oom_markers = (
        "out of memory",
        "oom when allocating",
        "resource exhausted",
        "resource_exhausted",
        "can't allocate memory",
        "not enough memory",
        "failed to allocate",
    )

    @classmethod
    def cpu_gemm(cls, n: int, threads: int, fmt: str) -> Callable[[], object]:
        tf.config.threading.set_intra_op_parallelism_threads(threads)  # oneDNN on: set at import, as for a run
        dtype = {"fp32": tf.float32, "bf16": tf.bfloat16}[fmt]
        a, b = (tf.cast(tf.random.normal((n, n)), dtype) for _ in range(2))
        return lambda: tf.linalg.matmul(a, b).numpy()

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int, threads: int) -> None:
        super().__init__(spec, rank, world, local_rank, threads)
        # Before any TensorFlow op runs (the runtime reads them once, when it starts).
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(INTER_OP_THREADS)
        self._srun = "SLURM_PROCID" in os.environ and "DLBENCH_RANK" not in os.environ
        self.gpu = self._pick_device(spec.device)  # a PhysicalDevice, or None for the CPU
        self.strategy: Any = None  # a tf.distribute.Strategy, from setup_runtime()
        self._communication: Any = None  # several workers: the CommunicationImplementation in use
        self.optimizer: Any = None  # a Keras optimizer, from setup_<model>()
        self._loss = None
        self._batches = None  # synthetic data on a CPU: the batch's iterator, taken by _fed_step (_synthetic)
        self._fed_step = None
        self._gathered = False
        self.parameters = 0
        self.policy: str | None = None  # amp: the Keras mixed-precision policy

    def _pick_device(self, request: str):
        gpus = tf.config.list_physical_devices("GPU")
        if request == "cpu" or (request == "auto" and not gpus):
            if gpus:
                tf.config.set_visible_devices([], "GPU")
            return None
        if not gpus:
            build = "a CPU-only build" if not tf.test.is_built_with_cuda() else "no GPU visible"
            raise Unsupported(f"device 'cuda' requested but TensorFlow {tf.__version__} finds no GPU ({build})")
        per_node = self.spec.devices_per_node
        if len(gpus) >= per_node:
            gpu = gpus[self.local_rank]
        elif self._srun and len(gpus) == 1:
            gpu = gpus[0]  # SLURM bound one GPU to each task (CUDA_VISIBLE_DEVICES)
        else:
            raise Unsupported(f"topology {self.spec.topology} needs {per_node} GPUs per node; {len(gpus)} visible")
        tf.config.set_visible_devices([gpu], "GPU")  # one process per device: see only ours
        return gpu

    def _cluster_resolver(self):
        if self._srun:
            # auto_set_gpu=False: the GPU is chosen above. gpus_per_node/gpus_per_task only shape the
            # resolver's task list (it zips tasks with GPU slots), so they are one slot per task here.
            port = int(os.environ.get("MASTER_PORT") or 0) or 20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000
            resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
                port_base=port, gpus_per_node=self.spec.devices_per_node, gpus_per_task=1, auto_set_gpu=False
            )
            cluster = resolver.cluster_spec()
            if resolver.task_id != self.rank or cluster.num_tasks("worker") != self.world:
                raise RuntimeError(
                    f"SlurmClusterResolver places this task as worker {resolver.task_id} of "
                    f"{cluster.num_tasks('worker')}, SLURM says rank {self.rank} of {self.world}"
                )
            # The resolver lists workers host by host (sorted), i.e. it assumes srun's block distribution.
            host = cluster.task_address("worker", self.rank).rsplit(":", 1)[0].split(".")[0]
            if host != sysinfo.hostname().split(".")[0]:
                print(
                    f"[dlbench] warning: SlurmClusterResolver gives rank {self.rank} the address of {host}, "
                    f"but it runs on {sysinfo.hostname()} (srun --distribution=block expected)",
                    file=sys.stderr,
                )
            return resolver
        address = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = int(os.environ.get("MASTER_PORT", "29500"))
        os.environ["TF_CONFIG"] = json.dumps(
            {
                "cluster": {"worker": [f"{address}:{port + r}" for r in range(self.world)]},
                "task": {"type": "worker", "index": self.rank},
            }
        )
        return tf.distribute.cluster_resolver.TFConfigClusterResolver()

    # ---- building
    def setup_runtime(self) -> None:
        spec = self.spec
        if self.world > 1:
            options = self._communication_options()
            self._communication = options.implementation
            # Must come before any other op: it starts this worker's gRPC server and the collectives.
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=self._cluster_resolver(), communication_options=options
            )
        else:
            self.strategy = tf.distribute.get_strategy()  # the default (no-op) strategy
        if spec.precision == "amp":
            self.policy = "mixed_float16" if self.gpu else "mixed_bfloat16"
        keras.mixed_precision.set_global_policy(self.policy or "float32")
        keras.utils.set_random_seed(spec.seed + self.rank)  # workers start from worker 0's variables

    def _communication_options(self) -> tf.distribute.experimental.CommunicationOptions:
        """MultiWorkerMirroredStrategy's collectives for spec.strategy (strategies.py): auto = NCCL on GPUs, ring
        on CPUs. NCCL without a GPU is refused here: TensorFlow would accept it and run something else."""
        implementation = tf.distribute.experimental.CommunicationImplementation
        name = self.spec.strategy
        chosen = {
            "mwms_ring": implementation.RING,
            "mwms_nccl": implementation.NCCL,
            "mwms_auto": implementation.AUTO,
        }.get(name, implementation.NCCL if self.gpu else implementation.RING)
        if not self.gpu and (reason := strategies.cpu_problem("tensorflow", name)):
            raise Unsupported(reason)
        pack = strategies.number("tensorflow", name) if name.startswith("mwms_pack") else None
        return tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=(pack or 0) * 2**20, implementation=chosen
        )

    def strategy_in_effect(self) -> dict:
        """Read back from the strategy object: its class, the cross-device ops it built and the communication
        options it holds (no public getter: the `extended` attribute TensorFlow's own code reads)."""
        if self.world == 1:
            return {"summary": "none (one rank)"}
        extended = self.strategy.extended
        options = extended._communication_options
        cross = extended._get_cross_device_ops(None)
        facts = {
            "strategy_class": type(self.strategy).__name__,
            "cross_device_ops": type(cross).__name__,
            "implementation": options.implementation.name,
            "bytes_per_pack": options.bytes_per_pack,
            "replicas": self.strategy.num_replicas_in_sync,
        }
        pack = f"{options.bytes_per_pack / 2**20:g} MiB" if options.bytes_per_pack else "auto"
        facts["summary"] = (
            f"{facts['strategy_class']} ({facts['cross_device_ops']}), implementation "
            f"{facts['implementation']}, bytes_per_pack {pack}, {facts['replicas']} replicas"
        )
        return facts

    def setup_resnet(self) -> None:
        spec = self.spec
        with self.strategy.scope():
            self.model = tf_models.build(tf_models.ResNet50(model=spec.model))
            if self.policy == "mixed_float16":  # loss scaling (GPUs) wraps a Keras optimizer
                self.optimizer = keras.optimizers.LossScaleOptimizer(
                    keras.optimizers.SGD(learning_rate=0.1, momentum=0.9, weight_decay=WEIGHT_DECAY)
                )
                self.optimizer.build(self.model.trainable_variables)
            else:
                self.optimizer = tf_models.FusedSGD(
                    self.model.trainable_variables, learning_rate=0.1, momentum=0.9, weight_decay=WEIGHT_DECAY
                )
        self.parameters = tf_models.parameter_count(self.model)
        self._step = tf_models.make_train_step(
            self.model, self.optimizer, world=self.world, strategy=self.strategy, jit_compile=spec.compiler
        )
        if spec.data == "real":
            self.pipeline = tf_data.imagenet_pipeline(
                spec, self.rank, self.world, self.threads, self._device(), strategy=self.strategy
            )
            return
        size, batch = spec.image_size, spec.batch_size
        seed = spec.seed + self.rank

        def make_data(_context):
            images = tf.random.stateless_normal((batch, size, size, 3), seed=(seed, 1))
            labels = tf.random.stateless_uniform((batch,), seed=(seed, 2), minval=0, maxval=1000, dtype=tf.int32)
            return images, labels

        self._synthetic(make_data)  # (images, labels)

    def setup_bert(self) -> None:
        spec = self.spec
        cfg = bert.CONFIGS[spec.model]
        with self.strategy.scope():
            self.model = tf_bert.BertPretraining(cfg)
            # time to quality: a constant rate (a variable) that quality's schedule sets before every step
            optimizer = tf_bert.make_optimizer(spec.optimizer_name, self.model, 0.0 if spec.quality else None)
            if self.policy == "mixed_float16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            optimizer.build(self.model.trainable_variables)
            self.optimizer = optimizer
        self.parameters = tf_bert.parameter_count(self.model)
        clip_norm = bert.OPTIMIZERS[spec.optimizer_name].clip_norm if spec.grad_clip else None
        self._step = tf_bert.make_train_step(
            self.model,
            self.optimizer,
            clip_norm=clip_norm,
            world=self.world,
            strategy=self.strategy,
            jit_compile=spec.compiler,
        )
        if spec.data == "real":
            self.pipeline = tf_data.bert_pipeline(
                spec, self.rank, self.world, self._device(), threads=self.threads, strategy=self.strategy
            )
            return
        batch = bert.synthetic_batch(
            cfg, spec.batch_size, spec.seq_length, spec.predictions, seed=spec.seed + self.rank
        )
        # tf.identity copies each feature onto this worker's device: resident there, not fed from the host
        self._synthetic(lambda _context: {name: tf.identity(value) for name, value in batch.items()})

    def _synthetic(self, make_data) -> None:
        """The synthetic batch (`make_data(context)`, one per replica) and how a step gets it. On a CPU as Keras's
        `fit` does: an iterator over the batch repeated (tf.data), taken inside the step's function; on this VM
        that step ran 2.9% faster than the same step called with the batch as arguments or captured (a
        median of 12 per-round ratios 1.029 [1.022-1.035], every round above 1; the harness's gap to `model.fit`).
        On a GPU the batch stays resident and is passed as arguments: a tf.data element lives on the host, and the
        copy to the device would count in every step. So it does under a memory budget (memory_limit_gb, an
        address-space limit): tf.data's threads reserve ~440 MiB of address space in allocator arenas that hold no
        data, which the budget would count against the batch."""
        if self.gpu is None and not self.spec.memory_limit_gb:
            dataset = self.strategy.distribute_datasets_from_function(
                lambda context: tf.data.Dataset.from_tensors(make_data(context)).repeat()
            )
            self._batches = iter(dataset)
            self._fed_step = tf.function(lambda iterator: self._take_step(next(iterator)))
        else:  # resident on this worker's device (a tensor of its replica; the default strategy: a tensor)
            self._inputs = self.strategy.experimental_distribute_values_from_function(make_data)

    def _device(self) -> str | None:
        return "/GPU:0" if self.gpu is not None else None  # ours is the only visible GPU

    # ---- the measured work
    def resnet_step(self) -> None:
        self._train_step()

    def bert_step(self) -> None:
        self._train_step()

    def _train_step(self) -> None:
        """One step on the synthetic batch's iterator (CPU), the resident batch (GPU, memory budget) or the
        pipeline's next batch; no read-back: the next step just queues."""
        if self._batches is not None:
            self._loss = self._fed_step(self._batches)
        else:
            self._loss = self._take_step(self._inputs if self.pipeline is None else self.pipeline.next())

    def _take_step(self, batch):
        """The step function on one batch: (images, labels) for ResNet-50, BERT's features dict."""
        return self._step(batch) if self.is_bert else self._step(*batch)

    # ---- time to quality
    def setup_quality(self, settings) -> None:
        if self.spec.data != "real":
            raise Unsupported("time to quality needs real data (synthetic data has no held-out split)")
        if self.world > 1:
            raise Unsupported("time to quality with several TensorFlow workers is not implemented yet")
        if self.is_bert:  # Adam/LAMB as configured, at the rate set_learning_rate gives (setup_bert)
            self._eval_data = tf_data.bert_eval_dataset(self.spec, self.threads)
            model = self.model

            @tf.function(reduce_retracing=True)
            def correct_mlm(features):
                mlm_logits, _ = model(features, training=False)
                real = features["masked_lm_weights"] > 0
                hit = tf.logical_and(
                    tf.argmax(mlm_logits, axis=-1, output_type=tf.int32) == features["masked_lm_ids"], real
                )
                return tf.reduce_sum(tf.cast(hit, tf.int64)), tf.reduce_sum(tf.cast(real, tf.int64))

            self._correct = correct_mlm
            return
        optimizer = self._update_rule()
        optimizer.momentum, optimizer.weight_decay = settings.momentum, settings.weight_decay  # before tracing
        self._eval_data = tf_data.imagenet_eval_dataset(self.spec, self.rank, self.world, self.threads)
        model = self.model

        @tf.function(reduce_retracing=True)
        def correct(images, labels):
            predicted = tf.argmax(model(images, training=False), axis=1, output_type=tf.int32)
            return tf.reduce_sum(tf.cast(predicted == labels, tf.int64)), tf.size(labels, out_type=tf.int64)

        self._correct = lambda batch: correct(*batch)

    def train_records(self) -> int:
        if self.is_bert:
            return datasets.bert_records(self.spec, "train")
        return datasets.imagenet_records(self.spec, "train")

    def set_learning_rate(self, lr: float) -> None:
        self._update_rule().learning_rate.assign(lr)

    def _update_rule(self):
        """The optimizer that updates the weights: ours, or the Keras one inside float16's loss-scale optimizer."""
        return getattr(self.optimizer, "inner_optimizer", self.optimizer)

    def evaluate(self) -> tuple[int, int]:
        right, total = 0, 0
        for batch in self._eval_data:  # ResNet: top-1; BERT: masked-LM accuracy at the real masked positions
            batch_right, batch_total = self._correct(batch)
            right, total = right + int(batch_right), total + int(batch_total)
        return right, total

    def _local(self, value) -> tf.Tensor:
        return self.strategy.experimental_local_results(value)[0]

    def loss(self) -> float:
        return 0.0 if self._loss is None else float(self._local(self._loss).numpy())

    def sync(self) -> None:
        if self._loss is not None:
            self._local(self._loss).numpy()  # waits for the last step's loss
        if self.gpu is not None:
            tf.test.experimental.sync_devices()  # and for everything queued on the GPU (the update too)

    def _all_reduce(self, values: np.ndarray) -> np.ndarray:
        if not hasattr(self, "_reduce_fn"):
            strategy = self.strategy

            def reduce(x):
                x = tf.identity(x)  # onto this replica's device: the collective's source and destination
                return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, x)

            self._reduce_fn = tf.function(lambda x: strategy.run(reduce, args=(x,)))
        return self._local(self._reduce_fn(tf.constant(values))).numpy()

    def barrier(self) -> None:
        if self.world > 1:
            self._all_reduce(np.ones((1,), np.float32))

    def all_gather(self, obj: dict) -> list[dict]:
        """Every rank's `obj`, in rank order: its JSON bytes in this rank's row of a zero buffer, summed."""
        if self.world == 1:
            return [obj]
        buffer = np.zeros((self.world, ROW_BYTES), np.float32)  # this rank's row: its record; the others zero
        buffer[self.rank] = encode_row(obj)
        rows = self._all_reduce(buffer)
        self._gathered = True
        return decode_rows(rows)

    # ---- facts for the log
    def device_name(self) -> str:
        if self.gpu is not None:
            return tf.config.experimental.get_device_details(self.gpu).get("device_name", self.gpu.name)
        return sysinfo.cpu_model()

    def peak_memory_bytes(self) -> int | None:
        if self.gpu is None:
            return None
        return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])

    def environment(self) -> dict:
        info = tf.sysconfig.get_build_info()
        gpu = self.gpu is not None
        distributed = None
        if self.world > 1:
            distributed = f"MultiWorkerMirroredStrategy ({self._communication.name.lower()})"
        amp_dtypes: dict[str | None, str] = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
        amp_dtype = amp_dtypes.get(self.policy)
        return {
            "framework": "tensorflow",
            "framework_version": tf.__version__,
            "keras_version": keras.__version__,
            "numpy_version": np.__version__,
            "cuda": info.get("cuda_version"),
            "cudnn": info.get("cudnn_version"),
            "nccl": None,  # bundled with the CUDA build; TensorFlow does not report its version
            "driver": sysinfo.nvidia_driver() if gpu else None,
            "device_type": "cuda" if gpu else "cpu",
            "device_name": self.device_name(),
            "device_count": len(tf.config.list_physical_devices("GPU")) if gpu else 0,
            "world_size": self.world,
            "distributed_backend": distributed,
            "threads": {
                "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            },
            "memory_format": "channels_last",  # NHWC, TensorFlow's native layout
            "settings": self.settings_in_effect(),
            "amp_dtype": amp_dtype,
            "amp_policy": self.policy,
            "loss_scaling": isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer),
            "compiler": "xla" if self.spec.compiler else None,
            "xla": ("on" if self.world == 1 else "on (forward and backward)") if self.spec.compiler else "off",
            "parameters": self.parameters,
            "input_pipeline": self.pipeline.describe()
            if self.pipeline is not None
            else "synthetic: one batch on the device"
            + (
                ", repeated by a tf.data iterator taken inside the step's function (as Keras's fit)"
                if self._batches is not None
                else ""
            ),
            **(self._bert_environment() if self.is_bert else {}),
        }

    def settings_in_effect(self) -> dict:
        """What decides this framework's speed here, read back from TensorFlow (the report's settings column)."""
        from tensorflow.python.util import _pywrap_util_port  # the flag TensorFlow's own tests read

        facts = {
            "onednn": bool(_pywrap_util_port.IsMklEnabled()),
            "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "xla": bool(self.spec.compiler),
            "memory_format": None if self.is_bert else "channels_last",
            # fp32 matrix products on TF32 tensor cores (on by default; Ampere and later): the peak MFU uses
            "tf32": tf.config.experimental.tensor_float_32_execution_enabled() if self.gpu is not None else None,
        }
        if not self.is_bert and hasattr(self, "optimizer"):  # the optimizer once the model is built
            rule = self._update_rule()
            facts["optimizer"] = "SGD fused" if isinstance(rule, tf_models.FusedSGD) else f"Keras {type(rule).__name__}"
        where = (
            f"GPU, TF32 {'on' if facts['tf32'] else 'off'}"
            if self.gpu is not None
            else f"oneDNN {'on' if facts['onednn'] else 'off (Eigen)'}"
        )
        facts["summary"] = (
            f"{where}, {facts['intra_op_threads']} intra-op / {facts['inter_op_threads']} inter-op "
            f"threads, XLA {'on' if facts['xla'] else 'off'}"
            + ("" if self.is_bert else ", channels_last (NHWC)")
            + (f", {facts['optimizer']}" if "optimizer" in facts else "")
        )
        return facts

    def _bert_environment(self) -> dict:
        name = self.spec.optimizer_name
        return {
            "memory_format": None,  # no images
            **self.bert_environment(tf_bert.OPTIMIZER_NAMES[name], bert.OPTIMIZERS[name].clip_norm),
        }

    def shutdown(self) -> None:
        """After the last collective, wait until every worker is past it before this one exits.

        Collective transfers are pulled by the receiver from the sender's gRPC server: a worker that
        exits right after its last all-reduce could take data another worker still has to fetch.
        """
        if self.world == 1 or not self._gathered:
            return
        rank_dir = Path(os.environ.get("DLBENCH_RANK_DIR") or f"{self.spec.log}.ranks")
        rank_dir.mkdir(parents=True, exist_ok=True)
        (rank_dir / f"tf-done-{self.rank}").touch()
        deadline = time.monotonic() + DONE_TIMEOUT_S
        while time.monotonic() < deadline:
            if all((rank_dir / f"tf-done-{r}").exists() for r in range(self.world)):
                return
            time.sleep(0.05)
